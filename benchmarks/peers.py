"""The workbench beside Holistic Trace Analysis on the same PyTorch (Kineto) traces: their numbers and their costs.

For each set of traces (a folder of one file per rank), each tool runs in a fresh process of its own
environment: HTA 0.5 in ``.venv-hta`` (``make peers``: it wants numpy 2 and pandas 3, which TensorFlow 2.15
cannot have), the workbench in this one. Each loads the traces and computes, per rank, HTA's temporal
breakdown (idle, compute, non-compute shares of the GPU's kernel time) and its communication-computation
overlap (``analysis.devices.temporal_breakdown`` defines them as HTA does). Printed per rank: both tools'
shares, their difference in points, and per set each tool's seconds (load + analysis) and peak memory (the
child's process tree, proportional set sizes summed) with their ratios.

Also per rank: HTA's idle time split by cause (host wait, kernel wait, other; ``analysis.launches``), its
kernel launch statistics and the top compute kernel; per set, its kernel-type breakdown (``analysis.kernels``).
Our child reads one rank's file at a time (as ``workbench import`` does); HTA holds every rank at once. A third
child takes the path a large run takes: ``workbench import``, then the whole analysis in rank groups
(``analyse_split``, a rank a group, 2 workers), HTA's shares read from the analysis's ``gpu_time`` table.

Sets: HTA's own samples (``data/traces/hta_trace_filter``) and made traces
(``workbench.datasets.made_traces.kineto``) shaped like real
profiles (``--steps`` steps of many kernels each), ``--made`` giving each set's ranks and events per rank.
``--scale`` times the workbench's own analysis of a 100 M-event run in the same run (the scale where HTA's users
give up). ``--json`` prints the results as one JSON object (the tables to stderr), as saved in
``benchmarks/results/peers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil

from workbench.datasets.made_traces.kineto import MadeKinetoStep, write_made_kineto

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
all_ranks = sorted(int(r) for r in breakdown["rank"])
idle, _stats = analysis.get_idle_time_breakdown(ranks=all_ranks, visualize=False)
launches = analysis.get_cuda_kernel_launch_stats(ranks=all_ranks, visualize=False)
kernel_types, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
done = time.perf_counter()
ranks = {}
for row in breakdown.itertuples():
    ranks[int(row.rank)] = {"idle": row.idle_time_pctg, "compute": row.compute_time_pctg,
                            "non_compute": row.non_compute_time_pctg}
for row in overlap.itertuples():
    ranks[int(row.rank)]["overlap"] = row.comp_comm_overlap_pctg
for rank, rows in idle.groupby("rank"):
    by_cause = rows.groupby("idle_category")["idle_time"].sum()
    total = float(by_cause.sum())
    for cause in ("host_wait", "kernel_wait", "other"):
        ranks[int(rank)][f"idle_{cause}"] = 100 * float(by_cause.get(cause, 0.0)) / total if total else None
for rank, events in launches.items():
    cutoff, delay_cutoff = 50, 100  # HTA's defaults, µs
    ranks[int(rank)].update(
        launches=len(events),
        launch_cpu_us=float(events["cpu_duration"].mean()),
        launch_delay_us=float(events["launch_delay"].mean()),
        short_kernels=int(((events.cpu_duration <= cutoff) & (events.gpu_duration < events.cpu_duration)).sum()),
        runtime_outliers=int((events["cpu_duration"] > cutoff).sum()),
        launch_delay_outliers=int((events["launch_delay"] > delay_cutoff).sum()),
    )
computation = kernels[kernels["kernel_type"] == "COMPUTATION"]
for rank, rows in computation[computation["name"] != "others"].groupby("rank"):
    top = rows.sort_values("sum (us)").iloc[-1]
    ranks[int(rank)].update(top_kernel=str(top["name"]), top_kernel_us=float(top["sum (us)"]))
types = {str(row.kernel_type).lower(): float(row.sum) for row in kernel_types.itertuples()}
print(json.dumps({"load_s": loaded - started, "analysis_s": done - loaded, "ranks": ranks, "kernel_types": types}))
"""

# One rank's file at a time: read, analyse, keep the numbers, let the activity go (HTA holds every rank at once).
OUR_CHILD = """
import json, sys, time
from pathlib import Path
started = time.perf_counter()
from workbench.analysis.devices import temporal_breakdown, without_last_step
from workbench.analysis.kernels import kernel_type_breakdown, top_kernels
from workbench.analysis.launches import idle_by_cause, kernel_launches, launch_summary
from workbench.formats.kineto import read_kineto_activity
ranks, load_s, types = {}, 0.0, {}
imported = time.perf_counter()
for path in sorted(p for p in Path(sys.argv[1]).iterdir() if ".json" in p.name):
    before = time.perf_counter()
    trace = read_kineto_activity(path)
    activity = without_last_step(trace.activity.assign(rank=trace.rank))  # as HTA reads a trace by default
    del trace
    load_s += time.perf_counter() - before
    row = temporal_breakdown(activity, include_last_step=True).iloc[0]
    numbers = {"idle": 100 * row.idle_share, "compute": 100 * row.compute_share,
               "non_compute": 100 * row.non_compute_share, "overlap": 100 * row.overlap_share}
    causes = idle_by_cause(activity).groupby("cause")["idle_s"].sum()
    for cause in ("host_wait", "kernel_wait", "other"):
        numbers[f"idle_{cause}"] = 100 * float(causes.get(cause, 0.0)) / float(causes.sum()) if causes.sum() else None
    summary = launch_summary(kernel_launches(activity))
    if len(summary):
        launch = summary.iloc[0]
        numbers.update(launches=int(launch.launches), launch_cpu_us=float(launch.cpu_mean_us),
                       launch_delay_us=float(launch.launch_delay_mean_us), short_kernels=int(launch.short_kernels),
                       runtime_outliers=int(launch.runtime_outliers),
                       launch_delay_outliers=int(launch.launch_delay_outliers))
    for row in kernel_type_breakdown(activity).itertuples():
        types[row.kernel_type] = types.get(row.kernel_type, 0.0) + row.seconds * 1e6
    computed = top_kernels(activity[(activity["kind"] == "kernel").to_numpy()], count=1)
    if len(computed):
        numbers.update(top_kernel=str(computed["name"].iloc[0]), top_kernel_us=float(computed["total_s"].iloc[0]) * 1e6)
    ranks[int(rank)] = numbers
    del activity
total = time.perf_counter() - started
load_s += imported - started
print(json.dumps({"load_s": load_s, "analysis_s": total - load_s, "ranks": ranks, "kernel_types": types}))
"""
# The path a large run takes: the traces imported into a run, then the whole analysis in rank groups (a rank a
# group, 2 worker processes); HTA's shares read from its ``gpu_time`` table.
GROUPS_CHILD = """
import json, sys, tempfile, time
started = time.perf_counter()
from workbench.importer import import_traces
from workbench.rank_groups import analyse_split
with tempfile.TemporaryDirectory() as runs:
    path = import_traces([sys.argv[1]], out=runs).run_path
    imported = time.perf_counter()
    result = analyse_split(path, group_ranks=1, workers=2)
    done = time.perf_counter()
ranks = {int(row.rank): {"idle": 100 * row.idle_share, "compute": 100 * row.compute_share,
                         "non_compute": 100 * row.non_compute_share, "overlap": 100 * row.overlap_share}
         for row in result.gpu_time.itertuples()}
print(json.dumps({"load_s": imported - started, "analysis_s": done - imported, "ranks": ranks,
                  "findings": len(result.findings)}))
"""
#: Shares in % (compared in points).
NUMBERS = ("idle", "compute", "non_compute", "overlap", "idle_host_wait", "idle_kernel_wait", "idle_other")
#: Launch statistics (compared as they are: counts, µs).
LAUNCH_NUMBERS = (
    "launches", "launch_cpu_us", "launch_delay_us", "short_kernels", "runtime_outliers", "launch_delay_outliers"
)  # fmt: skip


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
                **{f"hta_{k}": theirs.get(k) for k in LAUNCH_NUMBERS},
                **{f"ours_{k}": mine.get(k) for k in LAUNCH_NUMBERS},
            }
        )  # fmt: skip
    for row in rows:
        theirs, mine = hta["ranks"][str(row["rank"])], ours["ranks"].get(str(row["rank"]), {})
        row["top_kernel_same"] = theirs.get("top_kernel") == mine.get("top_kernel") and _same(
            theirs.get("top_kernel_us"), mine.get("top_kernel_us")
        )
    groups = run_child(Path(sys.executable), GROUPS_CHILD, folder)
    group_differences = [
        abs(groups["ranks"].get(rank, {}).get(k, float("nan")) - theirs[k])
        for rank, theirs in hta["ranks"].items()
        for k in NUMBERS[:4]
        if theirs.get(k) is not None
    ]
    kernel_types = _kernel_type_shares(hta["kernel_types"], ours["kernel_types"])
    hta_s, ours_s = hta["load_s"] + hta["analysis_s"], ours["load_s"] + ours["analysis_s"]
    differences = [abs(row[f"diff_{k}"]) for row in rows for k in NUMBERS if row[f"diff_{k}"] is not None]
    differences += [abs(t["diff"]) for t in kernel_types.values() if t["diff"] is not None]
    return {
        "traces": label,
        "ranks": rows,
        "hta": {k: hta[k] for k in ("load_s", "analysis_s", "peak_mb")},
        "ours": {k: ours[k] for k in ("load_s", "analysis_s", "peak_mb")},
        # the same traces imported and analysed whole in rank groups, as a large run is: HTA's four shares
        "groups": {
            **{k: groups[k] for k in ("load_s", "analysis_s", "peak_mb")},
            "max_diff_points": max(group_differences) if group_differences else None,
        },
        "speedup": hta_s / ours_s,
        "memory_ratio": ours["peak_mb"] / hta["peak_mb"],
        "kernel_types": kernel_types,
        "max_diff_points": max(differences),
        "top_kernels_same": all(row["top_kernel_same"] for row in rows),
        "launch_numbers_equal": all(_same(row[f"hta_{k}"], row[f"ours_{k}"]) for row in rows for k in LAUNCH_NUMBERS),
    }


def _kernel_type_shares(theirs: dict[str, float], mine: dict[str, float]) -> dict[str, dict[str, float | None]]:
    """The job's GPU time by kernel type, in % of all of it, per tool, and the difference in points."""
    total_theirs, total_mine = sum(theirs.values()) or 1.0, sum(mine.values()) or 1.0
    shares = {}
    for name in sorted(set(theirs) | set(mine), key=lambda n: -theirs.get(n, mine.get(n, 0.0))):
        hta = 100 * theirs[name] / total_theirs if name in theirs else None
        ours = 100 * mine[name] / total_mine if name in mine else None
        # a type one tool finds and the other does not differs by all of its share
        diff = (ours or 0.0) - (hta or 0.0)
        shares[name] = {"hta": hta, "ours": ours, "diff": diff}
    return shares


def _same(theirs: float | None, mine: float | None) -> bool:
    """Counts equal, means within 0.1 % (HTA keeps µs as integers where the trace has fractions)."""
    if theirs is None or mine is None:
        return theirs is None and mine is None
    return abs(mine - theirs) <= 1e-3 * max(abs(theirs), 1.0)


def print_result(result: dict) -> None:
    print(f"\n{result['traces']}: HTA, workbench, difference (points of %)")
    for names in (NUMBERS[:4], NUMBERS[4:]):
        print(f"{'rank':>5} " + " ".join(f"{k:>22}" for k in names))
        for row in result["ranks"]:
            cells = [
                f"{row[f'hta_{k}']:6.2f} {row[f'ours_{k}']:6.2f} {row[f'diff_{k}']:+6.2f}"
                if row[f"diff_{k}"] is not None
                else f"{'–':>22}"
                for k in names
            ]
            print(f"{row['rank']:>5} " + " ".join(f"{c:>22}" for c in cells))
    print(f"launches (HTA / workbench): {'rank':>4} " + " ".join(f"{k:>24}" for k in LAUNCH_NUMBERS))
    for row in result["ranks"]:
        cells = [f"{_cell(row[f'hta_{k}'])} / {_cell(row[f'ours_{k}'])}" for k in LAUNCH_NUMBERS]
        print(f"{'':>27}{row['rank']:>5} " + " ".join(f"{c:>24}" for c in cells))
    print("kernel types (% of the job's GPU time: HTA, workbench, difference):")
    for name, shares in result["kernel_types"].items():
        print(f"  {name:<58} {_cell(shares['hta']):>7} {_cell(shares['ours']):>7} {shares['diff']:+6.2f}")
    top = "the same" if result["top_kernels_same"] else "DIFFERENT"
    print(f"each rank's top compute kernel and its time: {top}")
    hta, ours = result["hta"], result["ours"]
    print(
        f"HTA {hta['load_s'] + hta['analysis_s']:.2f} s, {hta['peak_mb']:.0f} MB; workbench"
        f" {ours['load_s'] + ours['analysis_s']:.2f} s, {ours['peak_mb']:.0f} MB: {result['speedup']:.1f}x faster,"
        f" {result['memory_ratio']:.2f}x the memory; largest difference {result['max_diff_points']:.2f} points;"
        f" launch statistics {'equal' if result['launch_numbers_equal'] else 'DIFFERENT'}"
    )
    groups = result["groups"]
    print(
        f"imported and analysed whole in rank groups (a rank a group, 2 workers):"
        f" {groups['load_s'] + groups['analysis_s']:.2f} s, {groups['peak_mb']:.0f} MB; HTA's shares from its"
        f" gpu_time table: largest difference {groups['max_diff_points']:.2f} points"
    )


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}" if float(value).is_integer() else f"{value:.4g}"


def made_step(events: int, steps: int, slowest: float) -> MadeKinetoStep:
    """A step holding ``events / steps`` events (a marker, then a launch call and an activity per kernel), shaped
    like a real profile: a few steps of many kernels (HTA's cost grows with steps x events, so many tiny steps
    would make it look slower than on users' traces), short gaps between kernels, every second one launched
    just ahead of it (the GPU waits for the host there, and launch overhead elsewhere)."""
    kernels = max(1, (events // steps - 1) // 2 - 2)
    step = MadeKinetoStep(kernels=kernels, kernel_us=20, kernel_gap_us=10, launch_lead_us=5)
    busy_us = step.copy_us + kernels * (step.kernel_us * slowest + step.kernel_gap_us) + step.allreduce_us
    return replace(step, step_us=int(1.25 * busy_us))


def at_scale(ranks: int, events: int) -> dict:
    """The whole-run analysis at the scale HTA's users give up at, in this same run: ``workbench bench analysis
    --split`` (a made run of ``events`` in ``ranks`` ranks, analysed in rank groups on 2 local workers)."""
    workbench = str(Path(sys.executable).with_name("workbench"))
    command = [workbench, "bench", "analysis", "--split", "--events", str(events), "--ranks", str(ranks),
               "--no-whole", "--workers", "2", "--repeats", "1", "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"bench analysis: {tail}")
    measured = json.loads(done.stdout)
    mode = measured["modes"]["split-2"]
    return {"ranks": ranks, "events": mode["events"], "seconds": mode["seconds"], "peak_mb": mode["peak_rss_mb"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--made",
        default="8x1000000,64x100000",
        help="made sets, RANKSxEVENTS each, comma-separated (events per rank: GPU and CPU; default %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=5, help="profiler steps per made trace (default %(default)s)")
    parser.add_argument(
        "--scale",
        default="1024x100000000",
        help="RANKSxEVENTS of the workbench's own analysis timed in the same run ('' to skip; default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object (tables to stderr)")
    args = parser.parse_args()
    if not HTA_PYTHON.exists():
        raise SystemExit(f"no HTA environment at {HTA_PYTHON.parent.parent}: make it with `make peers`")
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        results, scale = measure_all(args)
    if args.json:
        print(json.dumps({"sets": results, "scale": scale}, indent=1))


def measure_all(args: argparse.Namespace) -> tuple[list[dict], dict | None]:
    """Every set side by side, then the workbench alone at scale; each printed as it is measured."""
    results = [compare("HTA's samples (tests/data/trace_filter: ranks 0 and 1 of 128)", SAMPLES)]
    print_result(results[-1])
    for made in filter(None, args.made.split(",")):
        ranks, events = (int(part) for part in made.lower().split("x"))
        with tempfile.TemporaryDirectory(prefix="wb-peers-") as scratch:
            step = made_step(events, args.steps, slowest=1.3)
            folder = Path(scratch) / "made"
            write_made_kineto(folder, ranks=ranks, steps=args.steps, step=step, slow_ranks={1: 1.3})
            per_rank = args.steps * (1 + 2 * (step.kernels + 2))
            label = f"made: {ranks} ranks x {per_rank:,} events ({args.steps} steps)"
            results.append(compare(label, folder))
            print_result(results[-1])
    scale = None
    if args.scale:
        ranks, events = (int(part) for part in args.scale.lower().split("x"))
        scale = at_scale(ranks, events)
        print(
            f"\nthe workbench's analysis of {scale['events']:,} events in {ranks} ranks (rank groups, 2 workers):"
            f" {scale['seconds']:.1f} s, {scale['peak_mb'] / 1000:.2f} GB (goal: 10 s, 4 GB)"
        )
    return results, scale


if __name__ == "__main__":
    main()
