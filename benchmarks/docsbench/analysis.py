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
from pathlib import Path
from typing import Any

from workbench.datasets.made_traces.job import ALLREDUCE_PARTS, made_events, slow_node_ranks, write_made_run, write_run
from workbench.events import BYTES_PER_MB

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
    """Load + analyse a stored made run of ``events`` over ``ranks`` (best of ``repeats`` fresh processes).

    ``seconds`` is the whole: ``load_seconds`` + breakdown + POP + findings, as a user waits for it;
    ``cpu_seconds`` the CPU time it took (on a shared machine, what other jobs cannot inflate).
    ``categorical=False`` times the load with object string columns (``Run.load``'s default).
    """
    frame = made_events(events, ranks)
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
    """A ``MadeJobEvents`` of ``JOB_SHAPE`` analysed at once (``whole``) and in rank groups, side by side.

    Each mode runs in fresh processes (the fastest of ``repeats``): ``whole`` is ``Run.load`` +
    breakdown + POP + findings + lateness in one process; ``split-N`` is ``analyse_split`` with N
    local worker processes (0: the groups one after the other in the process itself). Peak memory
    is the calling process's plus each worker's (a sum of peaks: an upper bound of the machine's).
    ``slow_hosts`` are the nodes the job made slow: the split analysis should find them latest.
    ``allreduce_parts``: transfers per step (``MadeJobEvents``); more of them, fewer steps for the events.
    """
    shape = {**JOB_SHAPE, "allreduce_parts": int(allreduce_parts)}
    per_node = JOB_SHAPE["ranks_per_node"]
    slow = slow_node_ranks(ranks, per_node, JOB_SHAPE["slow_nodes"])
    slow_hosts = sorted({f"node{r // per_node}" for r in slow.tolist()})
    modes: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="workbench-split-", dir=root) as scratch:
        started = time.perf_counter()
        path = write_made_run(scratch, events, ranks, **shape)
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
