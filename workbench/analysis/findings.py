"""Plain-language findings, ranked by the wall time they cost.

Each finding is one sentence a user can act on, with ``seconds_lost``: the wall-clock seconds the
problem costs, computed from the breakdown (how is stated per kind below). Findings look at the same
time from different angles, so they can overlap (ranks waiting for rank 0's evaluation are also
communication waiting): do not add their seconds up.

A run that lacks what a metric needs (no events, no compute spans, one rank, no communication)
gets a finding that says what is missing and what to record, never an exception: such findings
have ``seconds_lost`` NaN (the cost cannot be measured) and sort last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import phase_breakdown
from workbench.analysis.pop import pop_metrics, useful_phase_set
from workbench.events import GOOD_EFFICIENCY, phase_order, rank_list, ranks_with_hosts

FINDING_COLUMNS: tuple[str, ...] = ("order", "kind", "text", "seconds_lost", "fraction_of_wall", "ranks")

#: Where to look for how to record what a finding says is missing.
RECORD_COMPUTE = "record the training steps as compute spans (Recorder.phase('compute'), the Keras callback)"
RECORD_COMMUNICATION = (
    "record it: Horovod's timeline (workbench profile, HOROVOD_TIMELINE) or"
    " Recorder.phase('communication') around the allreduce"
)


#: Bandwidth (GB/s) a collective's bytes are charged at when ``per_call_cost`` estimates what its fixed
#: cost is: a conservative figure for ranks of one node (Open MPI's shared memory reached 0.7–1 GB/s
#: for 1–64 MB on this project's 2-core machine, `workbench bench allreduce`).
REFERENCE_GBPS = 1.0
#: A rank whose compute exceeds the mean by at least this share of (slowest - mean) is named as one
#: the others wait for (``load_imbalance``): the slowest rank alone, or all ranks of a slow node.
SLOW_RANK_SHARE = 0.5
#: Steps shorter than this (ms of compute) are "short": a millisecond of fixed cost per call is then a
#: large share of them.
SHORT_STEP_MS = 5.0
MS_PER_S = 1_000
BYTES_PER_GB = 1_000 * ev.BYTES_PER_MB


@dataclass(frozen=True)
class EventFacts:
    """What findings read from the events themselves, beyond the breakdown: small, and mergeable.

    Each field is per rank or a sum, so facts of rank groups computed apart (``workbench.rank_groups``)
    merge into exactly the facts of the whole run (``merge``).
    """

    #: Seconds of ``idle`` spans named ``off_cpu`` (the rank's thread not running), summed over ranks.
    off_cpu_s: float = 0.0
    #: Whether any span is in ``events.OVERLAP_PHASES`` (Horovod's collectives in flight).
    overlap: bool = False
    #: Per (rank, step) with ``communication`` spans that carry bytes: ``rank, step, seconds, calls, nbytes``.
    step_collectives: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["rank", "step", "seconds", "calls", "nbytes"])
    )
    #: Compute seconds per (rank, step), for the ranks in ``step_collectives``.
    step_compute_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @staticmethod
    def merge(parts: Iterable[EventFacts]) -> EventFacts:
        """The facts of the union of disjoint rank groups."""
        parts = list(parts)
        if not parts:
            return EventFacts()
        collectives = [p.step_collectives for p in parts if len(p.step_collectives)]
        return EventFacts(
            off_cpu_s=float(sum(p.off_cpu_s for p in parts)),
            overlap=any(p.overlap for p in parts),
            step_collectives=(
                pd.concat(collectives, ignore_index=True) if collectives else EventFacts().step_collectives
            ),
            step_compute_s=np.concatenate([p.step_compute_s for p in parts]),
        )


def event_facts(events: pd.DataFrame) -> EventFacts:
    """``EventFacts`` of ``events``: one pass over the phase column, the rest on the few rows that matter."""
    if len(events) == 0:
        return EventFacts()
    # string comparisons over millions of object strings cost ~30 ns a row: each is made once over
    # every row (the phase), the rest only on the rows that the cheaper tests leave
    phase = events["phase"]
    idle_rows = np.flatnonzero((phase == ev.IDLE).to_numpy())
    off_cpu = idle_rows[(events["name"].take(idle_rows) == ev.OFF_CPU).to_numpy(dtype=bool)]
    start = events["start_ns"].to_numpy()
    end = events["end_ns"].to_numpy()
    off_cpu_s = float((end[off_cpu] - start[off_cpu]).sum()) / ev.NS_PER_S
    overlap = bool(phase.isin(ev.OVERLAP_PHASES).any())
    facts = EventFacts(off_cpu_s=off_cpu_s, overlap=overlap)
    if "bytes" not in events or "step" not in events:
        return facts
    step = events["step"].to_numpy()
    in_step = step >= 0
    candidates = np.flatnonzero((events["bytes"].to_numpy() > 0) & in_step)
    comm_rows = candidates[(phase.take(candidates) == ev.COMMUNICATION).to_numpy(dtype=bool)]
    if len(comm_rows) == 0:
        return facts
    rank = events["rank"].to_numpy()

    def rows_of(rows: np.ndarray) -> pd.DataFrame:  # only the columns read here, not whole rows of events
        seconds = (end[rows] - start[rows]) / ev.NS_PER_S
        return pd.DataFrame({"rank": rank[rows], "step": step[rows], "seconds": seconds})

    comm = rows_of(comm_rows).assign(bytes=events["bytes"].to_numpy()[comm_rows])
    per_step = comm.groupby(["rank", "step"]).agg(
        seconds=("seconds", "sum"), calls=("seconds", "size"), nbytes=("bytes", "sum")
    )
    with_collectives = np.isin(rank, np.unique(rank[comm_rows]))
    compute_rows = np.flatnonzero((phase == ev.COMPUTE).to_numpy() & in_step & with_collectives)
    compute_per_step = rows_of(compute_rows).groupby(["rank", "step"])["seconds"].sum()
    return EventFacts(
        off_cpu_s=off_cpu_s,
        overlap=overlap,
        step_collectives=per_step.reset_index(),
        step_compute_s=compute_per_step.to_numpy(dtype=np.float64),
    )


def _short_step_collectives(facts: EventFacts, n_ranks: int) -> tuple[str, float] | None:
    """(text, seconds lost) when short steps pay a collective's fixed cost per call; None otherwise.

    Reads the ranks' ``communication`` spans that carry their bytes and the ``compute`` spans of the
    same ranks' steps (``EventFacts``): the per-step medians of both, the calls per step and the
    effective bandwidth.
    """
    per_step = facts.step_collectives
    if n_ranks < 2 or len(per_step) == 0 or int(per_step["calls"].sum()) < 2 * n_ranks:
        return None
    if len(facts.step_compute_s) == 0:
        return None
    comm_ms = float(per_step["seconds"].median()) * MS_PER_S
    compute_ms = float(np.median(facts.step_compute_s)) * MS_PER_S
    step_bytes = float(per_step["nbytes"].median())
    calls = float(per_step["calls"].median())
    reference_bytes_per_s = REFERENCE_GBPS * BYTES_PER_GB
    need_ms = step_bytes / reference_bytes_per_s * MS_PER_S
    if compute_ms >= SHORT_STEP_MS or comm_ms < 0.5 * compute_ms or comm_ms < 2 * need_ms:
        return None
    excess = (per_step["seconds"] - step_bytes / reference_bytes_per_s).clip(lower=0)
    lost = float(excess.groupby(per_step["rank"]).sum().mean())
    gbps = step_bytes / (comm_ms / MS_PER_S) / BYTES_PER_GB
    text = (
        f"short steps pay the allreduce's fixed cost: {compute_ms:.3g} ms of compute per step against"
        f" {comm_ms:.3g} ms of communication ({calls:.3g} call(s) moving {step_bytes / ev.BYTES_PER_MB:.3g} MB"
        " per step,"
        f" {gbps:.2g} GB/s effective; the bytes alone need ~{need_ms:.2g} ms at {REFERENCE_GBPS:g} GB/s)."
        " Below a few ms per step a collective costs mostly its per-call overhead; with Horovod, each call"
        " waits for its background thread's next cycle (HOROVOD_CYCLE_TIME, 1 ms by default) and that thread"
        " takes CPU on the rank's own core. Do more work per allreduce (a larger batch per rank, or"
        " accumulate several batches), make one call per step inside the step's tf.function, and compare"
        " cycle times on your machine (workbench bench horovod-step)"
    )
    return text, lost


@dataclass(frozen=True)
class RunTimes:
    """What every kind of finding reads: one run's seconds per rank and phase, its wall time, POP, thresholds."""

    #: What findings read from the events beyond the breakdown (``event_facts``).
    facts: EventFacts
    #: Seconds per rank (index) and phase (columns), from ``phase_breakdown``.
    seconds: pd.DataFrame
    #: ``W``: the longest rank's total seconds.
    wall: float
    #: The run's row of ``pop_metrics``.
    pop: pd.Series
    min_fraction: float
    efficiency_target: float
    #: ``{rank: host}``: findings name a rank's host when the run has more than one (``named``).
    hosts: Mapping[int, str] = field(default_factory=dict)

    def named(self, ranks: Iterable[int]) -> str:
        """``"rank 2"``, or ``"rank 2 (node3)"`` / ``"node3 (ranks 4–5)"`` on several hosts (``ranks_with_hosts``)."""
        return ranks_with_hosts(ranks, self.hosts)

    @property
    def n_ranks(self) -> int:
        """``R``."""
        return len(self.seconds)

    def phase(self, name: str) -> pd.Series:
        """Seconds per rank in one phase (zeros when no rank recorded it)."""
        return self.seconds[name] if name in self.seconds else pd.Series(0.0, index=self.seconds.index)

    def matters(self, lost: float) -> bool:
        """A loss is reported when it is at least ``min_fraction`` of the wall time."""
        return lost / self.wall >= self.min_fraction

    @property
    def useful(self) -> str:
        return str(self.pop.get("useful_phases") or "+".join(useful_phase_set()))

    @property
    def efficiency(self) -> float:
        return float(self.pop["parallel_efficiency"])

    @property
    def elsewhere(self) -> str:
        return _time_outside(self.seconds, self.useful.split("+"), self.wall)

    def found(self, kind: str, text: str, lost: float, involved: Iterable[int] | str) -> dict[str, Any]:
        """A finding's row: what it costs, in seconds and as a share of the wall time."""
        ranks = involved if isinstance(involved, str) else rank_list(involved)
        return {
            "kind": kind,
            "text": text,
            "seconds_lost": float(lost),
            "fraction_of_wall": float(lost) / self.wall,
            "ranks": ranks,
        }


def _note(kind: str, text: str, involved: Iterable[int] | str = "all") -> dict[str, Any]:
    """A row saying what the run lacks: its cost cannot be measured (NaN)."""
    ranks = involved if isinstance(involved, str) else rank_list(involved)
    return {"kind": kind, "text": text, "seconds_lost": np.nan, "fraction_of_wall": np.nan, "ranks": ranks}


Finding = dict[str, Any]


def serial_evaluation(run: RunTimes) -> Finding | None:
    """Some ranks evaluate, others wait: ``max(eval) - sum(eval) / R``, the time even sharing would save.

    Serial evaluation is imbalance, not presence: ranks that evaluate for under half the busiest
    rank's time (often an empty span around a skipped evaluation) count as waiting for it.
    """
    evaluation = run.phase(ev.EVALUATION)
    evaluators = evaluation.index[(evaluation > 0) & (evaluation >= 0.5 * evaluation.max())]
    if not 0 < len(evaluators) < run.n_ranks:
        return None
    lost = float(evaluation.max() - evaluation.sum() / run.n_ranks)
    if not run.matters(lost):
        return None
    others = run.seconds.index.difference(evaluators)
    waiting = run.phase(ev.COMMUNICATION) + run.phase(ev.COMMUNICATION_WAIT) + run.phase(ev.IDLE)
    wait_share = float(waiting[others].mean()) / run.wall
    verb = "evaluates" if len(evaluators) == 1 else "evaluate"
    wait = "waits" if len(others) == 1 else "wait"
    return run.found(
        "serial_evaluation",
        f"{run.named(evaluators)} {verb} for {evaluation.max() / run.wall:.0%}"
        f" of wall time while {run.named(others)} {wait} (communication or idle:"
        f" {wait_share:.0%} of their time); sharing evaluation over all ranks would save about"
        f" {lost:.1f} s",
        lost,
        evaluators,
    )


def load_imbalance(run: RunTimes) -> Finding | None:
    """2 or more ranks: ``max(compute) - mean(compute)``, the time ranks wait for the slowest."""
    compute = run.phase(ev.COMPUTE)
    if run.n_ranks < 2 or compute.max() <= 0:
        return None
    lost = float(compute.max() - compute.mean())
    if not run.matters(lost):
        return None
    most, least = compute.idxmax(), compute.idxmin()
    shortfall = 1 - compute.min() / compute.max()
    # a few ranks closer to the slowest than to the mean (a slow node's ranks) are named together;
    # when they are most ranks, the few fast ones are the exception and the slowest is named alone
    slow = sorted(compute.index[compute >= compute.mean() + SLOW_RANK_SHARE * (compute.max() - compute.mean())])
    several = 1 < len(slow) <= run.n_ranks // 2
    waited_for = f"{len(slow)} slow ranks: {run.named(slow)}" if several else run.named([most])
    return run.found(
        "load_imbalance",
        f"load imbalance: {run.named([least])} computes {shortfall:.0%} less than {run.named([most])}"
        f" ({ev.format_seconds(compute.min())} vs {ev.format_seconds(compute.max())}); the others wait for"
        f" {waited_for}",
        lost,
        [least, *slow] if several else [least, most],
    )


def communication(run: RunTimes) -> Finding | None:
    """Mean over ranks of communication seconds (transfer + waiting)."""
    transfer, waiting = run.phase(ev.COMMUNICATION), run.phase(ev.COMMUNICATION_WAIT)
    lost = float((transfer + waiting).mean())
    if not run.matters(lost):
        return None
    detail = f" ({waiting.mean() / run.wall:.0%} waiting)" if waiting.max() > 0 else ""
    return run.found("communication", f"communication takes {lost / run.wall:.0%} of wall time{detail}", lost, "all")


def per_call_cost(run: RunTimes) -> Finding | None:
    """Steps of a few ms whose allreduce calls move little data: mean over ranks of the communication
    seconds beyond what the bytes need at ``REFERENCE_GBPS``; the text says why (a collective's fixed
    cost per call, Horovod's cycle) and what to change."""
    short = _short_step_collectives(run.facts, run.n_ranks)
    if short is None or not run.matters(short[1]):
        return None
    return run.found("per_call_cost", short[0], short[1], "all")


def input_pipeline(run: RunTimes) -> Finding | None:
    """Mean over ranks of input seconds (waiting for the next batch)."""
    input_s = run.phase(ev.INPUT)
    lost = float(input_s.mean())
    if not run.matters(lost):
        return None
    return run.found(
        "input_pipeline",
        f"input pipeline: ranks wait {lost / run.wall:.0%} of time for the next batch"
        f" (most: {run.named([input_s.idxmax()])}, {input_s.max() / run.wall:.0%})",
        lost,
        _busy_ranks(input_s),
    )


def host_work(run: RunTimes) -> Finding | None:
    """Mean over ranks of ``host`` seconds (outside any training step)."""
    host = run.phase(ev.HOST)
    lost = float(host.mean())
    if not run.matters(lost):
        return None
    return run.found(
        "host_work",
        f"host work: ranks spend {lost / run.wall:.0%} of wall time on the CPU outside their training steps and"
        f" model runs (most: {run.named([host.idxmax()])}, {host.max() / run.wall:.0%}): Python between the calls,"
        " Keras's own work per call, callbacks, logging; a rank that does more of it than the others makes them"
        " wait (see straggler)",
        lost,
        _busy_ranks(host),
    )


def idle(run: RunTimes) -> Finding | None:
    """Mean over ranks of idle seconds: off the CPU between recorded calls, or in no recorded span at all."""
    idle_s = run.phase(ev.IDLE)
    lost = float(idle_s.mean())
    if not run.matters(lost):
        return None
    off_cpu_s = run.facts.off_cpu_s / run.n_ranks
    where = (
        f"waiting: {off_cpu_s / run.wall:.0%} off the CPU between recorded calls (sleeping, reading files, waiting"
        " for a lock or a message outside Horovod: the rank's main thread was not running),"
        f" {max(lost - off_cpu_s, 0.0) / run.wall:.0%} in no recorded span"
        if off_cpu_s > 0
        else "in no recorded span"
    )
    return run.found(
        "idle",
        f"idle: ranks spend {lost / run.wall:.0%} of wall time {where}"
        f" (most: {run.named([idle_s.idxmax()])}, {idle_s.max() / run.wall:.0%})",
        lost,
        _busy_ranks(idle_s),
    )


def no_useful_time(run: RunTimes) -> Finding | None:
    """Missing data (NaN): no span in a useful phase, so no POP metrics."""
    if not np.isnan(run.efficiency):
        return None
    elsewhere = run.elsewhere
    return _note(
        "no_useful_time",
        f"no time in the useful phases ({run.useful}), so there are no POP metrics: {RECORD_COMPUTE}"
        + (f"; recorded instead: {elsewhere}" if elsewhere else ""),
    )


def outside_useful_phases(run: RunTimes) -> Finding | None:
    """One rank whose share of time in useful phases (POP PE) is below ``efficiency_target``:
    ``W * (1 - PE)``, named for what it is: on one rank nothing is lost to parallelism, the time
    went to evaluation, idle and the like. Reported whatever ``min_fraction``."""
    if run.n_ranks != 1 or not run.efficiency < run.efficiency_target:
        return None
    return run.found(
        "outside_useful_phases",
        f"{run.named(run.seconds.index[:1])} spends {1 - run.efficiency:.0%} of wall time outside the useful phases"
        f" ({run.useful}): {run.elsewhere}",
        float(run.pop["runtime_s"]) * (1.0 - run.efficiency),
        run.seconds.index,
    )


def low_parallel_efficiency(run: RunTimes) -> Finding | None:
    """POP parallel efficiency below ``efficiency_target`` on 2 or more ranks: ``W * (1 - PE)``; the
    text names the useful phases and where the rest of the time went. Reported whatever ``min_fraction``."""
    if run.n_ranks < 2 or not run.efficiency < run.efficiency_target:
        return None
    metrics = run.pop
    return run.found(
        "low_parallel_efficiency",
        f"parallel efficiency is {run.efficiency:.2f} (below {run.efficiency_target:.2f}): load balance"
        f" {metrics['load_balance']:.2f} x communication efficiency"
        f" {metrics['communication_efficiency']:.2f}; useful phases: {run.useful}; the rest of wall"
        f" time, mean over ranks: {run.elsewhere}",
        float(metrics["runtime_s"]) * (1.0 - run.efficiency),
        "all",
    )


def single_rank(run: RunTimes) -> Finding | None:
    """Missing data (NaN): one rank, so no parallel losses to measure."""
    if run.n_ranks != 1:
        return None
    return _note(
        "single_rank",
        f"1 rank: no parallel losses to measure (load balance is 1 by definition, and POP's"
        f" communication efficiency is only the share of wall time in the useful phases, {run.useful});"
        " record a run on 2 or more ranks to measure parallel efficiency",
        run.seconds.index,
    )


def no_communication(run: RunTimes) -> Finding | None:
    """Missing data (NaN): several ranks but no communication span (nor collectives in flight)."""
    communicated = float((run.phase(ev.COMMUNICATION) + run.phase(ev.COMMUNICATION_WAIT)).max()) > 0
    if run.n_ranks < 2 or communicated or run.facts.overlap:
        return None
    return _note(
        "no_communication",
        f"no communication recorded on {run.n_ranks} ranks: waiting for other ranks shows as idle or"
        f" inside other phases; {RECORD_COMMUNICATION}",
    )


#: Every kind of finding ``findings`` looks for, each a function of the run's times (formula in its docstring).
FINDING_KINDS: tuple[Callable[[RunTimes], Finding | None], ...] = (
    serial_evaluation,
    load_imbalance,
    communication,
    per_call_cost,
    input_pipeline,
    host_work,
    idle,
    no_useful_time,
    outside_useful_phases,
    low_parallel_efficiency,
    single_rank,
    no_communication,
)


def findings(
    events: pd.DataFrame,
    *,
    pop: pd.DataFrame | None = None,
    ranks: Iterable[int] | None = None,
    min_fraction: float = 0.02,
    efficiency_target: float = GOOD_EFFICIENCY,
    breakdown: pd.DataFrame | None = None,
    hosts: Mapping[int, str] | None = None,
    facts: EventFacts | None = None,
) -> pd.DataFrame:
    """Findings for one run, largest ``seconds_lost`` first (columns ``FINDING_COLUMNS``).

    Each kind is a function in ``FINDING_KINDS`` whose docstring gives its ``seconds_lost`` (``W`` =
    wall time, ``R`` = ranks, per-rank seconds from ``phase_breakdown``). Missing data (``seconds_lost``
    NaN): ``no_events``, ``zero_wall_time`` (then nothing else is looked at), ``no_useful_time``,
    ``single_rank``, ``no_communication``.

    A finding is reported when its ``seconds_lost / W`` is at least ``min_fraction`` (low
    parallel efficiency: whenever PE is below the target). ``pop`` is ``pop_metrics`` of the same
    run (computed when not given), ``breakdown`` its ``phase_breakdown(events, by=("run_id",
    "rank"), ranks=ranks)`` (likewise). ``hosts`` (``{rank: host}``, default: the events' ``host``
    column): with more than one host, texts name each rank's host. ``facts`` (``event_facts(events)``,
    computed when not given) is all that is read from ``events`` beyond ``breakdown`` and ``pop``: with
    all three given, ``events`` may be empty (``workbench.rank_groups`` merges them from rank groups). No
    findings: an empty frame with the same columns.
    """
    if breakdown is None:
        breakdown = phase_breakdown(events, by=("run_id", "rank"), ranks=ranks)
    if breakdown.empty:
        return missing_data_finding(
            "no_events",
            "no events recorded: record phase spans (Recorder.phase, the Keras callback) or the"
            " Horovod timeline (workbench profile) to get a breakdown, POP metrics and findings",
        )
    runs = breakdown["run_id"].unique()
    if len(runs) > 1:
        raise ValueError(f"events hold {len(runs)} runs: select one (events[events.run_id == ...])")
    seconds = breakdown.pivot_table(index="rank", columns="phase", values="seconds", aggfunc="sum", fill_value=0.0)
    wall = float(seconds.sum(axis=1).max())
    if wall <= 0:
        return missing_data_finding(
            "zero_wall_time",
            "the run has zero wall time: every span is zero-length; record spans with their real start and end times",
        )
    if pop is None:
        pop = pop_metrics(events, ranks=ranks, breakdown=breakdown)
    if len(pop) != 1:
        raise ValueError(f"pop has {len(pop)} rows: pass pop_metrics of this one run")
    hosts = ev.rank_hosts(events) if hosts is None else hosts
    facts = event_facts(events) if facts is None else facts
    run = RunTimes(facts, seconds, wall, pop.iloc[0], min_fraction, efficiency_target, hosts)
    return _ranked([row for kind in FINDING_KINDS if (row := kind(run)) is not None])


def missing_data_finding(kind: str, text: str, ranks: str = "all") -> pd.DataFrame:
    """One finding that says what a run lacks and what to record; its cost is unknown (NaN)."""
    return _ranked([{"kind": kind, "text": text, "seconds_lost": np.nan, "fraction_of_wall": np.nan, "ranks": ranks}])


def combine_findings(*frames: pd.DataFrame) -> pd.DataFrame:
    """Findings of one run from several sources, ranked together (``order`` renumbered)."""
    rows = [
        row
        for frame in frames
        if frame is not None and len(frame)
        for row in frame.drop(columns=["order"], errors="ignore").to_dict("records")
    ]
    return _ranked(rows)


def oversubscription_finding(
    ranks: int, threads_per_rank: int, cores: int, *, wall_s: float | None = None
) -> pd.DataFrame:
    """A finding when ``ranks * threads_per_rank`` exceeds the cores: threads queue for a core.

    With ``demand = ranks * threads_per_rank > cores`` only ``cores / demand`` of the threads can
    run at once, so a compute-bound run loses up to ``wall_s * (1 - cores / demand)`` seconds
    (``seconds_lost``; 0.0 when ``wall_s`` is not given, ``fraction_of_wall`` is then still
    ``1 - cores / demand``). Empty frame when there is no oversubscription.
    """
    for name, value in (("ranks", ranks), ("threads_per_rank", threads_per_rank), ("cores", cores)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name}={value} must be a whole number >= 1")
    if wall_s is not None and wall_s < 0:
        raise ValueError(f"wall_s={wall_s} must be >= 0")
    demand = int(ranks) * int(threads_per_rank)
    if demand <= cores:
        return _ranked([])
    share = 1.0 - cores / demand
    lost = 0.0 if wall_s is None else float(wall_s) * share
    advice = max(1, int(cores) // int(ranks))
    text = (
        f"oversubscription: {ranks} ranks x {threads_per_rank} threads = {demand} threads on {cores} cores"
        f" ({demand / cores:.1f}x); set {advice} thread(s) per rank (TF intra-op threads, OMP_NUM_THREADS)"
    )
    if wall_s is None:
        text += "; pass wall_s to estimate the seconds lost"
    row = {
        "kind": "oversubscription",
        "text": text,
        "seconds_lost": lost,
        "fraction_of_wall": share,
        "ranks": "all",
    }
    return _ranked([row])


def oversubscription_finding_from_meta(meta: Mapping[str, Any], *, wall_s: float | None = None) -> pd.DataFrame:
    """``oversubscription_finding`` with the settings the run recorded, not this machine's.

    Reads ``meta["config"]["cluster"]`` (``ClusterConfig.as_dict()``: ``ranks``, ``threads``,
    ``cores``), falling back to ``meta["ranks"]`` and ``meta["cores"]``. Ranks spread over several
    machines (a hostfile, Slurm) are not judged against one machine's cores: empty frame. Settings
    that were not recorded give a ``settings_not_recorded`` finding that says which.
    """
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    cluster = config.get("cluster") if isinstance(config.get("cluster"), Mapping) else {}
    if cluster.get("hostfile") or cluster.get("launcher") == "slurm":
        return _ranked([])
    settings = {
        "ranks": cluster.get("ranks") or cluster.get("n") or meta.get("ranks"),
        "threads per rank": cluster.get("threads") or cluster.get("threads_per_rank"),
        "cores": cluster.get("cores") or meta.get("cores"),
    }
    missing = [name for name, value in settings.items() if not _whole_number(value)]
    if missing:
        return missing_data_finding(
            "settings_not_recorded",
            f"oversubscription not checked: the run does not record its {' and '.join(missing)}; runs started by"
            " `workbench profile` or a notebook's `Cluster` record them, and a run made with `create_run` does"
            " when given them: `create_run(..., config={'cluster': {'ranks': 8, 'threads': 4, 'cores': 32}})`",
        )
    return oversubscription_finding(
        int(settings["ranks"]), int(settings["threads per rank"]), int(settings["cores"]), wall_s=wall_s
    )


def _whole_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 1 and int(value) == value


def _time_outside(seconds: pd.DataFrame, useful: list[str], wall: float) -> str:
    """Mean seconds per rank in each phase that is not useful, as shares of wall time, largest first."""
    means = seconds.mean(axis=0)
    others = [p for p in phase_order(seconds.columns) if p not in useful and means[p] > 0]
    others.sort(key=lambda p: -means[p])
    return ", ".join(f"{p} {means[p] / wall:.0%}" for p in others)


def _busy_ranks(seconds: pd.Series) -> str:
    return rank_list(seconds.index[seconds > 0])


def _ranked(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=[c for c in FINDING_COLUMNS if c != "order"])
    frame = frame.astype({"seconds_lost": "float64", "fraction_of_wall": "float64"})
    frame = frame.sort_values(
        ["seconds_lost", "kind"], ascending=[False, True], kind="stable", na_position="last"
    ).reset_index(drop=True)
    frame.insert(0, "order", np.arange(1, len(frame) + 1))
    return frame


#: A node's link slower than this share of the median node's is named (``slow_link_finding``).
SLOW_LINK_SHARE = 0.5


def communication_seconds(events: pd.DataFrame) -> pd.Series:
    """Seconds in ``communication`` spans per rank (rank by rank: rank groups' series concatenate)."""
    communication = events[events["phase"] == ev.COMMUNICATION] if len(events) else events
    if not len(communication):
        return pd.Series(dtype="float64")
    return ((communication["end_ns"] - communication["start_ns"]) / ev.NS_PER_S).groupby(communication["rank"]).sum()


def slow_link_finding(
    links: Mapping[Any, Mapping[str, Any]] | None,
    events: pd.DataFrame | None = None,
    *,
    wall_s: float | None = None,
    per_rank: pd.Series | None = None,
) -> pd.DataFrame:
    """A node whose link is much slower than the others': every collective with its ranks moves at its speed.

    ``links``: ``{rank: {"host", "bytes_per_s"}}`` as the cluster measured them at start (run.json
    ``links``). A host's speed is its fastest rank's. ``seconds_lost``: the ranks' mean time in
    ``communication`` spans times ``1 - slow / median``, what the same collectives would have
    saved at the median node's speed when they are bound by that link. ``per_rank``: the ranks'
    ``communication_seconds``, when read already (from rank groups); else read from ``events``.
    """
    if not links:
        return _ranked([])
    by_host: dict[str, float] = {}
    ranks_of: dict[str, list[int]] = {}
    for rank, link in links.items():
        host, speed = str(link.get("host", "")), float(link.get("bytes_per_s", float("nan")))
        if not host or not np.isfinite(speed) or speed <= 0:
            continue
        by_host[host] = max(speed, by_host.get(host, 0.0))
        ranks_of.setdefault(host, []).append(int(rank))
    if len(by_host) < 2:
        return _ranked([])
    median = float(np.median(list(by_host.values())))
    slow = {host: speed for host, speed in by_host.items() if speed < SLOW_LINK_SHARE * median}
    if not slow or len(slow) == len(by_host):
        return _ranked([])
    if per_rank is None:
        per_rank = communication_seconds(events) if events is not None else pd.Series(dtype="float64")
    communication_s = float(per_rank.mean()) if len(per_rank) else float("nan")
    rank_hosts = {int(rank): str(link.get("host", "")) for rank, link in links.items()}
    rows = []
    for host, speed in sorted(slow.items(), key=lambda item: item[1]):
        lost = communication_s * (1 - speed / median) if np.isfinite(communication_s) else float("nan")
        spent = (
            f"; the ranks spent {communication_s:.3g} s each in communication" if np.isfinite(communication_s) else ""
        )
        rows.append(
            {
                "kind": "slow_link",
                "text": f"communication waits on {host}'s link: it carries {speed / ev.BYTES_PER_MB:.3g} MB/s,"
                f" the median node's {median / ev.BYTES_PER_MB:.3g} MB/s (measured when the cluster started);"
                " every collective with"
                f" {ranks_with_hosts(ranks_of[host], rank_hosts)} moves at that speed{spent}, about"
                f" {lost:.3g} s of it because of this link",
                "seconds_lost": lost,
                "fraction_of_wall": lost / wall_s if wall_s and np.isfinite(lost) else np.nan,
                "ranks": rank_list(ranks_of[host]),
            }
        )
    return _ranked(rows)
