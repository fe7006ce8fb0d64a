"""Every piece of a run's analysis, registered once: one analysis at any size.

A piece is a table or a finding (or both). Its contract (``Piece``) says what it reads of a run (events,
memory samples, counters, GPU activity, the ranks' facts, the run's metadata), what it reduces one group of
ranks to (``reduce``: a table per rank, or per rank and step, never per event), and how the groups' partial
results merge into the run's (``merge``), which writes its tables and findings into the ``RunState``.

``analysis.analyse_run`` runs every registered piece on the whole run as one group; ``workbench.rank_groups``
runs the same pieces on groups of ranks, where the data is (worker processes, the cluster's engines), and
merges them. A new finding is one function and one ``Piece`` in ``PIECES``: it is then computed at any size,
and the tests that compare the whole run with rank groups of 1, 2 and an odd size check it.

Two pieces read what earlier pieces merged: the breakdown (``late``) needs every rank's waits for the last rank
in each step (``step_waits``, which sets the ranks' steps side by side), so it is reduced in a second round,
given the waits of the group's ranks; pieces with no ``reduce`` only read the merged state (the stragglers from
the waits, the GPU findings from the GPU tables and the wall time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import breakdown_from_lanes, lane_table
from workbench.analysis.completion import completion_findings_of, life_table, write_stall_finding, write_stalls_of
from workbench.analysis.cpu_wait import cpu_wait_finding, cpu_wait_table
from workbench.analysis.devices import (
    TEMPORAL_COLUMNS,
    device_findings,
    device_step_table,
    device_summary,
    gpu_time_table,
    profile_window,
    with_window,
)
from workbench.analysis.findings import (
    EventFacts,
    combine_findings,
    communication_seconds,
    event_facts,
    findings,
    missing_data_finding,
    oversubscription_finding_from_meta,
    slow_link_finding,
)
from workbench.analysis.input import python_input_busy, python_input_finding_of, timed_input_ranks
from workbench.analysis.keras_calls import (
    KERAS_CALL_COLUMNS,
    KERAS_PREFIX,
    call_memory_findings,
    keras_call_findings,
    keras_call_table,
)
from workbench.analysis.launches import idle_by_cause, kernel_launches, launch_findings, launch_summary
from workbench.analysis.memory import memory_summary
from workbench.analysis.network import network_findings, reduce_network
from workbench.analysis.pop import pop_metrics
from workbench.analysis.retracing import retraced_steps, retracing_finding_of
from workbench.analysis.scaling import steps_per_rank
from workbench.analysis.straggler import (
    LATENESS_COLUMNS,
    OVERLAP_COLUMNS,
    STEP_WAIT_COLUMNS,
    StepEvidence,
    communication_overlap,
    concat_frames,
    lateness_table,
    step_evidence,
    straggler_rows,
    wait_spans,
    waits_from_evidence,
)

#: What a piece may read of a run (``Piece.reads``): the frames of ``Run.load`` and the run's metadata.
FRAMES: tuple[str, ...] = ("events", "memory", "counters", "devices", "rank_meta", "meta")


@dataclass(frozen=True)
class GroupFrames:
    """One group of a run's ranks, loaded (the whole run is one group): what a piece's ``reduce`` reads."""

    #: The group's events, spans that end before they start left out (``backwards`` counts them).
    events: pd.DataFrame
    memory: pd.DataFrame | None = None
    counters: pd.DataFrame | None = None
    devices: pd.DataFrame | None = None
    rank_meta: pd.DataFrame | None = None
    #: The group's ranks the run declares (silent ones count as idle); None where the run declares none.
    ranks: list[int] | None = None
    #: The run's reference steps for Horovod's readiness marks (``straggler.step_evidence``): ``"own"`` for the
    #: whole run, the run's lowest rank's steps for a group, ``"unknown"`` until they are known.
    reference: pd.DataFrame | str = "own"
    #: Spans that end before they start, left out: how many, their ranks, and the first one's (rank, name).
    backwards: int = 0
    backwards_ranks: tuple[int, ...] = ()
    backwards_first: tuple[int, str] | None = None


def group_frames(
    events: pd.DataFrame,
    run_id: str,
    *,
    memory: pd.DataFrame | None = None,
    counters: pd.DataFrame | None = None,
    devices: pd.DataFrame | None = None,
    rank_meta: pd.DataFrame | None = None,
    ranks: list[int] | None = None,
    reference: pd.DataFrame | str = "own",
) -> GroupFrames:
    """The frames as the pieces read them: every event labelled with the run (``run_id``; one label, relabelled
    in place where the column is categorical: no copy of millions of rows), backwards spans left out and counted."""
    count = len(events)
    backwards_mask = (events["end_ns"] < events["start_ns"]).to_numpy() if count else np.zeros(0, bool)
    backwards = int(backwards_mask.sum())
    backwards_ranks: tuple[int, ...] = ()
    backwards_first = None
    if backwards:
        first = events[backwards_mask].iloc[0]
        name = first["name"] if "name" in first and pd.notna(first["name"]) else first["phase"]
        backwards_first = (int(first["rank"]), str(name))
        backwards_ranks = tuple(sorted(int(r) for r in events.loc[backwards_mask, "rank"].unique()))
        events = events[~backwards_mask].copy(deep=False)  # its own frame: the relabel below is no write to a slice
    if len(events):
        stored = events.get("run_id")
        if stored is not None and isinstance(stored.dtype, pd.CategoricalDtype) and len(stored.cat.categories) == 1:
            events = events.copy(deep=False)
            events["run_id"] = stored.cat.rename_categories([run_id])
        else:
            events = events.assign(run_id=run_id)
    return GroupFrames(
        events=events,
        memory=memory,
        counters=counters,
        devices=devices,
        rank_meta=rank_meta if isinstance(rank_meta, pd.DataFrame) else None,
        ranks=ranks,
        reference=reference,
        backwards=backwards,
        backwards_ranks=backwards_ranks,
        backwards_first=backwards_first,
    )


@dataclass
class RunState:
    """The run as the pieces merge it: its settings, then each piece's tables, findings and facts, in order."""

    meta: Mapping[str, Any]
    #: The ranks the run declares (``analysis.declared_ranks``), None where it declares none.
    ranks: list[int] | None
    min_fraction: float = 0.02
    input_is_useful: bool = True
    #: Whether waits for the last rank become ``communication_wait`` (``analyse_run(derive_waits=...)``); pieces
    #: turn it off where nothing says the ranks wait for each other (no collective, GPU activity).
    derive_waits: bool = True
    hosts: dict[int, str] = field(default_factory=dict)
    events: int = 0
    #: The run's tables by name (``RunAnalysis`` fields).
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[pd.DataFrame] = field(default_factory=list)
    pop: pd.DataFrame = field(default_factory=pd.DataFrame)
    wall_s: float | None = None
    #: What a piece keeps for a later one (GPU idle causes, launches; whether ranks exchange data).
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id", ""))


@dataclass(frozen=True)
class Piece:
    """One table or finding of the analysis and how it is computed at any size."""

    name: str
    #: What it reads of the run (``FRAMES``); merge-only pieces read the merged state (``after``).
    reads: tuple[str, ...]
    #: The tables (``RunAnalysis`` fields) and finding kinds it can produce.
    yields: tuple[str, ...]
    #: How the groups' partial results (in rank order) become the run's: writes into the ``RunState``.
    merge: Callable[[list[Any], RunState], None]
    #: What one group of ranks is reduced to, where its data is; None: the piece reads only merged state.
    reduce: Callable[..., Any] | None = None
    #: Reduced in a second round, given ``needs(state, group ranks)`` (the breakdown: the group's waits).
    late: bool = False
    needs: Callable[[RunState, Sequence[int]], Any] | None = None
    #: The pieces whose merged results it reads.
    after: tuple[str, ...] = ()


def _empty(columns: Sequence[str]) -> Callable[[], pd.DataFrame]:
    return lambda: pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


# ------------------------------------------------------------------------------------------------
# The pieces, in the order they merge
# ------------------------------------------------------------------------------------------------


def _reduce_hosts(frames: GroupFrames) -> dict[int, str]:
    return ev.rank_hosts(frames.events, frames.memory, frames.rank_meta)


def _merge_hosts(parts: list[dict[int, str]], state: RunState) -> None:
    for part in parts:
        state.hosts.update(part)


def _reduce_record(frames: GroupFrames) -> tuple[int, int, tuple[int, ...], tuple[int, str] | None, tuple, dict]:
    events = frames.events
    recorded = tuple(sorted(int(r) for r in pd.unique(events["rank"]))) if len(events) else ()
    return (
        len(events) + frames.backwards,
        frames.backwards,
        frames.backwards_ranks,
        frames.backwards_first,
        recorded,
        steps_going_back(events),
    )


def steps_going_back(events: pd.DataFrame) -> dict[int, tuple[int, int, int, int]]:
    """Ranks whose (epoch, step) goes back: ``{rank: (times, step before, step after, when ns)}``.

    Read in the order each rank's spans were recorded (a rank's rows are together, in the order written): a
    span whose (epoch, step) is more than one step below the span before it went back (a step counter reset,
    a second ``fit`` without an epoch, a timeline's steps out of order); one step back is a span of the last
    step ending after the next began. Collectives in flight are left out (they span steps). The analysis
    groups spans by (rank, epoch, step), so such steps' spans are counted as one."""
    if not len(events) or "step" not in events:
        return {}
    keep = events["step"].to_numpy() >= 0
    if "phase" in events:
        keep &= (events["phase"] != ev.IN_FLIGHT).to_numpy()
    if not keep.any():
        return {}
    ranks = events["rank"].to_numpy()[keep].astype("int64")
    steps = events["step"].to_numpy()[keep].astype("int64")
    epochs = events["epoch"].to_numpy()[keep].astype("int64") if "epoch" in events else np.zeros_like(steps)
    order = np.maximum(epochs, -1) * (1 << 40) + steps
    back = np.flatnonzero((ranks[1:] == ranks[:-1]) & (order[1:] < order[:-1] - 1)) + 1
    if not len(back):
        return {}
    starts = events["start_ns"].to_numpy()[keep]
    going, first, times = np.unique(ranks[back], return_index=True, return_counts=True)
    return {
        int(rank): (int(count), int(steps[back[at] - 1]), int(steps[back[at]]), int(starts[back[at]]))
        for rank, at, count in zip(going, first, times)
    }


def _merge_record(parts: list[tuple], state: RunState) -> None:
    _merge_world_and_steps(parts, state)
    state.events = sum(p[0] for p in parts)
    state.facts["kept_events"] = sum(p[0] - p[1] for p in parts)
    backwards = sum(p[1] for p in parts)
    if backwards:
        rank, name = next(p[3] for p in parts if p[3] is not None)
        ranks = [r for p in parts for r in p[2]]
        state.findings.append(
            missing_data_finding(
                "backwards_spans",
                f"{backwards} span(s) end before they start (first: {ev.ranks_with_hosts([rank], state.hosts)},"
                f" {name!r}) and were left out: check the ranks' clock alignment",
                ev.rank_list(ranks),
            )
        )


def _merge_world_and_steps(parts: list[tuple], state: RunState) -> None:
    """Ranks past the run's declared world size, and ranks whose steps go back, said (their events are kept)."""
    recorded = sorted({rank for part in parts for rank in part[4]})
    if state.ranks is not None:
        beyond = [rank for rank in recorded if rank not in set(state.ranks)]
        if beyond:
            state.findings.append(
                missing_data_finding(
                    "ranks_beyond_world",
                    f"{ev.ranks_with_hosts(beyond, state.hosts)} recorded events, but the run declares"
                    f" {len(state.ranks)} rank{'s' if len(state.ranks) != 1 else ''}"
                    f" ({ev.rank_list(state.ranks)}); they are analysed as recorded, and the ranks declared that"
                    " recorded nothing count as idle: check the launcher's world size and the rank each process"
                    " took (OMPI_COMM_WORLD_RANK, PMI_RANK, HOROVOD_RANK)",
                    ev.rank_list(beyond),
                )
            )
    going_back = {rank: found for part in parts for rank, found in part[5].items()}
    if going_back:
        rank, (times, before, after, _when) = next(iter(sorted(going_back.items())))
        others = len(going_back) - 1
        more = f" (and {others} more rank{'s' if others != 1 else ''})" if others else ""
        state.findings.append(
            missing_data_finding(
                "steps_backwards",
                f"the step numbers of {ev.ranks_with_hosts([rank], state.hosts)}{more} go back {times} time"
                f"{'s' if times != 1 else ''} (first to step {after} after step {before}): spans are grouped by"
                " rank, epoch and step, so a step's spans from before and after count as one step; record the"
                " epoch with the step (Recorder.epoch, the Keras callback does) or keep numbering the steps",
                ev.rank_list(going_back),
            )
        )


def _reduce_devices(frames: GroupFrames) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Any] | None:
    devices = frames.devices
    if devices is None or not len(devices):
        return None
    steps = device_step_table(devices, rebase=True)
    return steps, idle_by_cause(devices), launch_summary(kernel_launches(devices)), profile_window(devices)


def _merge_devices(parts: list[Any], state: RunState) -> None:
    present = [p for p in parts if p is not None]
    if not present:
        state.tables["devices"] = pd.DataFrame()
        return
    windows = [p[3] for p in present if p[3] is not None]
    window_s = (max(w[1] for w in windows) - min(w[0] for w in windows)) / ev.NS_PER_S if windows else 0.0
    steps = with_window(pd.concat([p[0] for p in present], ignore_index=True), window_s)
    state.tables["devices"] = device_summary(steps)
    state.facts["gpu_steps"] = steps
    state.facts["idle_causes"] = pd.concat([p[1] for p in present], ignore_index=True)
    state.facts["launches"] = pd.concat([p[2] for p in present], ignore_index=True)
    # a GPU's spans already hold its idle time between kernels: nothing is derived from step lengths
    state.derive_waits = False


def _reduce_gpu_time(frames: GroupFrames) -> pd.DataFrame | None:
    return None if frames.devices is None or not len(frames.devices) else gpu_time_table(frames.devices)


def _merge_gpu_time(parts: list[pd.DataFrame | None], state: RunState) -> None:
    state.tables["gpu_time"] = concat_frames(parts, _empty(TEMPORAL_COLUMNS))


@dataclass(frozen=True)
class _Exchange:
    """Whether a group's ranks show any exchange of data (for the ``no_collectives`` note)."""

    ranks: frozenset[int]
    exchanges: bool
    trains: bool


def exchange_of(events: pd.DataFrame) -> _Exchange:
    """The ranks that recorded anything, and whether any exchanged data or trained (``independent_ranks_note``)."""
    if not len(events):
        return _Exchange(ranks=frozenset(), exchanges=False, trains=False)
    phases = set(events["phase"].astype(str).unique())
    return _Exchange(
        ranks=frozenset(int(r) for r in events["rank"].unique()),
        exchanges=bool(phases & {ev.COMMUNICATION, ev.IN_FLIGHT, ev.COMMUNICATION_WAIT}),
        trains=bool(((events["phase"] == ev.COMPUTE) & (events["name"] == "train_step")).any()),
    )


def _reduce_step_waits(frames: GroupFrames) -> tuple[StepEvidence, _Exchange]:
    return step_evidence(frames.events, frames.reference), exchange_of(frames.events)


def _merge_step_waits(parts: list[tuple[StepEvidence, _Exchange]], state: RunState) -> None:
    evidence = StepEvidence.merge([p[0] for p in parts])
    if evidence.marks is None:
        raise RuntimeError("readiness marks were not made against the run's reference steps: mark the groups first")
    state.tables["waits"] = waits_from_evidence(evidence)
    state.tables["lateness"] = lateness_table(evidence.marks)
    note = independent_ranks_note([p[1] for p in parts], state.ranks)
    state.facts["independent"] = note is not None
    if note is not None:
        # no collective anywhere in the record: nothing says a rank waits for another, so none is derived
        state.derive_waits = False
        state.findings.append(note)


def independent_ranks_note(exchanges: Sequence[_Exchange], ranks: list[int] | None) -> pd.DataFrame | None:
    """A note for a run of several ranks with training steps and no collective recorded at all.

    No communication span, no Horovod timeline, no wait: either the ranks exchange data outside what was
    recorded (mpi4py, torch.distributed), or they never exchange it and each trained on its own, often a
    script run under mpiexec without Horovod's optimizer. Either way, waits cannot be derived from step
    lengths (they assume the ranks meet every step).
    """
    recorded = set().union(*(x.ranks for x in exchanges))
    everyone = set(ranks or ()) | recorded
    if not recorded or len(everyone) < 2 or any(x.exchanges for x in exchanges):
        return None
    if not any(x.trains for x in exchanges):
        return None
    return missing_data_finding(
        "no_collectives",
        "no collective was recorded (no communication spans, no Horovod timeline), so no rank is taken to wait"
        " for another: if the ranks never exchange gradients, each trained on its own (wrap the optimizer with"
        " hvd.DistributedOptimizer or the tape with hvd.DistributedGradientTape, and call hvd.init()); if"
        " they exchange them outside Horovod, record it (Recorder.phase('communication', ...))",
        ev.rank_list(everyone),
    )


def _group_waits(state: RunState, ranks: Sequence[int]) -> pd.DataFrame:
    """The derived waits of a group's ranks (none where waits are not derived)."""
    waits = state.tables.get("waits")
    if not state.derive_waits or waits is None or waits.empty:
        return waits.iloc[:0] if waits is not None else pd.DataFrame(columns=list(STEP_WAIT_COLUMNS))
    return waits[waits["rank"].isin(list(ranks))] if ranks is not None else waits


@dataclass(frozen=True)
class Lanes:
    """A group's ``lane_table`` (idle against the group's own extent) and that extent (-1: no own-time span)."""

    table: pd.DataFrame
    first_ns: int
    last_ns: int


def group_lanes(frames: GroupFrames, waits: pd.DataFrame) -> Lanes:
    """The group's lanes with its derived waits as ``communication_wait`` spans inside their steps."""
    events = frames.events
    run_id = str(events["run_id"].iloc[0]) if len(events) and "run_id" in events else ""
    derived = wait_spans(waits, run_id=run_id) if len(waits) else None
    if derived is not None and len(derived):
        events = pd.concat([events, derived], ignore_index=True)
    own = ~events["phase"].isin(ev.OVERLAP_PHASES).to_numpy() if len(events) else np.zeros(0, bool)
    first_ns = int(events["start_ns"].to_numpy()[own].min()) if own.any() else -1
    last_ns = int(events["end_ns"].to_numpy()[own].max()) if own.any() else -1
    return Lanes(lane_table(events, ranks=frames.ranks), first_ns, last_ns)


def merge_lanes(parts: Sequence[Lanes], ranks: Sequence[int] | None, run_id: str) -> pd.DataFrame:
    """The groups' lane tables as one run's: idle re-based from each group's extent to the run's.

    A rank's idle is the run's extent minus its busy time; a group measured it against its own
    extent, so the difference of the two extents is added. Declared ranks of groups without events are
    idle for the whole run.
    """
    spans = [(p.first_ns, p.last_ns) for p in parts if p.first_ns >= 0]
    if not spans:
        return lane_table(ev.empty_events())
    first = min(s for s, _ in spans)
    last = max(e for _, e in spans)
    extent = last - first
    tables = []
    for part in parts:
        if part.first_ns < 0 or part.table.empty:
            continue
        tables.append(part.table)
        missing = extent - (part.last_ns - part.first_ns)
        if missing > 0:  # one more idle row per lane (a lane's explicit idle spans have a row of their own)
            lanes = part.table.drop_duplicates(["run_id", "rank"])
            tables.append(lanes.assign(phase=ev.IDLE, ns=float(missing)))
    merged = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
    silent = sorted(set(int(r) for r in ranks or ()) - set(int(r) for r in merged["rank"].unique()))
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


def _merge_breakdown(parts: list[Lanes], state: RunState) -> None:
    lanes = merge_lanes(parts, state.ranks, state.run_id)
    per_run = breakdown_from_lanes(lanes, ("run_id", "rank"))
    state.tables["breakdown_by_run"] = per_run
    state.pop = pop_metrics(ev.empty_events(), input_is_useful=state.input_is_useful, breakdown=per_run)
    runtime = float(state.pop["runtime_s"].iloc[0]) if len(state.pop) else float("nan")
    state.wall_s = runtime if np.isfinite(runtime) and runtime > 0 else None


def _merge_phase_findings(parts: list[EventFacts], state: RunState) -> None:
    found = findings(
        ev.empty_events(),
        pop=state.pop if len(state.pop) else None,
        ranks=state.ranks,
        min_fraction=state.min_fraction,
        breakdown=state.tables["breakdown_by_run"],
        hosts=state.hosts,
        facts=EventFacts.merge(parts),
    )
    if state.facts.get("independent"):  # ranks that never meet do not wait for the slowest: no imbalance to lose
        found = found[~found["kind"].isin(["load_imbalance", "straggler", "no_communication"])]
    state.findings.insert(0, found)


def _merge_stragglers(_parts: list[Any], state: RunState) -> None:
    waits = state.tables.get("waits")
    if state.derive_waits and state.wall_s and waits is not None and len(waits):
        rows = straggler_rows(waits, state.wall_s, min_fraction=state.min_fraction, hosts=state.hosts)
        state.findings.append(combine_findings(pd.DataFrame(rows)))


def _merge_gpu_findings(_parts: list[Any], state: RunState) -> None:
    gpus = state.tables.get("devices")
    if gpus is None or "gpu_steps" not in state.facts:
        return
    meta = state.meta
    idle_devices = meta.get("devices_idle") if isinstance(meta.get("devices_idle"), Mapping) else None
    gpu_found = device_findings(
        gpus, state.facts["gpu_steps"], idle_devices=idle_devices, profile_s=state.wall_s,
        min_fraction=state.min_fraction,
    )  # fmt: skip
    launch_found = launch_findings(
        state.facts["idle_causes"], state.facts["launches"], wall_s=state.wall_s, min_fraction=state.min_fraction
    )
    state.findings += [combine_findings(pd.DataFrame(gpu_found)), combine_findings(pd.DataFrame(launch_found))]


def _reduce_in_flight(frames: GroupFrames) -> pd.DataFrame:
    return communication_overlap(frames.events) if len(frames.events) else _empty(OVERLAP_COLUMNS)()


def _merge_in_flight(parts: list[pd.DataFrame], state: RunState) -> None:
    table = concat_frames(parts, _empty(OVERLAP_COLUMNS))
    state.tables["in_flight"] = table
    gpus = state.tables.get("devices")
    if len(table) and (gpus is None or gpus.empty):
        state.findings.append(in_flight_note(table, state.wall_s, state.hosts))


def in_flight_note(in_flight: pd.DataFrame, wall_s: float | None, hosts: Mapping[int, str]) -> pd.DataFrame:
    """Horovod's collectives in flight beside the ranks' own spans: overlap, said so, not time taken from compute."""
    busiest = in_flight.sort_values("in_flight_s").iloc[-1]
    share = f"{busiest['in_flight_s'] / wall_s:.0%} of wall time, " if wall_s else ""
    return missing_data_finding(
        "collectives_in_flight",
        f"Horovod had collectives in flight {share}{busiest['overlapped_share']:.0%} of it while"
        f" {ev.ranks_with_hosts([int(busiest['rank'])], hosts)} was in its own spans: that is overlap with"
        " compute, not time taken from"
        " it; the time ranks really waited is derived from step lengths and readiness (communication_wait)",
        ev.rank_list(in_flight["rank"]),
    )


def _merge_oversubscription(_parts: list[Any], state: RunState) -> None:
    if state.meta:
        state.findings.append(oversubscription_finding_from_meta(state.meta, wall_s=state.wall_s))


def _merge_slow_link(parts: list[pd.Series], state: RunState) -> None:
    links = state.meta.get("links") if state.meta else None
    if isinstance(links, Mapping):
        kept = [p for p in parts if len(p)]
        per_rank = pd.concat(kept) if kept else pd.Series(dtype="float64")
        state.findings.append(slow_link_finding(links, wall_s=state.wall_s, per_rank=per_rank))


def _reduce_write_stalls(frames: GroupFrames) -> tuple[list[dict[str, Any]], int | None]:
    origin = int(frames.events["start_ns"].min()) if len(frames.events) else None
    return write_stalls_of(frames.rank_meta), origin


def _merge_write_stalls(parts: list[tuple[list[dict[str, Any]], int | None]], state: RunState) -> None:
    stalls = [stall for found, _origin in parts for stall in found]
    origins = [origin for _found, origin in parts if origin is not None]
    state.findings.append(write_stall_finding(stalls, min(origins, default=None), state.hosts))


def _merge_network(parts: list[dict], state: RunState) -> None:
    state.findings.append(network_findings(parts, wall_s=state.wall_s))


def _merge_keras_calls(parts: list[pd.DataFrame], state: RunState) -> None:
    table = concat_frames(parts, _empty(KERAS_CALL_COLUMNS))
    state.tables["keras_calls"] = table
    if state.wall_s:
        found = keras_call_findings(ev.empty_events(), state.wall_s, min_fraction=state.min_fraction, table=table)
        state.findings.append(combine_findings(pd.DataFrame(found)))


def keras_call_samples(memory: pd.DataFrame | None) -> pd.DataFrame | None:
    """The memory samples taken right after Keras calls (one per call and rank): all ``call_memory_findings`` reads."""
    if memory is None or memory.empty or "label" not in memory:
        return None
    labels = memory["label"].astype(str)
    return memory[labels.str.startswith(KERAS_PREFIX).to_numpy()]


def _merge_memory_per_call(parts: list[pd.DataFrame | None], state: RunState) -> None:
    kept = [p for p in parts if p is not None and len(p)]
    samples = pd.concat(kept, ignore_index=True) if kept else None
    state.findings.append(combine_findings(pd.DataFrame(call_memory_findings(samples, state.hosts))))


def _merge_steps(parts: list[pd.DataFrame], state: RunState) -> None:
    state.tables["steps"] = concat_frames(parts, lambda: steps_per_rank(ev.empty_events()))


def _merge_memory(parts: list[pd.DataFrame], state: RunState) -> None:
    state.tables["memory"] = concat_frames(parts, lambda: memory_summary(None))
    steps = state.tables["steps"]
    if state.facts.get("kept_events") and int(steps["steps"].sum()) == 0:
        state.findings.append(
            missing_data_finding(
                "no_step_spans",
                "no training steps recorded (compute spans named 'train_step'), so no steps per rank:"
                " the Keras callback and Recorder.phase('compute', 'train_step') record them",
            )
        )
    if state.tables["memory"].empty:
        state.findings.append(
            missing_data_finding(
                "no_memory_samples",
                "no memory samples recorded, so no memory per rank: sample with"
                " Recorder(memory_interval_s=0.5) (workbench profile samples every rank)",
            )
        )


def _merge_completion(parts: list[pd.DataFrame], state: RunState) -> None:
    lives = concat_frames(parts, lambda: life_table(ev.empty_events(), None))
    state.findings.append(completion_findings_of(lives, state.meta, state.hosts))


def _merge_retracing(parts: list[pd.DataFrame], state: RunState) -> None:
    table = concat_frames(parts, lambda: retraced_steps(ev.empty_events()))
    state.findings.append(combine_findings(retracing_finding_of(table, state.hosts, wall_s=state.wall_s)))


def _reduce_python_input(frames: GroupFrames) -> tuple[pd.DataFrame, list[int]]:
    return python_input_busy(frames.events, frames.counters), timed_input_ranks(frames.events)


def _merge_python_input(parts: list[tuple[pd.DataFrame, list[int]]], state: RunState) -> None:
    table = concat_frames([p[0] for p in parts], lambda: python_input_busy(ev.empty_events(), None))
    timed = [r for p in parts for r in p[1]]
    state.findings.append(python_input_finding_of(table, timed, state.hosts))


def _merge_cpu_wait(parts: list[pd.DataFrame], state: RunState) -> None:
    table = concat_frames(parts, lambda: cpu_wait_table(None))
    state.findings.append(
        cpu_wait_finding(table, wall_s=state.wall_s, hosts=state.hosts, min_fraction=state.min_fraction)
    )


#: Every piece of the analysis, in the order they merge (a piece reads only what earlier ones merged).
PIECES: tuple[Piece, ...] = (
    Piece("hosts", ("events", "memory", "rank_meta"), ("header.rank_hosts",), _merge_hosts, _reduce_hosts),
    Piece(
        "record",
        ("events",),
        ("backwards_spans", "ranks_beyond_world", "steps_backwards"),
        _merge_record,
        _reduce_record,
    ),
    Piece("devices", ("devices",), ("devices",), _merge_devices, _reduce_devices),
    Piece("gpu_time", ("devices",), ("gpu_time",), _merge_gpu_time, _reduce_gpu_time),
    Piece(
        "step_waits",
        ("events",),
        ("waits", "lateness", "no_collectives"),
        _merge_step_waits,
        _reduce_step_waits,
        after=("devices",),
    ),
    Piece(
        "breakdown",
        ("events",),
        ("breakdown", "pop"),
        _merge_breakdown,
        group_lanes,
        late=True,
        needs=_group_waits,
        after=("step_waits",),
    ),
    Piece(
        "phase_findings",
        ("events",),
        (
            "serial_evaluation",
            "load_imbalance",
            "communication",
            "per_call_cost",
            "input_pipeline",
            "host_work",
            "idle",
            "no_useful_time",
            "outside_useful_phases",
            "low_parallel_efficiency",
            "single_rank",
            "no_communication",
            "no_events",
            "zero_wall_time",
        ),
        _merge_phase_findings,
        lambda frames: event_facts(frames.events),
        after=("breakdown", "step_waits"),
    ),
    Piece("stragglers", (), ("straggler",), _merge_stragglers, after=("step_waits", "breakdown")),
    Piece(
        "gpu_findings",
        ("meta",),
        ("idle_gpu", "unused_gpu", "lagging_gpu", "transfer_bound", "exposed_communication", "host_bound_gpu"),
        _merge_gpu_findings,
        after=("devices", "breakdown"),
    ),
    Piece(
        "in_flight",
        ("events",),
        ("in_flight", "collectives_in_flight"),
        _merge_in_flight,
        _reduce_in_flight,
        after=("devices",),
    ),
    Piece("oversubscription", ("meta",), ("oversubscription",), _merge_oversubscription, after=("breakdown",)),
    Piece(
        "slow_link",
        ("events", "meta"),
        ("slow_link",),
        _merge_slow_link,
        lambda frames: communication_seconds(frames.events),
    ),
    Piece("write_stalls", ("events", "rank_meta"), ("records_held",), _merge_write_stalls, _reduce_write_stalls),
    Piece(
        "network",
        ("events", "counters", "rank_meta"),
        ("link_down", "slowed_link"),
        _merge_network,
        lambda frames: reduce_network(frames.counters, frames.rank_meta, frames.events),
        after=("breakdown",),
    ),
    Piece(
        "keras_calls",
        ("events",),
        ("keras_calls", "keras_call"),
        _merge_keras_calls,
        lambda frames: keras_call_table(frames.events),
        after=("breakdown",),
    ),
    Piece(
        "memory_per_call",
        ("memory",),
        ("memory_growth",),
        _merge_memory_per_call,
        lambda frames: keras_call_samples(frames.memory),
    ),
    Piece(
        "steps",
        ("events",),
        ("steps",),
        _merge_steps,
        lambda frames: steps_per_rank(frames.events, ranks=frames.ranks),
    ),
    Piece(
        "memory",
        ("memory",),
        ("memory", "no_step_spans", "no_memory_samples"),
        _merge_memory,
        lambda frames: memory_summary(frames.memory),
        after=("steps", "record"),
    ),
    Piece(
        "completion",
        ("events", "memory", "meta"),
        ("stalled_collective", "unrecorded_tail", "run_interrupted", "run_failed", "setup_time"),
        _merge_completion,
        lambda frames: life_table(frames.events, frames.memory),
    ),
    Piece(
        "retracing",
        ("events",),
        ("retracing",),
        _merge_retracing,
        lambda frames: retraced_steps(frames.events),
        after=("breakdown",),
    ),
    Piece("python_input", ("events", "counters"), ("serial_python_input",), _merge_python_input, _reduce_python_input),
    Piece(
        "cpu_wait",
        ("counters", "rank_meta"),
        ("cpu_wait",),
        _merge_cpu_wait,
        lambda frames: cpu_wait_table(frames.counters, frames.rank_meta),
        after=("breakdown",),
    ),
)

#: The tables every analysis of a run has, whatever its size (``RunAnalysis`` fields the pieces fill).
TABLES: tuple[str, ...] = (
    "breakdown", "steps", "memory", "waits", "lateness", "in_flight", "keras_calls", "devices", "gpu_time"
)  # fmt: skip


def reduce_group(frames: GroupFrames) -> dict[str, Any]:
    """Round 1, where the group's data is: every piece's reduction of it (late pieces come in round 2)."""
    return {piece.name: piece.reduce(frames) for piece in PIECES if piece.reduce is not None and not piece.late}


def reduce_late(frames: GroupFrames, needed: Mapping[str, Any]) -> dict[str, Any]:
    """Round 2: the late pieces' reductions of the group, given what they need of the merged run (``needs``)."""
    return {piece.name: piece.reduce(frames, needed[piece.name]) for piece in PIECES if piece.late}


def merge_run(
    parts: Sequence[dict[str, Any]],
    state: RunState,
    late_parts: Callable[[RunState], Sequence[Mapping[str, Any]]],
) -> RunState:
    """Every piece merged in order; before the first late piece, ``late_parts(state)`` runs round 2 of every
    group (in the same order as ``parts``) with what the late pieces need of the state merged so far."""
    late: Sequence[Mapping[str, Any]] | None = None
    for piece in PIECES:
        if piece.late:
            late = late_parts(state) if late is None else late
            piece.merge([p[piece.name] for p in late], state)
        elif piece.reduce is None:
            piece.merge([], state)
        else:
            # taken out of the parts as they merge: a group's evidence is not held twice (a large run's per
            # rank and step tables are most of what the caller holds)
            piece.merge([p.pop(piece.name) for p in parts], state)
    return state


def late_needs(state: RunState, ranks: Sequence[int] | None) -> dict[str, Any]:
    """What each late piece needs of the merged run for a group of ``ranks`` (None: every rank)."""
    return {piece.name: piece.needs(state, ranks) for piece in PIECES if piece.late and piece.needs is not None}


def analyse_frames(frames: GroupFrames, state: RunState) -> RunState:
    """Every piece on one group holding the whole run (``analyse_run``): the same code as rank groups."""
    parts = [reduce_group(frames)]
    return merge_run(parts, state, lambda merged: [reduce_late(frames, late_needs(merged, None))])


def piece_names() -> tuple[str, ...]:
    """The registered pieces' names, in merge order."""
    return tuple(piece.name for piece in PIECES)


def empty_tables() -> dict[str, pd.DataFrame]:
    """Each table's empty frame, for an analysis that has none of it."""
    return {
        "waits": _empty(STEP_WAIT_COLUMNS)(),
        "lateness": _empty(LATENESS_COLUMNS)(),
        "in_flight": _empty(OVERLAP_COLUMNS)(),
        "keras_calls": _empty(KERAS_CALL_COLUMNS)(),
        "devices": pd.DataFrame(),
        "gpu_time": _empty(TEMPORAL_COLUMNS)(),
    }
