"""Everything the analysis layer says about one recorded run, in one call that never raises on it.

``workbench analyse``, the notebooks and the experiment runner all want the same picture of a run:
where each rank's time went, the POP efficiencies, the findings, how fast each rank stepped and
how much memory it held. Computing it in one place keeps them in agreement; a run that lacks
something (no events, no compute spans, one rank, no memory samples) gets findings that say what
is missing and what to record instead of an exception.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import phase_breakdown
from workbench.analysis.completion import completion_findings
from workbench.analysis.cpu_wait import cpu_wait_finding, cpu_wait_table
from workbench.analysis.devices import device_findings, device_step_table, device_summary
from workbench.analysis.findings import (
    combine_findings,
    findings,
    missing_data_finding,
    oversubscription_finding_from_meta,
    slow_link_finding,
)
from workbench.analysis.input import python_input_finding
from workbench.analysis.keras_calls import (
    KERAS_CALL_COLUMNS,
    call_memory_findings,
    keras_call_findings,
    keras_call_table,
)
from workbench.analysis.launches import idle_by_cause, kernel_launches, launch_findings, launch_summary
from workbench.analysis.memory import memory_summary
from workbench.analysis.pop import POP_COLUMNS, pop_metrics, useful_phase_set
from workbench.analysis.retracing import retracing_finding
from workbench.analysis.scaling import steps_per_rank
from workbench.analysis.straggler import (
    LATENESS_COLUMNS,
    OVERLAP_COLUMNS,
    STEP_WAIT_COLUMNS,
    allreduce_lateness,
    communication_overlap,
    step_waits,
    straggler_rows,
    with_derived_waits,
)

#: Run metadata shown above an analysis: what produced it.
HEADER_KEYS: tuple[str, ...] = ("run_id", "name", "created", "host", "ranks", "cores", "status", "versions")


@dataclass(frozen=True)
class RunAnalysis:
    """One run, analysed: tables for the per-rank detail, dicts for the one-per-run facts.

    Every per-rank table carries, after ``rank``, the rank's ``host`` ("" when not recorded), so
    a slow or late rank can be told apart from a slow or late host.
    """

    #: What produced the run: ``HEADER_KEYS`` from its metadata (missing ones are None), and
    #: ``rank_hosts``: ``{rank: host}`` of the ranks whose host is known.
    header: dict[str, Any]
    #: ``rank, host, phase, seconds, fraction`` (``phase_breakdown`` by rank).
    breakdown: pd.DataFrame
    #: ``pop_metrics`` of the run as a dict; ``useful_phases`` as a list; efficiencies NaN (with
    #: ``note`` saying why) when they cannot be computed.
    pop: dict[str, Any]
    #: ``FINDING_COLUMNS``, largest ``seconds_lost`` first, missing-data findings last.
    findings: pd.DataFrame
    #: ``steps_per_rank``: ``rank, host, steps, seconds, steps_per_s, mean_step_s, median_step_s``.
    steps: pd.DataFrame
    #: ``memory_summary``: ``rank, host, samples, first_mb, last_mb, peak_mb, gpu_peak_mb``.
    memory: pd.DataFrame
    #: ``step_waits``: per rank and step, its duration, the wait for the last rank and the evidence.
    waits: pd.DataFrame = field(default_factory=lambda: _empty(STEP_WAIT_COLUMNS))
    #: ``allreduce_lateness``: per step and rank, its arrival at the allreduce and how late it was.
    lateness: pd.DataFrame = field(default_factory=lambda: _empty(LATENESS_COLUMNS))
    #: ``communication_overlap``: collectives in flight per rank and how much overlapped its own work.
    in_flight: pd.DataFrame = field(default_factory=lambda: _empty(OVERLAP_COLUMNS))
    #: ``keras_call_table``: per rank and Keras method, calls, seconds, the model's runs and Keras's own work.
    keras_calls: pd.DataFrame = field(default_factory=lambda: _empty(KERAS_CALL_COLUMNS))
    #: ``devices.device_summary``: per GPU of an imported profile, busy, idle, compute, communication, copies.
    devices: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tables as lists of row dicts, NaN and inf as None, numpy scalars as Python."""
        return {
            **analysis_dict(self, lateness_summary(self.lateness, self.header.get("rank_hosts"))),
            "in_flight": json_records(self.in_flight),
            "keras_calls": json_records(self.keras_calls),
            "devices": json_records(self.devices),
        }


def analysis_dict(result: Any, lateness: pd.DataFrame) -> dict[str, Any]:
    """The JSON-ready tables every analysis of one run has (``RunAnalysis``, ``split.SplitAnalysis``)."""
    return {
        "run": json_ready(result.header),
        "pop": json_ready(result.pop),
        "breakdown": json_records(result.breakdown),
        "findings": json_records(result.findings),
        "steps": json_records(result.steps),
        "memory": json_records(result.memory),
        "lateness": json_records(lateness),
    }


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


def lateness_summary(lateness: pd.DataFrame, hosts: Mapping[int, str] | None = None) -> pd.DataFrame:
    """Per rank: in how many steps it arrived last to the allreduce, and its median and max lateness.

    With ``hosts`` (``{rank: host}``, e.g. ``RunAnalysis.header["rank_hosts"]``) a ``host`` column
    follows ``rank``: a late host shows as all its ranks late.
    """
    columns = ["rank", "steps", "last_in_steps", "last_share", "median_lateness_s", "max_lateness_s"]
    if lateness.empty:
        return with_hosts(_empty(tuple(columns)), hosts) if hosts is not None else _empty(tuple(columns))
    rank = lateness["rank"].to_numpy(np.int64)
    starts = ev.ascending_runs(rank)
    if starts is not None:  # each rank's rows together (rank groups' rows are): segment by segment
        late = lateness["lateness_s"].to_numpy(np.float64)
        summary = pd.DataFrame(
            {
                "steps": np.diff(np.append(starts, len(rank))),
                "last_in_steps": np.add.reduceat(lateness["last"].to_numpy(np.int64), starts),
                "median_lateness_s": ev.run_medians(late, starts),
                "max_lateness_s": np.maximum.reduceat(late, starts),
            },
            index=pd.Index(rank[starts], name="rank"),
        )
    else:
        summary = lateness.groupby("rank").agg(
            steps=("step", "size"),
            last_in_steps=("last", "sum"),
            median_lateness_s=("lateness_s", "median"),
            max_lateness_s=("lateness_s", "max"),
        )
    summary["last_share"] = summary["last_in_steps"] / summary["steps"]
    table = summary.reset_index()[columns].astype({"rank": "int64", "steps": "int64", "last_in_steps": "int64"})
    return with_hosts(table, hosts) if hosts is not None else table


def with_hosts(table: pd.DataFrame, hosts: Mapping[int, str] | None) -> pd.DataFrame:
    """``table`` with a ``host`` column after ``rank`` (``hosts[rank]``, "" when unknown); as it is without ``rank``."""
    if "rank" not in table:
        return table
    lookup = pd.Series({int(rank): str(host) for rank, host in (hosts or {}).items()}, dtype=object)
    column = table["rank"].map(lookup).astype(object).fillna("")  # NaN where unknown: object first (pandas 4)
    table = table.drop(columns="host", errors="ignore")
    table.insert(table.columns.get_loc("rank") + 1, "host", column.to_numpy())
    return table


def run_hosts(events: pd.DataFrame, memory: pd.DataFrame | None = None, rank_meta: Any = None) -> dict[int, str]:
    """``{rank: host}`` from the events' ``host`` column, then memory samples, then the ranks' meta.

    ``rank_meta``: ``Run.rank_meta`` (a frame with ``rank`` and ``host``) or a ``{rank: host}``
    mapping. Ranks with no host anywhere are left out; nothing here raises on a missing column.
    """
    if isinstance(rank_meta, Mapping):
        rank_meta = pd.DataFrame({"rank": list(rank_meta), "host": [str(h) for h in rank_meta.values()]})
    if rank_meta is not None and not isinstance(rank_meta, pd.DataFrame):
        rank_meta = None
    return ev.rank_hosts(events, memory, rank_meta)


def analyse_run(
    events: pd.DataFrame,
    memory: pd.DataFrame | None = None,
    meta: Mapping[str, Any] | None = None,
    *,
    input_is_useful: bool = True,
    min_fraction: float = 0.02,
    derive_waits: bool = True,
    rank_meta: pd.DataFrame | Mapping[int, str] | None = None,
    counters: pd.DataFrame | None = None,
    devices: pd.DataFrame | None = None,
) -> RunAnalysis:
    """Breakdown, POP metrics, findings, steps and memory of one run (``Run.load(path)``'s frames).

    - Ranks are those ``meta["ranks"]`` declares (a rank that recorded nothing shows as idle), else
      those that recorded anything.
    - Every event is taken to belong to this run (``run_id`` set from the metadata), so events that
      an importer labelled differently are not a second run.
    - Spans that end before they start are left out, with a finding that says how many.
    - Horovod's timeline (``in_flight`` spans) counts as overlap (``in_flight``), never as the ranks'
      own time. With ``derive_waits``, the time each rank waited for the last one in a step
      (``analysis.straggler.step_waits``: from readiness lateness, else step lengths) becomes
      ``communication_wait`` inside that step, and a rank that arrives last in most steps is named
      in a ``straggler`` finding that says on which evidence.
    - Findings add, to ``analysis.findings``: oversubscription from the recorded cluster settings
      (when ``meta`` is given), and notes when no training steps or no memory samples were recorded.
    - ``counters`` (``Run.counters``): a serial Python generator behind tf.data that was busy nearly all of
      a rank's training is named (``analysis.input.python_input_finding``).
    - ``devices`` (``Run.devices``, GPU activity of imported profiles): per GPU busy, idle, communication hidden
      or not (``analysis.devices``), and findings on idle, lagging and transfer-bound GPUs, and on GPUs that
      waited for their hosts to launch work (``analysis.launches``, where the trace ties launches to kernels).
    - Each rank's host comes from the events, else the memory samples, else ``rank_meta``
      (``Run.rank_meta``): per-rank tables get a ``host`` column, and when ranks ran on more than
      one host the findings name the host next to each rank ("rank 2 (node3)").
    """
    meta = dict(meta or {})
    run_id = str(meta.get("run_id", ""))
    ranks = declared_ranks(meta)
    hosts = run_hosts(events, memory, rank_meta)
    events = events.assign(run_id=run_id) if len(events) else events
    extra: list[pd.DataFrame] = []
    events, backwards = _without_backwards_spans(events, hosts)
    if backwards is not None:
        extra.append(backwards)

    if devices is not None and len(devices):
        # a GPU's spans already hold its idle time between kernels: nothing is derived from step lengths
        derive_waits = False
    independent = independent_ranks_finding(events, ranks)
    if independent is not None:
        # no collective anywhere in the record: nothing says a rank waits for another, so none is derived
        derive_waits = False
        extra.append(independent)
    waits = step_waits(events) if len(events) else _empty(STEP_WAIT_COLUMNS)
    lateness = allreduce_lateness(events) if len(events) else _empty(LATENESS_COLUMNS)
    in_flight = communication_overlap(events) if len(events) else _empty(OVERLAP_COLUMNS)
    if derive_waits and len(waits):
        events = with_derived_waits(events, waits)
    per_run = phase_breakdown(events, by=("run_id", "rank"), ranks=ranks)
    pop_frame = pop_metrics(events, input_is_useful=input_is_useful, breakdown=per_run)
    found = findings(
        events,
        pop=pop_frame if len(pop_frame) else None,
        ranks=ranks,
        min_fraction=min_fraction,
        breakdown=per_run,
        hosts=hosts,
    )
    if independent is not None:  # ranks that never meet do not wait for the slowest: no imbalance to lose
        found = found[~found["kind"].isin(["load_imbalance", "straggler", "no_communication"])]
    pop = pop_dict(pop_frame, run_id, ranks, input_is_useful)
    wall_s = wall_seconds(pop)
    if derive_waits and wall_s and len(waits):
        stragglers = straggler_rows(waits, wall_s, min_fraction=min_fraction, hosts=hosts)
        extra.append(combine_findings(pd.DataFrame(stragglers)))
    gpus = pd.DataFrame()
    if devices is not None and len(devices):
        gpus, gpu_found = _gpu_tables_and_findings(devices, meta, wall_s=wall_s, min_fraction=min_fraction)
        extra += gpu_found
    if len(in_flight) and gpus.empty:
        extra.append(_in_flight_finding(in_flight, wall_s, hosts))
    if meta:
        extra.append(oversubscription_finding_from_meta(meta, wall_s=wall_s))
        if isinstance(meta.get("links"), Mapping):
            extra.append(slow_link_finding(meta["links"], events, wall_s=wall_s))

    keras_calls = keras_call_table(events)
    if wall_s:
        calls_found = keras_call_findings(events, wall_s, min_fraction=min_fraction, table=keras_calls)
        extra.append(combine_findings(pd.DataFrame(calls_found)))
    extra.append(combine_findings(pd.DataFrame(call_memory_findings(memory, hosts))))
    steps = steps_per_rank(events, ranks=ranks)
    memory_table = memory_summary(memory)
    extra += missing_table_findings(len(events), steps, memory_table)
    # a run stopped, stalled or working outside its spans: the status, Horovod's unfinished collectives, and
    # the time each rank was alive (memory samples) outside what it recorded
    extra.append(completion_findings(events, memory, meta, hosts))
    extra.append(combine_findings(retracing_finding(events, hosts, wall_s=wall_s)))
    extra.append(python_input_finding(events, counters, hosts))
    waited = cpu_wait_table(counters, rank_meta if isinstance(rank_meta, pd.DataFrame) else None)
    extra.append(cpu_wait_finding(waited, wall_s=wall_s, hosts=hosts, min_fraction=min_fraction))
    return RunAnalysis(
        header={**run_header(meta), "rank_hosts": hosts},
        breakdown=with_hosts(per_run.drop(columns="run_id").reset_index(drop=True), hosts),
        pop=pop,
        findings=combine_findings(found, *extra),
        steps=with_hosts(steps, hosts),
        memory=with_hosts(memory_table, hosts),
        waits=with_hosts(waits, hosts),
        lateness=with_hosts(lateness, hosts),
        in_flight=with_hosts(in_flight, hosts),
        keras_calls=with_hosts(keras_calls, hosts),
        devices=gpus,
    )


def _without_backwards_spans(
    events: pd.DataFrame, hosts: Mapping[int, str]
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The events without spans that end before they start, and the finding that counts them (None: none)."""
    backwards = (events["end_ns"] < events["start_ns"]).to_numpy() if len(events) else np.zeros(0, bool)
    if not backwards.any():
        return events, None
    first = events[backwards].iloc[0]
    name = first.get("name", first["phase"])
    found = backwards_finding(int(backwards.sum()), int(first["rank"]), name, events.loc[backwards, "rank"], hosts)
    return events[~backwards], found


def _gpu_tables_and_findings(
    devices: pd.DataFrame, meta: Mapping[str, Any], *, wall_s: float | None, min_fraction: float
) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """Per GPU busy, idle and communication (``device_summary``), and the findings on GPUs and on their launches."""
    gpu_steps = device_step_table(devices)
    gpus = device_summary(gpu_steps)
    idle_devices = meta.get("devices_idle") if isinstance(meta.get("devices_idle"), Mapping) else None
    gpu_found = device_findings(gpus, gpu_steps, idle_devices=idle_devices, profile_s=wall_s, min_fraction=min_fraction)
    launch_found = launch_findings(
        idle_by_cause(devices), launch_summary(kernel_launches(devices)), wall_s=wall_s, min_fraction=min_fraction
    )
    return gpus, [combine_findings(pd.DataFrame(gpu_found)), combine_findings(pd.DataFrame(launch_found))]


def _in_flight_finding(in_flight: pd.DataFrame, wall_s: float | None, hosts: Mapping[int, str]) -> pd.DataFrame:
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


def with_step_waits(events: pd.DataFrame, ranks: list[int] | None = None) -> pd.DataFrame:
    """The events as ``analyse_run`` breaks them down: spans that end before they start left out, and each
    rank's wait for the last one in a step added as ``communication_wait`` (none where no collective was
    recorded). ``workbench compare`` uses it, so a wait reads as a wait in both commands."""
    if len(events) == 0:
        return events
    events = events[(events["end_ns"] >= events["start_ns"]).to_numpy()]
    if independent_ranks_finding(events, ranks) is not None:
        return events
    waits = step_waits(events)
    return with_derived_waits(events, waits) if len(waits) else events


def independent_ranks_finding(events: pd.DataFrame, ranks: list[int] | None) -> pd.DataFrame | None:
    """A note for a run of several ranks with training steps and no collective recorded at all.

    No communication span, no Horovod timeline, no wait: either the ranks exchange data outside what was
    recorded (mpi4py, torch.distributed), or they never exchange it and each trained on its own, often a
    script run under mpiexec without Horovod's optimizer. Either way, waits cannot be derived from step
    lengths (they assume the ranks meet every step).
    """
    if len(events) == 0:
        return None
    recorded = {int(r) for r in events["rank"].unique()}
    if len(set(ranks or ()) | recorded) < 2:
        return None
    phases = set(events["phase"].astype(str).unique())
    if phases & {ev.COMMUNICATION, ev.IN_FLIGHT, ev.COMMUNICATION_WAIT}:
        return None
    if not ((events["phase"] == ev.COMPUTE) & (events["name"] == "train_step")).any():
        return None
    return missing_data_finding(
        "no_collectives",
        "no collective was recorded (no communication spans, no Horovod timeline), so no rank is taken to wait"
        " for another: if the ranks never exchange gradients, each trained on its own (wrap the optimizer with"
        " hvd.DistributedOptimizer or the tape with hvd.DistributedGradientTape, and call hvd.init()); if"
        " they exchange them outside Horovod, record it (Recorder.phase('communication', ...))",
        ev.rank_list(set(ranks or ()) | recorded),
    )


def wall_seconds(pop: Mapping[str, Any]) -> float | None:
    """The run's wall time from its POP dict, None when it has none (no events, zero-length spans)."""
    runtime = pop.get("runtime_s")
    return runtime if isinstance(runtime, float) and math.isfinite(runtime) and runtime > 0 else None


def backwards_finding(
    count: int, first_rank: int, first_name: Any, ranks: Any, hosts: Mapping[int, str]
) -> pd.DataFrame:
    """The finding for spans that end before they start, which the analysis leaves out."""
    return missing_data_finding(
        "backwards_spans",
        f"{count} span(s) end before they start (first: {ev.ranks_with_hosts([first_rank], hosts)},"
        f" {first_name!r}) and were left out: check the ranks' clock alignment",
        ev.rank_list(ranks),
    )


def missing_table_findings(events: int, steps: pd.DataFrame, memory: pd.DataFrame) -> list[pd.DataFrame]:
    """Notes for a run with events but no training steps, and for one without memory samples."""
    notes = []
    if events and int(steps["steps"].sum()) == 0:
        notes.append(
            missing_data_finding(
                "no_step_spans",
                "no training steps recorded (compute spans named 'train_step'), so no steps per rank:"
                " the Keras callback and Recorder.phase('compute', 'train_step') record them",
            )
        )
    if memory.empty:
        notes.append(
            missing_data_finding(
                "no_memory_samples",
                "no memory samples recorded, so no memory per rank: sample with"
                " Recorder(memory_interval_s=0.5) (workbench profile samples every rank)",
            )
        )
    return notes


def declared_ranks(meta: Mapping[str, Any]) -> list[int] | None:
    """``0 .. ranks - 1`` when the metadata names a rank count, so silent ranks count; else None."""
    declared = meta.get("ranks")
    if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
        return list(range(declared))
    return None


def run_header(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``HEADER_KEYS`` of a run's metadata; ``created`` as local ISO time (from ``created_iso`` if any)."""
    header = {key: meta.get(key) for key in HEADER_KEYS}
    created = meta.get("created_iso")
    if not created and isinstance(meta.get("created"), int | float):
        created = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(float(meta["created"])))
    header["created"] = created
    cluster = (meta.get("config") or {}).get("cluster") if isinstance(meta.get("config"), Mapping) else None
    if header["cores"] is None and isinstance(cluster, Mapping):
        header["cores"] = cluster.get("cores")
    if "exit_code" in meta:
        header["exit_code"] = meta["exit_code"]
    return header


def json_ready(value: Any) -> Any:
    """``value`` with NaN / inf as None, numpy scalars and arrays as Python, mappings and lists walked."""
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value


def json_records(frame: pd.DataFrame | None, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """A table as JSON-ready row dicts (see ``json_ready``), only ``columns`` (those it has) when given."""
    if frame is None or frame.empty:
        return []
    if columns is not None:
        frame = frame[[c for c in columns if c in frame]]
    return [json_ready(row) for row in frame.to_dict("records")]


def pop_dict(pop_frame: pd.DataFrame, run_id: str, ranks: list[int] | None, input_is_useful: bool) -> dict[str, Any]:
    """The run's POP row as a dict, ``useful_phases`` as a list; NaN metrics when there is no row."""
    if len(pop_frame):
        first = pop_frame.iloc[0].items()
        row = {key: value.item() if isinstance(value, np.generic) else value for key, value in first}
    else:
        row = {column: math.nan for column in POP_COLUMNS}
        row.update(
            run_id=run_id,
            ranks=len(ranks or ()),
            useful_phases="+".join(useful_phase_set(input_is_useful)),
            note="no events: nothing to measure",
        )
    row["useful_phases"] = str(row["useful_phases"]).split("+")
    return row
