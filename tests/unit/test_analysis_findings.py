"""Findings: computed seconds_lost for every kind, plain text, ranking; oversubscription."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.analysis import (
    combine_findings,
    findings,
    missing_data_finding,
    oversubscription_finding,
    oversubscription_finding_from_meta,
    pop_metrics,
    rank_list,
)
from workbench.analysis.findings import FINDING_COLUMNS
from workbench.events import events_frame
from workbench.events import rank_list as events_rank_list

S = 1_000_000_000


def span(rank, phase, start, end, name=None):
    return {"rank": rank, "phase": phase, "name": name or phase, "start_ns": start * S, "end_ns": end * S}


def serial_evaluation_run():
    """4 ranks, 100 s.

    ranks 0-2 compute [0, 50); rank 3 computes [0, 40) and is idle [40, 50).
    rank 0 evaluates [50, 90) while ranks 1-3 wait in negotiation [50, 90).
    all ranks transfer [90, 100).
    """
    rows = []
    for rank in range(4):
        rows.append(span(rank, "compute", 0, 40 if rank == 3 else 50, "train_step"))
        if rank == 0:
            rows.append(span(0, "evaluation", 50, 90))
        else:
            rows.append(span(rank, "communication", 50, 90, "NEGOTIATE_ALLREDUCE"))
        rows.append(span(rank, "communication", 90, 100, "MPI_ALLREDUCE"))
    return events_frame(rows)


def test_findings_for_a_run_with_serial_evaluation():
    result = findings(serial_evaluation_run())
    assert tuple(result.columns) == FINDING_COLUMNS
    lost = dict(zip(result["kind"], result["seconds_lost"], strict=True))
    # low parallel efficiency: useful 50, 50, 50, 40 -> PE = 47.5 / 100 = 0.475 -> 100 * (1 - 0.475) = 52.5
    assert lost["low_parallel_efficiency"] == pytest.approx(52.5)
    # communication: (10 + 0) on rank 0, (10 + 40) on ranks 1-3 -> mean 40 s
    assert lost["communication"] == pytest.approx(40)
    # serial evaluation: max 40 - total 40 / 4 ranks = 30 s
    assert lost["serial_evaluation"] == pytest.approx(30)
    # load imbalance: max compute 50 - mean 47.5 = 2.5 s
    assert lost["load_imbalance"] == pytest.approx(2.5)
    # idle: rank 3 idle 10 s -> mean 2.5 s
    assert lost["idle"] == pytest.approx(2.5)
    assert "input_pipeline" not in lost
    # ranked by seconds lost; the 2.5 s tie is broken by kind name
    assert result["kind"].tolist() == [
        "low_parallel_efficiency",
        "communication",
        "serial_evaluation",
        "idle",
        "load_imbalance",
    ]
    assert result["order"].tolist() == [1, 2, 3, 4, 5]
    assert result["fraction_of_wall"].tolist() == pytest.approx([0.525, 0.4, 0.3, 0.025, 0.025])
    text = dict(zip(result["kind"], result["text"], strict=True))
    # others wait: (40 + 10 + 0), (40 + 10 + 0), (40 + 10 + 10) -> mean 53.3 s = 53%
    assert text["serial_evaluation"].startswith("rank 0 evaluates for 40% of wall time while ranks 1–3 wait")
    assert "53% of their time" in text["serial_evaluation"]
    assert text["load_imbalance"].startswith("load imbalance: rank 3 computes 20% less than rank 0")
    assert text["communication"] == "communication takes 40% of wall time (30% waiting)"
    assert text["idle"].startswith("idle: ranks spend 2% of wall time")
    ranks = dict(zip(result["kind"], result["ranks"], strict=True))
    assert (ranks["serial_evaluation"], ranks["load_imbalance"], ranks["idle"]) == ("0", "0, 3", "3")


def test_load_imbalance_names_a_slow_nodes_ranks_together():
    # 8 ranks, 2 a node; node2's ranks 4-5 compute 15 s, the others 10 s, then all communicate until 20 s
    rows = []
    for rank in range(8):
        compute = 15 if rank in (4, 5) else 10
        rows.append({**span(rank, "compute", 0, compute), "host": f"node{rank // 2}"})
        rows.append({**span(rank, "communication", compute, 20, "MPI_ALLREDUCE"), "host": f"node{rank // 2}"})
    result = findings(events_frame(rows))
    row = result[result["kind"] == "load_imbalance"].iloc[0]
    # mean compute (6 * 10 + 2 * 15) / 8 = 11.25 s; lost = 15 - 11.25 = 3.75 s; slow: >= 11.25 + 0.5 * 3.75
    assert row["seconds_lost"] == pytest.approx(3.75)
    assert row["text"].endswith("the others wait for 2 slow ranks: node2 (ranks 4–5)")
    assert row["ranks"] == "0, 4–5"


def test_input_pipeline_finding_and_threshold():
    # 2 ranks, 10 s: rank 0 waits for input 2 s, rank 1 for 1 s -> mean 1.5 s (15%)
    events = events_frame(
        [
            span(0, "input", 0, 2),
            span(0, "compute", 2, 10),
            span(1, "input", 0, 1),
            span(1, "compute", 1, 10),
        ]
    )
    result = findings(events, min_fraction=0.1)
    row = result.set_index("kind").loc["input_pipeline"]
    assert row["seconds_lost"] == pytest.approx(1.5)
    assert row["text"] == "input pipeline: ranks wait 15% of time for the next batch (most: rank 0, 20%)"
    # compute 8 vs 9: imbalance 9 - 8.5 = 0.5 s = 5% < min_fraction 10% -> left out
    assert "load_imbalance" not in set(result["kind"])
    # PE with input useful = 1.0: no efficiency finding
    assert "low_parallel_efficiency" not in set(result["kind"])


def test_efficient_run_has_no_findings_and_pop_can_be_passed():
    # 2 ranks compute 9.9 s and transfer 0.1 s: communication 1% < 2%, PE 0.99 -> nothing to report
    events = events_frame(
        [
            span(0, "compute", 0, 9.9),
            span(0, "communication", 9.9, 10),
            span(1, "compute", 0, 9.9),
            span(1, "communication", 9.9, 10),
        ]
    )
    result = findings(events, pop=pop_metrics(events))
    assert result.empty
    assert tuple(result.columns) == FINDING_COLUMNS


def test_findings_refuse_two_runs():
    events = serial_evaluation_run()
    two = events.assign(run_id=["a" if i % 2 else "b" for i in range(len(events))])
    with pytest.raises(ValueError, match="2 runs"):
        findings(two)


def test_no_events_is_a_finding_that_says_what_to_record():
    result = findings(events_frame(pd.DataFrame(columns=["rank", "phase", "start_ns", "end_ns"])))
    assert tuple(result.columns) == FINDING_COLUMNS
    assert result["kind"].tolist() == ["no_events"]
    assert result["text"].item().startswith("no events recorded: record phase spans")
    assert math.isnan(result["seconds_lost"].item()) and result["ranks"].item() == "all"


def test_zero_wall_time_is_a_finding():
    result = findings(events_frame([span(0, "compute", 1, 1), span(1, "compute", 1, 1)]))
    assert result["kind"].tolist() == ["zero_wall_time"]
    assert "every span is zero-length" in result["text"].item()


def test_run_without_compute_spans_says_so_and_keeps_the_other_findings():
    # 2 ranks, 10 s: rank 0 evaluates [0, 10); rank 1 waits in negotiation [0, 10). No compute at all.
    events = events_frame([span(0, "evaluation", 0, 10), span(1, "communication", 0, 10, "NEGOTIATE_ALLREDUCE")])
    result = findings(events).set_index("kind")
    assert "low_parallel_efficiency" not in result.index
    missing = result.loc["no_useful_time"]
    assert math.isnan(missing["seconds_lost"])
    # mean over ranks: communication_wait 5 s, evaluation 5 s of 10 s
    assert missing["text"] == (
        "no time in the useful phases (compute+input), so there are no POP metrics: record the training"
        " steps as compute spans (Recorder.phase('compute'), the Keras callback); recorded instead:"
        " communication_wait 50%, evaluation 50%"
    )
    # communication: mean (0 + 10) / 2 = 5 s; serial evaluation: max 10 - 10 / 2 = 5 s
    assert result.loc["communication", "seconds_lost"] == pytest.approx(5)
    assert result.loc["serial_evaluation", "seconds_lost"] == pytest.approx(5)
    # missing-data findings come last
    assert findings(events)["kind"].iloc[-1] == "no_useful_time"


def test_one_rank_reports_evaluation_as_time_outside_useful_phases_not_communication():
    # 1 rank, 10 s: compute [0, 4), evaluation [4, 9), idle [9, 10). PE = 4 / 10 = 0.4
    events = events_frame([span(0, "compute", 0, 4), span(0, "evaluation", 4, 9), span(0, "idle", 9, 10)])
    result = findings(events).set_index("kind")
    assert "low_parallel_efficiency" not in result.index
    outside = result.loc["outside_useful_phases"]
    # lost = 10 * (1 - 0.4) = 6 s
    assert outside["seconds_lost"] == pytest.approx(6)
    assert outside["text"] == (
        "rank 0 spends 60% of wall time outside the useful phases (compute+input): evaluation 50%, idle 10%"
    )
    assert outside["ranks"] == "0"
    single = result.loc["single_rank"]
    assert math.isnan(single["seconds_lost"])
    assert "load balance is 1 by definition" in single["text"]
    assert "compute+input" in single["text"]
    # one rank never lacks communication
    assert "no_communication" not in result.index


def test_one_rank_above_target_gets_only_the_single_rank_note():
    events = events_frame([span(0, "compute", 0, 9), span(0, "evaluation", 9, 10)])
    assert findings(events)["kind"].tolist() == ["single_rank"]


def test_several_ranks_without_communication_get_a_note():
    events = events_frame([span(0, "compute", 0, 10), span(1, "compute", 0, 10)])
    result = findings(events)
    assert result["kind"].tolist() == ["no_communication"]
    assert result["text"].item().startswith("no communication recorded on 2 ranks")
    assert "HOROVOD_TIMELINE" in result["text"].item()


def test_low_parallel_efficiency_names_useful_phases_and_where_the_rest_went():
    text = findings(serial_evaluation_run()).set_index("kind").loc["low_parallel_efficiency", "text"]
    # rest of wall time, mean over ranks: waiting 30 s (30%), transfer 10 s, evaluation 10 s, idle 2.5 s
    assert text == (
        "parallel efficiency is 0.47 (below 0.80): load balance 0.95 x communication efficiency 0.50;"
        " useful phases: compute+input; the rest of wall time, mean over ranks: communication_wait 30%,"
        " communication 10%, evaluation 10%, idle 2%"
    )


def test_listed_silent_rank_shows_as_idle():
    # ranks 0, 1 compute 10 s; rank 2 has no events: idle 10 s -> mean idle 3.33 s
    events = events_frame([span(0, "compute", 0, 10), span(1, "compute", 0, 10)])
    result = findings(events, ranks=[0, 1, 2]).set_index("kind")
    assert result.loc["idle", "seconds_lost"] == pytest.approx(10 / 3)
    assert result.loc["idle", "ranks"] == "2"


def test_oversubscription_finding():
    # 8 ranks x 4 threads = 32 threads on 16 cores: half the threads wait -> 100 s * (1 - 16/32) = 50 s
    row = oversubscription_finding(8, 4, 16, wall_s=100).iloc[0]
    assert (row["kind"], row["seconds_lost"], row["fraction_of_wall"]) == ("oversubscription", 50.0, 0.5)
    assert row["text"].startswith("oversubscription: 8 ranks x 4 threads = 32 threads on 16 cores (2.0x)")
    assert "set 2 thread(s) per rank" in row["text"]
    unknown_wall = oversubscription_finding(8, 4, 16).iloc[0]
    assert (unknown_wall["seconds_lost"], unknown_wall["fraction_of_wall"]) == (0.0, 0.5)
    assert oversubscription_finding(4, 4, 16).empty
    with pytest.raises(ValueError, match="cores"):
        oversubscription_finding(4, 4, 0)


def test_rank_list():
    assert rank_list([3, 1, 2, 5]) == "1–3, 5"
    assert rank_list([0]) == "0"
    assert rank_list([0, 2, 4]) == "0, 2, 4"
    assert rank_list([]) == ""
    assert rank_list is events_rank_list  # one definition, re-exported by the analysis layer


def test_oversubscription_from_the_settings_the_run_recorded():
    # 2 ranks x 2 threads = 4 threads on 2 cores, 10 s: half the threads wait -> 10 * (1 - 2/4) = 5 s
    meta = {"ranks": 2, "config": {"cluster": {"ranks": 2, "threads": 2, "cores": 2, "hostfile": None}}}
    row = oversubscription_finding_from_meta(meta, wall_s=10).iloc[0]
    assert (row["kind"], row["seconds_lost"], row["fraction_of_wall"]) == ("oversubscription", 5.0, 0.5)
    assert row["text"].startswith("oversubscription: 2 ranks x 2 threads = 4 threads on 2 cores (2.0x)")
    # cores and ranks from the run's own metadata when the cluster settings lack them
    fallback = {"ranks": 4, "cores": 16, "config": {"cluster": {"threads_per_rank": 4}}}
    assert oversubscription_finding_from_meta(fallback).empty  # 16 threads on 16 cores
    # 2 x 1 thread on 2 cores: fits
    fits = {"config": {"cluster": {"ranks": 2, "threads": 1, "cores": 2}}}
    assert oversubscription_finding_from_meta(fits).empty


def test_oversubscription_from_meta_skips_several_hosts_and_names_missing_settings():
    spread = {"config": {"cluster": {"ranks": 16, "threads": 8, "cores": 2, "hostfile": "hosts"}}}
    assert oversubscription_finding_from_meta(spread).empty
    row = oversubscription_finding_from_meta({"ranks": 2, "config": {"case": "predict-leak"}}).iloc[0]
    assert row["kind"] == "settings_not_recorded"
    assert row["text"].startswith(
        "oversubscription not checked: the run does not record its threads per rank and cores"
    )
    assert math.isnan(row["seconds_lost"])


def test_combine_findings_ranks_all_sources_together():
    combined = combine_findings(
        oversubscription_finding(2, 2, 2, wall_s=10),  # 5 s
        findings(serial_evaluation_run()),  # 52.5, 40, 30, 2.5, 2.5 s
        missing_data_finding("no_memory_samples", "no memory samples"),
    )
    assert combined["kind"].tolist() == [
        "low_parallel_efficiency",
        "communication",
        "serial_evaluation",
        "oversubscription",
        "idle",
        "load_imbalance",
        "no_memory_samples",
    ]
    assert combined["order"].tolist() == list(range(1, 8))
    assert combine_findings().empty


def test_serial_evaluation_found_when_other_ranks_hold_near_empty_evaluation_spans():

    s = 1_000_000_000
    events = events_frame(
        [
            {"rank": 0, "phase": "compute", "start_ns": 0, "end_ns": 5 * s},
            {"rank": 0, "phase": "evaluation", "start_ns": 5 * s, "end_ns": 9 * s},
            {"rank": 0, "phase": "compute", "start_ns": 9 * s, "end_ns": 10 * s},
            {"rank": 1, "phase": "compute", "start_ns": 0, "end_ns": 5 * s},
            {"rank": 1, "phase": "evaluation", "start_ns": 5 * s, "end_ns": 5 * s + s // 100},
            {"rank": 1, "phase": "communication", "start_ns": 5 * s + s // 100, "end_ns": 9 * s},
            {"rank": 1, "phase": "compute", "start_ns": 9 * s, "end_ns": 10 * s},
        ]
    )
    found = findings(events)
    serial = found[found["kind"] == "serial_evaluation"].iloc[0]
    # evaluation 4 s on rank 0 and 0.01 s on rank 1: lost = max - mean = 4 - 4.01 / 2 = 1.995 s
    assert serial["seconds_lost"] == pytest.approx(1.995)
    assert serial["ranks"] == "0"
    assert "rank 0 evaluates for 40% of wall time" in serial["text"]


def short_steps_run(compute_ms: float, comm_ms: float, nbytes: int, steps: int = 10):
    """2 ranks, each step: compute, then one allreduce of ``nbytes`` (times in ms)."""
    us = 1_000_000  # ns per ms
    rows = []
    for rank in (0, 1):
        t = 0.0
        for step in range(steps):
            rows.append(
                {
                    "rank": rank,
                    "phase": "compute",
                    "name": "train_step",
                    "step": step,
                    "start_ns": int(t * us),
                    "end_ns": int((t + compute_ms) * us),
                }
            )
            t += compute_ms
            rows.append(
                {
                    "rank": rank,
                    "phase": "communication",
                    "name": "allreduce",
                    "step": step,
                    "bytes": nbytes,
                    "start_ns": int(t * us),
                    "end_ns": int((t + comm_ms) * us),
                }
            )
            t += comm_ms
    return events_frame(rows)  # fmt: skip


def test_short_steps_paying_the_per_call_cost_are_named_with_numbers():
    # 1 ms of compute, 1.5 ms allreduce of 0.4 MB: at 1 GB/s the bytes need 0.4 ms, so 1.1 ms per step is
    # fixed cost; 10 steps per rank -> 11 ms lost; wall 25 ms
    result = findings(short_steps_run(1.0, 1.5, 400_000))
    (row,) = result[result["kind"] == "per_call_cost"].itertuples()
    assert row.seconds_lost == pytest.approx(0.011)
    assert row.fraction_of_wall == pytest.approx(0.011 / 0.025)
    assert "1 ms of compute per step against 1.5 ms of communication" in row.text
    assert "1 call(s) moving 0.4 MB per step" in row.text and "HOROVOD_CYCLE_TIME" in row.text
    # long steps, or an allreduce that is mostly its bytes: no such finding
    assert "per_call_cost" not in set(findings(short_steps_run(50.0, 20.0, 400_000))["kind"])
    assert "per_call_cost" not in set(findings(short_steps_run(1.0, 1.5, 1_400_000))["kind"])
