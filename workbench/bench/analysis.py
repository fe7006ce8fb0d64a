"""Synthetic events for timing the analysis layer (``workbench bench analysis``).

The generator mimics a Horovod data-parallel run, vectorised with numpy so that building a million
events takes well under a second: every step, every rank waits for its input batch, runs a
``train_step`` that holds a negotiation wait and the allreduce transfers, and at the end of each
epoch rank 0 evaluates while the other ranks wait for it in the next step's negotiation.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from workbench import events as ev

#: Events per rank and step: input, train_step, NEGOTIATE_ALLREDUCE, two MPI_ALLREDUCE transfers.
EVENTS_PER_STEP = 5
STEPS_PER_EPOCH = 500
EVAL_BATCHES = 50
MS = 1_000_000


def synthetic_events(events: int = 1_000_000, ranks: int = 8, seed: int = 0) -> pd.DataFrame:
    """About ``events`` schema-conformant events over ``ranks`` ranks (exactly, when it divides evenly)."""
    if ranks < 1 or events < ranks * EVENTS_PER_STEP:
        raise ValueError(f"need ranks >= 1 and events >= {EVENTS_PER_STEP} per rank, got {events=} {ranks=}")
    rng = np.random.default_rng(seed)
    per_epoch = ranks * EVENTS_PER_STEP * STEPS_PER_EPOCH + EVAL_BATCHES
    epochs = max(1, events // per_epoch)
    steps = max(1, (events - epochs * EVAL_BATCHES) // (ranks * EVENTS_PER_STEP))
    epoch_of_step = np.minimum(np.arange(steps) // STEPS_PER_EPOCH, epochs - 1)

    # Durations (ns) per step and rank; rank `ranks - 1` is a little slower (load imbalance).
    input_ns = rng.gamma(2.0, 1.0 * MS, size=(steps, ranks)).astype(np.int64)
    compute_ns = rng.normal(40 * MS, 2 * MS, size=(steps, ranks)).clip(20 * MS).astype(np.int64)
    compute_ns[:, -1] = (compute_ns[:, -1] * 1.1).astype(np.int64)
    transfer_ns = rng.normal(6 * MS, 0.5 * MS, size=steps).clip(1 * MS).astype(np.int64)
    eval_batch_ns = rng.normal(60 * MS, 3 * MS, size=(epochs, EVAL_BATCHES)).clip(1 * MS).astype(np.int64)
    eval_ns = eval_batch_ns.sum(axis=1)

    # Step timing: ranks start together, meet in the allreduce, rank 0 evaluates after each epoch.
    ready = input_ns + compute_ns  # from the step's start until the gradients are ready
    evaluates_after = np.zeros(steps, dtype=bool)
    last_of_epoch = np.flatnonzero(np.diff(epoch_of_step, append=epoch_of_step[-1] + 1) != 0)
    evaluates_after[last_of_epoch] = True
    eval_after_step = np.zeros(steps, dtype=np.int64)
    eval_after_step[last_of_epoch] = eval_ns[epoch_of_step[last_of_epoch]]
    # Others start step s while rank 0 still evaluates after step s-1; the allreduce waits for rank 0.
    delay = np.zeros((steps, ranks), dtype=np.int64)
    delay[1:, 0] = eval_after_step[:-1]
    meet = (delay + ready).max(axis=1)  # allreduce can start, relative to the step's start
    step_length = meet + transfer_ns
    step_start = np.concatenate([[0], np.cumsum(step_length[:-1])]) + 1_700_000_000 * 10**9
    rank_start = step_start[:, None] + delay
    input_end = rank_start + input_ns
    ready_at = rank_start + ready
    meet_at = (step_start + meet)[:, None] + np.zeros((1, ranks), dtype=np.int64)
    end_at = meet_at + transfer_ns[:, None]
    half_at = meet_at + (transfer_ns // 2)[:, None]

    rank_grid = np.broadcast_to(np.arange(ranks, dtype=np.int32), (steps, ranks))
    step_grid = np.broadcast_to(np.arange(steps, dtype=np.int64)[:, None], (steps, ranks))
    epoch_grid = np.broadcast_to(epoch_of_step[:, None], (steps, ranks))
    kinds = [
        (ev.INPUT, "next_batch", rank_start, input_end),
        (ev.COMPUTE, "train_step", input_end, end_at),
        (ev.COMMUNICATION, "NEGOTIATE_ALLREDUCE", ready_at, meet_at),
        (ev.COMMUNICATION, "MPI_ALLREDUCE", meet_at, half_at),
        (ev.COMMUNICATION, "MPI_ALLREDUCE", half_at, end_at),
    ]
    start = np.stack([k[2] for k in kinds], axis=-1).ravel()
    end = np.stack([k[3] for k in kinds], axis=-1).ravel()
    phase = np.tile(np.asarray([k[0] for k in kinds], dtype=object), steps * ranks)
    name = np.tile(np.asarray([k[1] for k in kinds], dtype=object), steps * ranks)
    rank = np.repeat(rank_grid.ravel(), len(kinds))
    step = np.repeat(step_grid.ravel(), len(kinds))
    epoch = np.repeat(epoch_grid.ravel(), len(kinds))

    # Evaluation on rank 0 after the last step of every epoch.
    eval_epoch = np.repeat(np.arange(epochs), EVAL_BATCHES)
    eval_offset = np.cumsum(eval_batch_ns, axis=1) - eval_batch_ns
    eval_start = (end_at[last_of_epoch, 0][:, None] + eval_offset).ravel()
    eval_end = eval_start + eval_batch_ns.ravel()

    n_eval = len(eval_start)
    frame = pd.DataFrame(
        {
            "run_id": np.full(len(start) + n_eval, "bench", dtype=object),
            "rank": np.concatenate([rank, np.zeros(n_eval, dtype=np.int32)]).astype(np.int32),
            "host": np.full(len(start) + n_eval, "node0", dtype=object),
            "phase": np.concatenate([phase, np.full(n_eval, ev.EVALUATION, dtype=object)]),
            "name": np.concatenate([name, np.full(n_eval, "evaluate", dtype=object)]),
            "detail": np.full(len(start) + n_eval, "", dtype=object),
            "step": np.concatenate([step, np.full(n_eval, -1, dtype=np.int64)]),
            "epoch": np.concatenate([epoch, eval_epoch]).astype(np.int64),
            "start_ns": np.concatenate([start, eval_start]).astype(np.int64),
            "end_ns": np.concatenate([end, eval_end]).astype(np.int64),
            "bytes": np.full(len(start) + n_eval, -1, dtype=np.int64),
        }
    )
    # The store returns events sorted by rank, then start (per-rank files concatenated): do the same.
    return frame.sort_values(["rank", "start_ns"], kind="stable", ignore_index=True)[list(ev.EVENT_COLUMNS)]


def run(events: int = 1_000_000, ranks: int = 8, repeats: int = 3) -> dict:
    """Time ``phase_breakdown`` and ``pop_metrics`` on synthetic events (best of ``repeats``)."""
    from workbench.analysis.breakdown import phase_breakdown
    from workbench.analysis.pop import pop_metrics

    frame = synthetic_events(events, ranks)
    breakdown_s, pop_s = [], []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        phase_breakdown(frame)
        breakdown_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        pop_metrics(frame)
        pop_s.append(time.perf_counter() - started)
    best_breakdown, best_pop = min(breakdown_s), min(pop_s)
    return {
        "events": len(frame),
        "ranks": int(ranks),
        "seconds": round(best_breakdown + best_pop, 4),
        "breakdown_seconds": round(best_breakdown, 4),
        "pop_seconds": round(best_pop, 4),
        "repeats": int(max(1, repeats)),
    }
