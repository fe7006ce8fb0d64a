"""Sweeps over node counts (``workbench run CASE --nodes``): the plan, the options, the link's sizes, the file."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench.experiment import Experiment
from workbench.node_sweep import describe_nodes, link_sizes, read_nodes_file


def test_rank_counts_keep_only_those_counts_of_the_sweep():
    experiment = Experiment("eval-frequency", preset="ci", rank_counts=(8, 1, 2, 4), backends=("mpi4py",))
    assert experiment.max_ranks == 8
    assert sorted({p.ranks for p in experiment.plan()}) == [1, 2, 4, 8]
    assert len(experiment.plan()) == 4 * 2  # two evaluation intervals per count
    with pytest.raises(ValueError, match="go past ranks=4"):
        Experiment("eval-frequency", preset="ci", ranks=4, rank_counts=(1, 8))
    with pytest.raises(ValueError, match=">= 1"):
        Experiment("eval-frequency", preset="ci", rank_counts=(0, 2))


def test_the_link_is_measured_with_sizes_it_carries_in_a_couple_of_seconds():
    slow = link_sizes(10_000_000)  # 10 Mbit/s: 2 MiB take 1.7 s, 4 MiB would take 3.4 s
    assert max(slow) == 2 << 20 and sum(size >= 1 << 20 for size in slow) == 2
    fast = link_sizes(1_000_000_000)
    assert max(fast) == 16 << 20 and min(fast) == 1024
    assert link_sizes(None) == fast  # an unshaped link: every size


def test_nodes_are_described_once_when_alike_and_one_by_one_when_not():
    alike = [{"name": f"node{k}", "cpus": 0.2, "link_bits_per_s": 10**9} for k in (1, 2)]
    assert describe_nodes(alike) == "0.2 core, 1gbit per node"
    mixed = [alike[0], {"name": "node2", "cpus": 0.4, "link_bits_per_s": 10**7}]
    assert describe_nodes(mixed) == "node1 0.2 core, 1gbit; node2 0.4 core, 10mbit"


def test_a_sweep_without_nodes_file_is_not_a_node_sweep_and_a_broken_one_says_so(tmp_path):
    assert read_nodes_file(tmp_path) is None
    (tmp_path / "nodes.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_nodes_file(tmp_path)
    (tmp_path / "nodes.json").write_text(json.dumps({"nodes": [], "counts": [1, 2], "allreduce": []}))
    assert read_nodes_file(tmp_path)["counts"] == [1, 2]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--link", "10mbit"], "give --nodes too"),
        (["--nodes", "1,2", "--minicluster"], "drop --minicluster and --ranks"),
        (["--nodes", "1,2", "--ranks", "2"], "drop --minicluster and --ranks"),
        (["--nodes", "0,2"], "whole number"),
    ],
)
def test_node_options_that_do_not_fit_get_one_line(argv, message, capsys):
    from workbench.cli import main

    assert main(["run", "eval-frequency", "--preset", "ci", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_bench_says_what_to_run_when_no_node_sweep_is_saved(tmp_path):
    from docsbench.projection_check import format_nodes, run_nodes

    result = run_nodes([("eval-frequency", str(tmp_path / "nodes-*"))])
    assert result["runs"] == 0 and result["missing_sweeps"] == [str(tmp_path / "nodes-*")]
    assert "workbench run eval-frequency --nodes" in format_nodes(result)


def test_the_node_table_says_where_the_hosts_speed_was_not_sampled():
    from docsbench.projection_check import format_nodes, validation_summary

    row = {
        "case": "eval-frequency",
        "cluster": "2 nodes: 0.2 core, 1gbit per node",
        "point": "n2/backend=mpi4py/k=1",
        "repetitions": 1,
        "measured_s": 10.0,
        "measured_spread": 0.0,
        "predicted_s": 11.0,
        "error": 0.1,
        "host_slowdown": float("nan"),  # a sweep made before host-speed.txt was written beside it
        "error_at_host_speed": float("nan"),
    }
    table = pd.DataFrame([row])
    result = {
        "validation": [row],
        **validation_summary(table),
        "single_repetitions": validation_summary(table),
        "at_host_speed": validation_summary(table, "error_at_host_speed"),
        "by_cluster": {},
    }
    text = format_nodes(result)
    assert "+10.0%" in text and "nan" not in text and "–" in text.splitlines()[1]
    assert text.splitlines()[1].endswith("–")  # no compute per step either (a result saved before it was kept)
    row["compute_growth"] = 0.8
    assert format_nodes({**result, "validation": [row]}).splitlines()[1].endswith("0.80x")
    assert "at the host's measured speed" not in text  # nothing to say without samples
    assert "the ranks' CPU" not in text  # nor without the ranks' CPU read (a recorder before it read it)
    row["ranks"] = 2
    row["cpu_target"] = {"cpu_cores": 0.118, "waiting_cores": 0.508, "throttled_share": 0.22}
    row["cpu_base"] = {"cpu_cores": 0.2, "waiting_cores": 1.38, "throttled_share": 1.0}
    last = format_nodes({**result, "validation": [row]}).splitlines()[-1].split()
    assert last[-3:] == ["0.118/0.2", "0.508/1.38", "22%/100%"] and last[-5:-3] == ["n2/backend=mpi4py/k=1", "2"]


def test_sweeps_named_by_glob_take_their_case_from_sweep_json_and_one_glob_is_one_case(tmp_path, capsys):
    from docsbench.projection_check import sweeps_of
    from workbench.cli import main
    from workbench.config import ConfigError

    for name, case in (("ef-r1", "eval-frequency"), ("ef-r2", "eval-frequency"), ("ip-r1", "input-pipeline")):
        (tmp_path / name).mkdir()
        pd.DataFrame({"point": ["n1"]}).to_parquet(tmp_path / name / "runs.parquet")
        (tmp_path / name / "sweep.json").write_text(json.dumps({"case": case}))
    assert sweeps_of([str(tmp_path / "ef-r*"), str(tmp_path / "ip-r1")]) == [
        ("eval-frequency", str(tmp_path / "ef-r*")),
        ("input-pipeline", str(tmp_path / "ip-r1")),
    ]
    with pytest.raises(ConfigError, match=r"matches sweeps of 2 cases \(eval-frequency, input-pipeline\)"):
        sweeps_of([str(tmp_path / "*-r1")])
    with pytest.raises(ConfigError, match="no sweep matches"):
        sweeps_of([str(tmp_path / "nothing-*")])
    assert main(["bench", "projection", "--sweeps", str(tmp_path / "ef-r*")]) == 2
    assert "give it with --nodes" in capsys.readouterr().err
