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
from pathlib import Path

from workbench.datasets.made_traces.horovod_timeline import write_made_timeline
from workbench.events import BYTES_PER_MB

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
        timeline = Path(path) if path is not None else write_made_timeline(Path(scratch) / "t.json", file_mb)
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
