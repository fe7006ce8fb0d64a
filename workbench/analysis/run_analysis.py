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
from workbench.analysis.devices import TEMPORAL_COLUMNS
from workbench.analysis.findings import combine_findings
from workbench.analysis.keras_calls import KERAS_CALL_COLUMNS
from workbench.analysis.pieces import (
    RunState,
    analyse_frames,
    empty_tables,
    exchange_of,
    group_frames,
    independent_ranks_note,
    piece_names,
)
from workbench.analysis.pop import POP_COLUMNS, useful_phase_set
from workbench.analysis.straggler import (
    LATENESS_COLUMNS,
    OVERLAP_COLUMNS,
    STEP_WAIT_COLUMNS,
    step_waits,
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
    #: ``devices.gpu_time_table``: per GPU, Holistic Trace Analysis's temporal breakdown and overlap (each rank's
    #: last profiler step left out, as HTA does), to set beside HTA's own numbers.
    gpu_time: pd.DataFrame = field(default_factory=lambda: _empty(TEMPORAL_COLUMNS))
    #: The registered pieces of the analysis it ran (``analysis.pieces.PIECES``): all of them, at any size.
    pieces: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tables as lists of row dicts, NaN and inf as None, numpy scalars as Python."""
        return {
            **analysis_dict(self, lateness_summary(self.lateness, self.header.get("rank_hosts"))),
            "in_flight": json_records(self.in_flight),
            "keras_calls": json_records(self.keras_calls),
            "devices": json_records(self.devices),
            "gpu_time": json_records(self.gpu_time),
            "pieces": list(self.pieces),
        }


@dataclass(frozen=True)
class SplitAnalysis(RunAnalysis):
    """A run analysed in rank groups: every table and finding of ``RunAnalysis``, and how it was split."""

    events: int = 0
    groups: int = 0
    workers: int = 0
    #: Wall seconds of each round (``open``, ``mark``, ``lanes``, ``merge``).
    seconds: dict[str, float] = field(default_factory=dict)
    #: Peak resident memory (bytes) of each worker process, by pid.
    worker_peak_rss: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``RunAnalysis.to_dict``, plus the split."""
        return {
            **super().to_dict(),
            "split": {
                "events": self.events,
                "groups": self.groups,
                "workers": self.workers,
                "seconds": self.seconds,
                "worker_peak_mb": [round(v / ev.BYTES_PER_MB, 1) for v in self.worker_peak_rss.values()],
            },
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
    ranks = declared_ranks(meta)
    frames = group_frames(
        events,
        str(meta.get("run_id", "")),
        memory=memory,
        counters=counters,
        devices=devices,
        rank_meta=rank_meta if isinstance(rank_meta, pd.DataFrame) else None,
        ranks=ranks,
    )
    state = RunState(meta, ranks, min_fraction=min_fraction, input_is_useful=input_is_useful, derive_waits=derive_waits)
    if isinstance(rank_meta, Mapping):  # {rank: host}: hosts the frames do not name
        state.hosts.update({int(r): str(h) for r, h in rank_meta.items()})
    return analysis_of(analyse_frames(frames, state))


def analysis_of(state: RunState, **extra: Any) -> RunAnalysis:
    """The ``RunAnalysis`` of a merged run (``pieces.merge_run``); ``extra``: the fields of a subclass."""
    hosts = dict(sorted(state.hosts.items()))
    tables = {**empty_tables(), **state.tables}
    per_run = tables.pop("breakdown_by_run")
    pop = pop_dict(state.pop, state.run_id, state.ranks, state.input_is_useful)
    return type_of(extra)(
        header={**run_header(state.meta), "rank_hosts": hosts},
        breakdown=with_hosts(per_run.drop(columns="run_id").reset_index(drop=True), hosts),
        pop=pop,
        findings=combine_findings(*state.findings),
        steps=with_hosts(tables["steps"], hosts),
        memory=with_hosts(tables["memory"], hosts),
        waits=with_hosts(tables["waits"], hosts),
        lateness=with_hosts(tables["lateness"], hosts),
        in_flight=with_hosts(tables["in_flight"], hosts),
        keras_calls=with_hosts(tables["keras_calls"], hosts),
        devices=tables["devices"],
        gpu_time=tables["gpu_time"],
        pieces=piece_names(),
        **extra,
    )


def type_of(extra: Mapping[str, Any]) -> type:
    """``RunAnalysis``, or the rank groups' ``SplitAnalysis`` when its fields are given."""
    return SplitAnalysis if extra else RunAnalysis


def forward_spans(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` without spans that end before they start (the analysis leaves them out and says how many in a
    finding); the same frame when there are none."""
    if not len(events):
        return events
    backwards = (events["end_ns"] < events["start_ns"]).to_numpy()
    return events[~backwards] if backwards.any() else events


def with_step_waits(events: pd.DataFrame, ranks: list[int] | None = None) -> pd.DataFrame:
    """The events as ``analyse_run`` breaks them down: spans that end before they start left out, and each
    rank's wait for the last one in a step added as ``communication_wait`` (none where no collective was
    recorded). ``workbench compare`` uses it, so a wait reads as a wait in both commands."""
    if len(events) == 0:
        return events
    events = forward_spans(events)
    if independent_ranks_finding(events, ranks) is not None:
        return events
    waits = step_waits(events)
    return with_derived_waits(events, waits) if len(waits) else events


def independent_ranks_finding(events: pd.DataFrame, ranks: list[int] | None) -> pd.DataFrame | None:
    """A note for a run of several ranks with training steps and no collective recorded at all
    (``pieces.independent_ranks_note``, read from ``events``)."""
    return independent_ranks_note([exchange_of(events)], ranks)


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
