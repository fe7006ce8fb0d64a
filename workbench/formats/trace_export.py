"""A whole run as one trace for the viewers people already use: ui.perfetto.dev and chrome://tracing.

The format is the Trace Event Format's JSON (what Horovod's timeline and TF's profiler write, and
what both viewers open): one process per host, named with its ranks; per rank a thread of its own
spans (they nest: a step holds its allreduce) and a thread of Horovod's collectives in flight (they
overlap the rank's spans, so they cannot share its thread); memory and counters as counter tracks.
Times are µs since the run's first record.

Streamed: the run's part files are read one at a time, ``BATCH_ROWS`` rows at a time, and written
as they come, the rows turned into JSON lines by Arrow's compute kernels (strings escaped once per
distinct value in the batch), so memory stays that of one batch however large the run. The
processes' and threads' names go at the end, once every rank's host is known; the viewers read
them wherever they are. ``.gz`` at the end of the file name compresses it (both viewers open
gzipped traces).
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workbench import events as ev
from workbench.store import STREAMS, TIME_COLUMNS, read_run_meta, stream_files

#: Rows turned into text at a time: what the export holds in memory, whatever the run's size.
BATCH_ROWS = 32_768
#: Compression level of a ``.gz`` export (1: fastest).
GZIP_LEVEL = 1
#: Thread ids: each rank's own spans on ``2 * rank``, Horovod's collectives in flight on ``2 * rank + 1``.
THREADS_PER_RANK = 2


@dataclass
class TraceExport:
    """What ``export_trace`` wrote: the file, its size, and what went into it."""

    path: Path
    bytes_written: int
    spans: int
    samples: int
    ranks: int
    hosts: int
    seconds: float
    #: Spans per rank (what a reader of the file must find).
    spans_per_rank: dict[int, int] = field(default_factory=dict)


class _Layout:
    """Hosts as processes (numbered as first seen), ranks as threads; names written at the end."""

    def __init__(self) -> None:
        self.pid_of_host: dict[str, int] = {}
        self.host_of_rank: dict[int, str] = {}
        self.in_flight_ranks: set[int] = set()
        #: ``"rank|device|stream"`` of imported GPU activity -> its thread id.
        self.device_lanes: dict[str, int] = {}

    def device_tid(self, lane: str) -> int:
        return self.device_lanes.setdefault(lane, DEVICE_TID_BASE + len(self.device_lanes))

    def pids(self, hosts: pa.ChunkedArray | pa.Array) -> pa.Array:
        """The process id of each row's host, as text."""
        encoded = pc.dictionary_encode(hosts.combine_chunks() if isinstance(hosts, pa.ChunkedArray) else hosts)
        ids = [
            self.pid_of_host.setdefault(str(host), len(self.pid_of_host) + 1) for host in encoded.dictionary.to_pylist()
        ]
        return pc.take(pa.array([str(i) for i in ids], pa.string()), encoded.indices)

    def known_hosts(self, run_path: Path) -> None:
        """Each rank's host from its rank file (``ranks/rank-N.json``), for rows that carry none."""
        for entry in sorted((run_path / "ranks").glob("rank-*.json")):
            try:
                facts = json.loads(entry.read_text())
                if facts.get("host"):
                    self.host_of_rank[int(facts["rank"])] = str(facts["host"])
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def with_hosts(self, table: pa.Table) -> pa.Table:
        """``table`` with each empty ``host`` (events imported from Horovod's timeline) set to its rank's."""
        hosts = table["host"]
        empty = pc.equal(hosts, "")
        if not self.host_of_rank or not pc.any(empty).as_py():
            return table
        lookup = [""] * (max(self.host_of_rank) + 1)
        for rank, host in self.host_of_rank.items():
            lookup[rank] = host
        ranks = pc.cast(table["rank"], pa.int64())
        inside = pc.if_else(pc.less(ranks, len(lookup)), ranks, 0)
        theirs = pc.take(pa.array(lookup, pa.string()), inside)
        filled = pc.if_else(empty, theirs, pc.cast(hosts, pa.string()))
        return table.set_column(table.schema.get_field_index("host"), "host", filled)

    def note(self, ranks: pa.Array, hosts: pa.Array) -> None:
        pairs = pa.table({"rank": ranks, "host": hosts}).group_by(["rank", "host"]).aggregate([])
        for rank, host in zip(pairs["rank"].to_pylist(), pairs["host"].to_pylist()):
            self.host_of_rank.setdefault(int(rank), str(host))

    def metadata(self) -> Iterator[dict[str, Any]]:
        """Process and thread names and their order: hosts by name, ranks by number."""
        ranks_of: dict[str, list[int]] = {}
        for rank, host in sorted(self.host_of_rank.items()):
            ranks_of.setdefault(host, []).append(rank)
        for order, host in enumerate(sorted(self.pid_of_host, key=ev.natural_order)):
            pid = self.pid_of_host[host]
            label = f"{host or 'unknown host'} (ranks {ev.rank_list(ranks_of.get(host, []))})"
            yield {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}}
            yield {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": order}}
        for rank, host in sorted(self.host_of_rank.items()):
            pid = self.pid_of_host.get(host, 0)
            tracks = [(0, f"rank {rank}")]
            if rank in self.in_flight_ranks:
                tracks.append((1, f"rank {rank} · Horovod in flight"))
            for offset, name in tracks:
                tid = THREADS_PER_RANK * rank + offset
                yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
                yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        for lane, tid in sorted(self.device_lanes.items(), key=lambda item: ev.natural_order(item[0])):
            rank_text, device, stream = lane.split("|", 2)
            pid = self.pid_of_host.get(self.host_of_rank.get(int(rank_text), ""), 0)
            name = f"rank {rank_text} · {device} · {stream}"
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
            yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}



def _json_strings(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each value as a JSON string literal (quoted, escaped), escaping each distinct value once."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        dictionary, indices = array.dictionary, array.indices
    else:
        encoded = pc.dictionary_encode(array)
        dictionary, indices = encoded.dictionary, encoded.indices
    escaped = pa.array(
        [json.dumps(value if value is not None else "") for value in dictionary.to_pylist()], pa.string()
    )
    return pc.take(escaped, indices)


def _micros(nanoseconds: pa.Array, origin: int) -> pa.Array:
    """ns since the epoch -> µs since ``origin`` as text (shortest exact decimal)."""
    relative = pc.subtract(pc.cast(nanoseconds, pa.int64()), pa.scalar(origin, pa.int64()))
    return pc.cast(pc.divide(pc.cast(relative, pa.float64()), 1000.0), pa.string())


def _text(values: pa.Array) -> pa.Array:
    return pc.cast(values, pa.string())


def _span_lines(table: pa.Table, origin: int, layout: _Layout) -> pa.Array:
    """One ``"ph":"X"`` line per span (each ending with ",\\n")."""
    rank = pc.cast(table["rank"], pa.int64())
    overlap = pc.is_in(table["phase"], value_set=pa.array(sorted(ev.OVERLAP_PHASES), pa.string()))
    tid = pc.add(pc.multiply(rank, THREADS_PER_RANK), pc.cast(overlap, pa.int64()))
    if pc.any(overlap).as_py():
        layout.in_flight_ranks.update(pc.unique(pc.filter(rank, overlap)).to_pylist())
    detail = pc.if_else(
        pc.equal(table["detail"], ""),
        pa.scalar("", pa.string()),
        pc.binary_join_element_wise(',"detail":', _json_strings(table["detail"]), ""),
    )
    nbytes = pc.if_else(
        pc.less(table["bytes"], 0),
        pa.scalar("", pa.string()),
        pc.binary_join_element_wise(',"bytes":', _text(table["bytes"]), ""),
    )
    return _complete_lines(table, origin, layout, tid, "phase", ',"epoch":', _text(table["epoch"]), detail, nbytes)


def _complete_lines(
    table: pa.Table, origin: int, layout: _Layout, tid: pa.Array, category: str, *args: Any
) -> pa.Array:
    """``"ph":"X"`` lines of spans on threads ``tid``, categorised by column ``category``; ``args`` after the step."""
    start = table["start_ns"]
    duration = pc.divide(pc.cast(pc.subtract(table["end_ns"], start), pa.float64()), 1000.0)
    return pc.binary_join_element_wise(
        '{"ph":"X","pid":', layout.pids(table["host"]),
        ',"tid":', _text(tid),
        ',"ts":', _micros(start, origin),
        ',"dur":', _text(duration),
        ',"name":', _json_strings(table["name"]),
        ',"cat":', _json_strings(table[category]),
        ',"args":{"step":', _text(table["step"]),
        *args, "}},\n",
        "",
    )  # fmt: skip


def _memory_lines(table: pa.Table, origin: int, layout: _Layout) -> pa.Array:
    """One ``"ph":"C"`` line per memory sample: the rank's resident (and GPU) memory in MB."""
    rss = pc.divide(pc.cast(table["rss_bytes"], pa.float64()), float(ev.BYTES_PER_MB))
    gpu = pc.if_else(
        pc.less(table["gpu_bytes"], 0),
        pa.scalar("", pa.string()),
        pc.binary_join_element_wise(
            ',"gpu_mb":', _text(pc.divide(pc.cast(table["gpu_bytes"], pa.float64()), float(ev.BYTES_PER_MB))), ""
        ),
    )
    return pc.binary_join_element_wise(
        '{"ph":"C","pid":', layout.pids(table["host"]),
        ',"ts":', _micros(table["time_ns"], origin),
        ',"name":"rank ', _text(table["rank"]), ' memory (MB)","args":{"rss_mb":', _text(rss), gpu, "}},\n",
        "",
    )  # fmt: skip


def _counter_lines(table: pa.Table, origin: int, layout: _Layout) -> pa.Array:
    """One ``"ph":"C"`` line per counter value, on a track per rank and counter."""
    names = _json_strings(pc.binary_join_element_wise("rank ", _text(table["rank"]), " ", table["name"], ""))
    return pc.binary_join_element_wise(
        '{"ph":"C","pid":', layout.pids(table["host"]),
        ',"ts":', _micros(table["time_ns"], origin),
        ',"name":', names,
        ',"args":{"value":', _text(table["value"]), "}},\n",
        "",
    )  # fmt: skip


def _device_lines(table: pa.Table, origin: int, layout: _Layout) -> pa.Array:
    """One ``"ph":"X"`` line per GPU activity (imported profiles), on a thread per rank, device and stream."""
    lane = pc.binary_join_element_wise(pc.cast(table["rank"], pa.string()), table["device"], table["stream"], "|")
    encoded = pc.dictionary_encode(lane).combine_chunks()
    tids = np.asarray([layout.device_tid(str(key)) for key in encoded.dictionary.to_pylist()] or [0], np.int64)
    tid = pa.array(tids[encoded.indices.to_numpy(zero_copy_only=False)])
    return _complete_lines(table, origin, layout, tid, "kind")


_LINES = {"events": _span_lines, "memory": _memory_lines, "counters": _counter_lines, "devices": _device_lines}
#: Device lanes' thread ids start here, above any rank's own (``THREADS_PER_RANK * rank``).
DEVICE_TID_BASE = 1 << 30


def _first_time(files: dict[str, list[tuple[int, Path]]]) -> int:
    """The earliest time in the run, from the part files' footers (min statistics of their time columns)."""
    first = None
    for stream, entries in files.items():
        column = TIME_COLUMNS[stream]
        for _rank, entry in entries:
            try:
                metadata = pq.read_metadata(entry)
            except (OSError, pa.ArrowInvalid):
                continue
            index = metadata.schema.names.index(column)
            groups = [metadata.row_group(group).column(index).statistics for group in range(metadata.num_row_groups)]
            if all(statistics is not None and statistics.has_min_max for statistics in groups):
                lows = [statistics.min for statistics in groups]
            else:  # a file written without statistics: its column read once
                lows = [pc.min(pq.read_table(entry, columns=[column])[column]).as_py()]
            for low in lows:
                if low is not None and (first is None or low < first):
                    first = int(low)
    return first or 0


def _write(out: IO[bytes], lines: pa.Array) -> None:
    """The lines' bytes as they lie in Arrow's value buffer (no Python string per line)."""
    if len(lines) == 0:
        return
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    if lines.type == pa.string() and len(lines) > (1 << 20):
        lines = lines.cast(pa.large_string())  # 32-bit offsets end at 2 GiB per array
    _validity, offsets_buffer, data = lines.buffers()
    width = np.int64 if lines.type == pa.large_string() else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=width)[lines.offset : lines.offset + len(lines) + 1]
    low, high = int(offsets[0]), int(offsets[-1])
    out.write(memoryview(data)[low:high])


def export_trace(run_path: str | Path, out_path: str | Path) -> TraceExport:
    """Write run ``run_path`` as one Trace Event Format JSON file (``.gz``: compressed); see the module docstring."""
    run_path = Path(run_path)
    meta = read_run_meta(run_path)  # one clear error if this is not a run
    files = {stream: stream_files(run_path, stream) for stream in STREAMS}

    def tables() -> Iterator[tuple[str, pa.Table]]:
        for stream, entries in files.items():
            for _rank, entry in entries:
                try:
                    with pq.ParquetFile(entry) as parquet:
                        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, use_threads=False):
                            yield stream, pa.Table.from_batches([batch]).cast(STREAMS[stream])
                except (OSError, pa.ArrowInvalid):
                    continue  # only complete files are renamed into place; tolerate foreign junk

    layout = _Layout()
    layout.known_hosts(run_path)
    return write_trace(out_path, tables(), origin=_first_time(files), layout=layout, meta=meta)


def write_trace(
    out_path: str | Path,
    tables: Iterable[tuple[str, pa.Table]],
    *,
    origin: int,
    layout: _Layout | None = None,
    meta: Mapping[str, Any] | None = None,
) -> TraceExport:
    """Write ``(stream, table)`` pairs (``events``, ``memory``, ``counters`` as the store holds them) as one trace.

    ``origin``: the time (ns) that becomes 0 µs, at or before every row's. Each table is written as
    it comes; nothing is kept but the hosts and ranks seen.
    """
    started = time.perf_counter()
    out_path = Path(out_path)
    layout = layout or _Layout()
    meta = meta or {}
    spans_per_rank: dict[int, int] = {}
    counts = {"events": 0, "memory": 0, "counters": 0, "devices": 0}
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    # gzip's fastest level: 8x smaller than plain JSON here; its default (9) took 4x as long for 22 % less
    compressed = out_path.suffix == ".gz"
    try:
        with gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) if compressed else open(tmp, "wb") as out:
            out.write(b'{"traceEvents":[\n')
            for stream, table in tables:
                if table.num_rows == 0:
                    continue
                table = layout.with_hosts(table)
                layout.note(table["rank"], table["host"])
                _write(out, _LINES[stream](table, origin, layout))
                counts[stream] += table.num_rows
                if stream == "events":
                    for item in pc.value_counts(table["rank"]).to_pylist():
                        rank = int(item["values"])
                        spans_per_rank[rank] = spans_per_rank.get(rank, 0) + int(item["counts"])
            # never empty once a line was written (those lines named a host); else no comma to close
            out.write(",\n".join(json.dumps(item) for item in layout.metadata()).encode())
            other = {
                "producer": "workbench export",
                "run_id": meta.get("run_id"),
                "run_name": meta.get("name"),
                "origin_unix_ns": origin,
            }
            out.write(f'\n],"displayTimeUnit":"ms","otherData":{json.dumps(other)}}}\n'.encode())
        tmp.replace(out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed export leaves no half-written file beside the target
        raise
    return TraceExport(
        path=out_path,
        bytes_written=out_path.stat().st_size,
        spans=counts["events"] + counts["devices"],
        samples=counts["memory"] + counts["counters"],
        ranks=len(layout.host_of_rank),
        hosts=len(layout.pid_of_host),
        seconds=time.perf_counter() - started,
        spans_per_rank=spans_per_rank,
    )


def write_chrome_trace(
    path: str | Path,
    events: pd.DataFrame,
    memory: pd.DataFrame | None = None,
    counters: pd.DataFrame | None = None,
) -> TraceExport:
    """Frames in memory (``Run.load``'s, or a window of them) as the same trace ``export_trace`` writes."""
    frames = {"events": events, "memory": memory, "counters": counters}
    tables = []
    for stream, frame in frames.items():
        if frame is None or frame.empty:
            continue
        schema = STREAMS[stream]
        filled = frame.assign(**{c: "" for c in ("run_id", "host") if c not in frame})
        tables.append((stream, pa.Table.from_pandas(filled[schema.names], schema=schema, preserve_index=False)))
    starts = [int(pc.min(table[TIME_COLUMNS[stream]]).as_py()) for stream, table in tables]
    return write_trace(path, tables, origin=min(starts) if starts else 0)
