"""The miniature cluster measured: up and down, its links against MPI and Horovod, each node's hardware, a slow link.

    sudo .venv/bin/python benchmarks/minicluster.py --json     # root; a few minutes on 2 cores

Builds its own cluster (``minicluster(nodes=4, cpus_per_node=0.4, link="1gbit")``) and takes it
down at the end; it refuses to run beside one that is already up (someone else's: it is not
taken down). Each measurement is one function, and each puts back the share or link it changed:

- ``up_s`` / ``down_s``: seconds for the cluster to come up (every node idle in Slurm) and go down;
- ``link``: node1 and node2 at 0.9 of a core (so the link decides, not the CFS quota): one TCP
  stream node1 -> node2, then the bus bandwidth of a 64 MiB MPI allreduce across them with Open
  MPI's default of one TCP link per peer and with the workbench's default of 4
  (``OMPI_MCA_btl_tcp_links``, ``workbench/config.py``), and Horovod's with 4;
- ``hardware``: the mean of a 1-thread TensorFlow step on 1, 2 and 4 busy nodes, in 3 interleaved
  rounds, with the spread of the medians (``tests/minicluster/test_node_hardware.py`` holds it to 15 %);
- ``slow_link``: one TCP stream to node2 with its link shaped to 100 Mbit/s.

MB/s are 10**6 bytes per second (a 1 Gbit/s link carries 125 MB/s of IP packets); busbw is
nccl-tests' (algbw x 2(n-1)/n, which is algbw itself on 2 ranks). ``--json`` prints one JSON
object (what ``benchmarks/measure_readme.sh minicluster`` saves); without it, lines to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

NODES = 4
CPUS_PER_NODE = 0.4
LINK = "1gbit"
#: The link test's nodes and their share: enough that MPI's polling is not throttled by the quota.
LINK_NODES = ("node1", "node2")
LINK_CPUS = 0.9
MEGABYTES = 64
ALLREDUCE_BYTES = 64 * 2**20
SLOW_NODE = "node2"
SLOW_LINK = "100mbit"
SLOW_MEGABYTES = 16  # about 1.3 s at 100 Mbit/s
ROUNDS = 3
STEP_SECONDS = 2.0


# -- run on the engines (pickled by value: this file is not importable there) --------------------------------
def busbw(nbytes: int, with_horovod: bool) -> dict[str, Any]:
    """One allreduce size measured on every rank (``workbench.allreduce.measure``), with the settings seen."""
    import os
    import socket

    from workbench.allreduce import measure

    rows = measure((nbytes,), 1.0, with_horovod)
    return {
        "host": socket.gethostname(),
        "tcp_links": os.environ.get("OMPI_MCA_btl_tcp_links"),  # noqa: SIM112 (Open MPI spells it so)
        "row": rows[0] if rows else None,
    }


# -- the measurements ---------------------------------------------------------------------------------------
def allreduce_mbps(mini: Any, with_horovod: bool, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Rank 0's 64 MiB allreduce busbw (MB/s) on 2 ranks (node1, node2); ``env`` for the engines."""
    settings = {"env": env} if env else {}
    with mini.cluster(2, **settings) as cluster:
        results = cluster.view.apply_sync(busbw, ALLREDUCE_BYTES, with_horovod)
    hosts = [result["host"] for result in results]
    if sorted(hosts) != sorted(LINK_NODES):
        raise RuntimeError(f"the allreduce ran on {hosts}, not on {', '.join(LINK_NODES)}")
    row = results[0]["row"]
    return {
        "tcp_links": results[0]["tcp_links"],
        "mpi_busbw_mbps": row["mpi_busbw_gbps"] * 1e3,
        "horovod_busbw_mbps": row["horovod_busbw_gbps"] * 1e3 if with_horovod else None,
    }


def measure_link(mini: Any) -> dict[str, Any]:
    """One TCP stream node1 -> node2 beside MPI's allreduce with 1 and 4 TCP links per peer, and Horovod's."""
    from workbench.bench.link import tcp_stream

    if "OMPI_MCA_btl_tcp_links" in os.environ:  # a user's own setting wins over the workbench's 4
        raise RuntimeError("OMPI_MCA_btl_tcp_links is set in this shell: unset it, the benchmark sets 1 and 4 itself")
    try:
        for node in LINK_NODES:
            mini.set_cpus(node, LINK_CPUS)
        stream = tcp_stream(mini, *LINK_NODES, MEGABYTES) / 1e6
        one = allreduce_mbps(mini, False, {"OMPI_MCA_btl_tcp_links": "1"})
        four = allreduce_mbps(mini, False)  # the workbench's default across nodes
        horovod = allreduce_mbps(mini, True)
    finally:
        for node in LINK_NODES:
            mini.set_cpus(node, CPUS_PER_NODE)
    links = (one["tcp_links"], four["tcp_links"], horovod["tcp_links"])
    if links != ("1", "4", "4"):
        raise RuntimeError(f"the engines had OMPI_MCA_btl_tcp_links = {links}, not 1, 4, 4")
    return {
        "nodes": list(LINK_NODES),
        "cpus": LINK_CPUS,
        "link": LINK,
        "link_mbps": mini_rate_mbps(LINK),
        "megabytes": MEGABYTES,
        "tcp_stream_mbps": stream,
        "allreduce_bytes": ALLREDUCE_BYTES,
        "mpi_busbw_mbps": {"1": one["mpi_busbw_mbps"], "4": four["mpi_busbw_mbps"]},
        "horovod_busbw_mbps": {"4": horovod["horovod_busbw_mbps"]},
    }


def measure_hardware(mini: Any) -> dict[str, Any]:
    """The same 1-thread step on 1, 2 and 4 busy nodes, rounds interleaved so drift falls on every count alike."""
    from workbench.bench.node_step import mean_step_s

    rounds: dict[str, list[float]] = {"1": [], "2": [], "4": []}
    with mini.cluster(NODES) as cluster:
        client = cluster.client
        client[:].apply_sync(mean_step_s, 1.0)  # every rank imports TF and traces once, before any timing
        for _ in range(ROUNDS):
            for busy in (1, 2, 4):
                per_rank = client[list(range(busy))].apply_sync(mean_step_s, STEP_SECONDS)
                rounds[str(busy)].append(sum(per_rank) / len(per_rank) * 1e3)
    medians = {busy: statistics.median(values) for busy, values in rounds.items()}
    return {
        "cpus": CPUS_PER_NODE,
        "rounds": ROUNDS,
        "seconds_per_measure": STEP_SECONDS,
        "step_ms": rounds,
        "median_step_ms": medians,
        "spread": max(medians.values()) / min(medians.values()) - 1,
    }


def measure_slow_link(mini: Any) -> dict[str, Any]:
    """One TCP stream node1 -> node2 with node2's link shaped to 100 Mbit/s (both directions), then 1 Gbit/s again."""
    from workbench.bench.link import tcp_stream

    try:
        mini.shape(SLOW_NODE, SLOW_LINK)
        stream = tcp_stream(mini, "node1", SLOW_NODE, SLOW_MEGABYTES) / 1e6
    finally:
        mini.shape(SLOW_NODE, LINK)
    return {
        "node": SLOW_NODE,
        "link": SLOW_LINK,
        "link_mbps": mini_rate_mbps(SLOW_LINK),
        "megabytes": SLOW_MEGABYTES,
        "tcp_stream_mbps": stream,
    }


def mini_rate_mbps(rate: str) -> float:
    """A tc rate as MB/s of packets (``1gbit`` -> 125.0)."""
    from workbench.minicluster import parse_rate

    bits = parse_rate(rate)
    return float("nan") if bits is None else bits / 8 / 1e6


def measure_all() -> dict[str, Any]:
    from workbench import minicluster

    minicluster.check_host_for_own_cluster()
    started = time.perf_counter()
    with minicluster.minicluster(nodes=NODES, cpus_per_node=CPUS_PER_NODE, link=LINK) as mini:
        up_s = time.perf_counter() - started
        link = measure_link(mini)
        hardware = measure_hardware(mini)
        slow = measure_slow_link(mini)
        ending = time.perf_counter()
    down_s = time.perf_counter() - ending
    return {
        "nodes": NODES,
        "cpus_per_node": CPUS_PER_NODE,
        "link": LINK,
        "up_s": up_s,
        "down_s": down_s,
        "link_test": link,
        "hardware": hardware,
        "slow_link": slow,
    }


def text(result: dict[str, Any]) -> str:
    link, hardware, slow = result["link_test"], result["hardware"], result["slow_link"]
    medians = " / ".join(f"{hardware['median_step_ms'][busy]:.1f}" for busy in ("1", "2", "4"))
    return "\n".join(
        [
            f"{result['nodes']} nodes of {result['cpus_per_node']:g} core, link {result['link']}: "
            f"up {result['up_s']:.1f} s, down {result['down_s']:.1f} s",
            f"node1 -> node2 at {link['cpus']:g} core: TCP stream {link['tcp_stream_mbps']:.1f} MB/s; "
            f"MPI allreduce busbw {link['mpi_busbw_mbps']['1']:.0f} MB/s (1 link per peer), "
            f"{link['mpi_busbw_mbps']['4']:.0f} MB/s (4 links); Horovod {link['horovod_busbw_mbps']['4']:.0f} MB/s",
            f"1-thread step on 1 / 2 / 4 busy nodes: {medians} ms (medians of {hardware['rounds']} rounds), "
            f"spread {hardware['spread']:.1%}",
            f"{slow['node']}'s link at {slow['link']}: TCP stream {slow['tcp_stream_mbps']:.1f} MB/s",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from workbench.minicluster import MiniClusterError

    try:
        result = measure_all()
    except MiniClusterError as error:
        print(f"benchmarks/minicluster.py: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=1) if args.json else text(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
