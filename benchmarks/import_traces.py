"""Speed and memory of ``workbench import`` per format: MB/s and peak resident memory, each in a fresh process.

Formats: Horovod timelines as 0.28 writes them and as 0.15-0.16 did (no start record, cycle marks, never
closed), the latter gzipped too, and a multi-host TensorFlow profile (one ``<host>.xplane.pb`` per host, made
by ``workbench.datasets.made_traces.xplane``). Each import runs alone in a child process
(``workbench.importer.import_traces``); its
peak RSS is the child's ``ru_maxrss``, so nothing this process holds counts. Files are made first, outside
the timing. Run: ``python benchmarks/import_traces.py --timeline-mb 300 --xplane-mb 1000 --hosts 4 [--json]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbench.datasets.made_traces.horovod_timeline import write_made_timeline
from workbench.datasets.made_traces.xplane import MS, MadeGpuStep, write_made_xplane

# The peak is the child's own VmHWM: ru_maxrss carries the parent's high-water mark across fork and exec.
CHILD = """
import json, sys, time
from workbench.importer import import_traces
started = time.perf_counter()
result = import_traces(sys.argv[1:-1], out=sys.argv[-1])
seconds = time.perf_counter() - started
status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
print(json.dumps({"seconds": seconds, "events": result.events, "activities": result.device_activities,
                  "ranks": result.ranks, "peak_rss_mb": int(status) / 1024}))
"""


#: The timeline's parse alone (what ``workbench bench timeline`` times for today's format), for every layout.
PARSE = """
import json, sys, time
from workbench.formats.horovod_timeline import read_horovod_timeline
started = time.perf_counter()
events = read_horovod_timeline(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - started, "events": len(events)}))
"""


def measure(paths: list[Path], out: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, paths), str(out)], capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if len(paths) == 1 and paths[0].is_file() and ".json" in paths[0].name:
        command = [sys.executable, "-c", PARSE, str(paths[0])]
        parsed = subprocess.run(command, capture_output=True, text=True, check=True)
        result["parse_seconds"] = json.loads(parsed.stdout.strip().splitlines()[-1])["seconds"]
    return result


def made_xplanes(folder: Path, total_mb: float, hosts: int) -> list[Path]:
    """``hosts`` profiles of about ``total_mb`` MB together: 8 GPUs each, steps until the size is reached."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = write_made_xplane(
        folder / "probe.xplane.pb", host="probe", gpus=8, steps=10, step=MadeGpuStep(step_ns=16 * MS)
    )
    per_step = probe.stat().st_size / 10
    probe.unlink()
    steps = max(1, int(total_mb * 1e6 / hosts / per_step))
    session = folder / "plugins" / "profile" / "session"
    session.mkdir(parents=True)
    return [
        write_made_xplane(session / f"node{h}.xplane.pb", host=f"node{h}", gpus=8, steps=steps,
                          step=MadeGpuStep(step_ns=16 * MS), slow_gpus={3: 1.3} if h == 0 else None)
        for h in range(1, hosts + 1)
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeline-mb", type=float, default=300)
    parser.add_argument("--xplane-mb", type=float, default=1000)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object (lines to stderr)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="wb-import-bench-") as scratch:
        folder = Path(scratch)
        cases: list[tuple[str, list[Path]]] = []
        cases.append(("horovod 0.28", [write_made_timeline(folder / "new.json", args.timeline_mb, ranks=8)]))
        old = write_made_timeline(folder / "old.json", args.timeline_mb, ranks=8, layout="2019", origin_us=10**12)
        cases.append(("horovod 0.15 (no start record)", [old]))
        packed = folder / "old.json.gz"
        with old.open("rb") as source, gzip.open(packed, "wb", compresslevel=1) as target:
            shutil.copyfileobj(source, target)
        cases.append(("horovod 0.15, gzip (MB/s of the JSON)", [packed]))
        made = time.perf_counter()
        profiles = made_xplanes(folder / "xplane", args.xplane_mb, args.hosts)
        print(f"made {len(profiles)} XPlane files in {time.perf_counter() - made:.0f} s", file=sys.stderr)
        cases.append((f"xplane, {args.hosts} hosts x 8 GPUs", [profiles[0].parent]))
        for label, paths in cases:
            files = list(paths[0].rglob("*.pb")) if paths[0].is_dir() else paths
            size = sum((old if p == packed else p).stat().st_size for p in files)
            result = measure(paths, folder / "runs")
            rate = size / 1e6 / result["seconds"]
            parse = ""
            if "parse_seconds" in result:
                parse = f"  parse alone {size / 1e6 / result['parse_seconds']:4.0f} MB/s"
            rows.append({"format": label, "file_mb": size / 1e6, **result, "mb_per_s": rate})
            print(
                f"{label:36s} {size / 1e6:7.0f} MB  {result['seconds']:6.1f} s  {rate:6.0f} MB/s"
                f"  peak {result['peak_rss_mb']:6.0f} MB  ({result['events']} spans,"
                f" {result['activities']} GPU activities){parse}",
                file=sys.stderr if args.json else sys.stdout,
            )
            shutil.rmtree(folder / "runs", ignore_errors=True)
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
