"""GPU activity from the profiles a GPU cluster writes: TensorFlow's XPlane, its trace-viewer JSON, TF1's timeline.

Each file becomes one ``DeviceTrace``: per device (``GPU:0`` ...) the kernels, copies and collective kernels
on its streams, and the step markers (the GPU plane's ``Steps`` line, else the host's TraceMe events that
carry ``step_num``), as rows of ``events.DEVICE_SCHEMA`` (rank not yet known: the importer places them).

How an activity is classified, by its name (the kernel's, or the copy's) and its lane's:
- a copy: ``MemcpyH2D``/``Memcpy HtoD`` (host to device), ``D2H``/``DtoH``, ``D2D``/``DtoD``,
  ``P2P``/``PtoP``/``Peer``; ``Memset``;
- a collective kernel: NCCL's (``ncclKernel_*``, ``ncclDevKernel_*``, ``ncclAllReduce...``) and the
  collective kernels of other libraries named so (``AllReduce``, ``all_reduce``, ``AllGather``, ``ReduceScatter``);
- else a compute kernel.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from workbench import events as ev
from workbench.formats.registry import FileStart, TraceFormatError, TraceReader, register_reader
from workbench.formats.xplane import XPlaneError, XSpaceData, read_xspace

#: Lines TensorFlow derives on a GPU plane from its streams (they repeat the streams' time): not activity.
DERIVED_LINES = frozenset(
    {
        "Steps",
        "TensorFlow Ops",
        "TensorFlow Name Scope",
        "XLA Ops",
        "XLA Modules",
        "Framework Ops",
        "Framework Name Scope",
        "Source code",
        "Launch Stats",
        "XLA TraceMe",
        "Async XLA Ops",
    }
)
_GPU_PLANE = re.compile(r"/device:GPU:(\d+)")
#: A TF1 timeline's per-stream process of a GPU (``/device:GPU:0/stream:14 Compute``, ``.../memcpy Compute``).
_TF1_STREAM = re.compile(r"device:GPU:\d+/(stream:\d+|memcpy)")
_COLLECTIVE = re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast_?kernel", re.I)
_COPY_DIRECTIONS = (
    ("memcpy_h2d", re.compile(r"h2d|htod|host\s*to\s*device", re.I)),
    ("memcpy_d2h", re.compile(r"d2h|dtoh|device\s*to\s*host", re.I)),
    ("memcpy_p2p", re.compile(r"p2p|ptop|peer", re.I)),
    ("memcpy_d2d", re.compile(r"d2d|dtod|device\s*to\s*device", re.I)),
)
#: Host TraceMe names that mark a training step in TF2 (Keras' fit, tf.profiler.experimental.Trace/StepMarker).
HOST_STEP_NAMES = frozenset({"train", "train_step", "TraceContext", "StepMarker", "train_function", "test", "predict"})


#: A trace's times are µs (Chrome trace, Kineto): past this many (year 2176 since 1970) they are damage (in ns,
#: with a header's base time below 2^61 added, they would overflow int64).
MAX_TRACE_US = 6.5e15
#: Longest activity taken as real, µs (a week): a duration past it is damage, not a kernel.
MAX_DURATION_US = 7 * 86400e6


def as_number(value: Any) -> float:
    """A JSON value as a float; NaN where it is not a number (a string of digits counts: some writers quote them)."""
    if isinstance(value, bool) or value is None:
        return float("nan")
    if isinstance(value, (int, float)):
        return float(value) if abs(value) < 1e300 else float("nan")
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return float("nan")
    return float("nan")


def usable_times(ts_us: np.ndarray, dur_us: np.ndarray) -> np.ndarray:
    """Rows whose start and duration (µs) make sense: finite, not negative, within ``MAX_TRACE_US`` and
    ``MAX_DURATION_US``; the others are damage, left out and counted (``dropped_note``)."""
    with np.errstate(invalid="ignore"):
        return (
            np.isfinite(ts_us) & np.isfinite(dur_us) & (ts_us >= 0) & (ts_us < MAX_TRACE_US)
            & (dur_us >= 0) & (dur_us <= MAX_DURATION_US)
        )  # fmt: skip


def dropped_note(path: Path, dropped: int, total: int) -> list[str]:
    """The import's line for events left out for times that make no sense (none when nothing was)."""
    if not dropped:
        return []
    return [
        f"{path.name}: {dropped} of {total} events left out: a start or duration that is missing, negative, or past"
        f" {MAX_DURATION_US / 86400e6:.0f} days (damage in the file; the rest is analysed)"
    ]


def not_objects_note(path: Path, count: int) -> list[str]:
    """The import's line for records of ``traceEvents`` that are not objects (none when there are none)."""
    return [f"{path.name}: {count} records of traceEvents are not objects: left out"] if count else []


def hashable(value: Any) -> Any:
    """A JSON value usable as a key (a pid or tid written as a list or object becomes its text)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else json.dumps(value, sort_keys=True)


def args_of(record: dict) -> dict:
    """A record's ``args`` object ({} where missing or not an object)."""
    args = record.get("args")
    return args if isinstance(args, dict) else {}


def activity_kind(name: str, lane: str = "") -> str:
    """``events.DEVICE_KINDS`` entry of one activity on a GPU, from its name and its lane's (see module docstring)."""
    text = f"{name} {lane}" if "memcpy" in lane.lower() and "memcpy" not in name.lower() else name
    low = text.lower()
    if "memset" in low:
        return ev.MEMSET
    if "memcpy" in low:
        for kind, pattern in _COPY_DIRECTIONS:
            if pattern.search(text):
                return kind
        return "memcpy_d2d"
    if _COLLECTIVE.search(name):
        return ev.COLLECTIVE
    return ev.KERNEL


def _kinds(names: pd.Series, lanes: pd.Series) -> np.ndarray:
    """``activity_kind`` of every row, computed once per distinct (name, lane)."""
    pairs = pd.DataFrame({"name": names.astype(str), "lane": lanes.astype(str)})
    distinct = pairs.drop_duplicates()
    kinds = [activity_kind(n, lane) for n, lane in zip(distinct["name"], distinct["lane"])]
    lookup = dict(zip(zip(distinct["name"], distinct["lane"]), kinds))
    return np.asarray([lookup[pair] for pair in zip(pairs["name"], pairs["lane"])], dtype=object)


@dataclass
class DeviceTrace:
    """What one profile file holds of one host: its devices' activity and step markers, and how it was read."""

    path: Path
    format: str
    host: str
    #: ``DEVICE_COLUMNS`` less ``run_id``/``rank`` (the importer sets them); ``device`` "CPU" for host step markers.
    activity: pd.DataFrame
    #: Devices the file names, busy or not (``GPU:0`` ...): a GPU with no activity was idle the whole profile.
    devices: list[str]
    #: True when the timestamps are ns since the Unix epoch (XPlane); False when relative to the profile's start.
    epoch_aligned: bool
    notes: list[str] = field(default_factory=list)
    #: The rank the file says it was (PyTorch's ``distributedInfo.rank``); None: placed in the files' order.
    rank: int | None = None
    #: The job's world size where the file says it (PyTorch's): the import says when only some ranks were given.
    world_size: int | None = None

    @property
    def window_ns(self) -> tuple[int, int] | None:
        """The profile's span: first start to last end of any activity."""
        if self.activity.empty:
            return None
        return int(self.activity["start_ns"].min()), int(self.activity["end_ns"].max())


_STRING_COLUMNS = ("host", "device", "stream", "kind", "name")


def activity_frame(rows: dict[str, Any]) -> pd.DataFrame:
    """Activity rows (``DEVICE_COLUMNS`` less run and rank); strings as categoricals, one value given once."""
    columns = [c for c in ev.DEVICE_COLUMNS if c not in ("run_id", "rank")]
    lengths = [len(v) for v in rows.values() if not isinstance(v, str)]
    n = lengths[0] if lengths else 0
    out: dict[str, Any] = {}
    for column in columns:
        value = rows.get(column, "" if column in _STRING_COLUMNS else -1)
        if column in _STRING_COLUMNS:
            if isinstance(value, str):
                value = pd.Categorical.from_codes(np.zeros(n, np.int8), categories=[value])
            elif not isinstance(value, pd.Categorical):
                value = pd.Categorical(np.asarray(value, dtype=object))
            if any(isinstance(c, str) and ev.writable_text(c) != c for c in value.categories):
                value = ev.labelled_codes(value.codes, list(value.categories))  # a name that cannot be stored as is
        else:
            value = np.full(n, value, np.int64) if np.isscalar(value) else np.asarray(value, np.int64)
        out[column] = value
    return pd.DataFrame(out, columns=columns)


def concat_activity(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Activity frames as one, their categoricals' labels united (``pd.concat`` would make them objects)."""
    parts = [part for part in parts if len(part)]
    if not parts:
        return activity_frame({})
    out = {}
    for column in parts[0].columns:
        values = [part[column] for part in parts]
        if isinstance(values[0].dtype, pd.CategoricalDtype):
            out[column] = union_categoricals(same_category_dtype([pd.Categorical(v) for v in values]))
        else:
            out[column] = np.concatenate([v.to_numpy() for v in values])
    return pd.DataFrame(out, columns=list(parts[0].columns))


def same_category_dtype(categoricals: list[pd.Categorical]) -> list[pd.Categorical]:
    """Categoricals whose labels share one dtype, as ``union_categoricals`` needs.

    pandas 3 infers the ``str`` dtype for labels given as strings but keeps ``object`` for an object array, so
    frames of one trace can differ; their labels become the default string dtype (``object`` on pandas 2).
    """
    if len({str(c.categories.dtype) for c in categoricals}) <= 1:
        return categoricals
    return [pd.Categorical.from_codes(c.codes, categories=pd.Index(c.categories.astype(str))) for c in categoricals]


def _host_of(path: Path, suffixes: tuple[str, ...]) -> str:
    name = path.name
    for suffix in suffixes:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def read_xplane_activity(path: str | Path) -> DeviceTrace:
    """One ``<host>.xplane.pb``: every GPU plane's stream activity and steps, and the host's step markers."""
    path = Path(path)
    space: XSpaceData = read_xspace(
        path,
        stats_for=lambda name: name in HOST_STEP_NAMES or "memcpy" in name.lower(),
        stat_keys={"step_num", "memcpy_details"},
    )
    host = space.hostnames[0] if space.hostnames else _host_of(path, (".xplane.pb",))
    parts: list[pd.DataFrame] = []
    devices: list[str] = []
    for plane in space.planes:
        match = _GPU_PLANE.search(plane.name)
        if match:
            device = f"GPU:{match.group(1)}"
            devices.append(device)
            streams = [line for line in plane.lines if line.name not in DERIVED_LINES]
            for line in streams:
                if len(line.metadata_id) == 0:
                    continue
                lane = line.display_name or line.name or f"line {line.line_id}"
                # per distinct metadata id, not per event: a gigabyte holds tens of millions of events
                distinct, inverse = np.unique(line.metadata_id, return_inverse=True)
                labels = np.asarray([plane.event_names.get(int(i), str(i)) for i in distinct], dtype=object)
                kinds = np.asarray([activity_kind(label, lane) for label in labels], dtype=object)
                parts.append(
                    activity_frame(
                        {
                            "host": host,
                            "device": device,
                            "stream": lane,
                            "kind": ev.labelled_codes(inverse, kinds),
                            "name": ev.labelled_codes(inverse, labels),
                            "bytes": _copy_bytes(line.stats, len(line.metadata_id)),
                            "start_ns": line.start_ns,
                            "end_ns": line.end_ns,
                        }
                    )
                )
            for line in plane.lines:
                if line.name == "Steps" and len(line.metadata_id):
                    labels = [plane.event_names.get(int(i), "") for i in line.metadata_id]
                    steps = [int(label) if label.isdigit() else k for k, label in enumerate(labels)]
                    parts.append(_step_rows(host, device, line.start_ns, line.end_ns, steps))
        elif plane.name.startswith("/host:"):
            for line in plane.lines:
                marked = [(index, facts) for index, facts in line.stats.items() if "step_num" in facts]
                if not marked:
                    continue
                rows = np.asarray([index for index, _ in marked])
                steps = [int(facts["step_num"]) for _, facts in marked]
                parts.append(_step_rows(host, "CPU", line.start_ns[rows], line.end_ns[rows], steps))
    notes = [f"{path.name}: damaged part-way ({space.damage})"] if space.damage else []
    return DeviceTrace(path, "xplane", host, concat_activity(parts), devices, True, notes)


_COPY_SIZE = re.compile(r"size:(\d+)")


def _copy_bytes(stats: dict[int, dict[str, Any]], n: int) -> np.ndarray:
    """Bytes of each copy its ``memcpy_details`` stat names (``size:4096 dest:0 async:1``); -1 elsewhere."""
    out = np.full(n, -1, np.int64)
    for index, facts in stats.items():
        match = _COPY_SIZE.search(str(facts.get("memcpy_details", "")))
        if match:
            out[index] = int(match.group(1))
    return out


def _step_rows(host: str, device: str, start: np.ndarray, end: np.ndarray, steps: list[int]) -> pd.DataFrame:
    return activity_frame(
        {
            "host": host,
            "device": device,
            "stream": "Steps",
            "kind": ev.STEP_MARKER,
            "name": [f"step {s}" for s in steps],
            "step": np.asarray(steps, np.int64),
            "start_ns": np.asarray(start, np.int64),
            "end_ns": np.asarray(end, np.int64),
        }
    )


#: Largest JSON trace read into memory, decompressed (bytes); larger is refused with a line saying so.
MAX_JSON_BYTES = 4 << 30


def load_json_trace(path: Path, *, limit: int = MAX_JSON_BYTES, notes: list[str] | None = None) -> Any:
    """A Chrome-trace JSON file (gzip or not) as Python objects; damaged or oversized files are one line.

    A JSON array never closed (a job stopped while writing) is read up to its last whole record. ``notes``
    gets a line for damage read past (a gzip stream damaged after its good part).
    """
    text = read_trace_bytes(path, limit=limit, notes=notes)
    try:
        return parse_json_bytes(text)
    except ValueError as error:
        recovered = _recover_unclosed(text)
        if recovered is None:
            what = f"{error.msg} at byte {error.pos}" if isinstance(error, json.JSONDecodeError) else str(error)
            raise TraceFormatError(
                f"{path} is not valid JSON ({what}): damaged after it was written (copy it again) or not a"
                " Chrome-trace file (pass TensorBoard's *.trace.json.gz or TF1's timeline JSON)"
            ) from None
        return recovered


def parse_json_bytes(text: bytes) -> Any:
    """JSON from bytes; bytes that are not UTF-8 (a name cut mid-character) become U+FFFD rather than refuse the
    file."""
    try:
        return json.loads(text)
    except UnicodeDecodeError:
        return json.loads(text.decode("utf-8", "replace"))


def read_trace_bytes(path: Path, *, limit: int = MAX_JSON_BYTES, notes: list[str] | None = None) -> bytes:
    """A trace file's bytes, gunzipped in pieces when compressed and refused once past ``limit`` (a file that
    expands past what this machine can hold is stopped before it fills the memory). A gzip stream damaged
    part-way gives what comes before the damage, and a line in ``notes`` says so."""
    import zlib

    raw = path.read_bytes() if path.stat().st_size else b""
    if not raw:
        raise TraceFormatError(f"{path} is empty: the job wrote nothing into it; pass the file once written")
    if raw[:2] == b"\x1f\x8b":
        out = bytearray()
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        damaged = ""
        try:
            for position in range(0, len(raw), 1 << 20):
                out += inflater.decompress(raw[position : position + (1 << 20)], limit + 1 - len(out))
                if inflater.unconsumed_tail or len(out) > limit:
                    break
        except zlib.error as error:
            damaged = str(error)
            out = _inflate_until_damage(raw, limit)  # the piece that failed held good data before its damage
        if len(out) > limit:
            raise TraceFormatError(
                f"{path} expands past {limit / 2**30:.1f} GiB: too large to read here; split the profile"
                " (fewer steps per trace) or read it on a machine with more memory"
            )
        if damaged and not out:
            raise TraceFormatError(f"{path} is not readable gzip ({damaged}): copy it again from where it was written")
        if damaged and notes is not None:
            notes.append(
                f"{path.name}: the gzip stream is damaged ({damaged}) after {len(out):,} bytes: what comes before"
                " is read; copy the file again from where it was written for the rest"
            )
        return bytes(out)
    return raw


def _inflate_until_damage(raw: bytes, limit: int) -> bytearray:
    """A gzip member's bytes up to where its deflate stream breaks (no CRC check: the check is what failed)."""
    import zlib

    flags, at = raw[3] if len(raw) > 3 else 0, 10
    try:
        if flags & 4:  # FEXTRA
            at += 2 + int.from_bytes(raw[at : at + 2], "little")
        for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
            if flags & flag:
                at = raw.index(b"\0", at) + 1
        if flags & 2:  # FHCRC
            at += 2
    except ValueError:
        return bytearray()
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    out = bytearray()
    for position in range(at, len(raw), 4096):
        try:
            out += inflater.decompress(raw[position : position + 4096], limit + 1 - len(out))
        except zlib.error:
            break
        if inflater.unconsumed_tail or len(out) > limit or inflater.eof:
            break
    return out


def _recover_unclosed(text: bytes) -> Any:
    """The records of a trace whose JSON was cut off: up to its last whole record, the rest dropped."""
    body = text.rstrip()
    for end in range(len(body), 0, -1):
        if body[end - 1 : end] != b"}":
            continue
        for closing in (b"]}", b"]"):
            try:
                return json.loads(body[:end] + closing)
            except ValueError:
                continue
        if len(body) - end > 1 << 20:  # no whole record in the last MB: not a cut-off trace
            return None
    return None


def read_json_activity(path: str | Path) -> DeviceTrace:
    """A TensorBoard ``*.trace.json.gz`` (trace viewer) or TF1's client timeline (Chrome-trace JSON).

    Processes named ``/device:GPU:N`` (TF2) or ``.../device:GPU:N ...`` (TF1, one process per stream) are
    the GPUs; each thread of a GPU process is a lane. Timestamps are µs after the profile's start: no epoch.
    """
    path = Path(path)
    notes: list[str] = []
    data = load_json_trace(path, notes=notes)
    records = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(records, list):
        raise TraceFormatError(f"{path} has no traceEvents list: pass a Chrome-trace file")
    process: dict[Any, str] = {}
    thread: dict[tuple[Any, Any], str] = {}
    for record in records:
        if isinstance(record, dict) and record.get("ph") == "M":
            name = str(args_of(record).get("name", ""))
            if record.get("name") == "process_name":
                process[hashable(record.get("pid"))] = name
            elif record.get("name") == "thread_name":
                thread[(hashable(record.get("pid")), hashable(record.get("tid")))] = name
    gpu_of = {pid: f"GPU:{m.group(1)}" for pid, name in process.items() if (m := _GPU_PLANE.search(name))}
    # TF1 names a GPU's ops (launched from the host) apart from its streams' kernels: where a GPU has streams,
    # its kernels and copies are the activity, its ops would count them twice
    streamed = {gpu_of[pid] for pid, name in process.items() if pid in gpu_of and _TF1_STREAM.search(name)}
    gpu_of = {
        pid: device
        for pid, device in gpu_of.items()
        if device not in streamed or _TF1_STREAM.search(process[pid]) or "/stream:all" in process[pid]
    }
    host_pids = {pid for pid, name in process.items() if "/host:" in name or ("CPU" in name and pid not in gpu_of)}
    rows: dict[str, list[Any]] = {k: [] for k in ("device", "stream", "name", "start_ns", "end_ns", "step")}
    spans = dropped = 0
    not_objects = sum(not isinstance(record, dict) for record in records)
    for record in records:
        if not isinstance(record, dict) or record.get("ph") != "X" or "ts" not in record:
            continue
        pid = hashable(record.get("pid"))
        name = str(record.get("name", ""))
        args = args_of(record)
        if pid not in gpu_of and not (pid in host_pids and ("step_num" in args or name in HOST_STEP_NAMES)):
            continue
        spans += 1
        ts, dur = as_number(record["ts"]), as_number(record.get("dur", 0) or 0)
        if not (0 <= ts < MAX_TRACE_US and 0 <= dur <= MAX_DURATION_US):  # NaN fails both: ``usable_times``
            dropped += 1
            continue
        start = round(ts * 1000)
        end = start + round(dur * 1000)
        if pid in gpu_of:
            lane = thread.get((pid, hashable(record.get("tid"))), "")
            process_name = process.get(pid, "")
            if "/stream:all" in process_name or "Tensors" in process_name:
                continue  # TF1's summary of every stream, and its tensor lifetimes: not more activity
            lane = lane or process_name.split(gpu_of[pid])[-1].strip(" /") or f"tid {record.get('tid')}"
            rows["device"].append(gpu_of[pid])
            rows["stream"].append(lane)
            rows["step"].append(-1)
        elif pid in host_pids and ("step_num" in args or name in HOST_STEP_NAMES):
            rows["device"].append("CPU")
            rows["stream"].append("Steps")
            step = args.get("step_num")
            rows["step"].append(int(step) if str(step).isdigit() and len(str(step)) < 16 else -1)
        rows["name"].append(name)
        rows["start_ns"].append(start)
        rows["end_ns"].append(max(end, start))
    host = _host_of(path, (".trace.json.gz", ".trace.json", ".json.gz", ".json"))
    is_step = np.asarray([device == "CPU" for device in rows["device"]], bool)
    kinds = np.full(len(is_step), ev.STEP_MARKER, dtype=object)
    names, lanes = np.asarray(rows["name"], dtype=object), np.asarray(rows["stream"], dtype=object)
    kinds[~is_step] = _kinds(pd.Series(names[~is_step]), pd.Series(lanes[~is_step]))
    frame = activity_frame({**rows, "host": host, "kind": kinds})
    steps = frame.loc[is_step, "step"].to_numpy()
    if is_step.any() and (steps < 0).any():  # markers without their number: counted in order
        frame.loc[is_step, "step"] = np.arange(int(is_step.sum()))
    fmt = "tf1_timeline" if any("/job:" in name for name in process.values()) else "trace_json"
    devices = sorted(set(gpu_of.values()), key=_device_order)
    notes += not_objects_note(path, not_objects) + dropped_note(path, dropped, spans)
    return DeviceTrace(path, fmt, host, frame, devices, False, notes)


def _device_order(device: str) -> tuple[str, int]:
    kind, _, number = device.partition(":")
    return kind, int(number) if number.isdigit() else -1


#: Why the two TensorFlow profile readers' failures are the file's: damage, a format they do not read, I/O.
READ_ERRORS = (XPlaneError, TraceFormatError, OSError)
_JSON_TRACE_NAMES = (".trace.json.gz", ".trace.json", ".json.gz")

register_reader(
    TraceReader(
        "xplane",
        ("*.xplane.pb",),
        lambda file: file.name.endswith(".xplane.pb"),
        read=read_xplane_activity,
        errors=READ_ERRORS,
        precedence=10,
    )
)
register_reader(
    TraceReader(
        "old_trace",
        ("*.trace",),
        lambda file: file.name.endswith(".trace"),
        refusal=(
            "{path} is TensorBoard's older *.trace protobuf, which this does not read: open the profile"
            " in TensorBoard 2.x and pass the *.xplane.pb (or trace.json.gz) it writes"
        ),
        precedence=10,
    )
)


def _is_json_trace(file: FileStart) -> bool:
    """A JSON object (Kineto's, asked first, has its own keys), or a damaged file named as a trace: its reader
    says what is wrong with it."""
    head = file.head
    return head.startswith(b"{") if head is not None else file.name.endswith(_JSON_TRACE_NAMES)


register_reader(
    TraceReader(
        "trace_json",
        ("*.trace.json.gz", "*.trace.json", "*.json", "*.json.gz"),
        _is_json_trace,
        read=read_json_activity,
        errors=READ_ERRORS,
        precedence=40,
    )
)

__all__ = [
    "DeviceTrace",
    "TraceFormatError",
    "XPlaneError",
    "activity_kind",
    "load_json_trace",
    "read_json_activity",
    "read_xplane_activity",
]
