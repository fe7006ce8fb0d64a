"""``workbench analyse`` / ``workbench compare`` on recorded run directories: text, JSON, HTML."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest

from workbench.cli import main
from workbench.events import events_frame
from workbench.formatting import (
    format_megabytes,
    format_percent,
    format_rate,
    format_ratio,
    format_seconds,
    text_table,
)
from workbench.store import StreamWriter, create_run, stream_rows, update_run_meta

S = 1_000_000_000
MB = 1_000_000


def span(rank, phase, start, end, name=None):
    return {"rank": rank, "phase": phase, "name": name or phase, "start_ns": int(start * S), "end_ns": int(end * S)}


def record(root, name, rows, *, ranks, memory=None, cluster=None):
    """A finished run directory holding ``rows`` as events (and ``memory`` samples)."""
    cluster = cluster or {"ranks": ranks, "threads": 1, "cores": 4}
    path = create_run(root, name, ranks=ranks, config={"cluster": cluster})
    if rows:
        events = events_frame(pd.DataFrame(rows).assign(run_id=path.name))
        for rank, part in events.groupby("rank"):
            StreamWriter(path, "events", int(rank)).write(part.to_dict(orient="list"))
    if memory is not None:
        for rank, part in memory.assign(run_id=path.name).groupby("rank"):
            StreamWriter(path, "memory", int(rank)).write(part.to_dict(orient="list"))
    update_run_meta(path, status="finished")
    return path


def every_epoch_rows():
    """10 s, 2 ranks: 3 train steps each [0, 6); rank 0 evaluates [6, 10) while rank 1 waits."""
    rows = [span(rank, "compute", 2 * i, 2 * i + 2, "train_step") for rank in (0, 1) for i in range(3)]
    return [*rows, span(0, "evaluation", 6, 10), span(1, "communication", 6, 10, "NEGOTIATE_ALLREDUCE")]


def memory_frame():
    return pd.DataFrame(
        {
            "rank": [0, 0, 1],
            "host": "h",
            "time_ns": [0, S, 0],
            "rss_bytes": [100 * MB, 2500 * MB, 80 * MB],
            "gpu_bytes": -1,
            "cpu_percent": 0.0,
            "label": "interval",
            "iteration": -1,
        }
    )


def test_numbers_carry_three_significant_figures_and_a_unit():
    assert format_seconds(0.00123) == "1.23 ms"
    assert format_seconds(5e-7) == "0.500 µs"
    assert format_seconds(95.24) == "95.2 s"
    assert format_seconds(9.996) == "10.0 s"  # rounded before the digits are chosen
    assert format_seconds(4000) == "66.7 min"
    assert format_seconds(50_000) == "13.9 h"
    assert format_seconds(-3, signed=True) == "−3.00 s"
    assert format_seconds(2, signed=True) == "+2.00 s"
    assert format_seconds(0) == "0 s"
    assert format_seconds(float("nan")) == format_seconds(None) == "–"
    assert format_megabytes(123.4) == "123 MB"
    assert format_megabytes(2346) == "2.35 GB"
    assert format_rate(12.345) == "12.3 /s"
    assert format_ratio(0.7292) == "0.73"
    assert format_ratio(math.inf) == "new"
    assert format_percent(0.254) == "25.4%" and format_percent(0.5) == "50.0%"


def test_wide_tables_wrap_into_blocks_that_repeat_the_first_column():
    header = ["rank", *[f"phase_{i:02d}" for i in range(12)]]
    rows = [[str(rank), *["12.3 s 45%"] * 12] for rank in range(2)]
    lines = text_table(header, rows, width=60)
    assert max(len(line) for line in lines) <= 60
    blocks = "\n".join(lines).split("\n\n")
    assert len(blocks) == 3  # 4 + 4 + 4 phase columns of 10 characters
    assert all(block.splitlines()[0].startswith("rank") for block in blocks)
    assert "phase_11" in blocks[-1]


def test_analyse_prints_a_summary_headed_by_what_produced_the_run(tmp_path, capsys):
    path = record(tmp_path, "eval-k1", every_epoch_rows(), ranks=2, memory=memory_frame())
    assert main(["analyse", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0].startswith(f"run      {path.name}  (eval-k1)")
    assert "2 ranks" in out and "status finished" in out and "python " in out
    assert "POP metrics (useful phases: compute + input)" in out
    # useful 6 s of 10 s on both ranks: LB 1.00, CommE 0.60, PE 0.60
    assert re.search(r"parallel efficiency +0\.60\n  load balance +1\.00\n  communication efficiency +0\.60", out)
    assert "4.00 s 40.0%" in out  # rank 0's evaluation
    flat = " ".join(out.split())
    assert "serial_evaluation: 2.00 s lost (20.0% of wall); ranks 0" in flat
    assert "sharing evaluation over all ranks would save about 2.0 s" in flat  # findings in full
    assert "0.500 /s" in out  # 3 steps over 6 s
    assert "2.50 GB" in out  # rank 0's peak


def test_analyse_json_is_one_object_with_pop_breakdown_findings_and_steps(tmp_path, capsys):
    path = record(tmp_path, "eval-k1", every_epoch_rows(), ranks=2)
    assert main(["analyse", str(path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["run"]["run_id"] == path.name
    assert payload["pop"]["parallel_efficiency"] == pytest.approx(0.6)
    assert payload["pop"]["useful_phases"] == ["compute", "input"]
    breakdown = {(row["rank"], row["phase"]): row["seconds"] for row in payload["breakdown"]}
    assert breakdown[(1, "communication_wait")] == pytest.approx(4)
    kinds = [row["kind"] for row in payload["findings"]]
    assert "serial_evaluation" in kinds and kinds[-1] == "no_memory_samples"
    assert [(row["rank"], row["steps"]) for row in payload["steps"]] == [(0, 3), (1, 3)]


def test_analyse_in_rank_groups_says_what_the_whole_run_says(tmp_path, capsys):
    path = record(tmp_path, "eval-k1", every_epoch_rows(), ranks=2, memory=memory_frame())
    assert main(["analyse", str(path), "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main(["analyse", str(path), "--json", "--workers", "0", "--group-ranks", "1"]) == 0
    grouped = json.loads(capsys.readouterr().out)
    assert grouped.pop("split")["groups"] == 2 and whole.pop("pieces") == grouped.pop("pieces")
    for key in ("runtime_s", "load_balance", "communication_efficiency", "parallel_efficiency"):
        assert grouped["pop"].pop(key) == pytest.approx(whole["pop"].pop(key), rel=1e-12)
    assert grouped == whole  # every table and finding, the same JSON
    assert main(["analyse", str(path), "--workers", "0", "--group-ranks", "1"]) == 0
    out = capsys.readouterr().out
    assert "analysed in 2 rank group(s) on 1 worker(s)" in out
    assert re.search(r"parallel efficiency +0\.60\n", out)
    assert "serial_evaluation: 2.00 s lost (20.0% of wall); ranks 0" in " ".join(out.split())
    report = tmp_path / "split.html"
    assert main(["analyse", str(path), "--workers", "0", "--group-ranks", "1", "--html", str(report)]) == 0
    html = report.read_text()
    whole_report = tmp_path / "whole.html"
    assert main(["analyse", str(path), "--html", str(whole_report)]) == 0
    headings = set(re.findall(r"<h2>(.*?)</h2>", whole_report.read_text())) - {"Timeline", "Memory"}
    assert headings <= set(re.findall(r"<h2>(.*?)</h2>", html)) and "How it was analysed" in html
    assert "sharing evaluation over all ranks" in html


def test_a_run_too_large_for_the_free_memory_is_analysed_in_rank_groups(tmp_path, capsys, monkeypatch):
    from workbench.commands import analyse

    path = record(tmp_path, "eval-k1", every_epoch_rows(), ranks=2, memory=memory_frame())
    fits, line = analyse.whole_run_fits(path, available=10**12)
    assert fits and line == ""
    fits, line = analyse.whole_run_fits(path, available=1_000)
    assert not fits and "in rank groups" in line and "GB free" in line
    # workers: one per core while the free memory holds a group each (2 ranks: one group of the run's events)
    group_bytes = stream_rows(path, "events") * analyse.BYTES_PER_EVENT_IN_GROUP
    assert analyse.split_workers(path, available=10**12, cores=8) == 8
    assert analyse.split_workers(path, available=int(3.5 * group_bytes / analyse.MEMORY_SHARE), cores=8) == 3
    assert analyse.split_workers(path, available=1_000, cores=8) == 1 and "on 1 worker (" in line
    monkeypatch.setattr(analyse, "BYTES_PER_EVENT_WHOLE_RUN", 10**15)  # every run is too large now
    assert main(["analyse", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert "in rank groups on 2 workers" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert json.loads(captured.out)["split"]["groups"] >= 1


def test_analyse_html_writes_the_report(tmp_path, capsys):
    path = record(tmp_path, "eval-k1", every_epoch_rows(), ranks=2, memory=memory_frame())
    report = tmp_path / "out" / "analysis.html"
    assert main(["analyse", str(path), "--html", str(report)]) == 0
    assert f"report: {report}" in capsys.readouterr().out
    html = report.read_text()
    for heading in ("Run", "POP metrics", "Findings", "Seconds per rank and phase", "Timeline", "Memory"):
        assert f"<h2>{heading}</h2>" in html
    assert "sharing evaluation over all ranks" in html


def test_analyse_html_of_many_ranks_draws_the_heatmap_and_the_slowest_ranks_timeline(tmp_path, capsys):
    """80 ranks, ranks 7 and 70 computing 0.9 of each 1 s step, the others 0.5 and then waiting."""
    rows = []
    for step in range(3):
        for rank in range(80):
            busy = 0.9 if rank in (7, 70) else 0.5
            rows.append(span(rank, "compute", step, step + busy, "train_step"))
            rows.append(span(rank, "communication", step + busy, step + 1.0, "allreduce"))
    path = record(tmp_path, "big", rows, ranks=80)
    report = tmp_path / "analysis.html"
    assert main(["analyse", str(path), "--html", str(report)]) == 0
    html = report.read_text()
    assert "<h2>Waiting share per rank over time (80 ranks; the 16 slowest marked)</h2>" in html
    assert "<h2>Timeline of the 16 slowest ranks (those that wait least)</h2>" in html
    assert "<h2>Timeline</h2>" not in html


def test_analyse_a_run_that_recorded_nothing(tmp_path, capsys):
    path = record(tmp_path, "empty", [], ranks=1)
    assert main(["analyse", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1. no_events (note); ranks all" in out and "no events recorded" in out
    assert "1 rank," in out
    assert "no_memory_samples" in out
    assert main(["analyse", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pop"]["parallel_efficiency"] is None


def test_compare_two_runs_with_different_ranks(tmp_path, capsys):
    a = record(tmp_path, "every-epoch", every_epoch_rows(), ranks=2)
    # B: 7 s on ranks 0 and 2 (rank 1 gone): steps [0, 6), rank 0 evaluates [6, 7)
    rows_b = [span(rank, "compute", 2 * i, 2 * i + 2, "train_step") for rank in (0, 2) for i in range(3)]
    b = record(tmp_path, "every-30", [*rows_b, span(0, "evaluation", 6, 7)], ranks=None)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert out.splitlines()[0].startswith(f"A        {a.name}  (every-epoch)")
    assert "wall time  A 10.0 s  B 7.00 s  B − A −3.00 s  B / A 0.70" in out
    assert re.search(r"\nevaluation +4\.00 s +1\.00 s +−3\.00 s +0\.25 +both\n", out)  # all ranks
    assert re.search(r"\n0 +evaluation +4\.00 s +1\.00 s +−3\.00 s +0\.25 +both\n", out)  # rank 0
    assert re.search(r"\n1 +communication_wait +4\.00 s +0 s +−4\.00 s +0\.00 +a only\n", out)
    assert re.search(r"\n2 +compute +0 s +6\.00 s +\+6\.00 s +new +b only\n", out)
    assert main(["compare", str(a), str(b), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["wall"]["delta_s"] == pytest.approx(-3)
    per_rank = {(row["rank"], row["phase"]): row for row in payload["per_rank"]}
    assert per_rank[(2, "compute")]["present"] == "b only" and per_rank[(2, "compute")]["ratio"] is None
    assert per_rank[(1, "communication_wait")]["seconds_b"] == 0
    report = tmp_path / "compare.html"
    assert main(["compare", str(a), str(b), "--html", str(report)]) == 0
    assert "Where the time went differently" in report.read_text()


def test_a_directory_that_is_not_a_run_is_one_clear_error(tmp_path, capsys):
    assert main(["analyse", str(tmp_path)]) == 2
    assert "is not a workbench run" in capsys.readouterr().err


def test_amounts_and_intervals_read_without_exponents():
    from workbench.formatting import format_amount, format_interval

    assert [format_amount(v) for v in (0.00103, 33.93, 1234.5, float("nan"), None)] == [
        "0.00103",
        "33.9",
        "1 234",
        "–",
        "–",
    ]
    assert format_interval(1187.5, 1084.2, 1313.9, "images/s") == "1 188 images/s [1 084, 1 314]"
    assert format_interval(26.0, float("nan"), 51.5, "images/s") == "26 images/s"


def test_compare_counts_a_derived_wait_as_analyse_does(tmp_path, capsys):
    # 3 steps: rank 1's last 3 s where rank 0's last 1 s, each ending in an allreduce both ranks leave together
    rows = []
    for i in range(3):
        rows += [
            {**span(0, "compute", 3 * i, 3 * i + 1, "train_step"), "step": i},
            {**span(1, "compute", 3 * i, 3 * i + 3, "train_step"), "step": i},
            {**span(0, "communication", 3 * i + 1, 3 * i + 3, "allreduce"), "step": i},
        ]
    path = record(tmp_path, "uneven", rows, ranks=2)
    assert main(["analyse", str(path), "--json"]) == 0
    analysed = {(row["rank"], row["phase"]): row["seconds"] for row in json.loads(capsys.readouterr().out)["breakdown"]}
    assert main(["compare", str(path), str(path), "--json"]) == 0
    per_rank = json.loads(capsys.readouterr().out)["per_rank"]
    compared = {(row["rank"], row["phase"]): row["seconds_a"] for row in per_rank}
    waits = {key: seconds for key, seconds in analysed.items() if key[1] == "communication_wait"}
    assert waits and all(compared[key] == pytest.approx(seconds) for key, seconds in waits.items())


def test_where_rank_groups_go_off_this_machine(tmp_path):
    """Engines on a hostfile's hosts or the allocation's nodes (as `workbench profile` places ranks), one a node or
    --per-node; local processes otherwise, and whenever --workers asks for them."""
    from workbench.commands.analyse import engine_placement
    from workbench.placement import PlacementError

    hosts = tmp_path / "hosts"
    hosts.write_text("node1 slots=4\nnode2 slots=4\nnode3 slots=4\n")
    placed = engine_placement(hostfile=str(hosts), per_node=2, environment={})
    assert placed.kind == "hostfile" and placed.ranks == 6 and placed.hosts == ("node1", "node2", "node3")
    assert placed.config.ranks_per_node == 2 and placed.config.threads == 1
    allocation = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_TASKS_PER_NODE": "8(x4)"}
    placed = engine_placement(environment=allocation)
    assert placed.kind == "allocation" and placed.ranks == 4 and placed.config.ranks_per_node == 1
    assert engine_placement(environment=allocation, workers=2) is None  # local processes, as asked
    one_node = {"SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "gpu01", "SLURM_TASKS_PER_NODE": "8"}
    assert engine_placement(environment=one_node) is None and engine_placement(environment={}) is None
    with pytest.raises(PlacementError, match="--per-node 0: run at least 1 engine"):
        engine_placement(hostfile=str(hosts), per_node=0, environment={})
    with pytest.raises(PlacementError, match="--workers runs the groups on local processes"):
        engine_placement(hostfile=str(hosts), workers=2, environment={})
    with pytest.raises(PlacementError, match="both name the nodes"):
        engine_placement(hostfile=str(hosts), minicluster=True, environment={})
