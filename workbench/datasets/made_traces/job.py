"""A made recorded run of any size, shaped like a Horovod data-parallel job: for tests, benchmarks and demos.

Vectorised with numpy: every step, every rank waits for its input batch, runs a ``train_step`` that holds a
negotiation wait and the allreduce transfers, and at the end of each epoch rank 0 evaluates while the other ranks
wait for it in the next step's negotiation; optionally 8 ranks a node, slow nodes and late ranks. Every time is
chosen, so what an analysis must find is known. ``write_made_run`` writes one to a run store a few ranks at a
time (bounded memory), as ``store.compact`` leaves a run: one Parquet file per rank.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from workbench import events as ev

#: Events per rank and step: input, train_step, NEGOTIATE_ALLREDUCE, ``ALLREDUCE_PARTS`` MPI_ALLREDUCE transfers.
ALLREDUCE_PARTS = 2
EVENTS_PER_STEP = 3 + ALLREDUCE_PARTS
STEPS_PER_EPOCH = 500
EVAL_BATCHES = 50
MS = 1_000_000


def made_events(events: int = 1_000_000, ranks: int = 8, seed: int = 0, **shape: Any) -> pd.DataFrame:
    """About ``events`` schema-conformant events over ``ranks`` ranks (exactly, when it divides evenly).

    ``shape``: the rest of a large job's shape, off by default (``MadeJobEvents``).
    """
    return MadeJobEvents(events, ranks, seed, **shape).frame(0, ranks)


#: How much longer a slow node's ranks compute (``slow_nodes``).
SLOW_NODE_FACTOR = 1.25
#: How much longer a late rank-step waits for its input (``straggler_share``).
STRAGGLER_MS = 25


def slow_node_ranks(ranks: int, ranks_per_node: int | None, slow_nodes: int) -> np.ndarray:
    """The ranks of ``slow_nodes`` nodes spread evenly over the job (none without ``ranks_per_node``)."""
    if not slow_nodes or not ranks_per_node:
        return np.zeros(0, dtype=np.int64)
    nodes = -(-ranks // ranks_per_node)
    slow = np.unique(np.linspace(0, nodes - 1, slow_nodes + 2).astype(np.int64)[1:-1])
    chosen = (slow[:, None] * ranks_per_node + np.arange(ranks_per_node)[None, :]).ravel()
    return chosen[chosen < ranks]


class MadeJobEvents:
    """The timing of every step and rank of a made job; its events produced a slice of ranks at a time.

    Per-step and per-(step, rank) durations are drawn once (a few arrays of steps x ranks); the
    events of ranks ``[low, high)`` are built from them on demand, so a 100 M-event run is written
    rank group by rank group without ever holding all its events. A large job's shape, off by
    default: ``ranks_per_node`` names each rank's host (``node<k>``, else every rank is on
    ``node0``); ``slow_nodes`` nodes, spread over the job, compute ``SLOW_NODE_FACTOR`` times
    longer; ``straggler_share`` of the rank-steps wait ``STRAGGLER_MS`` more for their input batch
    (a rank late now and then, a different one each time); ``allreduce_parts`` splits each step's
    allreduce into that many transfers, as a Horovod timeline records one per tensor or fused buffer
    (a real model's step holds tens to hundreds: the same events come from fewer steps).
    """

    def __init__(
        self,
        events: int = 1_000_000,
        ranks: int = 8,
        seed: int = 0,
        ranks_per_node: int | None = None,
        slow_nodes: int = 0,
        straggler_share: float = 0.0,
        allreduce_parts: int = ALLREDUCE_PARTS,
    ) -> None:
        per_step = 3 + allreduce_parts
        if ranks < 1 or allreduce_parts < 1 or events < ranks * per_step:
            raise ValueError(
                f"need ranks >= 1, allreduce_parts >= 1 and events >= {per_step} per rank,"
                f" got {events=} {ranks=} {allreduce_parts=}"
            )
        rng = np.random.default_rng(seed)
        self.ranks = ranks
        self.ranks_per_node = ranks_per_node
        self.allreduce_parts = allreduce_parts
        per_epoch = ranks * per_step * STEPS_PER_EPOCH + EVAL_BATCHES
        epochs = max(1, events // per_epoch)
        steps = max(1, (events - epochs * EVAL_BATCHES) // (ranks * per_step))
        self.epoch_of_step = np.minimum(np.arange(steps) // STEPS_PER_EPOCH, epochs - 1)

        # Durations (ns) per step and rank; rank `ranks - 1` is a little slower (load imbalance).
        self.input_ns = rng.gamma(2.0, 1.0 * MS, size=(steps, ranks)).astype(np.int64)
        compute_ns = rng.normal(40 * MS, 2 * MS, size=(steps, ranks)).clip(20 * MS).astype(np.int64)
        compute_ns[:, -1] = (compute_ns[:, -1] * 1.1).astype(np.int64)
        self.transfer_ns = rng.normal(6 * MS, 0.5 * MS, size=steps).clip(1 * MS).astype(np.int64)
        self.eval_batch_ns = rng.normal(60 * MS, 3 * MS, size=(epochs, EVAL_BATCHES)).clip(1 * MS).astype(np.int64)
        eval_ns = self.eval_batch_ns.sum(axis=1)
        self.slow_ranks = slow_node_ranks(ranks, ranks_per_node, slow_nodes)
        if len(self.slow_ranks):
            compute_ns[:, self.slow_ranks] = (compute_ns[:, self.slow_ranks] * SLOW_NODE_FACTOR).astype(np.int64)
        if straggler_share > 0:
            late = rng.random(size=(steps, ranks)) < straggler_share
            self.input_ns[late] += STRAGGLER_MS * MS
        self.compute_ns = compute_ns

        # Step timing: ranks start together, meet in the allreduce, rank 0 evaluates after each epoch.
        last_of_epoch = np.flatnonzero(np.diff(self.epoch_of_step, append=self.epoch_of_step[-1] + 1) != 0)
        self.last_of_epoch = last_of_epoch
        eval_after_step = np.zeros(steps, dtype=np.int64)
        eval_after_step[last_of_epoch] = eval_ns[self.epoch_of_step[last_of_epoch]]
        # Others start step s while rank 0 still evaluates after step s-1; the allreduce waits for rank 0.
        self.rank0_delay = np.zeros(steps, dtype=np.int64)
        self.rank0_delay[1:] = eval_after_step[:-1]
        ready = self.input_ns + compute_ns  # from the step's start until the gradients are ready
        self.meet = ready.max(axis=1)
        self.meet = np.maximum(self.meet, self.rank0_delay + ready[:, 0])  # allreduce can start, from the step's start
        step_length = self.meet + self.transfer_ns
        self.step_start = np.concatenate([[0], np.cumsum(step_length[:-1])]) + 1_700_000_000 * 10**9

    def frame(self, low: int, high: int) -> pd.DataFrame:
        """The events of ranks ``low .. high - 1``, sorted by rank, then start, as the store returns them."""
        steps = len(self.step_start)
        ranks = high - low
        delay = np.zeros((steps, ranks), dtype=np.int64)
        if low == 0:
            delay[:, 0] = self.rank0_delay
        input_ns = self.input_ns[:, low:high]
        rank_start = self.step_start[:, None] + delay
        input_end = rank_start + input_ns
        ready_at = rank_start + input_ns + self.compute_ns[:, low:high]
        meet_at = (self.step_start + self.meet)[:, None] + np.zeros((1, ranks), dtype=np.int64)
        end_at = meet_at + self.transfer_ns[:, None]
        parts = self.allreduce_parts
        cuts = [meet_at + (self.transfer_ns * k // parts)[:, None] for k in range(parts + 1)]

        rank_grid = np.broadcast_to(np.arange(low, high, dtype=np.int32), (steps, ranks))
        step_grid = np.broadcast_to(np.arange(steps, dtype=np.int64)[:, None], (steps, ranks))
        epoch_grid = np.broadcast_to(self.epoch_of_step[:, None], (steps, ranks))
        kinds = [
            (ev.INPUT, "next_batch", rank_start, input_end),
            (ev.COMPUTE, "train_step", input_end, end_at),
            (ev.COMMUNICATION, "NEGOTIATE_ALLREDUCE", ready_at, meet_at),
            *((ev.COMMUNICATION, "MPI_ALLREDUCE", a, b) for a, b in pairwise(cuts)),
        ]
        start = np.stack([k[2] for k in kinds], axis=-1).ravel()
        end = np.stack([k[3] for k in kinds], axis=-1).ravel()
        kind = np.tile(np.arange(len(kinds), dtype=np.int8), steps * ranks)
        rank = np.repeat(rank_grid.ravel(), len(kinds))
        step = np.repeat(step_grid.ravel(), len(kinds))
        epoch = np.repeat(epoch_grid.ravel(), len(kinds))

        # Evaluation on rank 0 after the last step of every epoch.
        epochs = len(self.eval_batch_ns)
        if low == 0:
            eval_epoch = np.repeat(np.arange(epochs), EVAL_BATCHES)
            eval_offset = np.cumsum(self.eval_batch_ns, axis=1) - self.eval_batch_ns
            eval_start = (end_at[self.last_of_epoch, 0][:, None] + eval_offset).ravel()
            eval_end = eval_start + self.eval_batch_ns.ravel()
        else:
            eval_epoch = eval_start = eval_end = np.zeros(0, dtype=np.int64)
        n_eval = len(eval_start)

        # Sort integer keys, then build the string columns from codes.
        rank = np.concatenate([rank, np.zeros(n_eval, dtype=np.int32)]).astype(np.int32)
        start = np.concatenate([start, eval_start]).astype(np.int64)
        order = np.lexsort((start, rank))
        phases = np.asarray([*(k[0] for k in kinds), ev.EVALUATION], dtype=object)
        names = np.asarray([*(k[1] for k in kinds), "evaluate"], dtype=object)
        kind = np.concatenate([kind, np.full(n_eval, len(kinds), dtype=np.int8)])[order]
        rank = rank[order]
        total = len(order)
        if self.ranks_per_node:
            first_node, last_node = low // self.ranks_per_node, (high - 1) // self.ranks_per_node
            labels = np.asarray([f"node{k}" for k in range(first_node, last_node + 1)], dtype=object)
            host = labels[rank // self.ranks_per_node - first_node]
        else:
            host = np.full(total, "node0", dtype=object)
        return pd.DataFrame(
            {
                "run_id": np.full(total, "bench", dtype=object),
                "rank": rank,
                "host": host,
                "phase": phases[kind],
                "name": names[kind],
                "detail": np.full(total, "", dtype=object),
                "step": np.concatenate([step, np.full(n_eval, -1, dtype=np.int64)])[order],
                "epoch": np.concatenate([epoch, eval_epoch]).astype(np.int64)[order],
                "start_ns": start[order],
                "end_ns": np.concatenate([end, eval_end]).astype(np.int64)[order],
                "bytes": np.full(total, -1, dtype=np.int64),
            },
            columns=list(ev.EVENT_COLUMNS),
        )


def write_run(events: pd.DataFrame, root: str | Path, ranks: int) -> Path:
    """``events`` as a run in the store under ``root``: one compacted Parquet file per rank."""
    from workbench.store import create_run

    path = create_run(root, "bench-analysis", ranks=ranks)
    _write_ranks(path, events, range(ranks))
    return path


#: The most events ``write_made_run`` builds at once (a few GB as a frame).
CHUNK_EVENTS = 8_000_000


def write_made_run(
    root: str | Path, events: int, ranks: int, *, seed: int = 0, chunk_ranks: int = 64, **shape: Any
) -> Path:
    """A ``MadeJobEvents`` written to a run under ``root`` ``chunk_ranks`` ranks at a time (bounded memory).

    ``shape``: ``ranks_per_node``, ``slow_nodes``, ``straggler_share``, ``allreduce_parts`` (``MadeJobEvents``).
    A chunk holds at most ``CHUNK_EVENTS`` events however many each rank has.
    """
    from workbench.store import create_run

    job = MadeJobEvents(events, ranks, seed, **shape)
    chunk_ranks = max(1, min(chunk_ranks, CHUNK_EVENTS * ranks // max(events, 1)))
    path = create_run(root, "bench-analysis", ranks=ranks)
    for low in range(0, ranks, chunk_ranks):
        high = min(ranks, low + chunk_ranks)
        _write_ranks(path, job.frame(low, high), range(low, high))
    return path


def _write_ranks(path: Path, events: pd.DataFrame, ranks: range) -> None:
    """Each rank's rows of ``events`` (sorted by rank) as its one compacted part file."""
    from workbench.store import COMPACT_ROW_GROUP, write_parquet

    table = pa.Table.from_pandas(events, schema=ev.EVENT_SCHEMA, preserve_index=False)
    bounds = np.searchsorted(events["rank"].to_numpy(), np.arange(ranks.start, ranks.stop + 1))
    for index, rank in enumerate(ranks):
        directory = path / "events" / f"rank-{rank:05d}"
        directory.mkdir(parents=True)
        part = table.slice(bounds[index], bounds[index + 1] - bounds[index])
        write_parquet(part, directory / "00000001-00000001.parquet", row_group_size=COMPACT_ROW_GROUP)
