"""``workbench bench horovod-step`` on real ranks: every variant and cycle time measured, the ratios consistent."""

from __future__ import annotations

import pytest

from workbench.bench.horovod_step import CYCLE_TIMES_MS, VARIANTS, format_result, run

pytestmark = pytest.mark.mpi


def test_every_variant_runs_on_two_ranks_and_the_speedup_is_its_ratio():
    result = run(steps=5, rounds=1, cycle_times_ms=(0.5,))  # one cycle time: each is one more launch
    rows = result["rows"]
    assert [(r["variant"], r["cycle_time_ms"]) for r in rows] == [(v, 0.5) for v in VARIANTS]
    assert CYCLE_TIMES_MS == (0.1, 1.0, 5.0)  # what the command measures by default
    for row in rows:
        assert row["ms_per_step"] > 0 and row["one_rank_ms_per_step"] > 0
        assert row["speedup_2_over_1"] == pytest.approx(2 * row["one_rank_ms_per_step"] / row["ms_per_step"])
        assert row["added_ms_per_step"] == pytest.approx(row["ms_per_step"] - row["one_rank_ms_per_step"])
    assert "in_graph" in format_result(result)
