"""Timing the analysis layer on a run the size of a real job (``workbench bench analysis``).

The generator mimics a Horovod data-parallel run, vectorised with numpy: every step, every rank
waits for its input batch, runs a ``train_step`` that holds a negotiation wait and the allreduce
transfers, and at the end of each epoch rank 0 evaluates while the other ranks wait for it in the
next step's negotiation. The bench writes it to a run store (one compacted Parquet file per rank,
as ``store.compact`` leaves it) and times what a user runs, in a fresh process pinned to one core:
``Run.load`` + ``phase_breakdown`` + ``pop_metrics`` + ``findings``, with the process's peak RSS.
A fresh process keeps the figure free of the generator's memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from workbench import events as ev
from workbench.events import BYTES_PER_MB

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
    kind = np.tile(np.arange(len(kinds), dtype=np.int8), steps * ranks)
    rank = np.repeat(rank_grid.ravel(), len(kinds))
    step = np.repeat(step_grid.ravel(), len(kinds))
    epoch = np.repeat(epoch_grid.ravel(), len(kinds))

    # Evaluation on rank 0 after the last step of every epoch.
    eval_epoch = np.repeat(np.arange(epochs), EVAL_BATCHES)
    eval_offset = np.cumsum(eval_batch_ns, axis=1) - eval_batch_ns
    eval_start = (end_at[last_of_epoch, 0][:, None] + eval_offset).ravel()
    eval_end = eval_start + eval_batch_ns.ravel()
    n_eval = len(eval_start)

    # The store returns events sorted by rank, then start (per-rank files concatenated): do the same,
    # sorting integer keys and building the string columns from codes afterwards.
    rank = np.concatenate([rank, np.zeros(n_eval, dtype=np.int32)]).astype(np.int32)
    start = np.concatenate([start, eval_start]).astype(np.int64)
    order = np.lexsort((start, rank))
    phases = np.asarray([*(k[0] for k in kinds), ev.EVALUATION], dtype=object)
    names = np.asarray([*(k[1] for k in kinds), "evaluate"], dtype=object)
    kind = np.concatenate([kind, np.full(n_eval, len(kinds), dtype=np.int8)])[order]
    total = len(order)
    return pd.DataFrame(
        {
            "run_id": np.full(total, "bench", dtype=object),
            "rank": rank[order],
            "host": np.full(total, "node0", dtype=object),
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
    from workbench.store import COMPACT_ROW_GROUP, create_run, write_parquet

    path = create_run(root, "bench-analysis", ranks=ranks)
    table = pa.Table.from_pandas(events, schema=ev.EVENT_SCHEMA, preserve_index=False)
    rank = events["rank"].to_numpy()
    bounds = np.searchsorted(rank, np.arange(ranks + 1))  # events are sorted by rank
    for r in range(ranks):
        directory = path / "events" / f"rank-{r:05d}"
        directory.mkdir(parents=True)
        part = table.slice(bounds[r], bounds[r + 1] - bounds[r])
        target = directory / "00000001-00000001.parquet"
        write_parquet(part, target, row_group_size=COMPACT_ROW_GROUP)
    return path


_CHILD = """
import json, os, resource, sys, time
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})  # one core
from workbench.analysis import findings, phase_breakdown, pop_metrics
from workbench.store import Run
def peak_rss():
    # VmHWM starts afresh with exec; ru_maxrss would keep the parent's peak from before it
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
cpu = time.process_time()
started = time.perf_counter()
run = Run.load(sys.argv[1], categorical=sys.argv[2] == "categorical")
loaded = time.perf_counter()
breakdown = phase_breakdown(run.events, by=("run_id", "rank"), ranks=run.ranks)
broken = time.perf_counter()
pop = pop_metrics(run.events, breakdown=breakdown)
popped = time.perf_counter()
found = findings(run.events, pop=pop, ranks=run.ranks, breakdown=breakdown)
done = time.perf_counter()
cpu = time.process_time() - cpu
print(json.dumps({
    "events": len(run.events), "seconds": done - started, "cpu_seconds": cpu, "load_seconds": loaded - started,
    "breakdown_seconds": broken - loaded, "pop_seconds": popped - broken, "findings_seconds": done - popped,
    "peak_rss": peak_rss(),
    "parallel_efficiency": float(pop["parallel_efficiency"].iloc[0]), "findings": list(found["kind"]),
}))
"""


def time_analysis(run_path: str | Path, *, categorical: bool = True) -> dict:
    """Load + breakdown + POP + findings of a stored run in a fresh process on one core: its seconds and peak RSS."""
    strings = "categorical" if categorical else "object"
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, str(run_path), strings], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"analysis bench failed: {tail}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run(events: int = 1_000_000, ranks: int = 8, repeats: int = 3, *, categorical: bool = True) -> dict:
    """Load + analyse a stored synthetic run of ``events`` over ``ranks`` (best of ``repeats`` fresh processes).

    ``seconds`` is the whole: ``load_seconds`` + breakdown + POP + findings, as a user waits for it;
    ``cpu_seconds`` the CPU time it took (on a shared machine, what other jobs cannot inflate).
    ``categorical=False`` times the load with object string columns (``Run.load``'s default).
    """
    frame = synthetic_events(events, ranks)
    with tempfile.TemporaryDirectory(prefix="workbench-analysis-") as scratch:
        path = write_run(frame, scratch, ranks)
        del frame
        trials = [time_analysis(path, categorical=categorical) for _ in range(max(1, repeats))]
    best = min(trials, key=lambda trial: trial["seconds"])
    return {
        "events": best["events"],
        "ranks": int(ranks),
        "seconds": round(best["seconds"], 4),
        "cpu_seconds": round(best["cpu_seconds"], 4),
        "load_seconds": round(best["load_seconds"], 4),
        "breakdown_seconds": round(best["breakdown_seconds"], 4),
        "pop_seconds": round(best["pop_seconds"], 4),
        "findings_seconds": round(best["findings_seconds"], 4),
        "peak_rss_mb": round(max(t["peak_rss"] for t in trials) / BYTES_PER_MB, 1),
        "strings": "categorical" if categorical else "object",
        "parallel_efficiency": best["parallel_efficiency"],
        "findings": best["findings"],
        "repeats": int(max(1, repeats)),
    }


def format_result(result: dict) -> str:
    """One line a reader compares by eye."""
    return (
        f"{result['events']} events on {result['ranks']} ranks: {result['seconds']:.2f} s"
        f" (load {result['load_seconds']:.2f} + breakdown {result['breakdown_seconds']:.2f}"
        f" + POP {result['pop_seconds']:.3f} + findings {result['findings_seconds']:.3f};"
        f" CPU {result['cpu_seconds']:.2f} s);"
        f" peak RSS {result['peak_rss_mb']:.0f} MB ({result['strings']} strings)"
    )
