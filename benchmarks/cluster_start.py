"""What starting and stopping a local cluster costs: ``Cluster.start_sync()``, the first task, ``stop_sync()``.

    .venv/bin/python benchmarks/cluster_start.py --json     # about a minute on 2 cores

Every notebook cell that starts ranks, and every sweep point with other settings than the last (threads,
bindings, an MPI), pays a start and a stop. Two ways, in rounds that interleave them so the host's drift
falls on each alike:

- ``workbench``: the controller pings its engines every 500 ms (``controller_heartbeat_args``): it
  registers an engine at the next ping;
- ``ipyparallel-heartbeat``: the same with ipyparallel's own 3 s period.

The stop is the same in both: engines' nannies are killed once their engines have gone, and a zombie
counts as ended (``reap_processes``, ``wait_ended``). Before, the stop took 4.3-5.7 s here: each nanny's
goodbye to the stopped controller lingered 3 s, then this machine's init took 1-2 s to reap it. ``--json``
prints one JSON object (``benchmarks/measure_readme.sh cluster-start`` saves it; docs/measurements.md's table
is rendered from it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

WAYS = ("workbench", "ipyparallel-heartbeat")


def one_cycle(ranks: int) -> dict[str, float]:
    """Start ``ranks`` engines, run one task on each, stop: the seconds of each part."""
    from workbench import Cluster

    started = time.perf_counter()
    cluster = Cluster(n=ranks)
    cluster.start_sync()
    up = time.perf_counter()
    cluster.client[:].apply_sync(sum, [1, 2])
    answered = time.perf_counter()
    cluster.stop_sync()
    stopped = time.perf_counter()
    return {"start_s": up - started, "first_task_s": answered - up, "stop_s": stopped - answered}


def measure(rounds: int, ranks: tuple[int, ...]) -> dict[str, Any]:
    from workbench import cluster as cluster_module

    ours = cluster_module.controller_heartbeat_args
    samples: dict[str, dict[int, list[dict[str, float]]]] = {way: {n: [] for n in ranks} for way in WAYS}
    try:
        for _ in range(rounds):
            for n in ranks:
                for way in WAYS:
                    cluster_module.controller_heartbeat_args = ours if way == "workbench" else (lambda _n: [])
                    samples[way][n].append(one_cycle(n))
    finally:
        cluster_module.controller_heartbeat_args = ours

    def summary(values: list[float]) -> dict[str, Any]:
        return {"median": statistics.median(values), "values": [round(v, 3) for v in values]}

    return {
        "rounds": rounds,
        "ranks": list(ranks),
        "heartbeat_args": ours(max(ranks)),
        "ways": {
            way: {
                str(n): {key: summary([cycle[key] for cycle in cycles]) for key in cycles[0]}
                for n, cycles in by_ranks.items()
            }
            for way, by_ranks in samples.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", default="1,2", help="engine counts, e.g. 1,2")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = measure(args.rounds, tuple(int(n) for n in args.ranks.split(",")))
    if args.json:
        print(json.dumps(result))
        return
    for way, by_ranks in result["ways"].items():
        for n, parts in by_ranks.items():
            print(way, f"{n} ranks:", ", ".join(f"{key} {value['median']:.2f}" for key, value in parts.items()))


if __name__ == "__main__":
    main()
