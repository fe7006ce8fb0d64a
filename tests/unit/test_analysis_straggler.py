"""Blocked time derived from evidence, the straggler finding, and Horovod's collectives as overlap.

Hand-computed run (ms): 2 ranks, steps 0..3 of 100 ms each. Rank 0's step k runs [100k, 100k+50];
rank 1 does 30 ms of host work first, so its step runs [100k+30, 100k+50] (step 0: [0, 50] on both,
the warm-up). Both end together: rank 0 waited 30 ms in steps 1..3. In Horovod's timeline rank 0
submits its tensor at 100k+15 and rank 1 at 100k+44: lateness says rank 0 waited 29 ms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.analysis import (
    allreduce_lateness,
    analyse_run,
    communication_overlap,
    phase_breakdown,
    step_waits,
    straggler_rows,
    with_derived_waits,
)
from workbench.events import events_frame

MS = 1_000_000


def steps(late_start: int = 30) -> list[dict]:
    rows = []
    for k in range(4):
        for rank in (0, 1):
            start = 100 * k + (late_start if rank == 1 and k > 0 else 0)
            rows.append(
                {"rank": rank, "phase": "compute", "name": "train_step", "step": k,
                 "start_ns": start * MS, "end_ns": (100 * k + 50) * MS}
            )
    return rows


def readiness() -> list[dict]:
    rows = []
    for k in range(4):
        for rank, ready in ((0, 15), (1, 44)):
            rows.append(
                {"rank": rank, "phase": "in_flight", "name": "NEGOTIATE_ALLREDUCE", "detail": "grad",
                 "start_ns": (100 * k + ready) * MS, "end_ns": (100 * k + 46) * MS}
            )
    return rows


def test_step_length_evidence_gives_the_longer_step_as_wait():
    waits = step_waits(events_frame(steps())).set_index(["step", "rank"])
    assert waits.loc[(0, 0), "wait_s"] == 0  # warm-up: tracing, not a steady-state loss
    for k in (1, 2, 3):
        assert waits.loc[(k, 0), "wait_s"] == pytest.approx(0.030)
        assert waits.loc[(k, 1), "wait_s"] == 0
        assert waits.loc[(k, 0), "evidence"] == "step_length"
        assert waits.loc[(k, 0), "late_rank"] == 1
        assert waits.loc[(k, 0), "compute_s"] == pytest.approx(0.020)


def test_lateness_from_readiness_is_preferred_and_tables_per_step():
    events = events_frame(steps() + readiness())
    lateness = allreduce_lateness(events).set_index(["step", "rank"])
    assert lateness.loc[(2, 1), "lateness_s"] == pytest.approx(0.029)
    assert bool(lateness.loc[(2, 1), "last"]) and not bool(lateness.loc[(2, 0), "last"])
    waits = step_waits(events).set_index(["step", "rank"])
    assert waits.loc[(1, 0), "wait_s"] == pytest.approx(0.029)
    assert waits.loc[(1, 0), "evidence"] == "lateness"


def test_derived_waits_take_time_from_the_waiting_ranks_step_only():
    events = with_derived_waits(events_frame(steps() + readiness()))
    seconds = phase_breakdown(events).set_index(["rank", "phase"])["seconds"]
    assert seconds[(0, "compute")] == pytest.approx(0.050 + 3 * 0.021)
    assert seconds[(0, "communication_wait")] == pytest.approx(3 * 0.029)
    assert seconds[(1, "compute")] == pytest.approx(0.050 + 3 * 0.020)
    assert (1, "communication_wait") not in seconds or seconds[(1, "communication_wait")] == 0


def test_straggler_named_with_time_lost_and_evidence():
    waits = step_waits(events_frame(steps() + readiness()))
    (row,) = straggler_rows(waits, wall_s=0.35)
    assert row["kind"] == "straggler" and row["ranks"] == "1"
    assert row["seconds_lost"] == pytest.approx(3 * 0.029)
    assert "3 of 3" in row["text"] and "lateness" in row["text"]


def test_symmetric_steps_name_no_straggler():
    waits = step_waits(events_frame(steps(late_start=0)))
    assert (waits["wait_s"] == 0).all()
    assert straggler_rows(waits, wall_s=0.35) == []


def test_horovod_activities_overlap_and_never_take_compute_time():
    events = events_frame(
        [
            {"rank": 0, "phase": "compute", "name": "train_step", "step": 0, "start_ns": 0, "end_ns": 50 * MS},
            {"rank": 1, "phase": "compute", "name": "train_step", "step": 0, "start_ns": 0, "end_ns": 50 * MS},
            {"rank": 0, "phase": "in_flight", "name": "ALLREDUCE", "start_ns": 10 * MS, "end_ns": 40 * MS},
            {"rank": 0, "phase": "in_flight", "name": "MPI_ALLREDUCE", "start_ns": 30 * MS, "end_ns": 60 * MS},
        ]
    )
    seconds = phase_breakdown(events).set_index(["rank", "phase"])["seconds"]
    assert seconds[(0, "compute")] == seconds[(1, "compute")] == pytest.approx(0.050)
    overlap = communication_overlap(events).set_index("rank")
    assert overlap.loc[0, "in_flight_s"] == pytest.approx(0.050)  # union of [10, 40] and [30, 60]
    assert overlap.loc[0, "overlapped_s"] == pytest.approx(0.040)  # [10, 50] inside the step
    result = analyse_run(events, meta={"run_id": "r", "ranks": 2})
    assert result.pop["load_balance"] == pytest.approx(1.0)
    kinds = set(result.findings["kind"])
    assert "collectives_in_flight" in kinds and not {"load_imbalance", "no_communication"} & kinds


def test_no_steps_gives_empty_tables_not_errors():
    events = events_frame([{"rank": 0, "phase": "in_flight", "name": "ALLREDUCE", "start_ns": 0, "end_ns": 5}])
    assert step_waits(events).empty and allreduce_lateness(events).empty
    result = analyse_run(events, meta={"run_id": "r", "ranks": 2})
    assert "no_useful_time" in set(result.findings["kind"]) or "no_events" in set(result.findings["kind"])
    assert isinstance(result.to_dict()["lateness"], list)


def test_host_work_between_steps_is_its_own_finding():
    rows = steps(late_start=0) + [
        {"rank": 1, "phase": "host", "name": "between_steps", "start_ns": (100 * k - 50) * MS, "end_ns": 100 * k * MS}
        for k in (1, 2, 3)
    ]
    found = analyse_run(events_frame(pd.DataFrame(rows)), meta={"run_id": "r", "ranks": 2}).findings.set_index("kind")
    assert "host_work" in found.index and found.loc["host_work", "ranks"] == "1"
    assert found.loc["host_work", "seconds_lost"] == pytest.approx(3 * 0.050 / 2)  # mean over ranks


def collective_run() -> list[dict]:
    """3 ranks, 2 epochs of 3 steps (ms). Each step the ranks leave the last collective together at S, compute 10,
    14 and 12 ms (rank 1: 18 in step 4), and the collective ends 6 ms after the last arrival; 100 ms of evaluation
    between the epochs; a final barrier of 500 ms in the last step. Each rank's clock is off by rank x 1 s."""
    rows, start = [], 0
    for step in range(6):
        if step == 3:
            start += 100
        compute = {0: 10, 1: 18 if step == 4 else 14, 2: 12}
        end = start + max(compute.values()) + 6
        for rank, ms in compute.items():
            offset = rank * 1000
            common = {"rank": rank, "step": step, "epoch": step // 3}
            rows.append({**common, "phase": "compute", "name": "train_step",
                         "start_ns": (offset + start) * MS, "end_ns": (offset + start + ms) * MS})
            rows.append({**common, "phase": "communication", "name": "allreduce",
                         "start_ns": (offset + start + ms) * MS, "end_ns": (offset + end) * MS})
            if step == 5:
                rows.append({**common, "phase": "communication", "name": "final_barrier",
                             "start_ns": (offset + end) * MS, "end_ns": (offset + end + 500) * MS})
        start = end
    return rows


def test_collective_split_parts_each_step_into_the_ranks_work_the_wait_and_the_collective():
    from workbench.analysis import collective_intervals, collective_split

    intervals = collective_intervals(events_frame(collective_run()))
    split = collective_split(intervals).set_index("step")
    # step 0 is warm-up, step 3 follows the evaluation, step 5 holds the run's final barrier
    assert list(split.index) == [1, 2, 4] and set(split["ranks"]) == {3} and list(split["epoch"]) == [0, 0, 1]
    assert split.loc[1, "between_s"] == pytest.approx(0.012)  # (10 + 14 + 12) / 3
    assert split.loc[1, "slowest_s"] == pytest.approx(0.014)
    assert split.loc[1, "wait_s"] == pytest.approx(0.002)
    assert split.loc[4, "between_s"] == pytest.approx(0.040 / 3)
    assert split.loc[4, "wait_s"] == pytest.approx(0.018 - 0.040 / 3)
    assert split["collective_s"].tolist() == pytest.approx([0.006] * 3)  # the last arrival's
    # a step one rank did not record is left out; 1 rank, or no collective spans: nothing to split
    missing = [r for r in collective_run() if not (r["rank"] == 2 and r["step"] == 2)]
    assert list(collective_split(collective_intervals(events_frame(missing)))["step"]) == [1, 4]
    assert collective_intervals(events_frame([r for r in collective_run() if r["rank"] == 0])).empty
    assert collective_intervals(events_frame([r for r in collective_run() if r["phase"] == "compute"])).empty


def test_step_correlation_is_the_mean_over_pairs_of_ranks():
    from workbench.analysis import step_correlation

    steps = [0.010, 0.014, 0.011, 0.019]
    together = [0.020, 0.028, 0.022, 0.038]  # rank 1: rank 0's steps doubled
    opposite = [0.019, 0.011, 0.014, 0.010]  # rank 2: rank 0's steps reversed
    intervals = pd.DataFrame(
        [
            {"rank": rank, "epoch": 0, "step": step, "between_s": seconds[step], "collective_s": 0.001}
            for rank, seconds in enumerate((steps, together, opposite))
            for step in range(4)
        ]
    )
    pairs = [np.corrcoef(a, b)[0, 1] for a, b in ((steps, together), (steps, opposite), (together, opposite))]
    assert step_correlation(intervals) == pytest.approx(np.mean(pairs))
    assert step_correlation(intervals[intervals["rank"] < 2]) == pytest.approx(1.0)
    assert np.isnan(step_correlation(intervals[intervals["step"] < 2]))  # 2 steps: too few


def test_collectives_recorded_after_the_steps_put_the_wait_in_the_collective_not_the_step():
    """``collective_run``'s steps end at different times (10, 14, 12 ms) and the ranks wait in the allreduce after
    them: step lengths would call rank 1, the last to arrive, the one that waited longest."""
    events = events_frame(collective_run())
    waits = step_waits(events).set_index(["step", "rank"])
    for step, slowest in ((1, 14), (2, 14), (4, 18)):
        for rank, own in ((0, 10), (1, 18 if step == 4 else 14), (2, 12)):
            row = waits.loc[(step, rank)]
            assert row["evidence"] == "between_collectives" and row["late_rank"] == 1
            assert row["wait_s"] == pytest.approx((slowest - own) / 1000)
            assert row["compute_s"] == pytest.approx(own / 1000)  # the whole step: the wait lies after it
            assert row["wait_end_ns"] == row["end_ns"] + round((slowest - own) * MS)  # in the collective
    # the steps this evidence cannot read (after the evaluation, the run's last) get no wait from step lengths
    assert set(waits.loc[[3, 5], "evidence"]) == {""} and (waits.loc[[3, 5], "wait_s"] == 0).all()
    seconds = phase_breakdown(with_derived_waits(events, waits.reset_index()), by=("rank",)).pivot_table(
        index="rank", columns="phase", values="seconds"
    )
    assert seconds.loc[0, "communication_wait"] == pytest.approx(0.016)  # 4 + 4 + 8 ms
    assert seconds.loc[1, "communication_wait"] == 0 or np.isnan(seconds.loc[1, "communication_wait"])
    assert seconds.loc[0, "compute"] == pytest.approx(0.060)  # 6 steps of 10 ms, none taken by the wait
    found = straggler_rows(waits.reset_index(), wall_s=0.2, min_fraction=0.0)
    assert found and found[0]["ranks"] == "1" and "between its collectives" in found[0]["text"], found
