"""What the live dashboard costs the ranks when the notebook shares their cores; prints JSON for the README.

    python benchmarks/dashboard_cost.py [--preset reduced] [--repetitions 3] [--ranks 2]

JupyterLab and headless Chromium (as in ``tests/browser``) run a notebook that this script writes. On
one cluster of ``--ranks`` MPI ranks it runs the same point of the eval-frequency case (mpi4py, rank 0
evaluating every epoch: notebook 01's live point) ``--repetitions`` times each way, alternating:

* **headless**: the kernel starts the point and awaits it, as ``experiment.run`` does;
* **live**: the same, with a ``Dashboard`` following the run and drawn in the browser, refreshed
  every 0.5 s, as notebook 01 does.

Around each point the kernel reads the CPU time (user + system) of itself, of the Jupyter server
and of every Chromium process, so each figure is CPU seconds per second of the point's span. The
ranks' own wall time (``wall_s``, as the case reports it) gives the slowdown of the live point
against the headless one: medians of the repetitions, measured side by side in one run. The
dashboard's refreshes are split into those that brought new events and those that did not.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SETUP = """
import json, time
import psutil
from workbench import Cluster
from workbench.experiment import Experiment
from workbench.store import RunTail
from workbench.widgets import Dashboard

kernel = psutil.Process()
server = kernel.parent()
rows = []

def _cpu(processes):
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total

def snapshot():
    browser = [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith(("chrom", "headless"))]
    return {"kernel": _cpu([kernel]), "server": _cpu([server]), "browser": _cpu(browser), "clock": time.perf_counter()}

def experiment(mode, repetition):
    e = Experiment("eval-frequency", preset=preset, ranks=ranks, out=f"{out}/{mode}-{repetition}", backends=("mpi4py",))
    return e.point(ranks=ranks, backend="mpi4py", eval_interval=min(e.settings.intervals)), e

def record(mode, repetition, before, results, dashboard=None):
    after = snapshot()
    row = {"mode": mode, "repetition": repetition, "span_s": after["clock"] - before["clock"],
           "wall_s": max(result["wall_s"] for result in results)}
    row.update({f"{name}_cpu_s": after[name] - before[name] for name in ("kernel", "server", "browser")})
    if dashboard is not None:
        row["refreshes"] = [dict(timing) for timing in dashboard.timings]
    rows.append(row)

cluster = Cluster(n=ranks)
cluster.start_sync()
cluster.init_horovod_sync()
"""

HEADLESS = """point, e = experiment("headless", {i})
before = snapshot()
results = await e.start(cluster, point)
record("headless", {i}, before, results)"""

LIVE_START = """point, e = experiment("live", {i})
before = snapshot()
live = e.start(cluster, point)
chosen = {{}} if refresh_s is None else {{"refresh_s": refresh_s}}  # None: the dashboard's own default
dashboard = Dashboard(RunTail(live.run_path), on_stop=live.abort, **chosen)
dashboard.start()"""

LIVE_END = """results = await live
dashboard.update()
dashboard.stop()
record("live", {i}, before, results, dashboard)"""

FINISH = """cluster.stop_sync()
with open("dashboard-cost.json", "w") as file:
    json.dump(rows, file)
len(rows)"""


def build_notebook(path: Path, repetitions: int) -> None:
    import nbformat

    cells = [
        nbformat.v4.new_code_cell(
            'ranks = 2\npreset = "reduced"\nout = "points"\nrefresh_s = None', metadata={"tags": ["parameters"]}
        )
    ]
    cells.append(nbformat.v4.new_code_cell(SETUP.strip()))
    for i in range(repetitions):  # alternating, so that a drift of the machine's speed hits both ways alike
        first, second = ("headless", "live") if i % 2 == 0 else ("live", "headless")
        for mode in (first, second):
            if mode == "headless":
                cells.append(nbformat.v4.new_code_cell(HEADLESS.format(i=i)))
            else:
                cells += [
                    nbformat.v4.new_code_cell(LIVE_START.format(i=i)),
                    nbformat.v4.new_code_cell(LIVE_END.format(i=i)),
                ]
    cells.append(nbformat.v4.new_code_cell(FINISH))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per mode; per second of the point's span; refreshes split by whether they had new events."""

    def median(mode: str, key: str, per_span: bool = False) -> float:
        values = [r[key] / r["span_s"] if per_span else r[key] for r in rows if r["mode"] == mode]
        return statistics.median(values)

    out: dict[str, Any] = {"repetitions": sum(r["mode"] == "live" for r in rows)}
    for mode in ("headless", "live"):
        out[mode] = {
            "wall_s": median(mode, "wall_s"),
            "walls_s": [r["wall_s"] for r in rows if r["mode"] == mode],
            **{f"{name}_cpu_per_s": median(mode, f"{name}_cpu_s", True) for name in ("kernel", "server", "browser")},
        }
    out["slowdown_live_over_headless"] = out["live"]["wall_s"] / out["headless"]["wall_s"]
    refreshes = [t for r in rows if r["mode"] == "live" for t in r.get("refreshes", [])]
    for label, chosen in (
        ("with_new_events", [t for t in refreshes if t["new_events"] > 0]),
        ("without_new_events", [t for t in refreshes if t["new_events"] == 0]),
    ):
        costs = [t["poll_s"] + t["redraw_s"] for t in chosen]
        out[f"refresh_{label}"] = {
            "count": len(chosen),
            "median_ms": 1e3 * statistics.median(costs) if costs else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="reduced")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--refresh-s", type=float, default=None, help="the dashboard's refresh (default: its own)")
    args = parser.parse_args(argv)

    from jupyterlab_browser import LabNotebooks, chromium_available

    if not chromium_available():
        print("dashboard_cost: Chromium is not installed: run `make browser` first", file=sys.stderr)
        return 2
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="dashboard-cost-") as home:
        source = Path(home) / "dashboard_cost.ipynb"
        build_notebook(source, args.repetitions)
        lab = LabNotebooks(Path(home))
        try:
            parameters = {"ranks": args.ranks, "preset": args.preset, "out": "points", "refresh_s": args.refresh_s}
            lab.run(source, "cost", parameters, timeout_s=3600)
        finally:
            lab.close()
        rows = json.loads((lab.root / "cost" / "dashboard-cost.json").read_text())
    result = summarise(rows)
    result.update(
        preset=args.preset,
        ranks=args.ranks,
        refresh_s=args.refresh_s,
        seconds=round(time.time() - started, 1),
        rows=rows,
    )
    result["host"] = socket.gethostname()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
