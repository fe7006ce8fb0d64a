"""What a node's CPU quota does to the allreduce that follows a training step on the miniature cluster.

    sudo .venv/bin/python benchmarks/collective_after_compute.py --json   # root; about 3 minutes on 2 cores

A node of the miniature cluster is a CFS quota (0.2 of a core: 1 ms of CPU every 5 ms period). A rank that
enters its gradients' allreduce having just computed a step may have spent its period's quota, and then
waits for the next period in the middle of the collective. This times one allreduce, rank 0's median over
``--calls``, after each of these on every rank (a barrier between, so no rank waits for a slower one):

- ``rested``: 50 ms asleep (every node's quota full);
- ``tf_step``: one training step (``workbench.bench.node_step``'s model);
- ``tf_step_then_2ms`` / ``tf_step_then_20ms``: the step, then that long asleep;
- ``spin``: a Python loop burning the step's CPU time (no TensorFlow thread left running after it);
- ``spin_then_2ms``: the same, then 2 ms asleep;
- ``back_to_back``: the mean of calls one after another, as ``bench allreduce`` (and so the link rows of a
  sweep's ``nodes.json``, which the projection fits) times them.

``spin`` as slow as ``tf_step`` says the quota is the cause, not TensorFlow's threads spinning after a step.
Rounds start fresh ranks on the same cluster; ``--json`` prints one JSON object
(``benchmarks/results/collective-after-compute.json``; docs/projection.md cites it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from cluster_options import add_cluster_options, run_measurement

NODES = 2
CPUS_PER_NODE = 0.2
LINK = "1gbit"
ALLREDUCE_BYTES = 407 * 1000  # eval-frequency's gradients
CALLS = 30
ROUNDS = 2
WAYS = ("rested", "tf_step", "tf_step_then_2ms", "tf_step_then_20ms", "spin", "spin_then_2ms", "back_to_back")


# -- run on the engines (pickled by value: this file is not importable there) --------------------------------
def allreduce_after(nbytes: int, calls: int) -> dict[str, float]:
    """On every rank: the allreduce's median seconds after each way, and the step's CPU seconds."""
    import resource
    import statistics

    import numpy as np
    from mpi4py import MPI

    from workbench.bench.node_step import training_step

    comm = MPI.COMM_WORLD
    step = training_step()

    def cpu_now() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    for _ in range(20):  # tracing and caches
        step().numpy()
    started = cpu_now()
    for _ in range(10):
        step().numpy()
    step_cpu_s = (cpu_now() - started) / 10

    def spin() -> None:
        until = time.thread_time() + step_cpu_s
        while time.thread_time() < until:
            pass

    send = np.ones(max(1, nbytes // 4), dtype=np.float32)
    receive = np.empty_like(send)
    before = {
        "rested": lambda: time.sleep(0.05),
        "tf_step": lambda: step().numpy(),
        "tf_step_then_2ms": lambda: (step().numpy(), time.sleep(0.002)),
        "tf_step_then_20ms": lambda: (step().numpy(), time.sleep(0.02)),
        "spin": spin,
        "spin_then_2ms": lambda: (spin(), time.sleep(0.002)),
    }
    for _ in range(5):
        comm.Allreduce(send, receive, op=MPI.SUM)
    times: dict[str, list[float]] = {way: [] for way in before}
    for _ in range(calls):  # the ways interleaved, so a drift falls on each alike
        for way, work in before.items():
            comm.Barrier()
            work()
            comm.Barrier()
            started = time.perf_counter()
            comm.Allreduce(send, receive, op=MPI.SUM)
            times[way].append(time.perf_counter() - started)
    comm.Barrier()
    started = time.perf_counter()
    for _ in range(calls):
        comm.Allreduce(send, receive, op=MPI.SUM)
    back_to_back = (time.perf_counter() - started) / calls
    return {
        "step_cpu_s": step_cpu_s,
        **{way: statistics.median(values) for way, values in times.items()},
        "back_to_back": back_to_back,
    }


# -- the measurement -----------------------------------------------------------------------------------------
def measure_all(nodes: int, cpus_per_node: float, link: str, nbytes: int, calls: int, rounds: int) -> dict[str, Any]:
    from workbench import minicluster

    minicluster.check_host_for_own_cluster()
    measured: dict[str, list[float]] = {}
    with minicluster.minicluster(nodes=nodes, cpus_per_node=cpus_per_node, link=link) as mini:
        idle_wait = mini.idle_wait
        for round_number in range(rounds):
            print(f"round {round_number + 1} of {rounds}", file=sys.stderr, flush=True)
            with mini.cluster(nodes) as cluster:
                result = cluster.view.apply_sync(allreduce_after, nbytes, calls)[0]
            for name, value in result.items():
                measured.setdefault(name, []).append(value)
    return {
        "nodes": nodes,
        "cpus_per_node": cpus_per_node,
        "link": link,
        "allreduce_bytes": nbytes,
        "calls": calls,
        "rounds": rounds,
        "idle_wait": idle_wait,
        "measured": {
            name: {"values": values, "median": statistics.median(values)} for name, values in measured.items()
        },
    }


def text(result: dict[str, Any]) -> str:
    measured = result["measured"]
    cpu = measured["step_cpu_s"]["median"]
    lines = [
        f"{result['nodes']} nodes of {result['cpus_per_node']:g} core, link {result['link']}, ranks waiting in MPI "
        f"{result['idle_wait']}; allreduce of {result['allreduce_bytes'] / 1e6:.3g} MB, rank 0's median of "
        f"{result['calls']} calls, {result['rounds']} rounds (median; range); a step's CPU {cpu * 1e3:.2g} ms"
    ]
    rested = measured["rested"]["median"]
    for way in WAYS:
        values = measured[way]["values"]
        median = measured[way]["median"]
        lines.append(
            f"{way:>18}: {median * 1e3:6.2f} ms ({min(values) * 1e3:.2f}-{max(values) * 1e3:.2f}), "
            f"{median / rested:.2g}x rested"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_cluster_options(parser, nodes=NODES, cpus_per_node=CPUS_PER_NODE, link=LINK, nbytes=ALLREDUCE_BYTES)
    parser.add_argument("--calls", type=int, default=CALLS, help=f"timed allreduces per way a round ({CALLS})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds, fresh ranks each ({ROUNDS})")
    args = parser.parse_args(argv)
    return run_measurement(
        "benchmarks/collective_after_compute.py",
        lambda: measure_all(args.nodes, args.cpus_per_node, args.link, int(args.bytes), args.calls, args.rounds),
        text,
        as_json=args.json,
    )


if __name__ == "__main__":
    sys.exit(main())
