"""Caveats as findings: a sweep too short, too noisy or too contended for its claims says so, with numbers."""

from __future__ import annotations

import math

import pandas as pd

from workbench.analysis.caveats import sweep_caveats
from workbench.analysis.findings import FINDING_COLUMNS


def scaling(speedups, means=None, stds=None, repetitions=3):
    ranks = list(range(1, len(speedups) + 1))
    return pd.DataFrame(
        {
            "ranks": ranks,
            "speedup": speedups,
            "throughput_mean": means or [100.0] * len(ranks),
            "throughput_std": stds or [1.0] * len(ranks),
            "repetitions": repetitions,
        }
    )


def test_a_scaling_result_below_1x_gets_a_caveat_with_the_number():
    found = sweep_caveats(scaling=scaling([1.0, 0.27]), label="horovod: ")
    assert list(found.columns) == list(FINDING_COLUMNS)
    (text,) = found.loc[found["kind"] == "scaling_below_1x", "text"]
    assert text.startswith("horovod: 2 ranks ran at 0.27x the throughput of 1 rank")
    assert found.loc[0, "ranks"] == "2" and math.isnan(found.loc[0, "seconds_lost"])


def test_contention_is_named_when_ranks_exceed_cores():
    found = sweep_caveats(scaling=scaling([1.0, 1.5, 0.8, 0.6]), ranks=4, cores=2)
    kinds = list(found["kind"])
    assert kinds.count("scaling_below_1x") == 2 and "more_ranks_than_cores" in kinds
    assert "4 ranks share 2 cores" in found.loc[found["kind"] == "scaling_below_1x", "text"].iloc[0]


def test_noisy_single_and_short_runs():
    noisy = sweep_caveats(scaling=scaling([1.0, 1.9], stds=[1.0, 25.0]))  # 25 % spread at 2 ranks
    (text,) = noisy.loc[noisy["kind"] == "noisy_repetitions", "text"]
    assert "±25%" in text and "2 rank(s)" in text
    single = sweep_caveats(scaling=scaling([1.0, 1.9], repetitions=1))
    assert list(single["kind"]) == ["single_repetition"]
    short = sweep_caveats(walls_s=[2.31, 40.0])
    assert short.loc[0, "kind"] == "short_runs" and "2.3 s" in short.loc[0, "text"]


def test_a_sound_sweep_gets_no_caveat():
    found = sweep_caveats(scaling=scaling([1.0, 1.9, 3.6]), walls_s=[60.0, 35.0], ranks=3, cores=4)
    assert found.empty and list(found.columns) == list(FINDING_COLUMNS)


def test_ranks_on_separate_nodes_do_not_count_as_sharing_one_hosts_cores():
    """The eval-frequency sweep's contention caveat counts the ranks on the busiest host, not all of them."""
    from types import SimpleNamespace

    import pandas as pd

    from workbench.cases.eval_frequency import _ranks_on_busiest_host

    def run(hosts):
        return SimpleNamespace(rank_meta=pd.DataFrame({"rank": range(len(hosts)), "host": hosts}))

    assert _ranks_on_busiest_host(run(["node1", "node2", "node3", "node4"])) == 1
    assert _ranks_on_busiest_host(run(["vm", "vm", "vm"])) == 3
    assert _ranks_on_busiest_host(run(["node1", "node1", "node2"])) == 2
    assert _ranks_on_busiest_host(SimpleNamespace(rank_meta=pd.DataFrame())) == 0  # hosts not recorded
