"""Import Horovod's timeline (Chrome-trace JSON written by rank 0) into workbench events, streaming.

What the file holds (Horovod 0.28): a JSON array whose first record carries
``start_time_since_epoch_in_micros``; every other ``ts`` is µs after it. Each tensor is a
"process" (``pid``) named by a ``process_name`` record. Activities are ``B``/``E`` pairs that
nest per pid (``ALLREDUCE`` around ``MEMCPY_IN_FUSION_BUFFER``, ``MPI_ALLREDUCE``, ...). Inside a
``NEGOTIATE_*`` activity, a zero-length ``X`` event named by a rank number marks the moment that
rank submitted the tensor.

How it maps: every activity runs on Horovod's background thread *while* the ranks compute, so
every span gets phase ``in_flight`` (``events.IN_FLIGHT``), an overlap phase the breakdown keeps
apart from the ranks' own time. Negotiation becomes one span *per rank*, from that rank's
readiness to the end of the negotiation (``analysis.straggler`` reads per-step lateness from
their starts); all other activities are rank 0's view, the file's writer.

Speed and memory: the file is read in chunks of ``chunk_mb``; each chunk is cut at its last
complete record, turned into newline-delimited JSON and parsed by Arrow's JSON reader, and the
``B``/``E`` pairing is done with numpy. Activities still open at a chunk's end are carried into
the next. Memory is bounded by a few chunks plus the events produced, whatever the file's size.
The writer appends while training runs and only closes the array at ``stop_timeline()``; a file
being written or cut off mid-record is read up to its last complete record.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from workbench.events import EVENT_COLUMNS, EVENT_SCHEMA, IN_FLIGHT

#: Bytes read per chunk unless told otherwise.
DEFAULT_CHUNK_MB = 8
_RECORD_SCHEMA = pa.schema(
    [
        ("ph", pa.string()),
        ("name", pa.string()),
        ("ts", pa.int64()),
        ("pid", pa.int64()),
        ("args", pa.struct([("start_time_since_epoch_in_micros", pa.int64()), ("name", pa.string())])),
    ]
)
_READ = pa_json.ReadOptions(block_size=2 << 20)
#: The C allocator returns the chunks' memory to the system once freed, so the peak stays bounded.
_POOL = pa.system_memory_pool()
_PARSE = pa_json.ParseOptions(explicit_schema=_RECORD_SCHEMA, unexpected_field_behavior="ignore")
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6")
    _LIBC.malloc_trim  # noqa: B018 - glibc only
except (OSError, AttributeError):
    _LIBC = None
_BEGIN, _END, _MARK, _META = 1, 2, 3, 4
_PH_CODES = {"B": _BEGIN, "E": _END, "X": _MARK, "M": _META}


class TimelineError(ValueError):
    """A file that is not a Horovod timeline."""


def _record_chunks(path: Path, chunk_bytes: int) -> Iterator[pa.Buffer]:
    """Newline-delimited JSON of the file's complete records, a chunk at a time."""
    with path.open("rb") as handle:
        head = handle.read(chunk_bytes)
        stripped = head.lstrip()
        if not stripped.startswith(b"["):
            raise TimelineError(
                f"{path} is not a Horovod timeline (it does not start with '['): pass the file "
                "written by HOROVOD_TIMELINE or hvd.start_timeline()"
            )
        pending, more = b"", stripped[1:]
        while True:
            data = pending + more
            if more:
                cut = data.rfind(b"},")
                if cut < 0:
                    pending, more = data, handle.read(chunk_bytes)
                    continue
                body, pending = data[: cut + 1], data[cut + 2 :]
            else:
                body = data.rstrip()
                if body.endswith(b"]"):
                    body = body[:-1].rstrip()
                elif body:
                    body = _whole_records(body)
                pending = b""
            body = body.strip().rstrip(b",")
            if body:
                yield _newline_delimited(body)
            if not more:
                return
            more = handle.read(chunk_bytes)


def _newline_delimited(body: bytes) -> pa.Buffer:
    """The records with the comma after each one's closing brace turned into a line break, in one copy.

    ``},{`` becomes ``}\n{`` and ``},\n{`` becomes ``} \n{`` (same length, no empty lines), which is what
    Arrow's JSON reader reads. A record's last value is never a nested object followed by a comma,
    so ``},`` only occurs between records.
    """
    data = np.frombuffer(bytearray(body), np.uint8)
    commas = np.flatnonzero((data[:-1] == ord("}")) & (data[1:] == ord(","))) + 1
    after = np.minimum(commas + 1, len(data) - 1)
    data[commas] = np.where(data[after] == ord("\n"), ord(" "), ord("\n"))
    return pa.py_buffer(data)


def _whole_records(body: bytes) -> bytes:
    """The end of an unfinished file: drop a last record that was cut mid-way."""
    body = body.rstrip().rstrip(b",")
    cut = body.rfind(b"},")
    last = body[cut + 2 :] if cut >= 0 else body
    try:
        json.loads(last)
    except ValueError:
        return body[: cut + 1] if cut >= 0 else b""
    return body


class _Pairing:
    """Pairs ``B``/``E`` records per pid across chunks and ties readiness marks to their negotiation."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.tensor_names: dict[int, str] = {}
        self.origin_us: int | None = None
        self.records = 0
        # open records carried from chunk to chunk: seq, kind, pid, ts, name code, rank
        self.carry = {k: np.zeros(0, np.int64) for k in ("seq", "kind", "pid", "ts", "name", "rank")}
        self.out: list[dict[str, np.ndarray]] = []

    def name_codes(self, column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """Global name code per record, and the rank a digit name stands for (-1 otherwise)."""
        encoded = pc.dictionary_encode(column).combine_chunks()
        labels = encoded.dictionary.to_pylist()
        lut = np.asarray([self.names.setdefault(str(label), len(self.names)) for label in labels], np.int64)
        ranks = np.asarray([int(label) if str(label).isdigit() else -1 for label in labels], np.int64)
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        valid = ~np.asarray(encoded.indices.is_null().to_numpy(zero_copy_only=False), bool)
        idx = np.where(valid, indices, 0).astype(np.int64)
        codes = np.where(valid, lut[idx] if len(lut) else -1, -1)
        rank = np.where(valid, ranks[idx] if len(ranks) else -1, -1)
        return codes, rank

    def add(self, table: pa.Table) -> None:
        n = table.num_rows
        seq = np.arange(self.records, self.records + n, dtype=np.int64)
        self.records += n
        ph_encoded = pc.dictionary_encode(table["ph"]).combine_chunks()
        ph_lut = np.asarray([_PH_CODES.get(str(p), 0) for p in ph_encoded.dictionary.to_pylist()] or [0], np.int64)
        ph_idx = ph_encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        kind = ph_lut[ph_idx] if len(ph_encoded.dictionary) else np.zeros(n, np.int64)
        pid = table["pid"].fill_null(-1).to_numpy().astype(np.int64)
        ts = table["ts"].fill_null(0).to_numpy().astype(np.int64)
        name, rank = self.name_codes(table["name"])
        meta = np.flatnonzero(kind == _META)
        if len(meta):
            args = table["args"].take(pa.array(meta)).combine_chunks()
            starts = args.field("start_time_since_epoch_in_micros").to_pylist()
            tensor = args.field("name").to_pylist()
            names = table["name"].take(pa.array(meta)).to_pylist()
            for position, record_name, start, label in zip(meta, names, starts, tensor):
                if record_name != "process_name":
                    continue
                if start is not None and self.origin_us is None:
                    self.origin_us = int(start)
                elif label is not None:
                    self.tensor_names[int(pid[position])] = str(label)
        keep = (kind == _BEGIN) | (kind == _END) | ((kind == _MARK) & (rank >= 0))
        columns = {"seq": seq, "kind": kind, "pid": pid, "ts": ts, "name": name, "rank": rank}
        columns = {k: np.concatenate([self.carry[k], v[keep]]) for k, v in columns.items()}
        self.pair(columns)

    def pair(self, c: dict[str, np.ndarray]) -> None:
        """Match ``B``/``E`` per pid and nesting level, tie marks to their negotiation, carry what is open.

        Records arrive in file order, so a stable sort by pid keeps each pid's records in order. At
        one nesting level of one pid, a ``B`` and the ``E`` that closes it are neighbours; a mark sits
        at the level of its negotiation, after its ``B`` and before its ``E``.
        """
        pid = c["pid"]
        small = len(pid) == 0 or (int(pid.min()) >= -1 and int(pid.max()) < 2**15 - 1)
        order = np.argsort(pid.astype(np.int16) if small else pid, kind="stable")  # radix sort for int16
        c = {k: v[order] for k, v in c.items()}
        kind, pid = c["kind"], c["pid"]
        delta = np.where(kind == _BEGIN, 1, np.where(kind == _END, -1, 0))
        running = np.cumsum(delta)
        group_start = np.r_[True, pid[1:] != pid[:-1]]
        base = np.maximum.accumulate(np.where(group_start, np.arange(len(pid)), 0))
        before = running - delta - (running[base] - delta[base])  # depth just before each record
        level = np.where(kind == _BEGIN, before + 1, before)  # B opens level d+1, E closes level d, marks sit at d

        begins, ends, open_begins, marks, mark_pair, held = [], [], [], [], [], []
        pair_of_row = np.full(len(kind), -1, np.int64)
        paired = 0
        for depth in np.unique(level[level > 0]):
            rows = np.flatnonzero(level == depth)
            k, p = kind[rows], pid[rows]
            spans = np.flatnonzero(k != _MARK)
            ks, ps = k[spans], p[spans]
            is_pair = np.zeros(len(spans), bool)
            is_pair[:-1] = (ks[:-1] == _BEGIN) & (ks[1:] == _END) & (ps[:-1] == ps[1:])
            b, e = rows[spans[is_pair]], rows[spans[1:][is_pair[:-1]]]
            begins.append(b)
            ends.append(e)
            pair_of_row[b] = np.arange(paired, paired + len(b))
            paired += len(b)
            open_begins.append(rows[spans[(ks == _BEGIN) & ~is_pair]])
            xm = np.flatnonzero(k == _MARK)
            if len(xm):
                position = np.arange(len(rows))
                last_begin = np.maximum.accumulate(np.where(k == _BEGIN, position, -1))[xm]
                last_end = np.maximum.accumulate(np.where(k == _END, position, -1))[xm]
                inside = (last_begin >= 0) & (last_end < last_begin)
                inside &= p[np.clip(last_begin, 0, None)] == p[xm]
                owner = np.where(inside, pair_of_row[rows[np.clip(last_begin, 0, None)]], -1)
                marks.append(rows[xm][owner >= 0])
                mark_pair.append(owner[owner >= 0])
                held.append(rows[xm][inside & (owner < 0)])  # their negotiation is still open
        begins_all = np.concatenate(begins) if begins else np.zeros(0, np.int64)
        ends_all = np.concatenate(ends) if ends else np.zeros(0, np.int64)
        marks_all = np.concatenate(marks) if marks else np.zeros(0, np.int64)
        owners = np.concatenate(mark_pair) if mark_pair else np.zeros(0, np.int64)

        with_marks = np.zeros(len(begins_all), bool)
        with_marks[owners] = True
        whole = ~with_marks
        self.out.append(
            {
                "rank": np.concatenate([np.zeros(int(whole.sum()), np.int64), c["rank"][marks_all]]),
                "name": np.concatenate([c["name"][begins_all[whole]], c["name"][begins_all[owners]]]),
                "pid": np.concatenate([pid[begins_all[whole]], pid[marks_all]]),
                "start_us": np.concatenate([c["ts"][begins_all[whole]], c["ts"][marks_all]]),
                "end_us": np.concatenate([c["ts"][ends_all[whole]], c["ts"][ends_all[owners]]]),
            }
        )
        carried = np.concatenate([*open_begins, *held]) if open_begins or held else np.zeros(0, np.int64)
        carried = carried[np.argsort(c["seq"][carried], kind="stable")]
        self.carry = {k: v[carried] for k, v in c.items()}

    def frame(self, run_id: str, host: str) -> pd.DataFrame:
        """The events, sorted by rank and start; built column by column without extra copies."""
        parts: dict[str, np.ndarray] = {}
        for column in ("rank", "start_us", "end_us", "name", "pid"):
            pieces = [part.pop(column) for part in self.out]
            parts[column] = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        self.out = []
        start_us, rank = parts.pop("start_us"), parts.pop("rank")
        n = len(rank)
        if n and int(start_us.max() - start_us.min()) < 2**40 and int(rank.max()) < 2**22 and int(rank.min()) >= 0:
            # one int64 key (rank, start): a stable sort of it is much faster than lexsort on nearly sorted runs
            order = np.argsort((rank << 40) | (start_us - start_us.min()), kind="stable")
        else:
            order = np.lexsort((start_us, rank))
        origin_ns = (self.origin_us or 0) * 1000
        start = start_us[order] * 1000 + origin_ns
        del start_us
        end = np.maximum(parts.pop("end_us")[order] * 1000 + origin_ns, start)
        labels = np.asarray(list(self.names) or [""], dtype=object)
        pids, pid_codes = _small_int_codes(parts.pop("pid")[order])
        tensors = np.asarray([self.tensor_names.get(int(p), f"tensor-{int(p)}") for p in pids] or [""], dtype=object)
        columns = {
            "run_id": np.full(n, run_id, dtype=object),
            "rank": rank[order].astype(np.int32),
            "host": np.full(n, host, dtype=object),
            "phase": np.full(n, IN_FLIGHT, dtype=object),
            "name": labels[parts.pop("name")[order]],
            "detail": tensors[pid_codes],
            "step": np.full(n, -1, np.int64),
            "epoch": np.full(n, -1, np.int64),
            "start_ns": start,
            "end_ns": end,
            "bytes": np.full(n, -1, np.int64),
        }
        return pd.DataFrame(columns, columns=list(EVENT_COLUMNS), copy=False)


def _small_int_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and each value's index among them: a lookup table for the few tensor ids."""
    if len(values) == 0:
        return values, values
    low, high = int(values.min()), int(values.max())
    if high - low > 4 * len(values) + 1024:
        distinct, codes = np.unique(values, return_inverse=True)
        return distinct, codes.ravel()
    present = np.zeros(high - low + 1, bool)
    present[values - low] = True
    return np.flatnonzero(present) + low, (np.cumsum(present) - 1)[values - low]


def _release_free_memory() -> None:
    """Give freed heap pages back to the system (glibc keeps them after large frees; elsewhere a no-op).

    Every chunk allocates and frees a few buffers of its size; glibc's growing mmap threshold then
    serves them from the heap, whose free pages it keeps, and the peak grows with the file.
    """
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _parse_next(chunks: Iterator[pa.Buffer], path: Path) -> pa.Table | None:
    """The next chunk as an Arrow table (None at the end); a parse error is a ``TimelineError``."""
    body = next(chunks, None)
    if body is None:
        return None
    try:
        return pa_json.read_json(pa.BufferReader(body), read_options=_READ, parse_options=_PARSE, memory_pool=_POOL)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        first = str(error).splitlines()[0]
        raise TimelineError(
            f"{path} is not a Horovod timeline ({first}): pass the file written by HOROVOD_TIMELINE"
            " or hvd.start_timeline()"
        ) from None


def read_horovod_timeline(
    path: str | Path, *, run_id: str = "", host: str = "", chunk_mb: float = DEFAULT_CHUNK_MB
) -> pd.DataFrame:
    """Events (``workbench.events`` schema, phase ``in_flight``) from a Horovod timeline, complete or not."""
    path = Path(path)
    if not path.is_file():
        raise TimelineError(f"{path} does not exist: pass the path given to HOROVOD_TIMELINE or hvd.start_timeline()")
    pairing = _Pairing()
    chunks = _record_chunks(path, max(64, int(chunk_mb * (1 << 20))))
    # Arrow parses the next chunk in a thread (it releases the GIL) while numpy pairs this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        upcoming = pool.submit(_parse_next, chunks, path)
        while True:
            table = upcoming.result()
            if table is None:
                break
            upcoming = pool.submit(_parse_next, chunks, path)
            pairing.add(table)
            del table
            _release_free_memory()
        if pairing.origin_us is None:
            raise TimelineError(f"{path} has no start_time_since_epoch_in_micros record: it is not a Horovod "
                                "0.2x timeline (or its first line is damaged)")
    if pairing.records == 0:
        return EVENT_SCHEMA.empty_table().to_pandas()
    return pairing.frame(run_id, host)
