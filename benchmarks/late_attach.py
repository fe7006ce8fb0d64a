"""A dashboard opened late on a long 64-rank job: the backlog's files and the seconds to read it.

The job is ``workbench bench live``'s synthetic one (64 ranks, a step every 0.1 s, each rank
flushing every 0.5 s), run in simulated time (each flush is written at once, stamped with the time
it stands for) so that minutes of a job take seconds here. Its writers merge their files as the
recorders do (``StreamWriter``, fanout 8), or not (``merge_fanout=0``, as before). Then, in a fresh
process each, what a late viewer does first: ``RunTail(run).poll()`` (the dashboard's first refresh
reads the whole backlog) and ``Run.load(run)``.

    python benchmarks/late_attach.py --minutes 10 60 --json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docsbench.live import LiveSyntheticJob
from workbench.events import NS_PER_S
from workbench.store import MERGE_FANOUT, create_run

RANKS = 64
FLUSH_S = 0.5

_CHILD = """
import json, sys, time
from workbench.store import RunData, RunTail
started = time.perf_counter()
events, memory = RunTail(sys.argv[1]).poll()
tail_s = time.perf_counter() - started
started = time.perf_counter()
run = RunData.load(sys.argv[1], categorical=True)
load_s = time.perf_counter() - started
print(json.dumps({"tail_s": tail_s, "rows": len(events), "load_s": load_s, "loaded": len(run.events)}))
"""


def simulate(root: Path, minutes: float, merge_fanout: int) -> tuple[Path, float]:
    """Write ``minutes`` of the job's flushes in simulated time; the run and the seconds it took to write."""
    path = create_run(root, f"late-attach-{merge_fanout}", ranks=RANKS)
    job = LiveSyntheticJob(path, ranks=RANKS, flush_s=FLUSH_S, merge_fanout=merge_fanout)
    start = job.clock[0]
    started = time.perf_counter()
    for flush in range(1, int(minutes * 60 / FLUSH_S) + 1):
        job.flush(start + int(flush * FLUSH_S * NS_PER_S))
    return path, time.perf_counter() - started


def attach(path: Path) -> dict:
    completed = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure(minutes: float, merge_fanout: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="workbench-attach-") as scratch:
        path, write_s = simulate(Path(scratch), minutes, merge_fanout)
        files = sum(1 for _ in (path / "events").rglob("*.parquet"))
        result = attach(path)
    return {
        "minutes": minutes,
        "merge_fanout": merge_fanout,
        "files": files,
        "rows": result["rows"],
        "first_refresh_s": round(result["tail_s"], 3),
        "run_load_s": round(result["load_s"], 3),
        "write_s": round(write_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[10.0, 60.0])
    parser.add_argument("--unmerged-minutes", type=float, default=10.0, help="the job without merging (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(minutes, MERGE_FANOUT) for minutes in args.minutes]
    if args.unmerged_minutes:
        rows.insert(0, measure(args.unmerged_minutes, 0))
    result = {"ranks": RANKS, "flush_s": FLUSH_S, "goal_s": 2.0, "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in rows:
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
