"""One analysis at any size: a run analysed in rank groups gives every table and finding the whole run gives.

Runs made to exercise every registered piece of the analysis (``analysis.pieces.PIECES``), HTA's real Kineto
ranks and the TF profiler's real XPlane are analysed whole and in rank groups of 1, 2 and an odd size; a piece
that the made runs do not exercise, or that the groups leave out, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from analysis_parity import (
    assert_same_analysis,
    whole_analysis,
    write_made_cpu_run,
    write_made_gpu_run,
)

from workbench.analysis.pieces import FRAMES, PIECES, TABLES
from workbench.datasets.made_traces.job import made_events, write_made_run, write_run
from workbench.rank_groups import GROUPED_PIECES, analyse_split, mark_group, rank_groups
from workbench.store import create_run, update_run_meta

JOB = {"ranks_per_node": 4, "slow_nodes": 1, "straggler_share": 0.02}
TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


@pytest.fixture(scope="module")
def made_runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("made")
    return {
        "cpu": write_made_cpu_run(root / "cpu"),
        "cpu-no-collectives": write_made_cpu_run(root / "alone", collectives=False),
        "gpu": write_made_gpu_run(root / "gpu"),
    }


@pytest.fixture(scope="module")
def whole_runs(made_runs) -> dict[str, object]:
    return {name: whole_analysis(path) for name, path in made_runs.items()}


@pytest.mark.parametrize("name", ["cpu", "cpu-no-collectives", "gpu"])
@pytest.mark.parametrize("group_ranks", [1, 2, 5])
def test_every_piece_is_the_same_in_rank_groups(made_runs, whole_runs, name, group_ranks):
    split = analyse_split(made_runs[name], group_ranks=group_ranks)
    assert split.groups == len(rank_groups(range(6 if name != "gpu" else 4), group_ranks))
    assert_same_analysis(split, whole_runs[name], context=f"{name}, groups of {group_ranks}")


def test_the_made_runs_exercise_every_registered_piece(whole_runs):
    """A piece whose tables stay empty and whose findings never appear on the made runs is not compared: add what
    exercises it to ``tests/analysis_parity.py``."""
    produced: set[str] = set()
    for result in whole_runs.values():
        produced |= set(result.findings["kind"])
        produced |= {name for name in TABLES if len(getattr(result, name))}
        produced |= {"header.rank_hosts"} if result.header["rank_hosts"] else set()
        produced |= {"pop"} if result.pop["parallel_efficiency"] == result.pop["parallel_efficiency"] else set()
    for piece in PIECES:
        assert set(piece.yields) & produced, piece.name
    assert tuple(piece.name for piece in PIECES) == GROUPED_PIECES

    cpu = whole_runs["cpu"]
    # what the made CPU run was made to show, named on the evidence it was made with
    kinds = set(cpu.findings["kind"])
    assert {"straggler", "retracing", "memory_growth", "keras_call", "slow_link", "stalled_collective",
            "serial_python_input", "serial_evaluation", "backwards_spans", "setup_time", "slowed_link", "link_down",
            "records_held"} <= kinds  # fmt: skip
    assert cpu.findings.set_index("kind").loc["straggler", "ranks"] == "4"
    assert {"no_collectives", "run_interrupted", "unrecorded_tail"} <= set(
        whole_runs["cpu-no-collectives"].findings["kind"]
    )
    gpu = set(whole_runs["gpu"].findings["kind"])
    assert {"idle_gpu", "unused_gpu", "lagging_gpu", "exposed_communication", "host_bound_gpu"} <= gpu


def test_each_piece_states_its_contract():
    """What a piece reads is a frame of the run; what it reads merged comes before it; a late piece says what it
    needs of the merged run; a merge-only piece reads no frame of its own beyond the metadata."""
    names = [piece.name for piece in PIECES]
    assert len(set(names)) == len(names)
    for index, piece in enumerate(PIECES):
        assert set(piece.reads) <= set(FRAMES), piece.name
        assert set(piece.after) <= set(names[:index]), f"{piece.name} merges before what it reads"
        assert piece.yields, piece.name
        assert (piece.needs is not None) == piece.late, piece.name
        if piece.reduce is None:
            assert set(piece.reads) <= {"meta"}, piece.name


@pytest.mark.parametrize(
    ("folder", "group_ranks"),
    [("hta_trace_filter", 1), ("tfprofiler_gpu_multi_worker", 1), ("tfprofiler_gpu_multi_worker", 2)],
)
def test_real_gpu_traces_give_the_same_gpu_analysis_in_rank_groups(tmp_path, folder, group_ranks):
    from workbench.importer import import_traces

    files = sorted(p for p in (TRACES / folder).iterdir() if p.name != "PROVENANCE.md")
    path = import_traces(files, out=tmp_path).run_path
    whole = whole_analysis(path)
    assert len(whole.devices) >= 2 and {"idle_gpu"} <= set(whole.findings["kind"])
    assert_same_analysis(analyse_split(path, group_ranks=group_ranks), whole, context=folder)


@pytest.mark.parametrize("group_ranks", [1, 3, 16])
def test_a_synthetic_job_merges_into_the_whole_runs_analysis(tmp_path, group_ranks):
    path = write_made_run(tmp_path, 60_000, 12, chunk_ranks=5, **JOB)
    split = analyse_split(path, group_ranks=group_ranks)
    assert_same_analysis(split, whole_analysis(path), context=f"groups of {group_ranks}")
    # the job's shape shows: the slow node's ranks arrive last most often, rank 0 evaluates alone
    late = split.lateness[split.lateness["last"]].groupby("host").size()
    assert late.idxmax() == "node1"
    assert {"serial_evaluation", "load_imbalance"} <= set(split.findings["kind"])


def test_worker_processes_give_the_same_answer_and_report_their_memory(made_runs, whole_runs):
    apart = analyse_split(made_runs["cpu"], group_ranks=2, workers=2)
    assert apart.workers == 2 and len(apart.worker_peak_rss) == 2
    assert all(peak > 0 for peak in apart.worker_peak_rss.values())
    assert set(apart.seconds) == {"open", "lanes", "merge"}
    assert_same_analysis(apart, whole_runs["cpu"], context="2 worker processes")


def test_declared_ranks_without_events_are_idle_for_the_whole_run(tmp_path):
    events = made_events(20_000, 4)
    path = write_run(events, tmp_path, 4)
    # the run declares 8 ranks; 4-7 never wrote: a whole group of them has no file at all
    update_run_meta(path, ranks=8)
    split = analyse_split(path, group_ranks=4)
    assert_same_analysis(split, whole_analysis(path))
    silent = split.breakdown[split.breakdown["rank"] >= 4]
    assert (silent.loc[silent["phase"] != "idle", "seconds"] == 0).all()
    wall = split.pop["runtime_s"]
    assert silent.groupby("rank")["seconds"].sum().tolist() == pytest.approx([wall] * 4)


def test_low_ranks_without_steps_leave_the_reference_to_the_groups(tmp_path):
    """The run's reference steps are its lowest rank with steps: read from the lowest ranks before the groups open,
    else found by the groups and marked in a round of its own; both give the run's lateness."""
    from workbench.rank_groups import REFERENCE_PROBE_RANKS

    events = made_events(30_000, 8)
    quiet = REFERENCE_PROBE_RANKS + 1  # ranks 0..4 keep only their input waits: no step, no negotiation
    steps_or_talk = events["name"].isin(["train_step"]) | events["name"].astype(str).str.startswith("NEGOTIATE")
    events = events[~((events["rank"] < quiet) & steps_or_talk)].reset_index(drop=True)
    late = write_run(events, tmp_path / "late", 8)
    found_late = analyse_split(late, group_ranks=3)
    assert "mark" in found_late.seconds
    assert_same_analysis(found_late, whole_analysis(late))
    assert int(found_late.lateness["rank"].min()) >= quiet
    first = write_run(made_events(30_000, 8), tmp_path / "first", 8)
    found_first = analyse_split(first, group_ranks=3)
    assert "mark" not in found_first.seconds and found_first.lateness["rank"].nunique() == 8
    assert_same_analysis(found_first, whole_analysis(first))


def test_bad_use_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="at least 1 rank"):
        rank_groups(range(4), 0)
    with pytest.raises(RuntimeError, match="open_group first"):
        mark_group("never-opened", pd.DataFrame())
    with pytest.raises(ValueError, match="at least 1"):
        analyse_split(write_run(made_events(5_000, 2), tmp_path, 2), workers=0)
    empty = create_run(tmp_path / "empty", "nothing", ranks=2)
    result = analyse_split(empty)
    assert result.events == 0 and "no_events" in set(result.findings["kind"])
    assert_same_analysis(result, whole_analysis(empty))
