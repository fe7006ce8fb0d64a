"""A Horovod timeline of several GB imported into a run as ``workbench profile`` does: MB/s, peak memory.

``workbench bench timeline`` times the whole-file read (``read_horovod_timeline``: every event in
memory at once, about 1.2x the file). ``workbench profile`` now imports batch by batch
(``iter_horovod_timeline`` → the run's store), so its memory should not grow with the file. This
writes the bench's synthetic timeline (``write_synthetic_timeline``, 2 ranks, 6 tensors per step) of
``--mb`` MB and imports it into a fresh run in a fresh process (its peak RSS is the import's).

    python benchmarks/timeline_stream.py --mb 5000 --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

from workbench.bench.timeline import write_synthetic_timeline
from workbench.store import create_run

_CHILD = """
import json, resource, sys, time
import psutil
from pathlib import Path
from workbench.profile import import_timeline
before = psutil.Process().memory_info().rss
start = time.perf_counter()
imported, line = import_timeline(Path(sys.argv[1]), enabled=True)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "events": imported, "line": line, "rss_before": before, "peak_rss": peak}))
"""


def measure(file_mb: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="workbench-stream-") as scratch:
        run_path = create_run(scratch, "timeline-stream", ranks=2)
        started = time.perf_counter()
        timeline = write_synthetic_timeline(run_path / "horovod_timeline.json", file_mb)
        written_s = time.perf_counter() - started
        size = timeline.stat().st_size
        completed = subprocess.run(
            [sys.executable, "-c", _CHILD, str(run_path)], capture_output=True, text=True, check=True
        )
        child = json.loads(completed.stdout.strip().splitlines()[-1])
        files = sum(1 for _ in (run_path / "events").rglob("*.parquet"))
    return {
        "file_mb": round(size / 1e6, 1),
        "events": child["events"],
        "seconds": round(child["seconds"], 2),
        "mb_per_s": round(size / 1e6 / child["seconds"], 1),
        "peak_rss_mb": round(child["peak_rss"] / 1e6, 1),
        "import_rss_mb": round((child["peak_rss"] - child["rss_before"]) / 1e6, 1),
        "store_files": files,
        "line": child["line"],
        "write_timeline_s": round(written_s, 1),
        "goal": {"peak_rss_mb": 1000, "mb_per_s": 200},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5000.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.mb)
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
