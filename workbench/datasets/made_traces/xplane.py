"""Made TensorFlow profiles (``<host>.xplane.pb``) with a known truth, for tests, notebook 07 and ``bench import``.

A GPU job's profile as TensorFlow writes it: per host an XSpace with ``/host:CPU`` (the step markers, a
TraceMe named ``train`` with ``step_num``) and one plane per GPU with a compute stream (kernels), an NCCL
stream (an allreduce at the end of each step, partly overlapping the last kernels), a copy stream (a
host-to-device copy at each step's start) and the derived ``Steps`` line. Every time is chosen, so a test
can assert busy, idle and overlap to the nanosecond. Encoded with numpy (the protobuf wire format), so a
gigabyte is written in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.formats.xplane import encode_varint

NS = 1
US = 1_000 * NS
MS = 1_000 * US


@dataclass(frozen=True)
class MadeGpuStep:
    """One GPU's step as the made profile lays it out (ns after the step's start)."""

    copy_ns: int = 200 * US  # host-to-device copy at the step's start
    kernels: int = 20  # compute kernels, back to back after the copy
    kernel_ns: int = 400 * US
    allreduce_ns: int = 2 * MS  # NCCL allreduce starting ``overlap_ns`` before the last kernel ends
    overlap_ns: int = 1 * MS
    step_ns: int = 12 * MS  # marker to marker

    def compute_ns(self, slow: float = 1.0) -> int:
        return int(self.kernels * self.kernel_ns * slow)


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's varint bytes in a (n, 10) matrix and how many of them it uses."""
    values = values.astype(np.uint64)
    bits = np.zeros(len(values), np.int64)
    rest = values.copy()
    while rest.any():
        bits += rest > 0
        rest >>= np.uint64(7)
    length = np.maximum(bits, 1)
    shifts = np.arange(10, dtype=np.uint64) * np.uint64(7)
    groups = ((values[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(10)[None, :] < (length[:, None] - 1)
    groups |= np.where(more, 0x80, 0).astype(np.uint8)
    return groups, length


def _concat_fields(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the bytes of several (matrix, length) fields one after the other: (flat bytes, row lengths)."""
    matrix = np.concatenate([m for m, _ in parts], axis=1)
    mask = np.concatenate([np.arange(m.shape[1])[None, :] < length[:, None] for m, length in parts], axis=1)
    return matrix[mask], mask.sum(axis=1)


def _constant(payload: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.tile(np.frombuffer(payload, np.uint8), (n, 1)), np.full(n, len(payload), np.int64)


def varint_stat(metadata_id: int, values: np.ndarray, *, field: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    """An XStat per event (XEvent field 4) holding a number: ``field`` 3 uint64, 4 int64, 7 a ref to a stat name."""
    value, length = _varints(values)
    n = len(values)
    head = _constant(bytes([0x22]), n)
    size = (np.full((n, 1), 0, np.uint8), np.ones(n, np.int64))
    size[0][:, 0] = (3 + length).astype(np.uint8)  # key 0x08, the id (< 128), the value's key, the value
    return [head, size, _constant(bytes([0x08, metadata_id, field << 3]), n), (value, length)]


def string_stat(metadata_id: int, text: bytes, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same string XStat (``str_value``) on every event."""
    body = bytes([0x08, metadata_id, 0x2A, len(text)]) + text
    return [_constant(bytes([0x22, len(body)]) + body, n)]


def encode_events(
    metadata_id: np.ndarray,
    offset_ps: np.ndarray,
    duration_ps: np.ndarray,
    stats: list[tuple[np.ndarray, np.ndarray]] = (),  # type: ignore[assignment]
) -> bytes:
    """XLine field 4 (``events``) for every event: key, length and the XEvent's fields 1-3 and its stats."""
    n = len(metadata_id)
    key = lambda byte: (np.full((n, 1), byte, np.uint8), np.ones(n, np.int64))  # noqa: E731
    body, body_length = _concat_fields(
        [key(0x08), _varints(metadata_id), key(0x10), _varints(offset_ps), key(0x18), _varints(duration_ps), *stats]
    )
    length_bytes, length_length = _varints(body_length)
    head, head_length = _concat_fields([key(0x22), (length_bytes, length_length)])
    # interleave each event's head and body
    out = np.empty(int(head_length.sum() + body_length.sum()), np.uint8)
    event_length = head_length + body_length
    event_start = np.r_[0, np.cumsum(event_length)[:-1]]
    head_position = np.repeat(event_start, head_length) + _ranks_within(head_length)
    body_position = np.repeat(event_start + head_length, body_length) + _ranks_within(body_length)
    out[head_position] = head
    out[body_position] = body
    return out.tobytes()


def _ranks_within(lengths: np.ndarray) -> np.ndarray:
    """0, 1, ..., len-1 for each row's bytes, concatenated."""
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    return np.arange(int(lengths.sum())) - np.repeat(starts, lengths)


def _field(number: int, payload: bytes) -> bytes:
    return encode_varint((number << 3) | 2) + encode_varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return encode_varint(number << 3) + encode_varint(value)


def _line(line_id: int, name: str, timestamp_ns: int, events: bytes) -> bytes:
    return _int_field(1, line_id) + _field(2, name.encode()) + _int_field(3, timestamp_ns) + events


def _metadata(entries: dict[int, str], field_number: int) -> bytes:
    out = b""
    for key, name in entries.items():
        value = _int_field(1, key) + _field(2, name.encode())
        out += _field(field_number, _int_field(1, key) + _field(2, value))
    return out


#: Stats TensorFlow's GPU tracer puts on every activity (their metadata ids on a made plane).
STAT_CORRELATION, STAT_CONTEXT, STAT_DETAILS, STAT_DETAILS_TEXT, STAT_GROUP, STAT_KERNEL_DETAILS = 1, 2, 3, 4, 5, 6
STAT_ANNOTATION, STAT_ANNOTATION_TEXT, STAT_SHAPE = 7, 8, 9
GPU_STATS = {
    STAT_CORRELATION: "correlation_id",
    STAT_CONTEXT: "context_id",
    STAT_DETAILS: "kernel_details",
    STAT_DETAILS_TEXT: "memcpy_details",
    STAT_GROUP: "group_id",
    STAT_KERNEL_DETAILS: "regs:64 static_shared:0 dynamic_shared:16384 grid:80,1,1 block:256,1,1 occ_pct:50",
    STAT_ANNOTATION: "annotation",
    STAT_ANNOTATION_TEXT: "model/dense/MatMul:MatMul",
    STAT_SHAPE: "shape",
}
#: Bytes of each made host-to-device copy (its ``memcpy_details`` says so).
COPY_BYTES = 4_194_304
KERNEL_NAME = "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn"
ALLREDUCE_NAME = "ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)"
COPY_NAME = "MemcpyH2D"


def write_made_xplane(
    path: str | Path,
    *,
    host: str,
    gpus: int = 2,
    steps: int = 10,
    epoch_ns: int = 1_700_000_000_000_000_000,
    step: MadeGpuStep = MadeGpuStep(),
    slow_gpus: dict[int, float] | None = None,
    unused_gpus: tuple[int, ...] = (),
) -> Path:
    """One host's profile: ``gpus`` GPUs (``unused_gpus`` named but idle), ``steps`` steps of ``step``.

    A GPU in ``slow_gpus`` (index -> factor) runs its kernels ``factor`` times longer; its allreduce still
    starts ``overlap_ns`` before its last kernel ends. Returns the path.
    """
    path = Path(path)
    slow_gpus = slow_gpus or {}
    planes = []
    step_start = np.arange(steps, dtype=np.int64) * step.step_ns
    # host: step markers with step_num
    host_events = b""
    for k in range(steps):
        stat = _field(4, _int_field(1, 1) + _int_field(4, k))  # XStat: metadata_id 1 (step_num), int64_value k
        body = _int_field(1, 1) + _int_field(2, int(step_start[k]) * 1000) + _int_field(3, step.step_ns * 900) + stat
        host_events += _field(4, body)
    host_plane = (
        _int_field(1, 1)
        + _field(2, b"/host:CPU")
        + _field(3, _line(1, "python3", epoch_ns, host_events))
        + _metadata({1: "train"}, 4)
        + _metadata({1: "step_num"}, 5)
    )
    planes.append(host_plane)
    for gpu in range(gpus):
        name = f"/device:GPU:{gpu}".encode()
        plane = _int_field(1, 2 + gpu) + _field(2, name)
        if gpu not in unused_gpus:
            slow = slow_gpus.get(gpu, 1.0)
            kernel_ns = int(step.kernel_ns * slow)
            per_step = np.arange(step.kernels, dtype=np.int64) * kernel_ns + step.copy_ns
            kernel_start = (step_start[:, None] + per_step[None, :]).ravel()
            compute_end = step_start + step.copy_ns + step.kernels * kernel_ns
            allreduce_start = compute_end - step.overlap_ns
            lines = [
                (10, "Stream #14(Kernel)", 1, kernel_start, np.full(len(kernel_start), kernel_ns)),
                (11, "Stream #20(nccl)", 2, allreduce_start, np.full(steps, step.allreduce_ns)),
                (12, "Stream #15(MemcpyH2D)", 3, step_start, np.full(steps, step.copy_ns)),
            ]
            correlation = 0
            for line_id, line_name, metadata_id, starts, durations in lines:
                n = len(starts)
                details = (
                    string_stat(STAT_DETAILS_TEXT, f"size:{COPY_BYTES} dest:{gpu} async:1".encode(), n)
                    if metadata_id == 3
                    else varint_stat(STAT_DETAILS, np.full(n, STAT_KERNEL_DETAILS), field=7)
                )
                stats = [
                    *varint_stat(STAT_CORRELATION, np.arange(correlation, correlation + n)),
                    *string_stat(STAT_CONTEXT, b"$$1", n),
                    *details,
                    *varint_stat(STAT_GROUP, (starts - starts.min()) // step.step_ns, field=4),
                    *varint_stat(STAT_ANNOTATION, np.full(n, STAT_ANNOTATION_TEXT), field=7),
                    *string_stat(STAT_SHAPE, b"(float16[512,512])", n),
                ]
                correlation += n
                events = encode_events(np.full(n, metadata_id), starts * 1000, durations * 1000, stats)
                plane += _field(3, _line(line_id, line_name, epoch_ns, events))
            step_ids = np.arange(steps) + 100
            step_events = encode_events(step_ids, step_start * 1000, np.full(steps, step.step_ns * 1000))
            plane += _field(3, _line(99, "Steps", epoch_ns, step_events))
            names = {1: KERNEL_NAME, 2: ALLREDUCE_NAME, 3: COPY_NAME, **{100 + k: str(k) for k in range(steps)}}
            plane += _metadata(names, 4)
            plane += _metadata(GPU_STATS, 5)
        planes.append(plane)
    space = b"".join(_field(1, plane) for plane in planes) + _field(4, host.encode())
    path.write_bytes(space)
    return path
