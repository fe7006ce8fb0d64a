"""A training step's skeleton on the miniature cluster's nodes: does it spend its time as the workload did?

    sudo .venv/bin/python benchmarks/step_rhythm.py 'artifacts/lightrec/nodes-eval-frequency-1gbit-r*' \
        --point k=20 --json            # root; 3-6 minutes on 2 cores

The skeleton is a step without the workload: each rank burns a CPU time drawn from the sweep's 1-node run's
steps (their compute and input seconds times the node's share of a core: what a CPU-bound step used), then
sums the run's gradient bytes in ``MPI.Allreduce``, step after step. It runs at every node count of the sweep,
on a cluster with the sweep's nodes (share, link), and each count's steps are split as the workload's are
(``analysis.collective_split``): the ranks' time between collectives, the wait for the last, the collective
after it, and how the ranks' steps varied together (``analysis.step_correlation``). The workload's split is
read from the sweep's own runs of ``--point`` (medians over the sweeps the glob matches). Each skeleton step
also reads where its node's CPU went: the rank's process CPU between collectives and inside them, and the time
its node's cgroup was throttled in each (``cpu.stat``), so a count's time between collectives splits into CPU,
throttled, and the rest (runnable, waiting for one of the machine's cores).

Why: the projection's misses on these nodes are in how a step's time divides (docs/projection.md). If a
skeleton reproduces the workload's split at each count, the nodes' behaviour (the CPU quota's periods, the
shaper's bursts) can be measured without the workload, as the link already is. ``--json`` prints one object
(``benchmarks/results/step-rhythm-*.json``).
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from cluster_options import engines_split, run_measurement

from workbench.analysis.straggler import SPLIT_PARTS

STEPS = 150
ROUNDS = 2
WARMUP_STEPS = 3
#: Per step, on the skeleton's nodes: the rank's CPU between collectives and in them, and its node's throttled time.
NODE_PARTS = ("cpu_between_s", "cpu_collective_s", "throttled_between_s", "throttled_collective_s")


# -- run on the engines (pickled by value: this file is not importable there) --------------------------------
def skeleton_steps(cpu_draws: list[float], nbytes: int, steps: int, seed: int) -> dict[str, Any]:
    """On every rank: ``steps`` steps of CPU work drawn from ``cpu_draws`` (this thread's CPU seconds), each
    followed by an allreduce of ``nbytes``; each step's wall seconds in both, and in both the CPU the rank's
    process took (all its threads: a node's quota counts them all) and the time its node was throttled."""
    import time
    from pathlib import Path

    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(seed + 7919 * comm.rank)
    send = np.ones(max(1, int(nbytes) // 4), dtype=np.float32)
    receive = np.empty_like(send)

    def spin(seconds: float) -> None:
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass

    # the node's cgroup in the cpu controller (cgroup v1: "N:cpu:/path"; or "N:cpu,cpuacct:/path")
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    controller = next((line.split(":", 2)[2] for line in lines if "cpu" in line.split(":")[1].split(",")), None)
    stat_file = Path("/sys/fs/cgroup/cpu") / (controller or "/").lstrip("/") / "cpu.stat"

    def throttled_s() -> float:
        try:
            fields = dict(line.split() for line in stat_file.read_text().splitlines())
        except OSError:
            return float("nan")
        return int(fields.get("throttled_time", 0)) / 1e9

    comm.Barrier()
    between, collective, cpu_between, cpu_collective, throttled_between, throttled_collective = ([] for _ in range(6))
    for _ in range(steps):
        started, cpu_started, throttled_started = time.perf_counter(), time.process_time(), throttled_s()
        spin(float(rng.choice(cpu_draws)))
        arrived, cpu_arrived, throttled_arrived = time.perf_counter(), time.process_time(), throttled_s()
        comm.Allreduce(send, receive, op=MPI.SUM)
        between.append(arrived - started)
        collective.append(time.perf_counter() - arrived)
        cpu_between.append(cpu_arrived - cpu_started)
        cpu_collective.append(time.process_time() - cpu_arrived)
        throttled_between.append(throttled_arrived - throttled_started)
        throttled_collective.append(throttled_s() - throttled_arrived)
    return {
        "rank": comm.rank,
        "between_s": between,
        "collective_s": collective,
        "node": {
            "cpu_between_s": cpu_between,
            "cpu_collective_s": cpu_collective,
            "throttled_between_s": throttled_between,
            "throttled_collective_s": throttled_collective,
        },
    }


# -- the workload's side, from the saved sweeps ---------------------------------------------------------------
def workload_steps(directories: list[Path], point: str) -> tuple[dict[str, Any], np.ndarray, float]:
    """Per count, the workload's step split (medians over the sweeps); the 1-node runs' seconds per step
    (compute and input, warm-up left out; pooled) and gradient bytes (median)."""
    from workbench.analysis import collective_intervals, collective_summary
    from workbench.analysis import projection as pj
    from workbench.store import RunData

    by_count: dict[int, list[dict[str, float]]] = {}
    draws, gradient_bytes = [], []
    for directory in directories:
        runs = pd.read_parquet(directory / "runs.parquet")
        runs = runs[[point in p.split("/", 1)[-1] for p in runs["point"]]]
        ranks = runs["ranks"] if "ranks" in runs else runs["workers"]
        for count, path in zip(ranks, runs["path"]):
            run = RunData.load(path)
            if int(count) == 1:
                costs = pj.step_costs(run.events, run.meta)
                draws.append(np.asarray(costs.compute_s) + np.asarray(costs.input_s))
                gradient_bytes.append(costs.gradient_bytes)
                continue
            summary = collective_summary(collective_intervals(run.events, warmup_steps=pj.WARMUP_STEPS))
            if summary is not None:
                by_count.setdefault(int(count), []).append(summary)
    if not draws:
        raise SystemExit(f"no 1-node run of {point!r} in {[str(d) for d in directories]}: give --point a value")
    medians = {
        count: {name: float(np.nanmedian([s[name] for s in splits])) for name in splits[0]}
        for count, splits in sorted(by_count.items())
    }
    return medians, np.concatenate(draws), float(np.median(gradient_bytes))


# -- the measurement -----------------------------------------------------------------------------------------
def measure(pattern: str, point: str, steps: int, rounds: int) -> dict[str, Any]:
    from workbench import minicluster
    from workbench.node_sweep import describe_sweep_cluster, read_nodes_file

    minicluster.check_host_for_own_cluster()
    directories = [Path(d) for d in sorted(glob.glob(pattern)) if (Path(d) / "runs.parquet").is_file()]
    if not directories:
        raise SystemExit(f"no sweep matches {pattern}: give the glob of a node sweep's repetitions")
    nodes = read_nodes_file(directories[0])
    if nodes is None:
        raise SystemExit(f"{directories[0]} has no nodes.json: it is not a sweep on a miniature cluster's nodes")
    workload, busy, nbytes = workload_steps(directories, point)
    share = min(float(nodes["nodes"][0]["cpus"]), 1.0)
    cpu_draws = [float(seconds) * share for seconds in busy]  # a CPU-bound step used its share all along
    spec = minicluster.MiniClusterSpec.from_json(nodes["nodes"])
    skeleton: dict[int, list[dict[str, float]]] = {}
    with minicluster.MiniCluster.up(spec) as mini:
        for round_number in range(rounds):
            for count in sorted({1, *(int(c) for c in nodes["counts"])}):
                print(f"round {round_number + 1} of {rounds}: {count} node(s)", file=sys.stderr, flush=True)
                with mini.cluster(count) as cluster:
                    results = cluster.view.apply_sync(skeleton_steps, cpu_draws, int(nbytes), steps, round_number)
                # 1 node: no pair of ranks, so no correlation (NaN)
                summary = engines_split(results, WARMUP_STEPS)
                # where each node's CPU went: means over the ranks' steps (warm-up left out)
                for name in NODE_PARTS:
                    summary[name] = float(np.mean([v for r in results for v in r["node"][name][WARMUP_STEPS:]]))
                skeleton.setdefault(count, []).append(summary)
    return {
        "sweeps": pattern,
        "point": point,
        "cluster": describe_sweep_cluster(nodes),
        "gradient_bytes": nbytes,
        "one_node_busy_s": float(busy.mean()),
        "cpu_per_step_s": float(np.mean(cpu_draws)),
        "steps": steps,
        "rounds": rounds,
        "workload": {str(count): split for count, split in workload.items()},
        "skeleton": {
            str(count): {name: statistics.median([s[name] for s in splits]) for name in splits[0]}
            for count, splits in skeleton.items()
        },
    }


def text(result: dict[str, Any]) -> str:
    lines = [
        f"{result['cluster']}: {result['sweeps']} ({result['point']}); the 1-node run's busy step"
        f" {result['one_node_busy_s'] * 1e3:.3g} ms, {result['cpu_per_step_s'] * 1e3:.3g} ms of CPU;"
        f" {result['gradient_bytes'] / 1e6:.3g} MB; skeleton {result['steps']} steps x {result['rounds']} rounds",
        "ms per step, workload / skeleton: between, wait, collective; correlation; the step",
    ]
    one = result["skeleton"].get("1", {})
    if one:
        lines.append(
            f"  1 node: skeleton between {one['between_s'] * 1e3:.3g} (the 1-node run's busy step:"
            f" {result['one_node_busy_s'] * 1e3:.3g})"
        )
    for count, measured in result["workload"].items():
        skeleton = result["skeleton"].get(count)
        if not skeleton:
            continue
        parts = "  ".join(
            f"{name[:-2]} {measured[name] * 1e3:.3g} / {skeleton[name] * 1e3:.3g}" for name in SPLIT_PARTS
        )
        step_w = sum(measured[n] for n in SPLIT_PARTS)
        step_s = sum(skeleton[n] for n in SPLIT_PARTS)
        lines.append(
            f"  {count} nodes: {parts}  correlation {measured['correlation']:.2f} / {skeleton['correlation']:.2f}"
            f"  step {step_w * 1e3:.3g} / {step_s * 1e3:.3g} ({step_s / step_w - 1:+.1%})"
        )
    lines.append("the skeleton's nodes, ms per step: CPU between / in the collective; throttled between / in it")
    for count, skeleton in result["skeleton"].items():
        if all(name in skeleton for name in NODE_PARTS):
            waited = skeleton["wait_s"] + skeleton["collective_s"]
            rate = skeleton["cpu_collective_s"] / waited if waited > 0 else float("nan")
            lines.append(
                f"  {count} node(s): CPU {skeleton['cpu_between_s'] * 1e3:.3g}"
                f" / {skeleton['cpu_collective_s'] * 1e3:.3g}"
                f" ({rate:.2f} core while waiting); throttled {skeleton['throttled_between_s'] * 1e3:.3g}"
                f" / {skeleton['throttled_collective_s'] * 1e3:.3g}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", help="a glob of one node sweep's repetitions (their nodes.json gives the cluster)")
    parser.add_argument("--point", default="", help="the point's parameters to take, e.g. k=20 (default: all)")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"skeleton steps a round ({STEPS})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds, fresh ranks each ({ROUNDS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    return run_measurement(
        "benchmarks/step_rhythm.py",
        lambda: measure(args.sweeps, args.point, args.steps, args.rounds),
        text,
        as_json=args.json,
    )


if __name__ == "__main__":
    sys.exit(main())
