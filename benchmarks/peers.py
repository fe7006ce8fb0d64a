"""The workbench beside Holistic Trace Analysis on the same PyTorch (Kineto) traces: their numbers and their costs.

For each set of traces (a folder of one file per rank), each tool runs in a fresh process of its own
environment: HTA 0.5 in ``.venv-hta`` (``make peers``: it wants numpy 2 and pandas 3, which TensorFlow 2.15
cannot have), the workbench in this one. Each loads the traces and computes, per rank, HTA's temporal
breakdown (idle, compute, non-compute shares of the GPU's kernel time) and its communication-computation
overlap (``analysis.devices.temporal_breakdown`` defines them as HTA does). Printed per rank: both tools'
shares, their difference in points, and per set each tool's seconds (load + analysis) and peak memory (the
child's own high-water mark) with their ratios.

Sets: HTA's own samples (``data/traces/hta_trace_filter``) and made traces (``bench.kineto``), ``--made``
giving each set's ranks and events per rank. ``--json FILE`` saves the results for
``benchmarks/render_readme.py save peers FILE``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
HTA_PYTHON = ROOT / ".venv-hta" / "bin" / "python"
SAMPLES = ROOT / "data" / "traces" / "hta_trace_filter"

HTA_CHILD = """
import json, sys, time
started = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
loaded = time.perf_counter()
breakdown = analysis.get_temporal_breakdown(visualize=False)
overlap = analysis.get_comm_comp_overlap(visualize=False)
done = time.perf_counter()
ranks = {}
for row in breakdown.itertuples():
    ranks[int(row.rank)] = {"idle": row.idle_time_pctg, "compute": row.compute_time_pctg,
                            "non_compute": row.non_compute_time_pctg, "kernel_time_us": float(row._5)}
for row in overlap.itertuples():
    ranks[int(row.rank)]["overlap"] = row.comp_comm_overlap_pctg
print(json.dumps({"load_s": loaded - started, "analysis_s": done - loaded, "ranks": ranks}))
"""

OUR_CHILD = """
import json, sys, time
from pathlib import Path
started = time.perf_counter()
from workbench.analysis.devices import temporal_breakdown
from workbench.formats.gpu_trace import concat_activity
from workbench.formats.kineto import read_kineto_activity
parts = []
for path in sorted(p for p in Path(sys.argv[1]).iterdir() if ".json" in p.name):
    trace, rank, _world = read_kineto_activity(path)
    parts.append(trace.activity.assign(rank=rank))
activity = concat_activity(parts)
loaded = time.perf_counter()
table = temporal_breakdown(activity)
done = time.perf_counter()
ranks = {
    int(row.rank): {"idle": 100 * row.idle_share, "compute": 100 * row.compute_share,
                    "non_compute": 100 * row.non_compute_share, "overlap": 100 * row.overlap_share,
                    "kernel_time_us": row.kernel_time_s * 1e6}
    for row in table.itertuples()
}
print(json.dumps({"load_s": loaded - started, "analysis_s": done - loaded, "ranks": ranks}))
"""
NUMBERS = ("idle", "compute", "non_compute", "overlap")


def run_child(python: Path, code: str, folder: Path) -> dict:
    """The child's JSON, and the peak memory of its process tree (HTA parses ranks in forked processes):
    proportional set sizes (shared pages split among the processes sharing them) summed, sampled every 50 ms."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen([str(python), "-c", code, str(folder)], stdout=out, stderr=err)
        peak = 0
        watched = psutil.Process(child.pid)
        while child.poll() is None:
            try:
                tree = [watched, *watched.children(recursive=True)]
                peak = max(peak, sum(_pss(p) for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if child.returncode != 0:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python.parent.parent.name}: {tail}")
    return {**json.loads(stdout.strip().splitlines()[-1]), "peak_mb": peak / 1e6}


def _pss(process: psutil.Process) -> int:
    try:
        return process.memory_full_info().pss
    except (psutil.AccessDenied, AttributeError):
        return process.memory_info().rss


def compare(label: str, folder: Path) -> dict:
    hta = run_child(HTA_PYTHON, HTA_CHILD, folder)
    ours = run_child(Path(sys.executable), OUR_CHILD, folder)
    rows = []
    for rank in sorted(hta["ranks"], key=int):
        theirs, mine = hta["ranks"][rank], ours["ranks"].get(rank, {})
        rows.append(
            {
                "rank": int(rank),
                **{f"hta_{k}": theirs.get(k) for k in NUMBERS},
                **{f"ours_{k}": mine.get(k) for k in NUMBERS},
                **{f"diff_{k}": None if mine.get(k) is None or theirs.get(k) is None else mine[k] - theirs[k]
                   for k in NUMBERS},
            }
        )  # fmt: skip
    hta_s, ours_s = hta["load_s"] + hta["analysis_s"], ours["load_s"] + ours["analysis_s"]
    return {
        "traces": label,
        "ranks": rows,
        "hta": {k: hta[k] for k in ("load_s", "analysis_s", "peak_mb")},
        "ours": {k: ours[k] for k in ("load_s", "analysis_s", "peak_mb")},
        "speedup": hta_s / ours_s,
        "memory_ratio": ours["peak_mb"] / hta["peak_mb"],
        "max_diff_points": max(abs(row[f"diff_{k}"]) for row in rows for k in NUMBERS if row[f"diff_{k}"] is not None),
    }


def print_result(result: dict) -> None:
    print(f"\n{result['traces']}")
    print(f"{'rank':>5} " + " ".join(f"{k:>22}" for k in NUMBERS))
    for row in result["ranks"]:
        cells = [
            f"{row[f'hta_{k}']:6.2f} {row[f'ours_{k}']:6.2f} {row[f'diff_{k}']:+6.2f}"
            if row[f"diff_{k}"] is not None
            else f"{'–':>22}"
            for k in NUMBERS
        ]
        print(f"{row['rank']:>5} " + " ".join(f"{c:>22}" for c in cells))
    hta, ours = result["hta"], result["ours"]
    print(
        f"HTA {hta['load_s'] + hta['analysis_s']:.2f} s, {hta['peak_mb']:.0f} MB; workbench"
        f" {ours['load_s'] + ours['analysis_s']:.2f} s, {ours['peak_mb']:.0f} MB: {result['speedup']:.1f}x faster,"
        f" {result['memory_ratio']:.2f}x the memory; largest difference {result['max_diff_points']:.2f} points"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--made",
        default="8x100000,64x10000",
        help="made sets, RANKSxEVENTS each, comma-separated (events per rank: GPU and CPU; default %(default)s)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not HTA_PYTHON.exists():
        raise SystemExit(f"no HTA environment at {HTA_PYTHON.parent.parent}: make it with `make peers`")
    from workbench.bench.kineto import write_made_kineto

    results = [compare("HTA's samples (tests/data/trace_filter: ranks 0 and 1 of 128)", SAMPLES)]
    print_result(results[-1])
    for made in filter(None, args.made.split(",")):
        ranks, events = (int(part) for part in made.lower().split("x"))
        with tempfile.TemporaryDirectory(prefix="wb-peers-") as scratch:
            per_step = 2 * 22 + 1  # launches and GPU activities per step, and the step's marker
            steps = max(2, events // per_step)
            folder = Path(scratch) / "made"
            write_made_kineto(folder, ranks=ranks, steps=steps, slow_ranks={1: 1.3})
            results.append(compare(f"made: {ranks} ranks x {steps * per_step:,} events", folder))
            print_result(results[-1])
    if args.json:
        Path(args.json).write_text(json.dumps({"sets": results}, indent=1))


if __name__ == "__main__":
    main()
