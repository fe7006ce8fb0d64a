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

import argparse
import json
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from workbench import events as ev
from workbench.events import BYTES_PER_MB

#: Events per rank and step: input, train_step, NEGOTIATE_ALLREDUCE, ``ALLREDUCE_PARTS`` MPI_ALLREDUCE transfers.
ALLREDUCE_PARTS = 2
EVENTS_PER_STEP = 3 + ALLREDUCE_PARTS
STEPS_PER_EPOCH = 500
EVAL_BATCHES = 50
MS = 1_000_000


def synthetic_events(events: int = 1_000_000, ranks: int = 8, seed: int = 0, **shape: Any) -> pd.DataFrame:
    """About ``events`` schema-conformant events over ``ranks`` ranks (exactly, when it divides evenly).

    ``shape``: the rest of a large job's shape, off by default (``SyntheticRunEvents``).
    """
    return SyntheticRunEvents(events, ranks, seed, **shape).frame(0, ranks)


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


class SyntheticRunEvents:
    """The timing of every step and rank of a synthetic job; its events produced a slice of ranks at a time.

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


#: The most events ``write_synthetic_run`` builds at once (a few GB as a frame).
CHUNK_EVENTS = 8_000_000


def write_synthetic_run(
    root: str | Path, events: int, ranks: int, *, seed: int = 0, chunk_ranks: int = 64, **shape: Any
) -> Path:
    """A ``SyntheticRunEvents`` written to a run under ``root`` ``chunk_ranks`` ranks at a time (bounded memory).

    ``shape``: ``ranks_per_node``, ``slow_nodes``, ``straggler_share``, ``allreduce_parts`` (``SyntheticRunEvents``).
    A chunk holds at most ``CHUNK_EVENTS`` events however many each rank has.
    """
    from workbench.store import create_run

    job = SyntheticRunEvents(events, ranks, seed, **shape)
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


_CHILD = """
import json, os, sys, time
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})  # one core
from workbench.analysis import findings, phase_breakdown, pop_metrics
from workbench.rank_groups import peak_rss  # VmHWM: starts afresh with exec, unlike ru_maxrss
from workbench.store import RunData
cpu = time.process_time()
started = time.perf_counter()
run = RunData.load(sys.argv[1], categorical=sys.argv[2] == "categorical")
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


#: The large job's shape in ``run_split``: 8 ranks a node, a few slow nodes, rare late rank-steps.
JOB_SHAPE: dict[str, Any] = {"ranks_per_node": 8, "slow_nodes": 3, "straggler_share": 0.001}

_REPORT = """
def report(result, seconds, cpu, **extra):
    from workbench.analysis import lateness_summary
    late = lateness_summary(result.lateness, result.header["rank_hosts"])
    late = late.sort_values(["last_in_steps", "rank"], ascending=[False, True])
    split = getattr(result, "worker_peak_rss", {})
    print(json.dumps({
        "events": getattr(result, "events", None), "seconds": seconds, "cpu_seconds": cpu,
        "rounds": getattr(result, "seconds", {}), "parent_peak_rss": peak_rss(),
        "worker_peak_rss": [peak for pid, peak in split.items() if pid != os.getpid()],
        "parallel_efficiency": result.pop["parallel_efficiency"], "findings": list(result.findings["kind"]),
        "latest_hosts": list(dict.fromkeys(late["host"].head(64))),
        "numbers": numbers_digest(result.to_dict()), **extra,
    }))
"""

_SPLIT_CHILD = (
    """
import json, os, sys, time
from docsbench.analysis import numbers_digest
from workbench.rank_groups import analyse_split, peak_rss
"""
    + _REPORT
    + """
path, group_ranks, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cpu = time.process_time()
started = time.perf_counter()
result = analyse_split(path, group_ranks=group_ranks, workers=workers or None)
report(result, time.perf_counter() - started, time.process_time() - cpu)
"""
)

#: The rank groups on engines on the miniature cluster's nodes, one a node (``workbench analyse --minicluster``);
#: the engines' start is timed apart from the analysis.
_NODES_CHILD = (
    """
import json, os, sys, time
from workbench import minicluster
from docsbench.analysis import numbers_digest
from workbench.cluster import Cluster
from workbench.rank_groups import analyse_split, engine_workers, peak_rss
"""
    + _REPORT
    + """
path, group_ranks = sys.argv[1], int(sys.argv[2])
mini = minicluster.running()
started = time.perf_counter()
with Cluster(config=mini.cluster_config(len(mini.node_names))) as cluster:
    start_s = time.perf_counter() - started
    cpu = time.process_time()
    started = time.perf_counter()
    result = analyse_split(path, group_ranks=group_ranks, workers=engine_workers(cluster))
    limits = [n.memory_bytes and n.memory_bytes / 1e6 for n in mini.spec.nodes]
    report(result, time.perf_counter() - started, time.process_time() - cpu, engines_start_s=start_s,
           nodes=len(mini.node_names), node_memory_mb=limits)
"""
)

#: What ``workbench analyse`` does with a run that fits one process: ``Run.load`` and every piece of ``analyse_run``.
_WHOLE_CHILD = (
    """
import json, os, sys, time
from workbench.analysis import analyse_run
from docsbench.analysis import numbers_digest
from workbench.rank_groups import peak_rss
from workbench.store import RunData
"""
    + _REPORT
    + """
cpu = time.process_time()
started = time.perf_counter()
run = RunData.load(sys.argv[1], categorical=True)
result = analyse_run(run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters,
                     devices=run.devices)
report(result, time.perf_counter() - started, time.process_time() - cpu, events=len(run.events))
"""
)


def numbers_digest(payload: dict) -> str:
    """A short hash of an analysis' JSON (``to_dict``) without how it was split, floats to 9 significant figures:
    equal digests are the same tables and findings, whichever path computed them (sums in another order differ
    in the last bits)."""
    import hashlib

    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return float(f"{value:.9g}")
        if isinstance(value, dict):
            return {k: rounded(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rounded(v) for v in value]
        return value

    kept = {k: v for k, v in payload.items() if k != "split"}
    return hashlib.sha1(json.dumps(rounded(kept), sort_keys=True).encode()).hexdigest()[:12]


def _child(script: str, *args: str) -> dict:
    """One timed analysis in a fresh process; an out-of-memory kill is a result, not an error."""
    completed = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=False)
    if completed.returncode in (-9, 137):
        return {"killed": "out of memory (SIGKILL)"}
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"analysis bench failed: {tail}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run_split(
    events: int = 10_000_000,
    ranks: int = 1024,
    *,
    workers: tuple[int, ...] = (0, 2),
    group_ranks: int = 32,
    repeats: int = 1,
    whole: bool = True,
    nodes: bool = False,
    allreduce_parts: int = ALLREDUCE_PARTS,
    root: str | Path | None = None,
) -> dict:
    """A ``SyntheticRunEvents`` of ``JOB_SHAPE`` analysed at once (``whole``) and in rank groups, side by side.

    Each mode runs in fresh processes (the fastest of ``repeats``): ``whole`` is ``Run.load`` +
    breakdown + POP + findings + lateness in one process; ``split-N`` is ``analyse_split`` with N
    local worker processes (0: the groups one after the other in the process itself). Peak memory
    is the calling process's plus each worker's (a sum of peaks: an upper bound of the machine's).
    ``slow_hosts`` are the nodes the job made slow: the split analysis should find them latest.
    ``allreduce_parts``: transfers per step (``SyntheticRunEvents``); more of them, fewer steps for the events.
    """
    shape = {**JOB_SHAPE, "allreduce_parts": int(allreduce_parts)}
    per_node = JOB_SHAPE["ranks_per_node"]
    slow = slow_node_ranks(ranks, per_node, JOB_SHAPE["slow_nodes"])
    slow_hosts = sorted({f"node{r // per_node}" for r in slow.tolist()})
    modes: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="workbench-split-", dir=root) as scratch:
        started = time.perf_counter()
        path = write_synthetic_run(scratch, events, ranks, **shape)
        write_s = time.perf_counter() - started
        plan = ([("whole", _WHOLE_CHILD, ())] if whole else []) + [
            (f"split-{n}", _SPLIT_CHILD, (str(group_ranks), str(n))) for n in workers
        ]
        if nodes:
            plan.append(("minicluster-nodes", _NODES_CHILD, (str(group_ranks),)))
        for label, script, extra in plan:
            trials = [_child(script, str(path), *extra) for _ in range(max(1, repeats))]
            done = [t for t in trials if "killed" not in t]
            if not done:
                modes[label] = trials[0]
                continue
            best = min(done, key=lambda t: t["seconds"])
            peak = best["parent_peak_rss"] + sum(best["worker_peak_rss"])
            modes[label] = {
                **{k: v for k, v in best.items() if k not in ("parent_peak_rss", "worker_peak_rss")},
                "seconds": round(best["seconds"], 3),
                "cpu_seconds": round(best["cpu_seconds"], 3),
                "peak_rss_mb": round(peak / BYTES_PER_MB, 1),
                "parent_peak_rss_mb": round(best["parent_peak_rss"] / BYTES_PER_MB, 1),
                "worker_peak_rss_mb": [round(w / BYTES_PER_MB, 1) for w in best["worker_peak_rss"]],
            }
    return {
        "events": int(events),
        "ranks": int(ranks),
        "group_ranks": int(group_ranks),
        "shape": shape,
        "slow_hosts": slow_hosts,
        "write_seconds": round(write_s, 1),
        "repeats": int(max(1, repeats)),
        "modes": modes,
        # every path gave the same tables and findings (``numbers_digest``)
        "same_numbers": len({m["numbers"] for m in modes.values() if "numbers" in m}) == 1,
    }


def format_split(result: dict) -> str:
    """One line per mode."""
    lines = [
        f"{result['events']:,} events on {result['ranks']} ranks ({result['group_ranks']} ranks a group;"
        f" slow nodes {', '.join(result['slow_hosts']) or 'none'}):"
    ]
    for label, mode in result["modes"].items():
        if "killed" in mode:
            lines.append(f"  {label}: killed, {mode['killed']}")
            continue
        found = [h for h in mode.get("latest_hosts", [])[: len(result["slow_hosts"])]]
        latest = f"; latest hosts {', '.join(found)}" if found else ""
        workers = mode.get("worker_peak_rss_mb") or []
        each = f" (caller {mode['parent_peak_rss_mb']:.0f} MB, a worker at most {max(workers):.0f})" if workers else ""
        lines.append(
            f"  {label}: {mode['seconds']:.2f} s (CPU {mode['cpu_seconds']:.2f} s in the caller),"
            f" peak {mode['peak_rss_mb']:.0f} MB{each}{latest}"
        )
    lines.append("  the same tables and findings on every path" if result.get("same_numbers") else "  NUMBERS DIFFER")
    return "\n".join(lines)


def command(args: argparse.Namespace) -> int:
    """``workbench bench analysis``: one run analysed whole, or with ``--split`` also in rank groups."""
    from workbench.bench import print_result

    if args.split:
        try:
            workers = tuple(int(n) for n in args.workers.split(","))
        except ValueError:
            problem = f"--workers {args.workers!r}: give worker counts like 0,2 (0: in the process itself)"
            raise SystemExit(problem) from None
        result = run_split(
            events=args.events,
            ranks=args.ranks,
            workers=workers,
            group_ranks=args.group_ranks,
            repeats=args.repeats,
            whole=not args.no_whole,
            nodes=args.minicluster,
            allreduce_parts=args.allreduce_parts,
        )
        print_result(result, args, format_split)
        return 0
    result = run(events=args.events, ranks=args.ranks, repeats=args.repeats, categorical=args.strings == "categorical")
    print_result(result, args, format_result)
    return 0
