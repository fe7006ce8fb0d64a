"""What-if estimates on a hand-built run where rank 0 evaluates while ranks 1-3 wait."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.analysis import WhatIf, estimate_eval_interval, estimate_sharded_evaluation
from workbench.events import events_frame

S = 1_000_000_000


def span(rank, phase, start, end, epoch, name=None):
    return {
        "rank": rank,
        "phase": phase,
        "name": name or phase,
        "start_ns": int(start * S),
        "end_ns": int(end * S),
        "epoch": epoch,
    }


def evaluating_run():
    """4 ranks, 2 epochs of 10 s compute + 1 s allreduce; rank 0 evaluates 5 s after each epoch.

    epoch 0: all compute [0, 10), allreduce [10, 11); rank 0 evaluates [11, 16).
    epoch 1: ranks 1-3 compute [11, 21) then wait for rank 0 in negotiation [21, 26);
             rank 0 computes [16, 26); all allreduce [26, 27); rank 0 evaluates [27, 32),
             ranks 1-3 are idle [27, 32). Measured wall time: 32 s.
    """
    rows = []
    for rank in range(4):
        rows += [
            span(rank, "compute", 0, 10, 0, "train_step"),
            span(rank, "communication", 10, 11, 0, "MPI_ALLREDUCE"),
            span(rank, "communication", 26, 27, 1, "MPI_ALLREDUCE"),
        ]
        if rank == 0:
            rows += [
                span(0, "evaluation", 11, 16, 0),
                span(0, "compute", 16, 26, 1, "train_step"),
                span(0, "evaluation", 27, 32, 1),
            ]
        else:
            rows += [
                span(rank, "compute", 11, 21, 1, "train_step"),
                span(rank, "communication", 21, 26, 1, "NEGOTIATE_ALLREDUCE"),
            ]
    return events_frame(rows)


def test_model_reproduces_the_measured_run():
    # epoch wall = max_r(work + eval) + min_r(comm):
    #   epoch 0: max(10 + 5, 10) + min(1, 1) = 16;  epoch 1: max(10 + 5, 10) + min(1, 6) = 16 -> 32 = measured
    result = estimate_eval_interval(evaluating_run(), 1)
    assert result.measured_s == pytest.approx(32)
    assert result.modelled_measured_s == pytest.approx(32)
    assert result.estimated_s == pytest.approx(32)
    assert result.estimated_speedup == pytest.approx(1.0)
    assert (result.evaluations_measured, result.evaluations_estimated) == (2, 2)


def test_evaluating_every_second_epoch():
    # k = 2 over 2 epochs: only the last epoch evaluates.
    #   epoch 0: 10 + 1 = 11; epoch 1: 16 -> 27 s; speedup 32 / 27 = 1.185; saved 5 s
    result = estimate_eval_interval(evaluating_run(), 2)
    assert result.estimated_s == pytest.approx(27)
    assert result.estimated_speedup == pytest.approx(32 / 27)
    assert result.seconds_saved == pytest.approx(5)
    assert result.evaluations_estimated == 1
    assert "every 2 epoch" in result.assumptions
    assert "current_interval" not in result.assumptions


def test_sharded_evaluation():
    # 5 s of evaluation per epoch shared by 4 ranks: 1.25 s each.
    #   each epoch: max(10 + 1.25) + 1 = 12.25 -> 24.5 s; speedup 32 / 24.5 = 1.306
    result = estimate_sharded_evaluation(evaluating_run())
    assert result.estimated_s == pytest.approx(24.5)
    assert result.estimated_speedup == pytest.approx(32 / 24.5)
    assert result.scenario == "shard evaluation over all ranks"


def test_result_is_frozen_and_becomes_a_row():
    result = estimate_eval_interval(evaluating_run(), 2)
    assert isinstance(result, WhatIf)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.estimated_s = 0.0
    row = result.to_frame()
    assert len(row) == 1
    assert {"measured_s", "estimated_s", "estimated_speedup", "assumptions"} <= set(row.columns)


def test_interval_mismatch_is_noted():
    result = estimate_eval_interval(evaluating_run(), 2, current_interval=2)
    assert "current_interval=2 implies 1 evaluations, events hold 2" in result.assumptions


def test_run_without_evaluation_changes_nothing():
    events = evaluating_run()
    events = events[events["phase"] != "evaluation"]
    result = estimate_eval_interval(events, 3)
    assert result.estimated_s == pytest.approx(result.measured_s)
    assert result.estimated_speedup == 1.0
    assert "no evaluation spans" in result.assumptions
    assert estimate_sharded_evaluation(events).estimated_speedup == pytest.approx(1.0)


def test_degenerate_inputs_raise():
    events = evaluating_run()
    with pytest.raises(ValueError, match="no span carries an epoch"):
        estimate_eval_interval(events.assign(epoch=-1), 2)
    with pytest.raises(ValueError, match="whole numbers"):
        estimate_eval_interval(events, 0)
    with pytest.raises(ValueError, match="no events"):
        estimate_sharded_evaluation(events.iloc[:0])
    two_runs = events.assign(run_id=["a" if i % 2 else "b" for i in range(len(events))])
    with pytest.raises(ValueError, match="2 runs"):
        estimate_eval_interval(two_runs, 2)
