"""A large run analysed in rank groups where its data is, the partial results merged.

At 1 024 ranks and 100 M events a run does not fit one process as one DataFrame. Everything
``analyse_split`` reports is either per rank (busy time per phase, steps, memory, readiness marks)
or a small reduction over ranks (the run's extent, each step's first and latest arrival, sums), so
a worker loads one group of ranks at a time from the run store, reduces it, keeps only what the
later rounds need, and sends back tables whose size does not grow with the events. Three rounds:

1. ``open_group``: load the group's events and memory samples; return its lane table (busy
   nanoseconds per rank and phase, idle against the group's extent), extent, steps per rank,
   memory summary, what findings read from events (``EventFacts``), hosts, and the step spans of
   its lowest rank with steps (candidates for the run's reference steps). Keep its ``NEGOTIATE``
   spans, or, given the run's reference steps, its readiness marks against them and return their
   ``step_arrivals`` (the caller reads the reference from the run's lowest ranks first: two rounds).
2. ``mark_group`` (when no low rank had steps): readiness marks against the run's reference steps;
   return ``step_arrivals``.
3. ``close_group``: lateness of its ranks against the merged arrivals; return the per-rank summary.

The caller merges: idle is re-based on the run's extent, then the breakdown, POP metrics and
findings go through the same functions as a run analysed at once, and equal them (the tests
compare both on runs with missing ranks, stragglers and several hosts). What it does not compute:
waits derived from step lengths, blocking-collective arrivals or TF's profiler (``step_waits``
sets every rank's steps side by side), Keras call tables and collectives in flight; ``analyse_run``
does those on runs that fit one process.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import breakdown_from_lanes, lane_table
from workbench.analysis.cpu_wait import cpu_wait_finding, cpu_wait_table
from workbench.analysis.findings import (
    EventFacts,
    combine_findings,
    event_facts,
    findings,
    missing_data_finding,
    oversubscription_finding_from_meta,
)
from workbench.analysis.memory import memory_summary
from workbench.analysis.pop import pop_metrics
from workbench.analysis.run_analysis import (
    analysis_dict,
    backwards_finding,
    declared_ranks,
    lateness_summary,
    missing_table_findings,
    pop_dict,
    run_header,
    wall_seconds,
    with_hosts,
)
from workbench.analysis.scaling import steps_per_rank
from workbench.analysis.straggler import (
    lateness_of_marks,
    merge_step_arrivals,
    negotiation_spans,
    readiness_marks,
    step_arrivals,
    step_spans,
)

#: Ranks per group: 32 ranks of a 100 M-event, 1 024-rank run are ~3 M events (~0.2 GB loaded). Of 16,
#: 32, 64 and 128 it was the fastest there (`workbench bench analysis --split`): smaller groups pay more
#: rounds and tables, larger ones more fresh memory per group.
DEFAULT_GROUP_RANKS = 32
#: The event columns a group's analysis reads (``detail`` and ``epoch`` are not needed).
READ_COLUMNS: tuple[str, ...] = ("run_id", "rank", "host", "phase", "name", "step", "start_ns", "end_ns", "bytes")

#: Per worker process: what each open group keeps between rounds (its NEGOTIATE spans, then marks).
_HELD: dict[str, pd.DataFrame] = {}
#: The lowest ranks the caller reads the run's reference steps from before the groups open (the reference is
#: the lowest rank with steps; past these, the groups find it and a round of its own marks them).
REFERENCE_PROBE_RANKS = 4


@dataclass(frozen=True)
class GroupPart:
    """What one rank group reduces to in ``open_group``: tables of a size set by ranks, not events."""

    ranks: list[int]
    events: int
    #: First start and last end of the group's own-time spans (-1 when it has none).
    first_ns: int
    last_ns: int
    #: ``lane_table`` of the group (idle measured against the group's extent).
    lanes: pd.DataFrame
    facts: EventFacts
    hosts: dict[int, str]
    steps: pd.DataFrame
    memory: pd.DataFrame
    #: Spans that end before they start, left out: how many, the ranks, and the first one's (rank, name).
    backwards: int = 0
    backwards_ranks: list[int] = field(default_factory=list)
    backwards_first: tuple[int, str] | None = None
    #: ``step_spans`` of the group's lowest rank with steps (empty when none has steps, or the caller gave the run's).
    reference: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: ``cpu_wait_table`` of the group's ranks (their heartbeats' wait for a core).
    cpu_wait: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The worker's pid and peak resident memory (bytes) when it returned this part.
    pid: int = 0
    peak_rss: int = 0
    #: ``step_arrivals`` of the group's readiness marks, when ``open_group`` was given the reference steps.
    arrivals: pd.DataFrame | None = None


@dataclass(frozen=True)
class SplitAnalysis:
    """A run analysed in rank groups: the tables of ``RunAnalysis`` that merge, and how it was split."""

    header: dict[str, Any]
    #: ``rank, host, phase, seconds, fraction`` (``phase_breakdown`` by rank).
    breakdown: pd.DataFrame
    pop: dict[str, Any]
    findings: pd.DataFrame
    steps: pd.DataFrame
    memory: pd.DataFrame
    #: ``lateness_summary`` per rank (from Horovod's readiness marks; empty without a timeline).
    lateness: pd.DataFrame
    #: Per step: ``step, ranks, first_ns, latest_ns`` of the readiness marks.
    step_arrivals: pd.DataFrame
    events: int
    groups: int
    workers: int
    #: Wall seconds of each round (``open``, ``mark``, ``close``, ``merge``).
    seconds: dict[str, float]
    #: Peak resident memory (bytes) of each worker process, by pid.
    worker_peak_rss: dict[int, int]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``RunAnalysis.to_dict`` (per-step arrivals left out: one row per step), plus the split."""
        return {
            **analysis_dict(self, self.lateness),
            "split": {
                "events": self.events,
                "groups": self.groups,
                "workers": self.workers,
                "seconds": self.seconds,
                "worker_peak_mb": [round(v / ev.BYTES_PER_MB, 1) for v in self.worker_peak_rss.values()],
            },
        }


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
# The three rounds, run where the data is
# --------------------------------------------------------------------------------------------


def open_group(
    run_path: str, ranks: list[int], token: str, run_id: str = "", run_reference: pd.DataFrame | None = None
) -> GroupPart:
    """Round 1: load ``ranks`` of the run, reduce them, keep their ``NEGOTIATE`` spans under ``token`` (or, given
    the run's reference steps, their readiness marks, whose arrivals the part carries)."""
    from workbench.store import RunData

    run = RunData.load(run_path, ranks=ranks, columns=READ_COLUMNS, categorical=True)
    events = run.events
    count = len(events)
    backwards_mask = (events["end_ns"] < events["start_ns"]).to_numpy() if count else np.zeros(0, bool)
    backwards = int(backwards_mask.sum())
    backwards_ranks: list[int] = []
    backwards_first = None
    if backwards:
        first = events[backwards_mask].iloc[0]
        backwards_first = (int(first["rank"]), str(first["name"] if pd.notna(first["name"]) else first["phase"]))
        backwards_ranks = sorted(int(r) for r in events.loc[backwards_mask, "rank"].unique())
        events = events[~backwards_mask].copy(deep=False)  # its own frame: the relabel below is no write to a slice
    # every event belongs to this run (as in analyse_run): relabel the stored run_id in place when it
    # holds one label, not by assign (which copies every column of millions of rows)
    stored = events["run_id"]
    if isinstance(stored.dtype, pd.CategoricalDtype) and len(stored.cat.categories) == 1:
        events["run_id"] = stored.cat.rename_categories([run_id])
    elif len(events):
        events = events.assign(run_id=run_id)
    rank_meta = run.rank_meta
    if len(rank_meta) and "rank" in rank_meta:
        rank_meta = rank_meta[rank_meta["rank"].isin(ranks)]
    hosts = ev.rank_hosts(events, run.memory, rank_meta if isinstance(rank_meta, pd.DataFrame) else None)
    lanes = lane_table(events, ranks=ranks)
    own = ~events["phase"].isin(ev.OVERLAP_PHASES).to_numpy()  # a mask: indexing would copy every column
    first_ns = int(events["start_ns"].to_numpy()[own].min()) if own.any() else -1
    last_ns = int(events["end_ns"].to_numpy()[own].max()) if own.any() else -1
    reference = pd.DataFrame()  # a candidate for the run's reference steps, needed only when the caller has none
    if run_reference is None:
        steps = step_spans(events)
        reference = steps[steps["rank"] == steps["rank"].min()] if len(steps) else steps
    _HELD[token] = negotiation_spans(events)
    arrivals = mark_group(token, run_reference) if run_reference is not None else None
    return GroupPart(
        ranks=list(ranks),
        events=count,
        first_ns=first_ns,
        last_ns=last_ns,
        lanes=lanes,
        facts=event_facts(events),
        hosts=hosts,
        steps=steps_per_rank(events, ranks=ranks),
        memory=memory_summary(run.memory),
        backwards=backwards,
        backwards_ranks=backwards_ranks,
        backwards_first=backwards_first,
        reference=reference.reset_index(drop=True),
        cpu_wait=cpu_wait_table(run.counters, rank_meta if isinstance(rank_meta, pd.DataFrame) else None),
        pid=os.getpid(),
        peak_rss=peak_rss(),
        arrivals=arrivals,
    )


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
    """Round 2: the group's readiness marks against the run's ``reference`` steps; their ``step_arrivals``."""
    negotiations = _HELD.get(token)
    if negotiations is None:
        raise RuntimeError(f"rank group {token} is not open in this process: run open_group first, on the same worker")
    marks = readiness_marks(negotiations, reference)
    _HELD[token] = marks
    return step_arrivals(marks)


def close_group(token: str, arrivals: pd.DataFrame) -> tuple[pd.DataFrame, int, int]:
    """Round 3: the lateness summary of the group's ranks against the run's merged ``arrivals``; forgets the group.

    Returns the summary, this process's pid and its peak resident memory.
    """
    marks = _HELD.pop(token, None)
    if marks is None:
        raise RuntimeError(f"rank group {token} is not open in this process: run open_group first, on the same worker")
    return lateness_summary(lateness_of_marks(marks, arrivals)), os.getpid(), peak_rss()


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
    for stream in ("events", "memory", "counters"):
        directory = Path(run_path) / stream
        for entry in directory.glob("rank-*") if directory.is_dir() else ():
            try:
                found.add(int(entry.name.removeprefix("rank-")))
            except ValueError:
                continue
    return sorted(found)


def merge_lanes(parts: Sequence[GroupPart], ranks: Sequence[int], run_id: str) -> pd.DataFrame:
    """The groups' lane tables as one run's: idle re-based from each group's extent to the run's.

    A rank's idle is the run's extent minus its busy time; a group measured it against its own
    extent, so the difference of the two extents is added. Ranks of groups without events are idle
    for the whole run.
    """
    spans = [(p.first_ns, p.last_ns) for p in parts if p.first_ns >= 0]
    if not spans:
        return lane_table(ev.empty_events())
    first = min(s for s, _ in spans)
    last = max(e for _, e in spans)
    extent = last - first
    tables = []
    for part in parts:
        if part.first_ns < 0 or part.lanes.empty:
            continue
        lanes = part.lanes.copy()
        idle = (lanes["phase"] == ev.IDLE).to_numpy()
        lanes.loc[idle, "ns"] = lanes.loc[idle, "ns"] + float(extent - (part.last_ns - part.first_ns))
        tables.append(lanes)
    merged = pd.concat(tables, ignore_index=True)
    silent = sorted(set(int(r) for r in ranks) - set(int(r) for r in merged["rank"].unique()))
    if silent:
        idle_rows = pd.DataFrame(
            {
                "run_id": run_id,
                "rank": np.asarray(silent).astype(merged["rank"].dtype),
                "host": "",
                "phase": ev.IDLE,
                "ns": float(extent),
            }
        )
        merged = pd.concat([merged, idle_rows], ignore_index=True)
    return merged


def analyse_split(
    run_path: str | Path,
    *,
    group_ranks: int = DEFAULT_GROUP_RANKS,
    workers: int | Sequence[Any] | None = None,
    input_is_useful: bool = True,
    min_fraction: float = 0.02,
) -> SplitAnalysis:
    """Breakdown, POP metrics, findings, steps, memory and lateness of a stored run, in rank groups.

    ``workers``: None (this process), a count of local worker processes (``local_workers``), or a
    sequence of objects with ``submit(fn, *args)`` such as ``engine_workers(client)``; a group's
    three rounds run on the same worker. Ranks are those the metadata declares, else those stored.
    """
    from workbench.store import read_run_meta

    path = str(Path(run_path))
    meta = read_run_meta(path)
    run_id = str(meta.get("run_id", ""))
    ranks = declared_ranks(meta) or stored_ranks(path)
    groups = rank_groups(ranks, group_ranks) if ranks else []
    owned = isinstance(workers, int)
    pool: Sequence[Any] = local_workers(workers) if isinstance(workers, int) else (workers or [InProcess()])
    tokens = [f"{uuid.uuid4().hex}-{i}" for i in range(len(groups))]
    seconds: dict[str, float] = {}
    try:
        started = time.perf_counter()
        known = reference_steps(path, sorted(ranks)[:REFERENCE_PROBE_RANKS])
        opened = [(path, g, t, run_id, known) for g, t in zip(groups, tokens)]
        parts: list[GroupPart] = _each_group(pool, open_group, opened)
        seconds["open"] = time.perf_counter() - started
        if known is not None:
            arrivals = merge_step_arrivals([p.arrivals for p in parts if p.arrivals is not None])
        else:  # no low rank has steps: the groups' lowest ranks with steps give the reference, a round of its own
            candidates = [p.reference for p in parts if len(p.reference)]
            reference = min(candidates, key=lambda r: int(r["rank"].iloc[0])) if candidates else pd.DataFrame()
            started = time.perf_counter()
            arrivals = merge_step_arrivals(_each_group(pool, mark_group, [(t, reference) for t in tokens]))
            seconds["mark"] = time.perf_counter() - started
        started = time.perf_counter()
        closed = _each_group(pool, close_group, [(t, arrivals) for t in tokens])
        seconds["close"] = time.perf_counter() - started
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
    started = time.perf_counter()
    result = _merge(parts, closed, arrivals, ranks, meta, input_is_useful, min_fraction)
    seconds["merge"] = time.perf_counter() - started
    worker_peak: dict[int, int] = {}
    for pid, peak in [(p.pid, p.peak_rss) for p in parts] + [(pid, peak) for _, pid, peak in closed]:
        worker_peak[pid] = max(worker_peak.get(pid, 0), peak)
    return SplitAnalysis(
        **result,
        step_arrivals=arrivals,
        events=sum(p.events for p in parts),
        groups=len(groups),
        workers=len(pool),
        seconds={k: round(v, 4) for k, v in seconds.items()},
        worker_peak_rss=worker_peak,
    )


def _merge(
    parts: list[GroupPart],
    closed: list[tuple[pd.DataFrame, int, int]],
    arrivals: pd.DataFrame,
    ranks: list[int],
    meta: Mapping[str, Any],
    input_is_useful: bool,
    min_fraction: float,
) -> dict[str, Any]:
    """The merged tables, through the same functions a run analysed at once goes through."""
    run_id = str(meta.get("run_id", ""))
    hosts: dict[int, str] = {}
    for part in parts:
        hosts.update(part.hosts)
    lanes = merge_lanes(parts, ranks, run_id)
    per_run = breakdown_from_lanes(lanes, ("run_id", "rank"))
    no_events = ev.empty_events()
    pop_frame = pop_metrics(no_events, input_is_useful=input_is_useful, breakdown=per_run)
    facts = EventFacts.merge(p.facts for p in parts)
    found = findings(
        no_events,
        pop=pop_frame if len(pop_frame) else None,
        ranks=ranks or None,
        min_fraction=min_fraction,
        breakdown=per_run,
        hosts=hosts,
        facts=facts,
    )
    pop = pop_dict(pop_frame, run_id, ranks, input_is_useful)
    wall_s = wall_seconds(pop)
    extra: list[pd.DataFrame] = []
    backwards = sum(p.backwards for p in parts)
    if backwards:
        rank, name = next(p.backwards_first for p in parts if p.backwards_first is not None)
        extra.append(backwards_finding(backwards, rank, name, [r for p in parts for r in p.backwards_ranks], hosts))
    if meta:
        extra.append(oversubscription_finding_from_meta(meta, wall_s=wall_s))
    waited = [p.cpu_wait for p in parts if len(p.cpu_wait)]
    if waited:
        table = pd.concat(waited, ignore_index=True)
        extra.append(cpu_wait_finding(table, wall_s=wall_s, hosts=hosts, min_fraction=min_fraction))
    steps = pd.concat([p.steps for p in parts], ignore_index=True) if parts else steps_per_rank(no_events)
    memory_parts = [p.memory for p in parts if len(p.memory)]
    memory = pd.concat(memory_parts, ignore_index=True) if memory_parts else memory_summary(None)
    extra += missing_table_findings(sum(p.events for p in parts), steps, memory)
    extra.append(
        missing_data_finding(
            "grouped_analysis",
            "analysed in rank groups (--workers): the waits derived from step lengths (communication_wait), the"
            " Keras calls and Horovod's collectives in flight need every rank's events at once and are left out,"
            " so the efficiencies can differ from the whole run's; leave out --workers where the run fits one"
            " process",
        )
    )
    summaries = [summary for summary, _pid, _peak in closed if len(summary)]
    lateness = pd.concat(summaries, ignore_index=True) if summaries else lateness_summary(pd.DataFrame())
    return {
        "header": {**run_header(meta), "rank_hosts": hosts},
        "breakdown": with_hosts(per_run.drop(columns="run_id").reset_index(drop=True), hosts),
        "pop": pop,
        "findings": combine_findings(found, *extra),
        "steps": with_hosts(steps, hosts),
        "memory": with_hosts(memory, hosts),
        "lateness": with_hosts(lateness, hosts),
    }
