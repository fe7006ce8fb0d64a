"""Read TensorFlow profiler XPlane files (``<host>.xplane.pb``) without TensorFlow, in bounded memory.

What the file holds: an ``XSpace`` protobuf, one ``XPlane`` per device (``/host:CPU``, ``/device:GPU:0``, ...),
each with ``XLine``s (a host thread, a GPU stream) of ``XEvent``s: a metadata id (the kernel's or the
TraceMe's name, kept once per plane), an offset in picoseconds after the line's ``timestamp_ns`` (ns since
the Unix epoch: the file carries its clock) and a duration; ``XStat``s add details (``step_num`` on a
step's TraceMe, ``memcpy_details`` on a copy).

Why not TensorFlow's converter (``formats.tf_profile.xplane_to_trace``): it needs TensorFlow of the
writer's version, builds the whole trace as JSON in memory and writes an ``.SSTABLE`` file beside its input.
Here the protobuf's wire format is walked by hand down to the lines (a few fields per plane) and each line
is parsed on its own by the protobuf runtime (C, ``upb``) from a memory map: memory is one line's events
at a time, and the user's folder is only read. The message layout is declared here from the public
``xplane.proto`` (field numbers), so no generated module of any TensorFlow version is imported.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

#: Events parsed per protobuf call when a line is longer: bounds the parsed objects' memory.
LINE_SLICE_BYTES = 64 << 20


class XPlaneError(ValueError):
    """A file that is not a readable XPlane profile; the message names the file and what is wrong."""


def _message_classes() -> dict[str, Any]:
    """XStat, XEvent, XLine, XEventMetadata, XStatMetadata as protobuf classes, in a pool of their own."""
    proto = descriptor_pb2.FileDescriptorProto(name="workbench_xplane.proto", package="workbench.xplane")
    proto.syntax = "proto3"
    label_one = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    label_many = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    kinds = descriptor_pb2.FieldDescriptorProto
    # a line's own fields; its events (field 4) are declared per message below
    line_fields = [
        ("id", 1, kinds.TYPE_INT64, False, ""),
        ("name", 2, kinds.TYPE_STRING, False, ""),
        ("timestamp_ns", 3, kinds.TYPE_INT64, False, ""),
        ("duration_ps", 9, kinds.TYPE_INT64, False, ""),
        ("display_id", 10, kinds.TYPE_INT64, False, ""),
        ("display_name", 11, kinds.TYPE_STRING, False, ""),
    ]
    layout: dict[str, list[tuple[str, int, int, bool, str]]] = {
        "XStat": [
            ("metadata_id", 1, kinds.TYPE_INT64, False, ""),
            ("double_value", 2, kinds.TYPE_DOUBLE, False, ""),
            ("uint64_value", 3, kinds.TYPE_UINT64, False, ""),
            ("int64_value", 4, kinds.TYPE_INT64, False, ""),
            ("str_value", 5, kinds.TYPE_STRING, False, ""),
            ("bytes_value", 6, kinds.TYPE_BYTES, False, ""),
            ("ref_value", 7, kinds.TYPE_UINT64, False, ""),
        ],
        "XEvent": [
            ("metadata_id", 1, kinds.TYPE_INT64, False, ""),
            ("offset_ps", 2, kinds.TYPE_INT64, False, ""),
            ("duration_ps", 3, kinds.TYPE_INT64, False, ""),
            ("stats", 4, kinds.TYPE_MESSAGE, True, "XStat"),
            ("num_occurrences", 5, kinds.TYPE_INT64, False, ""),
        ],
        "XLine": [*line_fields, ("events", 4, kinds.TYPE_MESSAGE, True, "XEvent")],
        "XEventMetadata": [
            ("id", 1, kinds.TYPE_INT64, False, ""),
            ("name", 2, kinds.TYPE_STRING, False, ""),
            ("display_name", 4, kinds.TYPE_STRING, False, ""),
        ],
        "XStatMetadata": [("id", 1, kinds.TYPE_INT64, False, ""), ("name", 2, kinds.TYPE_STRING, False, "")],
        # The same bytes read another way (see ``_columns``): every event of a line merged into one message whose
        # repeated fields collect each event's values in order; and the events counted as empty messages.
        "XEventColumns": [
            ("metadata_id", 1, kinds.TYPE_INT64, True, ""),
            ("offset_ps", 2, kinds.TYPE_INT64, True, ""),
            ("duration_ps", 3, kinds.TYPE_INT64, True, ""),
            ("num_occurrences", 5, kinds.TYPE_INT64, True, ""),
        ],
        "XLineColumns": [*line_fields, ("events", 4, kinds.TYPE_MESSAGE, False, "XEventColumns")],
        "Counted": [],
        # a plane's names (its map fields, as the repeated entries they are on the wire)
        "EventMetadataEntry": [
            ("key", 1, kinds.TYPE_INT64, False, ""),
            ("value", 2, kinds.TYPE_MESSAGE, False, "XEventMetadata"),
        ],
        "StatMetadataEntry": [
            ("key", 1, kinds.TYPE_INT64, False, ""),
            ("value", 2, kinds.TYPE_MESSAGE, False, "XStatMetadata"),
        ],
        "PlaneNames": [
            ("event_metadata", 4, kinds.TYPE_MESSAGE, True, "EventMetadataEntry"),
            ("stat_metadata", 5, kinds.TYPE_MESSAGE, True, "StatMetadataEntry"),
        ],
        "XLineCount": [("events", 4, kinds.TYPE_MESSAGE, True, "Counted")],
    }
    for name, fields in layout.items():
        message = proto.message_type.add(name=name)
        if name == "XStat":
            message.oneof_decl.add(name="value")
        for field_name, number, kind, repeated, type_name in fields:
            entry = message.field.add(name=field_name, number=number, type=kind)
            if name == "XStat" and number > 1:
                entry.oneof_index = 0
            entry.label = label_many if repeated else label_one
            if type_name:
                entry.type_name = f".workbench.xplane.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    # GetMessageClass since protobuf 4.22 (7.x has only it); GetPrototype before, for the protobuf 3.20-4.21 that
    # TensorFlow 2.13-2.15 environments hold
    get_class = getattr(message_factory, "GetMessageClass", None) or message_factory.MessageFactory(pool).GetPrototype
    return {name: get_class(pool.FindMessageTypeByName(f"workbench.xplane.{name}")) for name in layout}


_CLASSES = _message_classes()
XLINE, XEVENT = _CLASSES["XLine"], _CLASSES["XEvent"]
XLINE_COLUMNS, XLINE_COUNT = _CLASSES["XLineColumns"], _CLASSES["XLineCount"]
PLANE_NAMES = _CLASSES["PlaneNames"]


def _varint(data: Any, position: int, end: int) -> tuple[int, int]:
    """A protobuf varint at ``position``: (value, position after it)."""
    value = shift = 0
    while True:
        if position >= end:
            raise XPlaneError("a number runs past the end of its message")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise XPlaneError("a number longer than 10 bytes")


def _fields(data: Any, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """The fields of the message ``data[start:end]``: (number, wire type, value or payload start, payload end,
    where the field's key starts)."""
    position = start
    while position < end:
        field_start = position
        key, position = _varint(data, position, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position, end)
            yield number, wire, value, position, field_start
        elif wire == 2:
            length, position = _varint(data, position, end)
            if position + length > end:
                raise XPlaneError(f"field {number} says {length} bytes, past the end of its message")
            yield number, wire, position, position + length, field_start
            position += length
        elif wire == 1:
            position += 8
            yield number, wire, position - 8, position, field_start
        elif wire == 5:
            position += 4
            yield number, wire, position - 4, position, field_start
        else:
            raise XPlaneError(f"field {number} has wire type {wire}, which protobuf does not write")
        if position > end:
            raise XPlaneError("a field runs past the end of its message")


@dataclass
class XLineData:
    """One line's events as arrays: start and end in ns since the epoch, the metadata id of each."""

    name: str
    display_name: str
    line_id: int
    metadata_id: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    #: Per event index, the stats read for it (only events whose name was asked for): {stat name: value}.
    stats: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass
class XPlaneData:
    """One plane (a device or the host): its name, its lines, and the names behind the events' metadata ids."""

    name: str
    plane_id: int
    event_names: dict[int, str]
    lines: list[XLineData]

    @property
    def events(self) -> int:
        return sum(len(line.metadata_id) for line in self.lines)


@dataclass
class XSpaceData:
    """One ``.xplane.pb`` file: its host, planes, and where it stopped if it is damaged."""

    path: Path
    hostnames: list[str]
    planes: list[XPlaneData]
    #: "" when the whole file was read; else what was wrong, the planes before it kept.
    damage: str = ""


def read_xspace(path: str | Path, *, stats_for: Any = None, stat_keys: Any = None) -> XSpaceData:
    """Every plane of one XPlane file (``stats_for(name) -> bool`` picks the events whose stats are read;
    ``stat_keys``, a set of stat names, which of their stats: all when None).

    A file cut off or damaged part-way keeps the planes and lines before the damage (``damage`` says where).
    """
    path = Path(path)
    size = path.stat().st_size
    if size == 0:
        raise XPlaneError(f"{path} is empty: the profiler was stopped before it wrote; profile again")
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[0] not in (0x0A, 0x12, 0x1A, 0x22):  # XSpace's fields 1-4, all length-delimited
            raise XPlaneError(
                f"{path} is not an XPlane profile (it starts with byte 0x{data[0]:02x}): pass a *.xplane.pb"
                " file written by TensorFlow's profiler"
            )
        hostnames: list[str] = []
        planes: list[XPlaneData] = []
        damage = ""
        try:
            for number, _wire, start, end, _ in _fields(data, 0, size):
                if number == 1:
                    planes.append(_read_plane(data, start, end, stats_for, stat_keys))
                elif number == 4:
                    hostnames.append(bytes(data[start:end]).decode("utf-8", "replace"))
        except XPlaneError as error:
            damage = f"{error}; the {len(planes)} planes before it are kept"
        except Exception as error:  # the protobuf runtime's DecodeError and friends
            name = type(error).__name__
            damage = f"a line could not be decoded ({name}); the {len(planes)} planes before it are kept"
    if not planes and damage:
        raise XPlaneError(
            f"{path} is not a readable XPlane profile ({damage.split(';')[0]} in its first plane): copy it again"
            " from where the profiler wrote it, or profile again"
        )
    return XSpaceData(path, hostnames, planes, damage)


def _read_plane(data: Any, start: int, end: int, stats_for: Any, stat_keys: Any = None) -> XPlaneData:
    plane_id, name = 0, ""
    line_spans: list[tuple[int, int]] = []
    event_names: dict[int, str] = {}
    stat_names: dict[int, str] = {}
    metadata_fields: list[bytes] = []
    for number, _wire, value, stop, field_start in _fields(data, start, end):
        if number == 1:
            plane_id = value
        elif number == 2:
            name = bytes(data[value:stop]).decode("utf-8", "replace")
        elif number == 3:
            line_spans.append((value, stop))
        elif number in (4, 5):  # map entries: parsed together below, by the C runtime
            metadata_fields.append(data[field_start:stop])
    names = PLANE_NAMES.FromString(b"".join(metadata_fields))
    for entry in names.event_metadata:
        event_names[entry.value.id or entry.key] = entry.value.display_name or entry.value.name
    for entry in names.stat_metadata:
        stat_names[entry.value.id or entry.key] = entry.value.name
    wanted = {i for i, n in event_names.items() if stats_for is not None and stats_for(n)}
    lines = [_read_line(data, s, e, wanted, stat_names, stat_keys) for s, e in line_spans]
    return XPlaneData(name, plane_id, event_names, lines)


def _columns(data: Any, start: int, end: int, wanted: set[int]) -> XLineData | None:
    """A line's events as arrays without a Python object per event, or None where that cannot be trusted.

    Protobuf merges the occurrences of a singular message field: parsed as ``XLineColumns`` (events declared
    singular), all events become one message whose repeated fields hold every event's metadata id, offset
    and duration in order, built by the C runtime. Proto3 omits zeros, so the columns line up only when each
    holds one value per event (counted by parsing the events as empty messages); the usual exception, the
    first event at the line's own timestamp (offset 0), is checked and mended. Lines with events whose stats
    are wanted, and any other mismatch, take the per-event path (None).
    """
    blob = data[start:end]
    line = XLINE_COLUMNS.FromString(blob)
    count = len(XLINE_COUNT.FromString(blob).events)
    events = line.events
    ids = np.fromiter(events.metadata_id, np.int64, len(events.metadata_id))
    offsets = np.fromiter(events.offset_ps, np.int64, len(events.offset_ps))
    durations = np.fromiter(events.duration_ps, np.int64, len(events.duration_ps))
    if len(events.num_occurrences) or len(ids) != count or len(durations) != count:
        return None
    if len(offsets) == count - 1 and count:
        first = next((s, e) for number, _w, s, e, _ in _fields(data, start, end) if number == 4)
        if XEVENT.FromString(data[first[0] : first[1]]).offset_ps != 0:
            return None
        offsets = np.r_[np.int64(0), offsets]
    if len(offsets) != count or (wanted and np.isin(ids, list(wanted)).any()):
        return None
    start_ns, end_ns = _event_times_ns(line.timestamp_ns, offsets, durations)
    return XLineData(
        name=line.name,
        display_name=line.display_name or line.name,
        line_id=line.id,
        metadata_id=ids,
        start_ns=start_ns,
        end_ns=end_ns,
    )


def _event_times_ns(timestamp_ns: int, offset_ps: np.ndarray, duration_ps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events' start and end in ns since the epoch, exact in int64.

    The line's timestamp in picoseconds (~1.7e21) is past int64: numpy 1 made such sums Python objects, numpy 2
    refuses them (OverflowError). The timestamp is whole nanoseconds, so ``(T*1000 + o) // 1000 == T + o // 1000``.
    """
    timestamp = np.int64(timestamp_ns)
    return timestamp + offset_ps // 1000, timestamp + (offset_ps + np.maximum(duration_ps, 0)) // 1000


def _read_line(
    data: Any, start: int, end: int, wanted: set[int], stat_names: dict[int, str], stat_keys: Any = None
) -> XLineData:
    """One line: parsed whole by upb when it is at most ``LINE_SLICE_BYTES``; a longer one has its own fields
    walked by hand and its events parsed in slices of about that size (bounded memory, per-event Python only
    for the walk)."""
    if end - start <= LINE_SLICE_BYTES:
        fast = _columns(data, start, end, wanted)
        if fast is not None:
            return fast
    head = bytearray()
    slices: list[tuple[int, int]] = []
    if end - start <= LINE_SLICE_BYTES:
        slices.append((start, end))
    else:
        slice_start = slice_end = -1
        for number, wire, value, stop, field_start in _fields(data, start, end):
            if number == 4:
                if slice_start < 0 or stop - slice_start > LINE_SLICE_BYTES or field_start != slice_end:
                    if slice_start >= 0:
                        slices.append((slice_start, slice_end))
                    slice_start = field_start
                slice_end = stop
            else:
                head += _field_bytes(data, number, wire, value, stop)
        if slice_start >= 0:
            slices.append((slice_start, slice_end))
        head_line = XLINE.FromString(bytes(head))
    if end - start <= LINE_SLICE_BYTES:
        head_line = XLINE.FromString(data[start:end])
    line = head_line
    ids, starts, durations = [], [], []
    stats: dict[int, dict[str, Any]] = {}
    counted = 0
    for first, last in slices:
        events = line.events if (first, last) == (start, end) else XLINE.FromString(data[first:last]).events
        flat = np.fromiter((v for e in events for v in (e.metadata_id, e.offset_ps, e.duration_ps)), np.int64)
        flat = flat.reshape(-1, 3)
        ids.append(flat[:, 0])
        starts.append(flat[:, 1])
        durations.append(flat[:, 2])
        if wanted:
            named = {i for i, n in stat_names.items() if n in stat_keys} if stat_keys is not None else None
            for index in np.flatnonzero(np.isin(flat[:, 0], list(wanted))).tolist():
                stats[counted + index] = {
                    stat_names.get(s.metadata_id, str(s.metadata_id)): _stat_value(s, stat_names)
                    for s in events[index].stats
                    if named is None or s.metadata_id in named
                }
        counted += len(flat)
        del events
    offset = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    duration = np.concatenate(durations) if durations else np.zeros(0, np.int64)
    start_ns, end_ns = _event_times_ns(line.timestamp_ns, offset, duration)
    return XLineData(
        name=line.name,
        display_name=line.display_name or line.name,
        line_id=line.id,
        metadata_id=np.concatenate(ids) if ids else np.zeros(0, np.int64),
        start_ns=start_ns,
        end_ns=end_ns,
        stats=stats,
    )


def _field_bytes(data: Any, number: int, wire: int, value: int, stop: int) -> bytes:
    """A line's own field (not an event) written back in wire format, for the protobuf runtime to parse."""
    key = encode_varint((number << 3) | wire)
    if wire == 0:
        return key + encode_varint(value)
    if wire == 2:
        return key + encode_varint(stop - value) + bytes(data[value:stop])
    return key + bytes(data[value:stop])


def encode_varint(value: int) -> bytes:
    """A protobuf varint (``_varint`` reads it): also what the made profiles are written with."""
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _stat_value(stat: Any, stat_names: dict[int, str]) -> Any:
    """A stat's value, whichever kind it holds; ``ref_value`` is a string kept once among the stat names."""
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, kind) if kind else 0
