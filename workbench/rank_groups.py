"""A large run analysed in rank groups where its data is, the partial results merged: the same analysis.

At 1 024 ranks and 100 M events a run does not fit one process as one DataFrame. Every piece of the
analysis (``analysis.pieces.PIECES``) reduces a group of ranks to tables of a size set by ranks and steps,
not events, so a worker loads one group at a time from the run store, reduces it, and sends the tables
back; the caller merges them with the same code that analyses a whole run (``analyse_run`` runs the pieces
on the run as one group). Rounds:

1. ``open_group``: load the group's events, memory samples, counters and GPU activity; return every
   piece's reduction (``pieces.reduce_group``). Horovod's readiness marks need the run's reference steps
   (its lowest rank's): the caller reads them from the run's lowest ranks first; where none of those has
   steps, the group keeps its ``NEGOTIATE`` spans and
2. ``mark_group`` marks them against the reference the groups found.
3. ``lanes_group``: the breakdown needs each rank's wait for the last rank in every step, which sets every
   rank's steps side by side: given the merged waits of its ranks, the group reads its spans again and
   returns its lane table (busy time per rank and phase, idle against its own extent).

Idle is re-based on the run's extent when the lanes merge. The tests compare the two paths piece by piece
on runs made to exercise each (GPUs, Keras calls, memory growth, slow links, hangs, retracing, Python input,
missing ranks) with groups of 1, 2 and an odd size.

Workers are anything with ``submit(fn, *args)``: ``local_workers(n)`` (processes on this machine),
``engine_workers(client)`` (ipyparallel engines, e.g. on the nodes that hold the run), or none
(this process, one group at a time: the memory of one group, not of the run).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.analysis.pieces import (
    PIECES,
    GroupFrames,
    RunState,
    group_frames,
    late_needs,
    merge_run,
    reduce_group,
    reduce_late,
)
from workbench.analysis.run_analysis import SplitAnalysis, analysis_of, declared_ranks
from workbench.analysis.straggler import negotiation_spans, readiness_marks, reference_of, step_spans

#: Ranks per group: 32 ranks of a 100 M-event, 1 024-rank run are ~3 M events (~0.2 GB loaded). Of 16,
#: 32, 64 and 128 it was the fastest there (`workbench bench analysis --split`): smaller groups pay more
#: rounds and tables, larger ones more fresh memory per group.
DEFAULT_GROUP_RANKS = 32
#: The event columns a group's analysis reads (all but the schema's ``labels``).
READ_COLUMNS: tuple[str, ...] = (
    "run_id", "rank", "host", "phase", "name", "detail", "epoch", "step", "start_ns", "end_ns", "bytes",
)  # fmt: skip
#: The columns the breakdown's second read of a group takes.
LANE_COLUMNS: tuple[str, ...] = ("run_id", "rank", "host", "phase", "name", "start_ns", "end_ns")

#: Per worker process: the NEGOTIATE spans of each open group whose reference steps are not known yet.
_HELD: dict[str, pd.DataFrame] = {}
#: The lowest ranks the caller reads the run's reference steps from before the groups open (the reference is
#: the lowest rank with steps; past these, the groups find it and a round of its own marks them).
REFERENCE_PROBE_RANKS = 4


@dataclass(frozen=True)
class GroupPart:
    """What one rank group reduces to in ``open_group``: every piece's tables, of a size set by ranks, not events."""

    ranks: list[int]
    #: ``pieces.reduce_group`` of the group.
    parts: dict[str, Any]
    #: The worker's pid and peak resident memory (bytes) when it returned this part.
    pid: int = 0
    peak_rss: int = 0


def peak_rss() -> int:
    """This process's peak resident memory in bytes (``VmHWM``; ``ru_maxrss`` where /proc is absent)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# --------------------------------------------------------------------------------------------
# The rounds, run where the data is
# --------------------------------------------------------------------------------------------


def _load_group(
    run_path: str, ranks: list[int], run_id: str, declared: bool, reference: pd.DataFrame | str
) -> GroupFrames:
    """The group's frames from the run store: only its ranks' files, only the event columns the pieces read."""
    from workbench.store import RunData

    run = RunData.load(run_path, ranks=ranks, columns=READ_COLUMNS, categorical=True)
    rank_meta = run.rank_meta
    if len(rank_meta) and "rank" in rank_meta:
        rank_meta = rank_meta[rank_meta["rank"].isin(ranks)]
    return group_frames(
        run.events,
        run_id,
        memory=run.memory,
        counters=run.counters,
        devices=run.devices,
        rank_meta=rank_meta,
        ranks=list(ranks) if declared else None,
        reference=reference,
    )


def open_group(
    run_path: str,
    ranks: list[int],
    token: str,
    run_id: str = "",
    declared: bool = False,
    run_reference: pd.DataFrame | None = None,
) -> GroupPart:
    """Round 1: load ``ranks`` of the run and reduce them (every piece). Without the run's reference steps,
    keep the group's ``NEGOTIATE`` spans under ``token`` for ``mark_group``."""
    reference = run_reference if run_reference is not None else "unknown"
    frames = _load_group(run_path, ranks, run_id, declared, reference)
    if run_reference is None:
        _HELD[token] = negotiation_spans(frames.events)
    return GroupPart(ranks=list(ranks), parts=reduce_group(frames), pid=os.getpid(), peak_rss=peak_rss())


def reference_steps(run_path: str, ranks: Sequence[int]) -> pd.DataFrame | None:
    """The step spans of the lowest of ``ranks`` with steps (the run's reference, when ``ranks`` are its lowest),
    read rank by rank; None when none of them has steps."""
    from workbench.store import RunData

    for rank in sorted(ranks):
        events = RunData.load(run_path, ranks=[rank], columns=("rank", "phase", "name", "step", "start_ns", "end_ns"),
                          categorical=True).events  # fmt: skip
        steps = step_spans(events[(events["end_ns"] >= events["start_ns"]).to_numpy()]) if len(events) else None
        if steps is not None and len(steps):
            return steps.reset_index(drop=True)
    return None


def mark_group(token: str, reference: pd.DataFrame) -> pd.DataFrame:
    """Round 2 (where the run's lowest ranks had no steps): the group's readiness marks against the run's
    ``reference`` steps; forgets the group's spans."""
    negotiations = _HELD.pop(token, None)
    if negotiations is None:
        raise RuntimeError(f"rank group {token} is not open in this process: run open_group first, on the same worker")
    return readiness_marks(negotiations, reference)


def lanes_group(
    run_path: str, ranks: list[int], run_id: str, declared: bool, needed: dict[str, Any]
) -> tuple[dict, int, int]:
    """Round 3: the late pieces of the group (its lanes, with its derived waits), its spans read again.

    Returns the reductions, this process's pid and its peak resident memory.
    """
    from workbench.store import read_stream

    events = read_stream(run_path, "events", ranks=ranks, columns=LANE_COLUMNS, categorical=True)
    frames = group_frames(events, run_id, ranks=list(ranks) if declared else None)
    return reduce_late(frames, needed), os.getpid(), peak_rss()


def forget_groups(tokens: Iterable[str]) -> None:
    """Drop what open groups keep (after a failed round)."""
    for token in tokens:
        _HELD.pop(token, None)


# --------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------


class InProcess:
    """Runs each call here and now: one group in memory at a time."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args))
        except Exception as error:
            future.set_exception(error)
        return future

    def shutdown(self) -> None:
        return None


class EngineWorker:
    """One ipyparallel engine as a worker: its ``DirectView`` runs the rounds, the engine keeps the groups."""

    def __init__(self, view: Any) -> None:
        self.view = view

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.view.apply_async(fn, *args)

    def shutdown(self) -> None:
        return None


def local_workers(count: int) -> list[Any]:
    """``count`` worker processes on this machine, each its own pinned queue (a group stays on its worker)."""
    if count < 1:
        raise ValueError(f"workers={count}: use at least 1 (or None to analyse in this process)")
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    return [cf.ProcessPoolExecutor(max_workers=1, mp_context=context) for _ in range(count)]


def engine_workers(cluster: Any) -> list[EngineWorker]:
    """One worker per engine of a started ``workbench.Cluster`` or an ipyparallel ``Client``.

    The engines import workbench and open the run by its path: on several nodes, a path every node
    reads (a shared file system), and each engine reads only its groups' files.
    """
    client = getattr(cluster, "client", cluster)
    if client is None or not getattr(client, "ids", None):
        raise ValueError("no engines to analyse on: start the cluster first (cluster.start_sync())")
    return [EngineWorker(client[engine]) for engine in sorted(client.ids)]


def _result(future: Any) -> Any:
    return future.get() if hasattr(future, "get") and not isinstance(future, cf.Future) else future.result()


def _each_group(workers: Sequence[Any], fn: Callable[..., Any], args: list[tuple]) -> list[Any]:
    """``fn(*args[i])`` for every group ``i`` on worker ``i % len(workers)``, results in group order."""
    futures = [workers[i % len(workers)].submit(fn, *a) for i, a in enumerate(args)]
    return [_result(f) for f in futures]


# --------------------------------------------------------------------------------------------
# The merge
# --------------------------------------------------------------------------------------------


def rank_groups(ranks: Sequence[int], group_ranks: int = DEFAULT_GROUP_RANKS) -> list[list[int]]:
    """``ranks`` (sorted) cut into consecutive groups of ``group_ranks``: ranks of a node stay together."""
    if group_ranks < 1:
        raise ValueError(f"group_ranks={group_ranks}: use at least 1 rank per group")
    ordered = sorted({int(r) for r in ranks})
    return [ordered[i : i + group_ranks] for i in range(0, len(ordered), group_ranks)]


def stored_ranks(run_path: str | Path) -> list[int]:
    """Ranks with a directory in any stream of the run store."""
    found: set[int] = set()
    for stream in ("events", "memory", "counters", "devices"):
        directory = Path(run_path) / stream
        for entry in directory.glob("rank-*") if directory.is_dir() else ():
            try:
                found.add(int(entry.name.removeprefix("rank-")))
            except ValueError:
                continue
    return sorted(found)


def analyse_split(
    run_path: str | Path,
    *,
    group_ranks: int = DEFAULT_GROUP_RANKS,
    workers: int | Sequence[Any] | None = None,
    input_is_useful: bool = True,
    min_fraction: float = 0.02,
) -> SplitAnalysis:
    """Every table and finding of ``analyse_run`` for a stored run, computed in rank groups.

    ``workers``: None (this process), a count of local worker processes (``local_workers``), or a
    sequence of objects with ``submit(fn, *args)`` such as ``engine_workers(client)``; a group's
    rounds run on the same worker. Ranks are those the metadata declares, else those stored.
    """
    from workbench.store import read_run_meta

    path = str(Path(run_path))
    meta = read_run_meta(path)
    declared = declared_ranks(meta)
    ranks = declared or stored_ranks(path)
    groups = rank_groups(ranks, group_ranks) if ranks else []
    owned = isinstance(workers, int)
    pool: Sequence[Any] = local_workers(workers) if isinstance(workers, int) else (workers or [InProcess()])
    tokens = [f"{uuid.uuid4().hex}-{i}" for i in range(len(groups))]
    seconds: dict[str, float] = {}
    peaks: list[tuple[int, int]] = []
    state = RunState(meta, declared, min_fraction=min_fraction, input_is_useful=input_is_useful)
    is_declared = declared is not None

    def late_parts(merged: RunState) -> list[dict[str, Any]]:
        started = time.perf_counter()
        args = [(path, g, merged.run_id, is_declared, late_needs(merged, g)) for g in groups]
        done = _each_group(pool, lanes_group, args)
        seconds["lanes"] = time.perf_counter() - started
        peaks.extend((pid, peak) for _, pid, peak in done)
        return [parts for parts, _, _ in done]

    try:
        started = time.perf_counter()
        known = reference_steps(path, sorted(ranks)[:REFERENCE_PROBE_RANKS])
        opened = [(path, g, t, state.run_id, is_declared, known) for g, t in zip(groups, tokens)]
        parts: list[GroupPart] = _each_group(pool, open_group, opened)
        seconds["open"] = time.perf_counter() - started
        if known is None and parts:
            # no low rank has steps: the groups' lowest rank with steps gives the reference, a round of its own
            started = time.perf_counter()
            steps = [p.parts["step_waits"][0].steps for p in parts]
            found = [s for s in steps if len(s)]
            reference = reference_of(min(found, key=lambda s: int(s["rank"].min()))) if found else pd.DataFrame()
            marks = _each_group(pool, mark_group, [(t, reference) for t in tokens])
            for part, group_marks in zip(parts, marks):
                evidence, exchange = part.parts["step_waits"]
                part.parts["step_waits"] = (replace(evidence, marks=group_marks), exchange)
            seconds["mark"] = time.perf_counter() - started
        started = time.perf_counter()
        merge_run([p.parts for p in parts], state, late_parts)
        seconds["merge"] = time.perf_counter() - started - seconds.get("lanes", 0.0)
    except BaseException:
        for worker in pool:
            try:
                worker.submit(forget_groups, tokens)
            except Exception:
                pass
        raise
    finally:
        if owned:
            for worker in pool:
                worker.shutdown()
    worker_peak: dict[int, int] = {}
    for pid, peak in [(p.pid, p.peak_rss) for p in parts] + peaks:
        worker_peak[pid] = max(worker_peak.get(pid, 0), peak)
    result = analysis_of(
        state,
        events=state.events,
        groups=len(groups),
        workers=len(pool),
        seconds={k: round(v, 4) for k, v in seconds.items()},
        worker_peak_rss=worker_peak,
    )
    assert isinstance(result, SplitAnalysis)
    return result


#: The registered pieces a rank group computes: all of them (``analysis.pieces.PIECES``).
GROUPED_PIECES: tuple[str, ...] = tuple(piece.name for piece in PIECES)
