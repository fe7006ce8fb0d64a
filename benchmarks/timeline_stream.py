"""A Horovod timeline of several GB imported into a run as ``workbench profile`` does: MB/s, peak memory.

``workbench bench timeline`` times the whole-file read (``read_horovod_timeline``: every event in
memory at once, about 1.2x the file). ``workbench profile`` imports batch by batch
(``iter_horovod_timeline`` → the run's store), so its memory should not grow with the file. This
writes the bench's synthetic timeline (``write_made_timeline``, 6 tensors per step) of ``--mb``
MB and imports it into a fresh run in a fresh process (its peak RSS is the import's).

With ``--ranks N`` every negotiation holds N readiness marks (``--late-ranks`` mark 30 µs later), and
a second fresh process reads every rank's readiness and lateness from the imported run, as a
dashboard or report does (``analyse_split``: rank groups of 32 on 2 workers, with rank 0's steps
written as its recorder would): its seconds, peak memory, and whether the ranks it finds latest (by
median lateness) are the late ones.

    python benchmarks/timeline_stream.py --mb 5000 --json
    python benchmarks/timeline_stream.py --mb 2000 --ranks 1024 --late-ranks 37,600 --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench.datasets.made_traces.horovod_timeline import made_step_us, write_made_timeline
from workbench.store import StreamWriter, create_run

_IMPORT = """
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
_LATENESS = """
import json, sys, time
from workbench.analysis import lateness_summary
from workbench.rank_groups import analyse_split, peak_rss
start = time.perf_counter()
result = analyse_split(sys.argv[1], group_ranks=32, workers=2)
seconds = time.perf_counter() - start
summary = lateness_summary(result.lateness)
late = summary.sort_values(["median_lateness_s", "rank"], ascending=[False, True])
print(json.dumps({
    "seconds": seconds,
    "events": result.events,
    "peak_rss": peak_rss() + sum(result.worker_peak_rss.values()),
    "ranks": int(len(summary)),
    "steps": int(result.lateness["step"].nunique()),
    "latest": late.head(int(sys.argv[2])).to_dict("records"),
}))
"""
#: A late rank marks readiness this much after the others (``write_made_timeline``'s ``late_us``).
LATE_US = 30


def _child(code: str, *args: str) -> dict:
    completed = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _write_reference_steps(run_path: Path, origin_us: int, steps: int, late: bool) -> None:
    """Rank 0's training steps, as its recorder writes them: what each negotiation's step is read from."""
    start = [(origin_us + made_step_us(k, late_us=LATE_US if late else 0)) * 1000 for k in range(steps + 1)]
    StreamWriter(run_path, "events", 0, merge_fanout=0).write(
        {
            "run_id": [run_path.name] * steps,
            "rank": [0] * steps,
            "host": [""] * steps,
            "phase": ["compute"] * steps,
            "name": ["train_step"] * steps,
            "detail": [""] * steps,
            "step": list(range(steps)),
            "epoch": [0] * steps,
            "start_ns": start[:-1],
            "end_ns": [s - 1 for s in start[1:]],
            "bytes": [-1] * steps,
        }
    )


def measure(file_mb: float, ranks: int = 2, late_ranks: tuple[int, ...] = ()) -> dict:
    with tempfile.TemporaryDirectory(prefix="workbench-stream-") as scratch:
        run_path = create_run(scratch, "timeline-stream", ranks=ranks)
        origin_us = int(time.time() * 1e6)
        started = time.perf_counter()
        timeline = write_made_timeline(
            run_path / "horovod_timeline.json",
            file_mb,
            ranks=ranks,
            late_ranks=late_ranks,
            late_us=LATE_US,
            origin_us=origin_us,
        )
        written_s = time.perf_counter() - started
        size = timeline.stat().st_size
        child = _child(_IMPORT, str(run_path))
        files = sum(1 for _ in (run_path / "events").rglob("*.parquet"))
        result = {
            "file_mb": round(size / 1e6, 1),
            "ranks": ranks,
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
        if ranks > 2:
            result["lateness"] = _lateness(run_path, timeline, origin_us, late_ranks)
    return result


def _lateness(run_path: Path, timeline: Path, origin_us: int, late_ranks: tuple[int, ...]) -> dict:
    """Every rank's readiness and lateness read back from the imported run, in a fresh process."""
    with timeline.open("rb") as handle:  # the last record's ts: how many whole steps the file holds
        handle.seek(max(0, timeline.stat().st_size - 200))
        last_us = int(handle.read().rsplit(b'"ts": ', 1)[1].split(b",", 1)[0])
    per_step = made_step_us(1, late_us=LATE_US if late_ranks else 0) - made_step_us(0)
    steps = (last_us - made_step_us(0)) // per_step
    _write_reference_steps(run_path, origin_us, steps, bool(late_ranks))
    child = _child(_LATENESS, str(run_path), str(max(len(late_ranks), 1)))
    latest = child["latest"]
    return {
        "seconds": round(child["seconds"], 2),
        "events": child["events"],
        "peak_rss_mb": round(child["peak_rss"] / 1e6, 1),
        "ranks_with_lateness": child["ranks"],
        "steps": child["steps"],
        "late_ranks": list(late_ranks),
        "latest_ranks": [int(row["rank"]) for row in latest],
        "latest_found": sorted(int(row["rank"]) for row in latest) == sorted(late_ranks),
        "latest_median_lateness_us": [round(float(row["median_lateness_s"]) * 1e6, 1) for row in latest],
        "latest_last_in_steps": [int(row["last_in_steps"]) for row in latest],
        "made_late_us": LATE_US,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5000.0)
    parser.add_argument("--ranks", type=int, default=2, help="readiness marks per negotiation (default 2)")
    parser.add_argument("--late-ranks", default="", help="ranks that mark readiness late, e.g. 37,600")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    late = tuple(int(r) for r in args.late_ranks.split(",") if r.strip())
    if any(not 0 <= r < args.ranks for r in late):
        parser.error(f"--late-ranks {args.late_ranks} must be ranks below --ranks {args.ranks}")
    result = measure(args.mb, args.ranks, late)
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
