"""A made Horovod timeline of any size, shaped like Horovod 0.28's or 2019's: for tests, benchmarks and demos.

A negotiation with every rank's readiness mark, then ``ALLREDUCE`` holding the fusion-buffer copies and
``MPI_ALLREDUCE``, per tensor and step; every time is chosen, so what an import reads is known.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from workbench.events import BYTES_PER_MB

TENSORS = 6
ACTIVITIES = ("MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER")


def write_made_timeline(
    path: str | Path,
    file_mb: float,
    *,
    ranks: int = 2,
    tensors: int = TENSORS,
    late_ranks: Iterable[int] = (),
    late_us: int = 30,
    origin_us: int | None = None,
    layout: str = "0.28",
) -> Path:
    """A Horovod-shaped timeline of about ``file_mb`` MB (steps of ``tensors`` allreduces over ``ranks``).

    ``layout="2019"``: as Horovod 0.15-0.16 wrote it: no start record (timestamps on a steady clock, µs since
    boot), a ``CYCLE_START`` mark before each step, and the array never closed (a job stopped while it wrote).

    Ranks mark readiness 0, 3, 6 or 9 µs into each negotiation (``rank % 4``); ``late_ranks`` mark
    ``late_us`` later, and the negotiation and what follows wait for them. Step ``k`` starts at
    ``made_step_us(k, ...)`` µs after ``origin_us`` (now, unless given).
    """
    path = Path(path)
    target = int(file_mb * BYTES_PER_MB)
    late = set(late_ranks)
    shift = late_us if late else 0
    if layout not in ("0.28", "2019"):
        raise ValueError(f"layout {layout!r}: pass '0.28' or '2019'")
    old = layout == "2019"
    origin = int(time.time() * 1e6) if origin_us is None else origin_us
    with path.open("w") as out:
        if old:
            out.write("[\n")
        else:
            out.write(
                '[\n{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros":'
                f"{origin}}}}},\n"
            )
        for pid in range(1, tensors + 1):
            out.write(f'{{"name": "process_name", "ph": "M", "pid": {pid}, "args": {{"name": "grad_{pid}"}}}},\n')
        written, step = out.tell(), 0
        ts = made_step_us(0, tensors=tensors, late_us=shift)
        offsets = [3 * (rank % 4) + (shift if rank in late else 0) for rank in range(ranks)]
        while written < target:
            records = [f'{{"ph": "i", "name": "CYCLE_START", "ts": {ts}, "s": "g"}}'] if old else []
            for pid in range(1, tensors + 1):
                records.append(f'{{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": {ts}, "pid": {pid}}}')
                for rank, offset in enumerate(offsets):
                    records.append(f'{{"ph": "X", "name": "{rank}", "ts": {ts + offset}, "pid": {pid}, "dur": 0}}')
                ts += shift  # the negotiation ends once the late ranks are ready
                records.append(f'{{"ph": "E", "ts": {ts + 10}, "pid": {pid}}}')
                records.append(f'{{"ph": "B", "name": "ALLREDUCE", "ts": {ts + 11}, "pid": {pid}}}')
                for offset, activity in enumerate(ACTIVITIES):
                    begin = ts + 12 + 10 * offset
                    records.append(f'{{"ph": "B", "name": "{activity}", "ts": {begin}, "pid": {pid}}}')
                    records.append(f'{{"ph": "E", "ts": {begin + 8}, "pid": {pid}}}')
                args = '{"dtype": "float32", "shape": "[512, 512]"}'
                records.append(f'{{"ph": "E", "ts": {ts + 45}, "pid": {pid}, "args": {args}}}')
                ts += 50
            if old:  # a steady clock's µs: the origin added to every timestamp
                records = [_shifted(record, origin) for record in records]
            block = ",".join(records) + ",\n"
            out.write(block)
            written += len(block)
            step += 1
        if not old:
            out.write(f'{{"ph": "X", "name": "end", "ts": {ts}, "pid": 0, "dur": 0}}]\n')
    return path


def _shifted(record: str, origin: int) -> str:
    """One record with ``origin`` added to its ``ts`` (records written relative, stored absolute)."""
    head, _, rest = record.partition('"ts": ')
    if not rest:
        return record
    digits = len(rest) - len(rest.lstrip("0123456789"))
    return f'{head}"ts": {int(rest[:digits]) + origin}{rest[digits:]}'


def made_step_us(step: int, *, tensors: int = TENSORS, late_us: int = 0) -> int:
    """Where step ``step`` of ``write_made_timeline`` starts, µs after its origin (its steps are back to back)."""
    return 1000 + step * tensors * (50 + late_us)

