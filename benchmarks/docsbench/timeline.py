"""Horovod timeline import speed and memory (``workbench bench timeline``).

Horovod users report timelines of several GB. The bench writes a timeline of ``file_mb`` shaped
like Horovod 0.28's (a negotiation with every rank's readiness mark, then ``ALLREDUCE`` holding
the fusion-buffer copies and ``MPI_ALLREDUCE``, per tensor and step), imports it in a fresh
process, and reports MB/s and the import's peak resident memory: the fresh process keeps the
figure free of whatever this process already holds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from workbench.events import BYTES_PER_MB

TENSORS = 6
ACTIVITIES = ("MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER")


def write_synthetic_timeline(
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
    ``synthetic_step_us(k, ...)`` µs after ``origin_us`` (now, unless given).
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
        ts = synthetic_step_us(0, tensors=tensors, late_us=shift)
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


def synthetic_step_us(step: int, *, tensors: int = TENSORS, late_us: int = 0) -> int:
    """Where step ``step`` of ``write_synthetic_timeline`` starts, µs after its origin (its steps are back to back)."""
    return 1000 + step * tensors * (50 + late_us)


_CHILD = """
import json, resource, sys, time
import psutil
from workbench.formats.horovod_timeline import read_horovod_timeline
before = psutil.Process().memory_info().rss
start = time.perf_counter()
events = read_horovod_timeline(sys.argv[1], engine=sys.argv[2])
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "events": len(events), "rss_before": before, "peak_rss": peak}))
"""
#: The importer's engines, timed one after the other on the same file: "auto" is what users get
#: (Horovod's byte layout read directly), "arrow" Arrow's general JSON reader for every chunk.
ENGINES = ("auto", "arrow")


def _import_once(timeline: Path, engine: str) -> dict[str, float]:
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, str(timeline), engine], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"timeline import failed: {tail}")
    child = json.loads(completed.stdout.strip().splitlines()[-1])
    size = timeline.stat().st_size
    file_mb = size / BYTES_PER_MB
    return {
        "file_mb": round(file_mb, 1),
        "seconds": round(child["seconds"], 3),
        "mb_per_s": round(file_mb / child["seconds"], 1),
        "events": child["events"],
        "peak_rss_mb": round(child["peak_rss"] / BYTES_PER_MB, 1),
        "import_rss_mb": round((child["peak_rss"] - child["rss_before"]) / BYTES_PER_MB, 1),
        "peak_over_file": round(child["peak_rss"] / size, 2),
    }


def run(file_mb: float = 300.0, *, path: str | Path | None = None) -> dict:
    """Import a ``file_mb`` timeline (written first, unless ``path`` names one) in a fresh process per engine.

    The top-level fields are the default engine's; ``engines`` holds each engine's, measured in turn.
    """
    with tempfile.TemporaryDirectory(prefix="workbench-timeline-") as scratch:
        timeline = Path(path) if path is not None else write_synthetic_timeline(Path(scratch) / "t.json", file_mb)
        engines = {engine: _import_once(timeline, engine) for engine in ENGINES}
    return {**engines["auto"], "engines": engines}


def format_result(result: dict[str, float]) -> str:
    """One line a reader compares by eye."""
    return (
        f"timeline import: {result['file_mb']:.0f} MB in {result['seconds']:.2f} s = {result['mb_per_s']:.0f} MB/s;"
        f" peak RSS {result['peak_rss_mb']:.0f} MB ({result['peak_over_file']:.2f}x the file,"
        f" {result['import_rss_mb']:.0f} MB for the import itself); {result['events']} events"
    )


def command(args: argparse.Namespace) -> int:
    """``workbench bench timeline``."""
    from workbench.bench import print_result

    print_result(run(args.mb, path=args.path), args, format_result)
    return 0
