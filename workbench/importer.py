"""``workbench import``: the traces a GPU cluster already wrote, as one run in the store.

What it reads (a folder is searched for them; several files of one job become one run):
- Horovod timelines (``HOROVOD_TIMELINE``) of every version: with or without the start record, gzip, an
  array never closed, rotated fragments of one job (given together, read in name order as one timeline);
- TensorFlow profiles: ``<host>.xplane.pb`` (one per host in ``plugins/profile/<session>/``: a multi-worker
  job is one run with its hosts), TensorBoard's ``*.trace.json.gz`` and TF1's client timeline (Chrome-trace JSON);
- PyTorch profiler (Kineto) traces, one file per rank (``formats.kineto``): each file's rank is its
  ``distributedInfo.rank``.

Which formats: those registered in ``formats.registry`` (each format's module registers its ``TraceReader``),
so that a new format is its module and one ``register_reader``, never an edit here. The importer asks the
readers for the names a folder is searched for, which one claims a file (``sniff``), whether it is refused
(TensorBoard's older ``*.trace``), and reads each profile with its reader into a ``DeviceTrace``; a reader of
kind ``timeline`` (Horovod's) is streamed here instead, all of a job's fragments as one.

How ranks are placed: each GPU that ran something is a rank (Horovod runs one rank per GPU; a
MirroredStrategy worker's GPUs are its replicas), numbered by host (in natural order) then GPU index; its
spans come from its GPU's activity (``analysis.devices.device_phase_spans``) and the activity itself is
kept in the run's ``devices`` stream. Without GPU profiles the ranks are those the timeline names. The
files never say which rank drove which GPU, so a timeline's rank ``r`` is taken to be GPU rank ``r``.

Clocks: XPlane's timestamps are ns since the Unix epoch on each host (aligned across hosts as far as
their clocks agree: NTP, typically within a millisecond); Horovod's are since its start record, when it
wrote one; TensorBoard's JSON and 2019 timelines count from an instant the file does not give. Each
source's alignment is in ``run.json`` (``import.sources``) and the import says which are unaligned.

The user's files are only read: no converter writes beside them; the run's folder gets everything.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from workbench import events as ev
from workbench.analysis.devices import device_phase_spans, group_codes
from workbench.formats.gpu_trace import DeviceTrace
from workbench.formats.horovod_timeline import TimelineError, iter_horovod_timeline, timeline_tensor_bytes
from workbench.formats.registry import TraceReader, file_patterns, sniff_reader
from workbench.store import StreamWriter, create_run, update_run_meta, write_rank_meta

#: Timestamps (ns) above this are since the Unix epoch (after 1973); below, since some start the file omits.
EPOCH_NS = 10**17


class TraceImportError(ValueError):
    """Nothing importable: the message names the file or folder and what to pass instead."""


@dataclass
class ImportResult:
    """What ``import_traces`` made: the run, its ranks and hosts, and one line per source read."""

    run_path: Path
    ranks: int
    hosts: list[str]
    events: int
    device_activities: int
    lines: list[str] = field(default_factory=list)


def sniff(path: Path) -> str:
    """Which registered format a file is (xplane, trace_json, horovod_timeline, kineto, old_trace ...) or unknown."""
    reader = sniff_reader(path)
    return reader.name if reader else "unknown"


def discover(paths: list[str | Path]) -> list[tuple[TraceReader | None, Path]]:
    """The trace files among ``paths`` (folders searched), each with the reader that claims it (None: no format
    does; a file given by itself is kept so that the import names it), in natural name order."""
    found: list[tuple[TraceReader | None, Path]] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise TraceImportError(f"{path} does not exist: pass trace files or the folder that holds them")
        if path.is_dir():
            files = sorted({f for pattern in file_patterns() for f in path.rglob(pattern) if f.is_file()})
            chosen = [(sniff_reader(f), f) for f in files]
            chosen = [(reader, f) for reader, f in chosen if reader is not None]
            if not chosen:
                raise TraceImportError(
                    f"{path} holds no trace this reads (*.xplane.pb, *.trace.json.gz, a Horovod timeline):"
                    " pass the TensorBoard log folder or the timeline file"
                )
            found += chosen
        else:
            found.append((sniff_reader(path), path))
    return sorted(found, key=lambda item: ev.natural_order(str(item[1])))


def import_traces(paths: list[str | Path], *, out: str | Path | None = None, name: str | None = None) -> ImportResult:
    """Read the traces and write one run (see the module docstring); one clear error when nothing is readable."""
    sources = discover(paths)
    readers = [(_check_readable(reader, path), path) for reader, path in sources]
    lines: list[str] = []
    timelines = [path for reader, path in readers if reader.kind == "timeline"]
    profiles = [(reader, path) for reader, path in readers if reader.kind == "activity"]
    title = name or _default_name(sources)
    run_path = create_run(out, title, config={"source": "import"}, ranks=None)
    run_id = run_path.name
    events_written = activities = 0
    source_facts: list[dict[str, Any]] = []
    hosts_of_rank: dict[int, str] = {}
    idle_devices: dict[str, list[str]] = {}
    world_sizes: set[int] = set()
    # one profile at a time, written before the next is read: memory is one host's activity, however many hosts
    for reader, path in profiles:
        try:
            trace = _read_profile(reader, path)
        except TraceImportError:
            shutil.rmtree(run_path, ignore_errors=True)  # no half-made run left behind the one line
            raise
        lines += trace.notes
        if trace.world_size:
            world_sizes.add(trace.world_size)
        ranks = _place_ranks(trace, first_rank=len(hosts_of_rank) if trace.rank is None else trace.rank)
        for (host, _device), rank in ranks.items():
            hosts_of_rank[rank] = host
        activity = _placed_activity(trace, ranks, run_id)
        activities += _write_devices(run_path, activity)
        events_written += _write_events(run_path, device_phase_spans(activity[activity["rank"] >= 0], run_id=run_id))
        del activity
        facts = _profile_facts(trace)
        source_facts.append(facts)
        unused = [d for d in trace.devices if d not in facts["busy_devices"]]
        if unused:
            idle_devices.setdefault(trace.host, []).extend(unused)
        lines.append(_profile_line(trace, facts))
        del trace
    world = max(hosts_of_rank) + 1 if hosts_of_rank else 0
    if world_sizes and not hosts_of_rank:
        lines.append(
            f"ranks: the traces are of a job of {max(world_sizes)} ranks but hold no GPU activity: nothing to place;"
            " profile with the GPU activities on (PyTorch: ProfilerActivity.CUDA)"
        )
    elif world_sizes and max(world_sizes) > len(hosts_of_rank):
        lines.append(
            f"ranks: the traces are {len(hosts_of_rank)} of a job of {max(world_sizes)} ranks"
            f" (ranks {ev.rank_list(sorted(hosts_of_rank))}); the analysis covers these"
        )
    timeline_info: dict[str, Any] = {}
    unfinished: list[dict[str, object]] = []
    if timelines:
        written, timeline_info, error = _import_timeline(run_path, timelines, unfinished, hosts_of_rank)
        events_written += written
        timeline_ranks = timeline_info.get("ranks") or []
        world = max(world, (max(timeline_ranks) + 1) if timeline_ranks else 1)
        if profiles and world != len(hosts_of_rank):
            lines.append(
                f"ranks: the timeline names {len(timeline_ranks)} ranks, the profiles {len(hosts_of_rank)} busy GPUs:"
                " the timeline's rank r is taken to be GPU rank r"
            )
        source_facts.append(_timeline_facts(timelines, timeline_info))
        lines.append(_timeline_line(timelines, timeline_info, written, error, len(unfinished)))
    hosts = sorted(set(hosts_of_rank.values()), key=ev.natural_order)
    contiguous = not hosts_of_rank or sorted(hosts_of_rank) == list(range(len(hosts_of_rank)))
    for rank in range(world) if contiguous else sorted(hosts_of_rank):
        write_rank_meta(run_path, rank, host=hosts_of_rank.get(rank, ""), source="import")
    aligned = [bool(f["epoch_aligned"]) for f in source_facts]
    update_run_meta(
        run_path,
        # what produced the run is this import, not the packages of the job that wrote the files
        versions={"workbench": _workbench_version()},
        # a rank count only where the ranks are 0..N-1: sampled ranks of a larger job (5 and 77) are those analysed
        ranks=world if contiguous else None,
        status="finished",
        hosts=hosts,
        timeline_unfinished=unfinished,
        # each tensor's bytes, for the projection (the gradients' bytes, and their readiness with steps recorded)
        timeline_tensors=timeline_tensor_bytes(timelines[0]) if timelines else {},
        devices_idle=idle_devices,
        **{
            "import": {
                "sources": source_facts,
                "clocks": "aligned" if all(aligned) else ("unaligned" if not any(aligned) else "partly aligned"),
            }
        },
    )
    if not all(aligned):
        lines.append(
            "clocks: "
            + (
                "none of the files carries an epoch: each keeps its own time base"
                if not any(aligned)
                else "the files without an epoch keep their own time base, apart from the others"
            )
        )
    return ImportResult(run_path, world, hosts, events_written, activities, lines)


def _timeline_facts(timelines: list[Path], info: Mapping[str, Any]) -> dict[str, Any]:
    """What the run's metadata says of its Horovod timeline: files, records, start record, cycle marks, ranks."""
    return {
        "path": [str(p) for p in timelines],
        "format": "horovod_timeline",
        **{k: v for k, v in info.items() if k in ("records", "has_start_record", "cycle_marks")},
        "epoch_aligned": bool(info.get("epoch_aligned")),
        "ranks": info.get("ranks") or [],
    }


def _workbench_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("workbench")
    except metadata.PackageNotFoundError:
        return "unknown"


def _default_name(sources: list[tuple[TraceReader | None, Path]]) -> str:
    first = sources[0][1]
    return "import-" + (first.parent.name if first.parent.name else first.stem)


def _check_readable(reader: TraceReader | None, path: Path) -> TraceReader:
    """The file's reader; one line for a file of a format this does not read, before anything is written."""
    if reader is not None and reader.refusal:
        raise TraceImportError(reader.refusal.format(path=path))
    if reader is None or (reader.kind == "activity" and reader.read is None):
        raise TraceImportError(
            f"{path} is not a trace this reads (not an XPlane, Chrome-trace JSON or Horovod timeline):"
            " pass *.xplane.pb, *.trace.json.gz or the file HOROVOD_TIMELINE wrote"
        )
    return reader


def _read_profile(reader: TraceReader, path: Path) -> DeviceTrace:
    """One profile's activity (with its rank and world size where the file says them: PyTorch's do)."""
    assert reader.read is not None  # ``_check_readable`` refused the formats without a reader
    try:
        return reader.read(path)
    except reader.errors as error:
        raise TraceImportError(str(error)) from None


def _profile_facts(trace: DeviceTrace) -> dict[str, Any]:
    working = trace.activity["kind"].isin(ev.GPU_KINDS).to_numpy()
    window = trace.window_ns
    return {
        "path": str(trace.path),
        "format": trace.format,
        "host": trace.host,
        "devices": trace.devices,
        "busy_devices": sorted(trace.activity.loc[working, "device"].unique(), key=ev.natural_order),
        "activities": int(working.sum()),
        "steps": int((trace.activity["kind"] == ev.STEP_MARKER).sum()),
        "epoch_aligned": bool(trace.epoch_aligned and window is not None and window[0] > EPOCH_NS),
    }


def _profile_line(trace: DeviceTrace, facts: dict[str, Any]) -> str:
    return (
        f"{trace.path.name}: {trace.format}, host {trace.host}: {facts['activities']} GPU activities on"
        f" {', '.join(facts['busy_devices']) or 'no GPU'} of {len(trace.devices)} GPUs, {facts['steps']} step markers"
        + ("" if facts["epoch_aligned"] else "; clock: relative to the profile's start (no epoch)")
    )


def _place_ranks(trace: DeviceTrace, *, first_rank: int) -> dict[tuple[str, str], int]:
    """``{(host, device): rank}`` for every GPU of the profile that ran something, in GPU order."""
    working = trace.activity[trace.activity["kind"].isin(ev.GPU_KINDS).to_numpy()]
    _codes, pairs = group_codes(working, ["host", "device"])
    pairs_in_order = zip(pairs["host"], pairs["device"])
    ordered = sorted(pairs_in_order, key=lambda pair: (ev.natural_order(pair[0]), ev.natural_order(pair[1])))
    return {pair: first_rank + index for index, pair in enumerate(ordered)}


def _placed_activity(trace: DeviceTrace, ranks: dict[tuple[str, str], int], run_id: str) -> pd.DataFrame:
    """The profile's activity with its rank; the host's step markers (device CPU) go to its first GPU's rank."""
    frame = trace.activity
    if frame.empty:
        return ev.DEVICE_SCHEMA.empty_table().to_pandas()
    codes, pairs = group_codes(frame, ["host", "device"])
    rank = np.asarray([ranks.get(pair, -1) for pair in zip(pairs["host"], pairs["device"])], np.int64)[codes]
    if ranks:  # the host's rows (step markers, a PyTorch trace's operators) go to its first GPU's rank
        rank[(frame["device"] == "CPU").to_numpy()] = min(ranks.values())
    return frame.assign(run_id=run_id, rank=rank)[list(ev.DEVICE_COLUMNS)]


def _write_devices(run_path: Path, activity: pd.DataFrame) -> int:
    written = 0
    for rank, rows in activity[activity["rank"] >= 0].groupby("rank", sort=True):
        rows = rows.sort_values("start_ns", kind="stable")
        table = pa.Table.from_pandas(rows.astype({"rank": "int32"}), schema=ev.DEVICE_SCHEMA, preserve_index=False)
        StreamWriter(run_path, "devices", int(rank), merge_fanout=0).write(
            {name: table[name] for name in ev.DEVICE_SCHEMA.names}
        )
        written += len(rows)
    return written


def _write_events(run_path: Path, events: pd.DataFrame) -> int:
    from workbench.profile import write_events

    return write_events(run_path, events) if len(events) else 0


def _import_timeline(
    run_path: Path, paths: list[Path], unfinished: list[dict[str, object]], hosts: dict[int, str]
) -> tuple[int, dict[str, Any], str]:
    """The timeline's events into the run (bounded memory): (events, what it held, the error that stopped it)."""
    from workbench.profile import ImportWriter

    info: dict[str, Any] = {}
    writer = ImportWriter(run_path)
    error = ""
    try:
        for batch in iter_horovod_timeline(paths, run_id=run_path.name, unfinished=unfinished, info=info):
            if hosts:
                batch["host"] = batch["rank"].map(hosts).fillna("").astype(str)
            writer.add(batch)
    except TimelineError as failure:
        error = str(failure)
    writer.flush()
    if error and not writer.written and not info:
        raise TraceImportError(error)
    return writer.written, info, error


def _timeline_line(paths: list[Path], info: dict[str, Any], written: int, error: str, unfinished: int) -> str:
    """One line on what the timeline held: its version's traits, ranks, spans, and why it gave no span."""
    name = paths[0].name if len(paths) == 1 else f"{len(paths)} fragments ({paths[0].name} ...)"
    ranks = info.get("ranks") or []
    traits = [
        "start record" if info.get("has_start_record") else "no start record (Horovod before 0.20)",
        f"{info.get('cycle_marks', 0)} cycle marks",
    ]
    if not info.get("epoch_aligned"):
        traits.append("clock: steady, no epoch")
    world = f"ranks {ev.rank_list(ranks)} named (a world of at least {max(ranks) + 1})" if ranks else "no rank named"
    text = f"{name}: Horovod timeline, {', '.join(traits)}; {world}, {written} spans"
    if info.get("skipped_records"):
        text += (
            f"; {info['skipped_records']} damaged records left out (not JSON, or values of the wrong type or"
            " range), the rest read"
        )
    if error:
        text += f"; stopped early ({error}), the spans before it kept"
    if written == 0 and unfinished:
        text += (
            f" — its {unfinished} collectives began and never ended within the file(s): the job's timeline"
            " continues in fragments not given, or the job was stopped"
        )
    return text
