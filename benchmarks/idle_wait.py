"""How ranks that wait in MPI cost the miniature cluster: polling against sleeping (``WORKBENCH_MINICLUSTER_IDLE``).

    sudo .venv/bin/python benchmarks/idle_wait.py --json     # root; about 10 minutes on 2 cores
    sudo .venv/bin/python benchmarks/idle_wait.py --nodes 4 --cpus-per-node 0.4 --link unshaped --bytes 87e6 \
        --allreduces 12      # ps-vs-allreduce's nodes and gradients instead

A rank waiting in MPI polls and yields; on a real node that spends its own core, here a node is a share
of a core, so the waiting spends the share and the kernel's network path every node's packets go through.
By default the cluster preloads a library that makes MPI's yields short sleeps (``workbench/minicluster.py``,
``IDLE_SLEEP_SOURCE``; ``WORKBENCH_MINICLUSTER_IDLE=spin`` turns it off). This measures what each way costs,
on its own cluster of 8 nodes of 0.2 core at 1 Gbit/s (the projection's smallest share; ``--nodes``,
``--cpus-per-node``, ``--link`` and ``--bytes`` change it), in rounds that interleave the ways so the host's
drift falls on each alike. Each round and way starts its own ranks, one a node; on each:

- ``allreduce_ms``: the median of rank 0's 407 KB MPI allreduces (eval-frequency's gradients; the link's
  own time for them is about 4.9 ms at 1 Gbit/s on 8 nodes: 2(n-1)/n of the bytes over 125 MB/s);
- ``working_beside_waiters_s``: rank 0's 150 training steps (``workbench.bench.node_step``'s model) while
  the others wait in a barrier, as every rank waits for rank 0's evaluation;
- ``all_working_s``: the same 150 steps on rank 0 while every rank runs them.

Three ways: ``spin`` (poll and yield, ``WORKBENCH_MINICLUSTER_IDLE=spin``), ``sleep`` (the default: MPI's
yields sleep as SCHED_BATCH) and ``sleep-preempting`` (the same sleep as a normal task, whose wake-ups
preempt a working rank; built by the benchmark). ``--library NAME=PATH`` adds a way: a library of your own
preloaded into the ranks (with MPI's yields left to it), to try another idea against these. ``--json``
prints one JSON object (what ``benchmarks/measure_readme.sh idle-wait`` saves; docs/clusters.md's table is
rendered from it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from cluster_options import add_cluster_options, run_measurement

NODES = 8
CPUS_PER_NODE = 0.2
LINK = "1gbit"
ALLREDUCE_BYTES = 407 * 1000
ALLREDUCES = 60
STEPS = 150
ROUNDS = 3
#: The plain sleep (``build_idle_sleep(preempting=True)``): what sleeping as SCHED_BATCH is measured against.
PREEMPTING = "sleep-preempting"


@dataclass(frozen=True)
class Setup:
    """The cluster and the collective measured on it (the defaults: eval-frequency's on the smallest share)."""

    nodes: int = NODES
    cpus_per_node: float = CPUS_PER_NODE
    link: str = LINK
    allreduce_bytes: int = ALLREDUCE_BYTES
    allreduces: int = ALLREDUCES


# -- run on the engines (pickled by value: this file is not importable there) --------------------------------
def waiting_and_working(nbytes: int, allreduces: int, steps: int) -> dict[str, float]:
    """On every rank: the three measurements, in one order; rank 0's numbers are the ones reported."""
    import statistics

    import numpy as np
    from mpi4py import MPI

    from workbench.bench.node_step import training_step

    comm = MPI.COMM_WORLD
    step = training_step()

    def train(count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            step().numpy()
        return time.perf_counter() - started

    train(20)  # tracing and caches, on every rank before any timing
    send = np.ones(max(1, nbytes // 4), dtype=np.float32)
    receive = np.empty_like(send)
    for _ in range(5):
        comm.Allreduce(send, receive, op=MPI.SUM)
    times = []
    for _ in range(allreduces):
        comm.Barrier()
        started = time.perf_counter()
        comm.Allreduce(send, receive, op=MPI.SUM)
        times.append(time.perf_counter() - started)
    comm.Barrier()
    beside_waiters = train(steps) if comm.Get_rank() == 0 else 0.0
    comm.Barrier()  # the others wait here, as for rank 0's evaluation
    all_working = train(steps)
    comm.Barrier()
    return {
        "allreduce_ms": statistics.median(times) * 1e3,
        "working_beside_waiters_s": beside_waiters,
        "all_working_s": all_working,
    }


# -- the measurement -----------------------------------------------------------------------------------------
def measure_way(mini: Any, way: str, library: str | None, setup: Setup) -> dict[str, float]:
    """One round of one way: fresh ranks, one a node, the idle-wait variable set for them as the way asks."""
    from workbench.minicluster import IDLE_WAIT_VARIABLE

    before = os.environ.get(IDLE_WAIT_VARIABLE)
    os.environ[IDLE_WAIT_VARIABLE] = "sleep" if way == "sleep" else "spin"
    try:
        if way == "sleep" and mini.idle_wait != "sleep":
            raise RuntimeError("the cluster built no idle-sleep library (no C compiler?): nothing to compare")
        settings = {"env": {"LD_PRELOAD": library}} if library else {}
        with mini.cluster(setup.nodes, **settings) as cluster:
            results = cluster.view.apply_sync(waiting_and_working, setup.allreduce_bytes, setup.allreduces, STEPS)
    finally:
        if before is None:
            os.environ.pop(IDLE_WAIT_VARIABLE, None)
        else:
            os.environ[IDLE_WAIT_VARIABLE] = before
    return results[0]


def measure_all(libraries: dict[str, str], rounds: int, setup: Setup = Setup()) -> dict[str, Any]:
    from workbench import minicluster

    minicluster.check_host_for_own_cluster()
    measured: dict[str, dict[str, list[float]]] = {}
    with minicluster.minicluster(nodes=setup.nodes, cpus_per_node=setup.cpus_per_node, link=setup.link) as mini:
        preempting = minicluster.build_idle_sleep(mini.directory, preempting=True)
        if preempting is None:
            raise minicluster.MiniClusterError("no C compiler (cc): the sleeping ways cannot be built")
        libraries = {PREEMPTING: str(preempting), **libraries}
        ways = ["spin", "sleep", *libraries]
        for round_number in range(rounds):
            print(f"round {round_number + 1} of {rounds}: {', '.join(ways)}", file=sys.stderr, flush=True)
            for way in ways:
                result = measure_way(mini, way, libraries.get(way), setup)
                for name, value in result.items():
                    measured.setdefault(way, {}).setdefault(name, []).append(value)
    return {
        **asdict(setup),
        "steps": STEPS,
        "rounds": rounds,
        "idle_sleep_us": minicluster.IDLE_SLEEP_US,
        "libraries": {name: path for name, path in libraries.items() if name != PREEMPTING},
        "ways": {
            way: {name: {"values": values, "median": statistics.median(values)} for name, values in by_name.items()}
            for way, by_name in measured.items()
        },
    }


def text(result: dict[str, Any]) -> str:
    lines = [
        f"{result['nodes']} nodes of {result['cpus_per_node']:g} core, link {result['link']}, "
        f"allreduce of {result['allreduce_bytes'] / 1e6:.3g} MB, {result['rounds']} interleaved rounds (medians; range)"
    ]
    for way, numbers in result["ways"].items():

        def cell(name: str, unit: str, digits: int, numbers: dict[str, Any] = numbers) -> str:
            values = numbers[name]["values"]
            return f"{numbers[name]['median']:.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"

        lines.append(
            f"{way:>8}: allreduce {cell('allreduce_ms', 'ms', 1)}; rank 0's {result['steps']} steps beside "
            f"waiters {cell('working_beside_waiters_s', 's', 2)}, all working {cell('all_working_s', 's', 2)}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    parser.add_argument(
        "--library", action="append", default=[], metavar="NAME=PATH", help="another way: a library to preload"
    )
    add_cluster_options(parser, nodes=NODES, cpus_per_node=CPUS_PER_NODE, link=LINK, nbytes=ALLREDUCE_BYTES)
    parser.add_argument(
        "--allreduces", type=int, default=ALLREDUCES, help=f"timed allreduces a round (default {ALLREDUCES})"
    )
    args = parser.parse_args(argv)
    libraries = {}
    for entry in args.library:
        name, _, path = entry.partition("=")
        if not name or not os.path.isfile(path):
            parser.error(f"--library {entry}: give NAME=PATH of a shared library that exists")
        libraries[name] = os.path.abspath(path)
    setup = Setup(args.nodes, args.cpus_per_node, args.link, int(args.bytes), args.allreduces)
    return run_measurement(
        "benchmarks/idle_wait.py", lambda: measure_all(libraries, args.rounds, setup), text, as_json=args.json
    )


if __name__ == "__main__":
    sys.exit(main())
