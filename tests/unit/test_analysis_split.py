"""A run analysed in rank groups, merged, says what the same run analysed at once says."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench import events as ev
from workbench.analysis import (
    allreduce_lateness,
    findings,
    lateness_summary,
    phase_breakdown,
    pop_metrics,
    steps_per_rank,
    with_hosts,
)
from workbench.analysis.findings import EventFacts, event_facts
from workbench.bench.analysis import synthetic_events, write_run, write_synthetic_run
from workbench.rank_groups import analyse_split, close_group, rank_groups
from workbench.store import RunData, create_run, update_run_meta

JOB = {"ranks_per_node": 4, "slow_nodes": 1, "straggler_share": 0.02}


def whole(path, ranks=None):
    """What the split analysis must equal: the run loaded at once through the same functions."""
    run = RunData.load(path)
    events = run.events
    hosts = ev.rank_hosts(events)
    breakdown = phase_breakdown(events, by=("run_id", "rank"), ranks=ranks)
    pop = pop_metrics(events, breakdown=breakdown)
    found = findings(events, pop=pop, ranks=ranks, breakdown=breakdown, hosts=hosts)
    return {
        "breakdown": with_hosts(breakdown.drop(columns="run_id").reset_index(drop=True), hosts),
        "pop": pop.iloc[0],
        "findings": found,
        "lateness": with_hosts(lateness_summary(allreduce_lateness(events)), hosts),
        "steps": with_hosts(steps_per_rank(events, ranks=ranks), hosts),
        "events": len(events),
    }


def assert_same(split, expected):
    pd.testing.assert_frame_equal(split.breakdown, expected["breakdown"])
    for key in ("runtime_s", "useful_total_s", "load_balance", "communication_efficiency", "parallel_efficiency"):
        assert split.pop[key] == pytest.approx(expected["pop"][key], rel=1e-12)
    kinds = list(expected["findings"]["kind"])
    merged = split.findings[split.findings["kind"].isin(kinds)].reset_index(drop=True)
    columns = ["kind", "text", "seconds_lost", "ranks"]
    pd.testing.assert_frame_equal(merged[columns], expected["findings"][columns].reset_index(drop=True))
    pd.testing.assert_frame_equal(split.lateness.reset_index(drop=True), expected["lateness"], check_dtype=False)
    pd.testing.assert_frame_equal(split.steps.reset_index(drop=True), expected["steps"], check_dtype=False)
    assert split.events == expected["events"]


@pytest.mark.parametrize("group_ranks", [1, 3, 16])
def test_groups_merge_into_the_whole_runs_analysis(tmp_path, group_ranks):
    path = write_synthetic_run(tmp_path, 60_000, 12, chunk_ranks=5, **JOB)
    split = analyse_split(path, group_ranks=group_ranks)
    assert split.groups == len(rank_groups(range(12), group_ranks))
    assert_same(split, whole(path, ranks=list(range(12))))
    # the job's shape shows: the slow node's ranks arrive last most often, rank 0 evaluates alone
    late = split.lateness.sort_values("last_in_steps").iloc[-1]
    assert late["host"] == "node1"
    assert {"serial_evaluation", "load_imbalance"} <= set(split.findings["kind"])
    assert "grouped_analysis" in set(split.findings["kind"])  # what groups leave out, said in the output


def test_worker_processes_give_the_same_answer_and_report_their_memory(tmp_path):
    path = write_synthetic_run(tmp_path, 40_000, 8, **JOB)
    here = analyse_split(path, group_ranks=3)
    apart = analyse_split(path, group_ranks=3, workers=2)
    assert apart.workers == 2 and len(apart.worker_peak_rss) == 2
    assert all(peak > 0 for peak in apart.worker_peak_rss.values())
    pd.testing.assert_frame_equal(apart.breakdown, here.breakdown)
    pd.testing.assert_frame_equal(apart.findings, here.findings)
    pd.testing.assert_frame_equal(apart.lateness, here.lateness)
    pd.testing.assert_frame_equal(apart.step_arrivals, here.step_arrivals)


def test_declared_ranks_without_events_are_idle_for_the_whole_run(tmp_path):
    events = synthetic_events(20_000, 4)
    path = write_run(events, tmp_path, 4)
    # the run declares 8 ranks; 4-7 never wrote: a whole group of them has no file at all
    update_run_meta(path, ranks=8)
    split = analyse_split(path, group_ranks=4)
    assert_same(split, whole(path, ranks=list(range(8))))
    silent = split.breakdown[split.breakdown["rank"] >= 4]
    assert set(silent["phase"]) == {"idle"} or (silent.loc[silent["phase"] != "idle", "seconds"] == 0).all()
    wall = split.pop["runtime_s"]
    assert silent.groupby("rank")["seconds"].sum().tolist() == pytest.approx([wall] * 4)


def _events(rows):
    frame = ev.events_frame(pd.DataFrame(rows))
    return frame.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def test_short_steps_facts_and_backwards_spans_merge(tmp_path):
    ms = 1_000_000
    rows = []
    for rank in range(4):
        for step in range(20):
            t0 = step * 10 * ms
            rows.append(dict(rank=rank, phase="compute", name="train_step", step=step, start_ns=t0, end_ns=t0 + 4 * ms))
            rows.append(
                dict(rank=rank, phase="communication", name="allreduce", step=step, bytes=1000,
                     start_ns=t0 + 1 * ms, end_ns=t0 + 4 * ms)
            )
        rows.append(dict(rank=rank, phase="idle", name=ev.OFF_CPU, start_ns=200 * ms, end_ns=(201 + rank) * ms))
    rows.append(dict(rank=2, phase="compute", name="broken", start_ns=50 * ms, end_ns=40 * ms))
    events = _events(rows)
    path = write_run(events, tmp_path, 4)
    split = analyse_split(path, group_ranks=1)
    kept = events[events["end_ns"] >= events["start_ns"]]
    expected = event_facts(kept)
    merged = EventFacts.merge(event_facts(kept[kept["rank"] == r]) for r in range(4))
    assert merged.off_cpu_s == pytest.approx(expected.off_cpu_s) == pytest.approx(0.010)
    pd.testing.assert_frame_equal(merged.step_collectives, expected.step_collectives)
    assert np.array_equal(merged.step_compute_s, expected.step_compute_s)
    alone = findings(kept, ranks=range(4))
    columns = ["text", "seconds_lost"]
    pd.testing.assert_frame_equal(
        split.findings.loc[split.findings["kind"] == "per_call_cost", columns].reset_index(drop=True),
        alone.loc[alone["kind"] == "per_call_cost", columns].reset_index(drop=True),
    )
    assert (split.findings["kind"] == "per_call_cost").sum() == 1
    backwards = split.findings[split.findings["kind"] == "backwards_spans"]
    assert len(backwards) == 1 and "1 span(s)" in backwards["text"].item() and backwards["ranks"].item() == "2"


def test_bad_use_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="at least 1 rank"):
        rank_groups(range(4), 0)
    with pytest.raises(RuntimeError, match="open_group first"):
        close_group("never-opened", pd.DataFrame())
    with pytest.raises(ValueError, match="at least 1"):
        analyse_split(write_run(synthetic_events(5_000, 2), tmp_path, 2), workers=0)
    empty = create_run(tmp_path / "empty", "nothing", ranks=2)
    result = analyse_split(empty)
    assert result.events == 0 and "no_events" in set(result.findings["kind"])


def test_low_ranks_without_steps_leave_the_reference_to_the_groups(tmp_path):
    """The run's reference steps are its lowest rank with steps: read from the lowest ranks before the groups open
    (two rounds), else found by the groups and marked in a round of its own; both give the run's lateness."""
    from workbench.rank_groups import REFERENCE_PROBE_RANKS

    events = synthetic_events(30_000, 8)
    quiet = REFERENCE_PROBE_RANKS + 1  # ranks 0..4 keep only their input waits: no step, no negotiation
    steps_or_talk = events["name"].isin(["train_step"]) | events["name"].astype(str).str.startswith("NEGOTIATE")
    events = events[~((events["rank"] < quiet) & steps_or_talk)].reset_index(drop=True)
    late = write_run(events, tmp_path / "late", 8)
    found_late = analyse_split(late, group_ranks=3)
    assert "mark" in found_late.seconds
    assert_same(found_late, whole(late, ranks=list(range(8))))
    assert int(found_late.lateness["rank"].min()) >= quiet and found_late.step_arrivals["ranks"].max() == 8 - quiet
    first = write_run(synthetic_events(30_000, 8), tmp_path / "first", 8)
    found_first = analyse_split(first, group_ranks=3)
    assert "mark" not in found_first.seconds and len(found_first.lateness) == 8
    assert_same(found_first, whole(first, ranks=list(range(8))))
