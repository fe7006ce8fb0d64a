"""Blocked time derived from evidence, the straggler finding, and Horovod's collectives as overlap.

Hand-computed run (ms): 2 ranks, steps 0..3 of 100 ms each. Rank 0's step k runs [100k, 100k+50];
rank 1 does 30 ms of host work first, so its step runs [100k+30, 100k+50] (step 0: [0, 50] on both,
the warm-up). Both end together: rank 0 waited 30 ms in steps 1..3. In Horovod's timeline rank 0
submits its tensor at 100k+15 and rank 1 at 100k+44: lateness says rank 0 waited 29 ms.
"""

from __future__ import annotations

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
