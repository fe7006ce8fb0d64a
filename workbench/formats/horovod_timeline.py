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

Speed and memory: the file is read in chunks of ``chunk_mb``, each cut at its last complete record
and turned into one record per line in place. Two threads parse chunks while this one pairs the
records of the previous ones in file order. A chunk in the byte layout Horovod's writer produces is
read directly with numpy (``_parse_horovod_layout``, every key checked where it is expected); any
other chunk goes to Arrow's general JSON reader, with the same result. ``B``/``E`` pairing is done
with numpy; activities still open at a chunk's end are carried into the next. Memory is bounded by
a few chunks plus the events produced (string columns as categoricals), whatever the file's size.
The writer appends while training runs and only closes the array at ``stop_timeline()``; a file
being written or cut off mid-record is read up to its last complete record.
"""

from __future__ import annotations

import ctypes
import json
import math
import re
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from numpy.lib.stride_tricks import as_strided

from workbench.events import EVENT_COLUMNS, EVENT_SCHEMA, IN_FLIGHT, writable_text
from workbench.formats.registry import TraceReader, open_maybe_compressed, register_reader

#: Bytes read per chunk unless told otherwise.
DEFAULT_CHUNK_MB = 8
#: Chunks read ahead of the pairing: two being parsed, one waiting.
_IN_FLIGHT = 3
#: Freed memory is handed back to the system every this many chunks: each time costs page faults
#: afterwards (every chunk: 2.75 s for 300 MB; every 4th: 1.6 s and a peak 10 % higher).
_TRIM_EVERY = 4
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
_BEGIN, _END, _MARK, _META, _INSTANT = 1, 2, 3, 4, 5
_PH_CODES = {"B": _BEGIN, "E": _END, "X": _MARK, "M": _META, "i": _INSTANT, "I": _INSTANT}
#: Horovod's mark of each background cycle (``HOROVOD_TIMELINE_MARK_CYCLES``; always written by 0.15-0.19).
CYCLE_MARK = "CYCLE_START"
#: Activity names only Horovod's timeline writes: a file naming none of them (nor NEGOTIATE_*) is another trace.
HOROVOD_ACTIVITY_HINTS = frozenset(
    {
        CYCLE_MARK,
        "ALLREDUCE",
        "ALLGATHER",
        "BROADCAST",
        "MPI_ALLREDUCE",
        "NCCL_ALLREDUCE",
        "MEMCPY_IN_FUSION_BUFFER",
        "QUEUE",
        "WAIT_FOR_DATA",
        "GLOO_ALLREDUCE",
        "MPI_ALLGATHER",
        "NCCL_ALLGATHER",
        "ALLTOALL",
        "REDUCESCATTER",
    }
)
#: Timestamps above this many µs are since the Unix epoch (after 2001); below, a steady clock's (since boot).
EPOCH_US = 10**15


class TimelineError(ValueError):
    """A file that is not a Horovod timeline."""


def _record_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[bytearray, int, int]]:
    """The file's complete records a chunk at a time: (buffer, first byte, end of the last record).

    Each chunk is read into a buffer of its own (chunks are parsed in threads while the next is
    read), followed by zero bytes so that 8-byte windows near its last record stay inside it. A gzip
    file is decompressed as it is read (never whole, never to disk).
    """
    with open_maybe_compressed(path) as handle:
        try:
            head = handle.read(chunk_bytes)
        except (OSError, EOFError) as error:
            raise TimelineError(f"{path} is damaged ({error}): copy it again from where the job wrote it") from None
        stripped = head.lstrip()
        if not stripped:
            raise TimelineError(f"{path} is empty: the job wrote no timeline record (it stopped before hvd.init())")
        if not stripped.startswith(b"["):
            raise TimelineError(
                f"{path} is not a Horovod timeline (it does not start with '['): pass the file "
                "written by HOROVOD_TIMELINE or hvd.start_timeline()"
            )
        carry = stripped[1:]
        while True:
            buffer = bytearray(len(carry) + chunk_bytes + _PADDING)
            buffer[: len(carry)] = carry
            try:
                got = handle.readinto(memoryview(buffer)[len(carry) : len(carry) + chunk_bytes])
            except (OSError, EOFError):  # a gzip stream cut off: what was decompressed so far is read
                got = 0
            filled, final = len(carry) + got, got == 0
            if not final:
                cut = buffer.rfind(b"},", 0, filled)
                if cut < 0:
                    carry = bytes(buffer[:filled])
                    continue
                length, carry = cut + 1, bytes(buffer[cut + 2 : filled])
            else:
                length = _last_whole_record(memoryview(buffer)[:filled])
            while length and buffer[length - 1] in b" \t\r\n,":
                length -= 1
            first = 0
            while first < length and buffer[first] in b" \t\r\n":
                first += 1
            buffer[length:filled] = bytes(filled - length)
            if length > first:
                yield buffer, first, length
            if final:
                return


def _last_whole_record(view: memoryview) -> int:
    """How many bytes of the file's last chunk are whole records: a closing ']' or a record cut mid-way dropped."""
    body = bytes(view).rstrip()
    if body.endswith(b"]"):
        return len(body) - 1
    body = body.rstrip(b",")
    cut = body.rfind(b"},")
    last = body[cut + 2 :] if cut >= 0 else body
    try:
        json.loads(last)
    except ValueError:
        return cut + 1 if cut >= 0 else 0
    return len(body)


def _newline_delimited(buffer: bytearray, start: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The records ``buffer[start:length]`` one per line, in place; and where each line starts.

    ``},{`` becomes ``}\n{`` and ``},\n{`` becomes ``} \n{`` (same length, no empty lines), which is what
    Arrow's JSON reader reads. A record's last value is never a nested object followed by a comma,
    so ``},`` only occurs between records. The returned array keeps the zero padding after ``length``.
    """
    data = np.frombuffer(buffer, np.uint8)[start:]
    end = length - start
    body = data[:end]
    closing = np.flatnonzero(body[:-1] == ord("}"))  # one pass over the bytes; the rest on the few braces
    commas = closing[body[closing + 1] == ord(",")] + 1
    after = np.minimum(commas + 1, end - 1)
    line_break = data[after] == ord("\n")
    data[commas] = np.where(line_break, ord(" "), ord("\n"))
    starts = np.concatenate([np.zeros(1, np.int64), commas + np.where(line_break, 2, 1)])
    return data[: end + _PADDING], starts[starts < end]


def _le_word(text: bytes) -> np.uint64:
    """The first 8 bytes of ``text`` (zero-padded) as a little-endian uint64, to compare with a window."""
    return np.uint64(int.from_bytes(text[:8].ljust(8, b"\0"), "little"))


#: Zero bytes after each chunk's records: windows up to 32 bytes past a record's start stay inside.
_PADDING = 48
_LOW_BYTES = np.asarray([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_EVENT_HEAD, _META_HEAD = _le_word(b'{"ph": "'), _le_word(b'{"name":')
_NAME_KEY, _NAME_TAIL = _le_word(b'", "name'), _le_word(b'": "')
_TS_KEY, _PID_KEY, _MARK_KEY = _le_word(b'", "ts":'), _le_word(b', "pid":'), _le_word(b', "s": ')
_HASH = [np.uint64(k) for k in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)]
#: A name's 32 bytes masked to its length: ``_NAME_MASKS[length]``, one 64-bit mask per word.
_NAME_MASKS = _LOW_BYTES[np.clip(np.arange(33)[:, None] - 8 * np.arange(4), 0, 8)]
#: Constants of the eight-digits-in-a-word parse (``_integers``).
_ZERO_DIGITS = np.uint64(0x3030303030303030)
_LOW_SEVEN_BITS, _HIGH_BITS = np.uint64(0x7F7F7F7F7F7F7F7F), np.uint64(0x8080808080808080)
_PAST_NINE = np.uint64(0x7676767676767676)  # 9 + 0x76 = 0x7F: the high bit set only above 9
_ALTERNATE_PAIRS = np.uint64(0x000000FF000000FF)
_PAIRS_TO_NUMBER, _PAIRS_TO_LOW = np.uint64(100 + (1_000_000 << 32)), np.uint64(1 + (10_000 << 32))
_POWERS_OF_TEN = 10 ** np.arange(9, dtype=np.uint64)


class _Chunk(NamedTuple):
    """One chunk's records in file order, whichever parser read them."""

    kind: np.ndarray  # _BEGIN, _END, _MARK, _META or 0 (other)
    pid: np.ndarray  # -1 where a record has none
    ts: np.ndarray
    name: np.ndarray  # index into labels, -1 where a record has no name
    labels: list[str]
    meta: list[tuple[int, str, int | None, str | None]]  # metadata records: (pid, name, start, tensor)
    skipped: int = 0  # records left out as damaged (``_python_chunk``)


def _windows(data: np.ndarray) -> np.ndarray:
    """``w[i]`` is ``data[i:i + 8]`` read as one little-endian uint64: a view, no copy."""
    return as_strided(data, shape=(len(data) - 7, 8), strides=(data.strides[0], 1)).view(np.uint64)[:, 0]


def _integers(window: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The unsigned decimal integers starting at ``start`` (at most 15 digits): values and where each ends.

    Eight digits at a time inside one 64-bit word (SWAR): the digits' count from a bit trick on the
    word, their value from three multiplications; half the CPU of a loop over digit positions.
    """
    if len(start) == 0:
        return np.zeros(0, np.int64), start
    first = window[start] ^ _ZERO_DIGITS
    width = _digit_count(first)
    if int(width.min()) == 0:  # no digit where a number belongs
        return None
    value = _eight_digits(first, width)
    long = np.flatnonzero(width == 8)
    if len(long):
        second = window[start[long] + 8] ^ _ZERO_DIGITS
        more = _digit_count(second)
        if int(more.max()) == 8:  # 16 digits and more
            return None
        value[long] = value[long] * _POWERS_OF_TEN[more] + _eight_digits(second, more)
        width[long] += more
    return value.astype(np.int64), start + width


def _digit_count(word: np.ndarray) -> np.ndarray:
    """How many of each word's bytes, from the first, are digits (the word already XORed with '0' bytes); 0-8."""
    not_digit = (((word & _LOW_SEVEN_BITS) + _PAST_NINE) | word) & _HIGH_BITS  # a byte's high bit: above 9
    lowest = not_digit & (~not_digit + np.uint64(1))
    bit = np.log2(np.where(not_digit == 0, 2.0**71, lowest.astype(np.float64)))  # exact: a power of two
    return (bit.astype(np.int64) - 7) >> 3


def _eight_digits(word: np.ndarray, width: np.ndarray) -> np.ndarray:
    """The value of each word's first ``width`` digit bytes (0-9 each), the first the most significant."""
    digits = (word & _LOW_BYTES[width]) << (np.uint64(8) * (np.uint64(8) - width.astype(np.uint64)))
    digits = digits * np.uint64(10) + (digits >> np.uint64(8))  # pairs of digits
    pairs = digits & _ALTERNATE_PAIRS
    return (pairs * _PAIRS_TO_NUMBER + ((digits >> np.uint64(16)) & _ALTERNATE_PAIRS) * _PAIRS_TO_LOW) >> np.uint64(32)


def _parse_horovod_layout(data: np.ndarray, starts: np.ndarray) -> _Chunk | None:
    """Records read straight from the bytes Horovod's writer produces; None if one is laid out otherwise.

    Horovod 0.28 writes every record with the same keys, order and spacing (``{"ph": "B", "name":
    "ALLREDUCE", "ts": 123, "pid": 4}``), so each field sits at an offset found from the record's
    start and the end of the field before it: a few numpy operations per chunk instead of a
    general JSON parse, less than half the CPU of Arrow's reader. Every key is checked where
    it is expected; a record that differs (another writer, a hand-edited file) sends the whole chunk
    to Arrow's reader instead.
    """
    if sys.byteorder != "little" or len(starts) == 0:
        return None
    window = _windows(data)
    n = len(starts)
    head = window[starts]
    is_event = head == _EVENT_HEAD
    kind = np.zeros(n, np.int64)
    pid = np.full(n, -1, np.int64)
    ts = np.zeros(n, np.int64)
    name = np.full(n, -1, np.int64)
    meta: list[tuple[int, str, int | None, str | None]] = []
    if not is_event.all():
        others = np.flatnonzero(~is_event)
        if len(others) > max(64, n // 8) or not (head[others] == _META_HEAD).all():
            return None
        ends = np.r_[starts[1:], len(data)]
        for position in others.tolist():
            record = bytes(data[starts[position] : ends[position]]).rstrip(b"\x00")
            try:
                fields = json.loads(record)
                if fields.get("ph") != "M":  # an event whose keys come in another order: Arrow reads the chunk
                    return None
                args = fields.get("args") or {}
                pid[position] = int(fields.get("pid", -1))
                meta.append(
                    (
                        int(pid[position]),
                        str(fields.get("name")),
                        args.get("start_time_since_epoch_in_micros"),
                        args.get("name"),
                    )
                )
            except (ValueError, TypeError, AttributeError):
                return None
        kind[others] = _META
    events = np.flatnonzero(is_event)
    s = starts[events]
    ph = data[s + 8]
    if not (data[s + 9] == ord('"')).all() or (ph == ord("M")).any():  # metadata laid out as an event: Arrow
        return None
    kind[events] = np.select(
        [ph == ord("B"), ph == ord("E"), ph == ord("X"), ph == ord("i")], [_BEGIN, _END, _MARK, _INSTANT], 0
    )
    named = ph != ord("E")
    ts_start = s + 18  # {"ph": "E", "ts": 123
    if not (window[s[~named] + 9] == _TS_KEY).all():
        return None
    labels: list[str] = []
    if named.any():
        parsed = _names(window, s[named] + 21)
        if parsed is None or not (window[s[named] + 9] == _NAME_KEY).all():
            return None
        codes, labels, name_end = parsed
        if not ((window[s[named] + 17] & _LOW_BYTES[4]) == _NAME_TAIL).all():
            return None
        if not (window[name_end] == _TS_KEY).all():
            return None
        name[events[named]] = codes
        ts_start[named] = name_end + 9
    if not (data[ts_start - 1] == ord(" ")).all():
        return None
    numbers = _integers(window, ts_start)
    if numbers is None:
        return None
    ts[events], ts_end = numbers
    after = window[ts_end]
    has_pid = after == _PID_KEY
    if not (has_pid | ((after & _LOW_BYTES[7]) == _MARK_KEY)).all():
        return None
    if not (data[ts_end[has_pid] + 8] == ord(" ")).all():
        return None
    numbers = _integers(window, ts_end[has_pid] + 9)
    if numbers is None:
        return None
    pid[events[has_pid]] = numbers[0]
    return _Chunk(kind, pid, ts, name, labels, meta)


def _names(window: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray] | None:
    """Names (at most 31 bytes, no escapes) starting at ``start``: a code per record, the labels, each name's end."""
    step = window.strides[0]
    words = as_strided(window, shape=(len(window) - 24, 4), strides=(step, 8 * step))[start]  # (n, 4): 32 bytes
    text = words.view(np.uint8)
    length = np.argmax(text == ord('"'), axis=1)  # an escaped quote ends a name early: the check after it fails
    if not (text[np.arange(len(start)), length] == ord('"')).all():
        return None  # no quote in 32 bytes
    masked = words & _NAME_MASKS[length]
    key = length.astype(np.uint64)
    for k in range(4):
        key = (key ^ masked[:, k]) * _HASH[k]
    codes, _uniques = pd.factorize(key)
    first = np.full(int(codes.max()) + 1, len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    if not ((masked == masked[first][codes]).all() and (length == length[first][codes]).all()):
        return None  # two names with one hash (never seen): let Arrow tell them apart
    try:  # equal bytes are equal names; the few distinct ones are decoded as JSON strings (escapes and all)
        labels = [writable_text(json.loads(b'"' + bytes(text[row, : length[row]]) + b'"')) for row in first.tolist()]
    except ValueError:
        return None
    return codes.astype(np.int64), labels, start + length


def _texts(array: pa.Array) -> list[str | None]:
    """A string array's values; bytes that are not UTF-8 (Arrow's JSON reader does not check) become U+FFFD."""
    try:
        return array.to_pylist()
    except UnicodeDecodeError:
        raw = array.cast(pa.binary()).to_pylist()
        return [None if value is None else value.decode("utf-8", "replace") for value in raw]


def _arrow_chunk(table: pa.Table) -> _Chunk:
    """A chunk parsed by Arrow's JSON reader as the same arrays as the direct parse."""
    n = table.num_rows
    ph_encoded = pc.dictionary_encode(table["ph"]).combine_chunks()
    ph_lut = np.asarray([_PH_CODES.get(str(p), 0) for p in _texts(ph_encoded.dictionary)] or [0], np.int64)
    ph_idx = ph_encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    kind = ph_lut[ph_idx] if len(ph_encoded.dictionary) else np.zeros(n, np.int64)
    pid = table["pid"].fill_null(-1).to_numpy().astype(np.int64)
    ts = table["ts"].fill_null(0).to_numpy().astype(np.int64)
    encoded = pc.dictionary_encode(table["name"]).combine_chunks()
    labels = [writable_text(str(label)) for label in _texts(encoded.dictionary)]
    name = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    meta = []
    positions = np.flatnonzero(kind == _META)
    if len(positions):
        args = table["args"].take(pa.array(positions)).combine_chunks()
        starts = args.field("start_time_since_epoch_in_micros").to_pylist()
        tensors = _texts(args.field("name"))
        names = _texts(table["name"].take(pa.array(positions)).combine_chunks())
        meta = [
            (int(pid[p]), str(record), start, tensor)
            for p, record, start, tensor in zip(positions.tolist(), names, starts, tensors)
        ]
    return _Chunk(kind, pid, ts, name, labels, meta)


class _Pairing:
    """Pairs ``B``/``E`` records per pid across chunks and ties readiness marks to their negotiation."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.tensor_names: dict[int, str] = {}
        self.origin_us: int | None = None
        self.records = 0
        self.chunks = 0
        # open records carried from chunk to chunk: seq, kind, pid, ts, name code, rank
        self.carry = {k: np.zeros(0, np.int64) for k in ("seq", "kind", "pid", "ts", "name", "rank")}
        self.out: list[dict[str, np.ndarray]] = []
        self.last_us = 0  # the latest timestamp read: where the file ends in time
        self.first_us: int | None = None
        self.cycle_marks = 0
        self.mark_ranks: set[int] = set()  # ranks named by readiness marks: the job's world, as the file shows it
        self.has_start_record = False
        # rotated fragments of one job: each may carry its own start record; their timestamps are moved
        # onto the first fragment's origin
        self.fragment = -1
        self.fragment_shift_us = 0
        self.fragments_with_start: set[int] = set()

    def new_fragment(self, index: int) -> None:
        """The next chunks come from fragment ``index`` (files of one job, in order)."""
        self.fragment = index
        self.fragment_shift_us = 0

    def decide_origin(self) -> None:
        """No start record in the first chunk: timestamps are taken as they are (µs since the epoch when they
        are that large, else a steady clock's, with no epoch: ``epoch_aligned`` False)."""
        if self.origin_us is None:
            self.origin_us = 0

    @property
    def epoch_aligned(self) -> bool:
        return self.has_start_record or (self.first_us is not None and self.first_us > EPOCH_US)

    def add(self, chunk: _Chunk) -> None:
        """One chunk's records: metadata noted, ``B``/``E``/readiness marks paired with what was carried."""
        n = len(chunk.kind)
        self.chunks += 1
        seq = np.arange(self.records, self.records + n, dtype=np.int64)
        self.records += n
        lut = np.asarray([self.names.setdefault(label, len(self.names)) for label in chunk.labels] + [-1], np.int64)
        ranks = np.asarray(
            [int(label) if label.isdigit() and len(label) < 10 else -1 for label in chunk.labels] + [-1], np.int64
        )
        name, rank = lut[chunk.name], ranks[chunk.name]  # code -1 picks the -1 appended last
        for pid, record_name, start, tensor in chunk.meta:
            if record_name != "process_name":
                continue
            if start is not None:
                if self.origin_us is None:
                    self.origin_us = int(start)
                    self.has_start_record = True
                elif self.fragment not in self.fragments_with_start and self.has_start_record:
                    self.fragment_shift_us = int(start) - self.origin_us
                self.fragments_with_start.add(self.fragment)
            elif tensor is not None:
                self.tensor_names[pid] = str(tensor)
        if self.origin_us is None:
            self.decide_origin()
        kind = chunk.kind
        ts = chunk.ts + self.fragment_shift_us if self.fragment_shift_us else chunk.ts
        timed = kind != _META
        if timed.any():
            stamps = ts[timed]
            self.last_us = max(self.last_us, int(stamps.max()))
            low = int(stamps.min())
            self.first_us = low if self.first_us is None else min(self.first_us, low)
        instants = np.flatnonzero(kind == _INSTANT)
        if len(instants):
            cycle = self.names.get(CYCLE_MARK, -2)
            self.cycle_marks += int((name[instants] == cycle).sum())
        keep = (kind == _BEGIN) | (kind == _END) | ((kind == _MARK) & (rank >= 0))
        marked = rank[kind == _MARK]
        if len(marked):
            self.mark_ranks.update(np.unique(marked[marked >= 0]).tolist())
        columns = {"seq": seq, "kind": kind, "pid": chunk.pid, "ts": ts, "name": name, "rank": rank}
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
        nested = level[level > 0]
        for depth in np.flatnonzero(np.bincount(nested)) if len(nested) else ():  # a few levels: no sort
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

    def unfinished(self) -> list[dict[str, object]]:
        """The negotiations still open where the file ends: a collective some ranks submitted and that never
        ran, because a rank never submitted it (a stall) or the job was stopped. One dict per tensor: its
        ``tensor``, ``operation`` (``ALLREDUCE``), ``since_ns`` (its negotiation's start), ``ready_ranks`` and
        ``file_end_ns`` (the file's last timestamp)."""
        labels = list(self.names)
        c, origin_ns = self.carry, (self.origin_us or 0) * 1000
        found = []
        for row in np.flatnonzero(c["kind"] == _BEGIN):
            label = labels[int(c["name"][row])] if 0 <= int(c["name"][row]) < len(labels) else ""
            if not label.startswith("NEGOTIATE_"):
                continue
            pid = int(c["pid"][row])
            ready = (c["kind"] == _MARK) & (c["pid"] == pid) & (c["seq"] > c["seq"][row])
            found.append(
                {
                    "tensor": self.tensor_names.get(pid, f"tensor-{pid}"),
                    "operation": label.removeprefix("NEGOTIATE_"),
                    "since_ns": int(c["ts"][row]) * 1000 + origin_ns,
                    "ready_ranks": sorted({int(r) for r in c["rank"][ready]}),
                    "file_end_ns": self.last_us * 1000 + origin_ns,
                }
            )
        return found

    def pending(self) -> int:
        """Events paired and not yet handed out by ``frame``."""
        return sum(len(part["rank"]) for part in self.out)

    def frame(self, run_id: str, host: str) -> pd.DataFrame:
        """The events paired since the last call, sorted by rank and start; built column by column without copies."""
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
        labels = pd.Index(list(self.names) or [""], dtype=object)
        pids, pid_codes = _small_int_codes(parts.pop("pid")[order])
        tensors = pd.Index([self.tensor_names.get(int(p), f"tensor-{int(p)}") for p in pids] or [""], dtype=object)
        columns = {
            "run_id": _constant(run_id, n),
            "rank": rank[order].astype(np.int32),
            "host": _constant(host, n),
            "phase": _constant(IN_FLIGHT, n),
            "name": _categorical(parts.pop("name")[order], labels),
            "detail": _categorical(pid_codes, tensors),
            "step": np.full(n, -1, np.int64),
            "epoch": np.full(n, -1, np.int64),
            "start_ns": start,
            "end_ns": end,
            "bytes": np.full(n, -1, np.int64),
        }
        return pd.DataFrame(columns, columns=list(EVENT_COLUMNS), copy=False)


def _categorical(codes: np.ndarray, labels: pd.Index) -> pd.Categorical:
    """Codes into a few labels as a categorical: no Python string per row (2.6 M rows: 1 s and 0.4 GB less)."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(labels)))
    if len(used) == len(labels):
        return pd.Categorical.from_codes(codes.astype(np.int32), categories=labels, validate=False)
    lookup = np.full(len(labels), -1, np.int32)
    lookup[used] = np.arange(len(used), dtype=np.int32)
    return pd.Categorical.from_codes(lookup[codes], categories=labels[used], validate=False)


def _constant(value: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, np.int8), categories=pd.Index([value], dtype=object), validate=False)


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


#: Timestamps past this (µs, 2^53) cannot be exact: damage.
_MAX_TS_US = 2**53


def _python_chunk(data: np.ndarray, starts: np.ndarray) -> _Chunk:
    """A chunk Arrow refused (a value of the wrong type, a record that is not JSON), read record by record: the
    sound records as ``_arrow_chunk`` gives them, the others counted in ``skipped``. Slow, and only for damage."""
    ends = np.r_[starts[1:], len(data)]
    kind, pid, ts, name = [], [], [], []
    labels: dict[str, int] = {}
    meta: list[tuple[int, str, int | None, str | None]] = []
    skipped = 0
    for start, end in zip(starts.tolist(), ends.tolist()):
        record = bytes(data[start:end]).rstrip(b"\x00").strip().rstrip(b",]").strip()
        if not record:
            continue
        try:
            fields = json.loads(record.decode("utf-8", "replace"), strict=False)
        except ValueError:
            fields = None
        parsed = _sound_record(fields)
        if parsed is None:
            skipped += 1
            continue
        code, own_pid, own_ts, own_name = parsed
        kind.append(code)
        pid.append(own_pid)
        ts.append(own_ts)
        name.append(-1 if own_name is None else labels.setdefault(own_name, len(labels)))
        if code == _META:
            args = fields.get("args") if isinstance(fields.get("args"), dict) else {}
            start_us = args.get("start_time_since_epoch_in_micros")
            tensor = args.get("name")
            meta.append(
                (
                    own_pid,
                    str(own_name),
                    start_us if isinstance(start_us, int) and 0 <= start_us < _MAX_TS_US else None,
                    tensor if isinstance(tensor, str) else None,
                )
            )
    as_array = partial(np.asarray, dtype=np.int64)
    return _Chunk(as_array(kind), as_array(pid), as_array(ts), as_array(name), list(labels), meta, skipped)


def _sound_record(fields: Any) -> tuple[int, int, int, str | None] | None:
    """(kind, pid, ts, name) of a record whose values have the types and ranges Horovod writes; None else."""
    if not isinstance(fields, dict):
        return None
    ph, own_pid, own_ts, own_name = (fields.get(k) for k in ("ph", "pid", "ts", "name"))
    if not isinstance(ph, str) or (own_name is not None and not isinstance(own_name, str)):
        return None
    code = _PH_CODES.get(ph, 0)
    if own_pid is None:
        own_pid = -1
    elif isinstance(own_pid, bool) or not isinstance(own_pid, int) or not 0 <= own_pid < 2**31:
        return None
    if own_ts is None and code in (_META, 0):
        own_ts = 0
    elif isinstance(own_ts, bool) or not isinstance(own_ts, (int, float)) or not 0 <= own_ts < _MAX_TS_US:
        return None  # NaN fails the comparison too
    return code, own_pid, int(own_ts), None if own_name is None else writable_text(own_name)


class _Damaged(NamedTuple):
    """A chunk whose record ``row`` is not JSON: the records before it, and the error that stopped the read."""

    chunk: _Chunk | None
    error: TimelineError


def _parse_chunk(raw: tuple[bytearray, int, int], path: Path, engine: str) -> _Chunk | _Damaged:
    """One chunk's records; a damaged record keeps the records before it (``_Damaged``)."""
    data, starts = _newline_delimited(*raw)
    if engine == "auto":
        direct = _parse_horovod_layout(data, starts)
        if direct is not None:
            return direct
    body = pa.py_buffer(data[: len(data) - _PADDING])
    try:
        table = pa_json.read_json(pa.BufferReader(body), read_options=_READ, parse_options=_PARSE, memory_pool=_POOL)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        one_by_one = _python_chunk(data[: len(data) - _PADDING], starts)
        if one_by_one.skipped < len(starts):  # some records are sound: those are read, the others counted
            return one_by_one
        first = str(error).splitlines()[0]
        failure = TimelineError(
            f"{path} is not a Horovod timeline ({first}): pass the file written by HOROVOD_TIMELINE"
            " or hvd.start_timeline()"
        )
        row = re.search(r"in row (\d+)", first)
        if row is None or int(row.group(1)) == 0 or int(row.group(1)) >= len(starts):
            return _Damaged(None, failure)
        good = int(starts[int(row.group(1))])  # the records before the damaged one, read alone
        try:
            table = pa_json.read_json(
                pa.BufferReader(pa.py_buffer(data[:good])), read_options=_READ, parse_options=_PARSE, memory_pool=_POOL
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return _Damaged(None, failure)
        return _Damaged(_arrow_chunk(table), TimelineError(f"{path} is damaged ({first})"))
    return _arrow_chunk(table)


def read_horovod_timeline(
    path: str | Path,
    *,
    run_id: str = "",
    host: str = "",
    chunk_mb: float = DEFAULT_CHUNK_MB,
    engine: str = "auto",
) -> pd.DataFrame:
    """Events (``workbench.events`` schema, phase ``in_flight``) from a Horovod timeline, complete or not.

    String columns are categoricals. ``engine="arrow"`` reads every chunk with Arrow's general JSON
    reader (``"auto"`` does so only for chunks not in the byte layout Horovod's writer produces).
    The whole file's events at once: ``iter_horovod_timeline`` gives them in batches, in bounded memory.
    """
    one_batch = sys.maxsize  # the file's events are yielded once, at its end
    whole = list(
        iter_horovod_timeline(path, run_id=run_id, host=host, chunk_mb=chunk_mb, engine=engine, batch_events=one_batch)
    )
    return whole[0] if whole else EVENT_SCHEMA.empty_table().to_pandas()


#: Bytes of a timeline's start read for its tensors' shapes: every tensor shows in the first steps.
TENSOR_SCAN_BYTES = 64 << 20
_PROCESS_NAME = re.compile(r'"name": "process_name", "ph": "M", "pid": (\d+), "args": \{"name": "((?:[^"\\]|\\.)*)"\}')
_NEGOTIATION = re.compile(r'"ph": "B", "name": "NEGOTIATE_([A-Z_]+)", "ts": \d+, "pid": (\d+)')
_SHAPE = re.compile(r'"pid": (\d+), "args": \{"dtype": "(\w+)", "shape": "\[([^\]]*)\]"\}')
_ITEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "int8": 1, "uint8": 1}


def _json_string(body: str) -> str:
    """A JSON string's text from between its quotes; as written where it does not decode (a raw control
    character, a broken escape)."""
    try:
        return json.loads(f'"{body}"', strict=False)
    except ValueError:
        return body


def timeline_tensor_bytes(path: str | Path, *, scan_bytes: int = TENSOR_SCAN_BYTES) -> dict[str, int]:
    """``{tensor: bytes}`` of every tensor Horovod allreduced, in the order they first appear, from the shapes
    the timeline writes on each allreduce's end (``"args": {"dtype": ..., "shape": ...}``).

    Why: a profiled script records no gradient sizes of its own, and a projection to more ranks needs the bytes
    each step allreduces. Only the file's first ``scan_bytes`` are read (the first steps show every tensor);
    records in another layout than Horovod's writer produces are not matched, which leaves the dict empty.
    """
    with open_maybe_compressed(Path(path)) as handle:
        text = handle.read(scan_bytes).decode("utf-8", errors="replace")
    names = {int(pid): _json_string(name) for pid, name in _PROCESS_NAME.findall(text)}
    allreduced = {int(pid) for operation, pid in _NEGOTIATION.findall(text) if operation == "ALLREDUCE"}
    sizes: dict[str, int] = {}
    for pid, dtype, shape in _SHAPE.findall(text):
        pid = int(pid)
        if pid not in allreduced or dtype not in _ITEM_BYTES:
            continue
        written = [d for d in shape.replace(" ", "").split(",") if d]
        dims = [int(d) for d in written if d.isdigit()]
        nbytes = math.prod(dims) * _ITEM_BYTES[dtype]
        if len(dims) != len(written) or nbytes >= 2**50:
            continue  # a dimension that is not a count, or a petabyte tensor: damage, the tensor left out
        sizes.setdefault(names.get(pid, f"tensor-{pid}"), nbytes)
    return sizes


#: Events ``iter_horovod_timeline`` gathers before it yields them: about 0.14 GB of memory at the peak.
BATCH_EVENTS = 1_000_000


def iter_horovod_timeline(
    path: str | Path | Sequence[str | Path],
    *,
    run_id: str = "",
    host: str = "",
    chunk_mb: float = DEFAULT_CHUNK_MB,
    engine: str = "auto",
    batch_events: int = BATCH_EVENTS,
    unfinished: list[dict[str, object]] | None = None,
    info: dict[str, object] | None = None,
) -> Iterator[pd.DataFrame]:
    """The events of ``read_horovod_timeline`` in batches of about ``batch_events``, as they are paired.

    Memory stays that of a batch and the chunks in flight, whatever the file's size. Each batch is
    sorted by rank and start; an activity is in the batch of the chunk that closed it, so a rank's
    starts can step back a little from one batch to the next (the store's readers sort per rank).
    ``unfinished``: a list that gets, once the file is read, the negotiations still open at its end
    (``_Pairing.unfinished``): the collective a stalled or stopped job was waiting in.

    Every version that wrote a timeline: with the start record (0.20 on; timestamps after it) or without
    (0.15-0.19: timestamps as written, on a steady clock with no epoch, ``info["epoch_aligned"]`` False),
    gzip, an array never closed. ``path`` may list the rotated fragments of one job, in order: an activity
    begun in one and ended in the next is one span. ``info`` gets what the files held: ``records``,
    ``has_start_record``, ``epoch_aligned``, ``cycle_marks``, ``first_ns``/``last_ns``, ``open_activities``.
    """
    if batch_events < 1:
        raise ValueError(f"batch_events={batch_events} must be >= 1")
    if engine not in ("auto", "arrow"):
        raise ValueError(f"engine {engine!r} is not known: pass 'auto' or 'arrow'")
    paths = [Path(p) for p in ([path] if isinstance(path, (str, Path)) else path)]
    for one in paths:
        if not one.is_file():
            raise TimelineError(
                f"{one} does not exist: pass the path given to HOROVOD_TIMELINE or hvd.start_timeline()"
            )
    pairing = _Pairing()

    def ready() -> bool:
        return pairing.origin_us is not None and pairing.pending() >= batch_events

    def chunks() -> Iterator[tuple[int, tuple[bytearray, int, int]]]:
        for index, one in enumerate(paths):
            for raw in _record_chunks(one, max(64, int(chunk_mb * (1 << 20)))):
                yield index, raw

    # Two threads parse the next chunks (numpy and Arrow release the GIL) while this one pairs records
    # in file order; at most _IN_FLIGHT chunks are held at once, whatever the file's size.
    in_flight: deque[tuple[int, Future[_Chunk]]] = deque()

    def pair_next() -> None:
        index, parsed = in_flight.popleft()
        if index != pairing.fragment:
            pairing.new_fragment(index)
        result = parsed.result()
        skipped[0] += getattr(result, "skipped", 0)
        if isinstance(result, _Damaged):
            if result.chunk is not None:
                pairing.add(result.chunk)
            raise result.error
        pairing.add(result)

    damage: TimelineError | None = None
    skipped = [0]  # records left out as damaged, read past
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for index, raw in chunks():
                in_flight.append((index, pool.submit(_parse_chunk, raw, paths[index], engine)))
                del raw
                if len(in_flight) >= _IN_FLIGHT:
                    pair_next()
                    if pairing.chunks % _TRIM_EVERY == 0:
                        _release_free_memory()
                    if ready():
                        yield pairing.frame(run_id, host)
            while in_flight:
                pair_next()
                if ready():
                    yield pairing.frame(run_id, host)
    except TimelineError as error:
        if pairing.records == 0:
            raise
        damage = error  # what was read before the damage is kept: paired, counted and yielded below
    if (
        not pairing.has_start_record
        and not any(name in pairing.names for name in HOROVOD_ACTIVITY_HINTS)
        and not any(name.startswith("NEGOTIATE_") for name in pairing.names)
    ):
        raise TimelineError(
            f"{paths[0]} is not a Horovod timeline (none of its {pairing.records} records is a Horovod activity):"
            " pass the file written by HOROVOD_TIMELINE or hvd.start_timeline()"
        )
    if unfinished is not None:
        unfinished.extend(pairing.unfinished())
    if info is not None:
        origin_ns = (pairing.origin_us or 0) * 1000
        info.update(
            records=pairing.records,
            fragments=len(paths),
            has_start_record=pairing.has_start_record,
            epoch_aligned=pairing.epoch_aligned,
            cycle_marks=pairing.cycle_marks,
            first_ns=None if pairing.first_us is None else pairing.first_us * 1000 + origin_ns,
            last_ns=pairing.last_us * 1000 + origin_ns,
            open_activities=int((pairing.carry["kind"] == _BEGIN).sum()),
            ranks=sorted(pairing.mark_ranks),
            skipped_records=skipped[0],
        )
    if pairing.pending():
        yield pairing.frame(run_id, host)
    if damage is not None:
        raise damage


# a JSON array: the importer streams it itself (``iter_horovod_timeline``), all of a job's fragments as one
register_reader(
    TraceReader(
        "horovod_timeline",
        ("*.json", "*.json.gz"),
        lambda file: file.head is not None and file.head.startswith(b"["),
        kind="timeline",
        errors=(TimelineError, OSError),
        precedence=20,
    )
)
