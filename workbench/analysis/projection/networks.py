"""Networks and what a collective costs on them: the named catalogue, a fit to ``bench allreduce``, ring/tree/PS.

Split from the projection model so the network side can be read (and checked by hand) on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from workbench.events import BYTES_PER_MB

#: Bytes per gigabyte (SI), for bandwidths written as GB/s.
BYTES_PER_GB = 1000 * BYTES_PER_MB
#: Horovod's default tensor-fusion buffer (HOROVOD_FUSION_THRESHOLD): 64 MiB.
HOROVOD_FUSION_THRESHOLD_BYTES = 64 * 1024 * 1024
ALGORITHMS = ("ring", "tree")


# --------------------------------------------------------------------------------------------
# Networks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Network:
    """Links between ranks: α (latency per message step), β (bytes/s), Horovod's cost per call.

    ``latency_s`` / ``bandwidth_bytes_per_s`` are between nodes, ``intra_*`` between the ranks of one
    node; ``ranks_per_node`` ranks share a node (and its network card). ``cores_per_node`` (None:
    each rank keeps the threads it was measured with) lets ranks on one node share its cores.
    ``horovod_thread_cores``: the cores' worth of CPU each rank's compute loses to Horovod's background
    thread once there are 2 ranks or more (it negotiates every cycle, busy or not); measured by
    ``workbench bench allreduce``, 0 for the named networks (their ranks compute on GPUs, and the
    thread takes CPU the GPU does not need).
    ``compute_factor_beside_collectives``: how much longer a rank's compute takes, from 2 ranks on, when
    collectives run between its compute (1: not at all). Waiting in MPI polls, and where a node's CPU is
    capped (a CPU quota, every core busy training) that polling takes CPU the compute then lacks; measured
    on a miniature cluster's nodes (``workbench.node_sweep``), 1 elsewhere.
    """

    name: str
    latency_s: float
    bandwidth_bytes_per_s: float
    per_call_s: float = 0.0
    ranks_per_node: int = 1
    intra_latency_s: float = 1e-6
    intra_bandwidth_bytes_per_s: float = 10.0 * BYTES_PER_GB
    cores_per_node: int | None = None
    algorithm: str = "ring"
    hierarchical: bool = True
    assumptions: str = ""
    horovod_thread_cores: float = 0.0
    compute_factor_beside_collectives: float = 1.0

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={self.algorithm!r}: use one of {', '.join(ALGORITHMS)}")
        if self.bandwidth_bytes_per_s <= 0 or self.intra_bandwidth_bytes_per_s <= 0:
            raise ValueError(f"network {self.name!r}: bandwidths must be > 0 bytes/s")
        if self.latency_s < 0 or self.intra_latency_s < 0 or self.per_call_s < 0:
            raise ValueError(f"network {self.name!r}: latencies and per-call cost must be >= 0 s")
        if not self.horovod_thread_cores >= 0:
            raise ValueError(f"network {self.name!r}: horovod_thread_cores must be >= 0 cores")
        if not self.compute_factor_beside_collectives > 0:
            raise ValueError(f"network {self.name!r}: compute_factor_beside_collectives must be > 0")
        if self.ranks_per_node < 1:
            raise ValueError(f"network {self.name!r}: ranks_per_node must be >= 1")

    def describe(self) -> str:
        """One line a reader can check: the numbers the cost model uses and why."""
        inter = f"{self.bandwidth_bytes_per_s / BYTES_PER_GB:.3g} GB/s, α {self.latency_s * 1e3:.3g} ms"
        intra = f"{self.intra_bandwidth_bytes_per_s / BYTES_PER_GB:.3g} GB/s, α {self.intra_latency_s * 1e3:.3g} ms"
        text = (
            f"{self.name}: between nodes {inter}; inside a node ({self.ranks_per_node} rank(s)) {intra};"
            f" Horovod {self.per_call_s * 1e3:.3g} ms per fused call"
            + (
                f" and {self.horovod_thread_cores:.2g} of a core per rank for its background thread"
                if self.horovod_thread_cores
                else ""
            )
            + (
                f"; compute x{self.compute_factor_beside_collectives:.3g} beside collectives"
                if self.compute_factor_beside_collectives != 1.0
                else ""
            )
            + f"; {self.algorithm} allreduce"
        )
        return f"{text}. {self.assumptions}" if self.assumptions else text


#: Horovod's fixed cost per fused call assumed for the named networks: negotiation plus, on average,
#: half of the background thread's 1 ms cycle (HOROVOD_CYCLE_TIME). Measured here: ~1.1 ms on 2 cores.
NAMED_PER_CALL_S = 0.5e-3

NETWORKS: dict[str, Network] = {
    "10gbe": Network(
        "10gbe",
        latency_s=25e-6,
        bandwidth_bytes_per_s=1.1 * BYTES_PER_GB,
        per_call_s=NAMED_PER_CALL_S,
        assumptions="10 Gb/s Ethernet, TCP: ~90 % of 1.25 GB/s usable, ~25 µs MPI latency; 1 rank per node",
    ),
    "100g-infiniband": Network(
        "100g-infiniband",
        latency_s=2e-6,
        bandwidth_bytes_per_s=11.0 * BYTES_PER_GB,
        per_call_s=NAMED_PER_CALL_S,
        assumptions="100 Gb/s InfiniBand (EDR) or Omni-Path: ~11 GB/s, ~2 µs MPI latency (RDMA); 1 rank per node",
    ),
    "nvlink": Network(
        "nvlink",
        latency_s=2e-6,
        bandwidth_bytes_per_s=11.0 * BYTES_PER_GB,
        per_call_s=NAMED_PER_CALL_S,
        ranks_per_node=8,
        intra_latency_s=5e-6,
        intra_bandwidth_bytes_per_s=40.0 * BYTES_PER_GB,
        assumptions="8 GPUs per node joined by NVLink 2.0 (~40 GB/s per GPU in a ring, ~5 µs per NCCL step);"
        " nodes joined by 100 Gb/s InfiniBand; hierarchical allreduce",
    ),
    "aries": Network(
        "aries",
        latency_s=1.5e-6,
        bandwidth_bytes_per_s=9.0 * BYTES_PER_GB,
        per_call_s=NAMED_PER_CALL_S,
        assumptions="Cray Aries (Piz Daint): ~9 GB/s injection per node, ~1.5 µs; 1 GPU per node",
    ),
    "aws-high": Network(
        "aws-high",
        latency_s=50e-6,
        bandwidth_bytes_per_s=0.15 * BYTES_PER_GB,
        per_call_s=NAMED_PER_CALL_S,
        assumptions="EC2 'High' network performance (p2.xlarge, g2.2xlarge): ~1.2 Gb/s sustained"
        " (an estimate: AWS does not publish it), ~50 µs; 1 GPU per node",
    ),
    "aws-10g-8gpu": Network(
        "aws-10g-8gpu",
        latency_s=50e-6,
        bandwidth_bytes_per_s=1.1 * BYTES_PER_GB,
        per_call_s=NAMED_PER_CALL_S,
        ranks_per_node=8,
        intra_latency_s=10e-6,
        intra_bandwidth_bytes_per_s=5.0 * BYTES_PER_GB,
        assumptions="EC2 p2.8xlarge: 8 K80 GPUs per node over PCIe (~5 GB/s), 10 Gb/s between nodes",
    ),
}


def network(name: str | Network, /, **changes: Any) -> Network:
    """A named network (``NETWORKS``), with fields changed (``ranks_per_node=4``) if given."""
    if isinstance(name, Network):
        chosen = name
    else:
        key = name.lower().replace("_", "-")
        if key not in NETWORKS:
            raise ValueError(
                f"unknown network {name!r}: use one of {', '.join(NETWORKS)} (in Python, or build a Network)"
            )
        chosen = NETWORKS[key]
    return replace(chosen, **changes) if changes else chosen


def fit_network(
    rows: Sequence[Mapping[str, Any]],
    *,
    name: str = "measured here",
    ranks_per_node: int | None = None,
    cores_per_node: int | None = None,
    at_bytes: float | None = None,
) -> Network:
    """α–β (and Horovod's per-call cost) fitted to ``workbench bench allreduce --json`` rows.

    ``at_bytes``: take β at this message size instead (the gradient bytes a step sends): the measured time
    interpolated between the sizes around it (log-log), less its latency part; outside the measured sizes,
    the rate of the nearest (largest or smallest) one. On a shaped or CPU-capped
    link mid-size messages stray from the line through the large ones, by tens of per cent either way
    (faster inside a shaper's burst, slower where per-message work meets a CPU quota).

    Ring model at the bench's ``n`` ranks: ``t = 2(n-1)α + 2(n-1)/n · bytes/β``, fitted where each
    term dominates: β from the least-squares slope of raw MPI's times over messages >= 1 MiB, α from
    the median time of messages <= 64 KiB (less their bandwidth part). Horovod's fixed cost per call
    is the median of Horovod's time minus MPI's over messages <= 1 MiB, where transfer is small (past
    its 64 MB fusion buffer Horovod splits a message: that size is left out). The fitted links are
    used inside a node and between nodes alike (more hosts like this one). ``horovod_thread_cores``
    is taken from the rows when the bench measured it.
    """
    frame = pd.DataFrame(list(rows))
    needed = {"bytes", "ranks", "mpi_seconds"}
    if frame.empty or not needed <= set(frame.columns):
        raise ValueError("rows lack bytes, ranks, mpi_seconds: pass `workbench bench allreduce --json` output")
    ranks = int(frame["ranks"].iloc[0])
    if ranks < 2:
        raise ValueError("the allreduce bench ran on 1 rank: nothing crossed a link; run it with --ranks 2 or more")
    frame = frame[np.isfinite(frame["mpi_seconds"].astype(float)) & (frame["mpi_seconds"] > 0)]
    steps, share = 2.0 * (ranks - 1), 2.0 * (ranks - 1) / ranks
    large = frame[frame["bytes"] >= 1024 * 1024]
    if len(large) < 2:
        raise ValueError("the fit needs at least 2 message sizes >= 1 MiB (the bench's default sizes have 4)")
    slope = float(np.polyfit(large["bytes"].astype(float), large["mpi_seconds"].astype(float), 1)[0])
    if slope <= 0:
        raise ValueError("the allreduce times do not grow with the message size: no bandwidth to fit")
    bandwidth = share / slope
    small = frame[frame["bytes"] <= 64 * 1024]
    latency = 0.0
    if len(small):
        latency = max(float((small["mpi_seconds"] - share * small["bytes"] / bandwidth).median()) / steps, 0.0)
    if at_bytes and at_bytes > 0:
        ordered = frame.sort_values("bytes")
        sizes, times = ordered["bytes"].to_numpy(dtype=float), ordered["mpi_seconds"].to_numpy(dtype=float)
        # outside the measured sizes, β of the nearest one: interpolating past the largest would hold its
        # time, not its rate (87 MB at the time of 16 MB: a link 5x too fast)
        size = float(np.clip(at_bytes, sizes[0], sizes[-1]))
        seconds = float(np.exp(np.interp(np.log(size), np.log(sizes), np.log(times))))
        transfer = seconds - steps * latency
        if transfer > 0:
            bandwidth = share * size / transfer
    per_call = 0.0
    if "horovod_seconds" in frame:
        both = frame[(frame["bytes"] <= 1024 * 1024) & frame["horovod_seconds"].notna()]
        if len(both):
            per_call = max(float((both["horovod_seconds"] - both["mpi_seconds"]).median()), 0.0)
    idle = frame["horovod_thread_cores"].astype(float).dropna() if "horovod_thread_cores" in frame else ()
    node = ranks_per_node or ranks
    return Network(
        name,
        latency_s=latency,
        bandwidth_bytes_per_s=bandwidth,
        per_call_s=per_call,
        ranks_per_node=node,
        intra_latency_s=latency,
        intra_bandwidth_bytes_per_s=bandwidth,
        cores_per_node=cores_per_node,
        horovod_thread_cores=max(float(np.median(idle)), 0.0) if len(idle) else 0.0,
        assumptions=f"fitted to the allreduce bench on {ranks} ranks of this host; more nodes are assumed"
        f" to be hosts like it, {node} rank(s) each, joined by the same bandwidth",
    )


# --------------------------------------------------------------------------------------------
# Collective costs
# --------------------------------------------------------------------------------------------


def ring_allreduce_seconds(nbytes: float, ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> float:
    """Ring allreduce: ``2(n-1)/n · bytes/β + 2(n-1)·α`` (reduce-scatter then allgather); 0 on 1 rank."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * nbytes / bandwidth_bytes_per_s + 2.0 * (ranks - 1) * latency_s


def tree_allreduce_seconds(nbytes: float, ranks: int, latency_s: float, bandwidth_bytes_per_s: float) -> float:
    """Pipelined tree allreduce (NCCL's double binary tree): ``2·ceil(log2 n)·α + 2·bytes/β``; 0 on 1 rank."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * math.ceil(math.log2(ranks)) * latency_s + 2.0 * nbytes / bandwidth_bytes_per_s


def fused_calls(nbytes: float, fusion_threshold_bytes: int = HOROVOD_FUSION_THRESHOLD_BYTES) -> int:
    """Horovod allreduce calls per step: tensors fused up to the threshold, ``ceil(bytes/threshold)``."""
    if nbytes <= 0:
        return 0
    if fusion_threshold_bytes <= 0:
        raise ValueError(
            "fusion_threshold_bytes must be > 0 (HOROVOD_FUSION_THRESHOLD=0 is one call per tensor:"
            " pass tensor_bytes instead)"
        )
    return max(1, math.ceil(nbytes / fusion_threshold_bytes))


def allreduce_seconds(
    nbytes: float,
    ranks: int,
    net: Network,
    *,
    fusion_threshold_bytes: int = HOROVOD_FUSION_THRESHOLD_BYTES,
    tensor_bytes: Sequence[int] | None = None,
) -> tuple[float, float]:
    """Seconds per step of Horovod's allreduce of ``nbytes``: (transfer, fixed per-call cost).

    ``tensor_bytes`` (the gradient tensors' sizes) packs tensors into fusion buffers in order; without
    it the bytes are split into ``ceil(bytes/threshold)`` equal calls.
    """
    if ranks <= 1 or nbytes <= 0:
        return 0.0, 0.0
    chunks = _fusion_chunks(nbytes, fusion_threshold_bytes, tensor_bytes)
    transfer = sum(_collective(chunk, ranks, net) for chunk in chunks)
    return transfer, len(chunks) * net.per_call_s


def fused_allreduce_seconds(nbytes: float, ranks: int, net: Network) -> float:
    """One Horovod allreduce of a fusion buffer of ``nbytes``: the collective plus the fixed cost per call."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return _collective(nbytes, ranks, net) + net.per_call_s


def server_shares_by_node(
    nodes: int, *, servers: int | None = None, shares: Sequence[float] | None = None, colocated: bool = False
) -> tuple[list[float], list[float]]:
    """``(shares, held)``: each server's share of the variables (normalised; even over ``servers`` when not
    given, one server per node by default) and the share each worker's node holds (server ``j`` on node
    ``j mod nodes`` when ``colocated``, else none)."""
    if shares is None:
        count = nodes if servers is None else int(servers)
        if count < 1:
            raise ValueError("servers must be >= 1")
        shares = [1.0 / count] * count
    elif not shares or min(shares) < 0 or sum(shares) <= 0:
        raise ValueError(f"shares={list(shares)!r}: give each server's share of the variables, e.g. 0.5,0.5")
    total = float(sum(shares))
    normalised = [share / total for share in shares]
    held = [0.0] * nodes
    if colocated:
        for task, share in enumerate(normalised):
            held[task % nodes] += share
    return normalised, held


def parameter_server_link_bytes(
    nbytes: float,
    nodes: int,
    *,
    servers: int | None = None,
    shares: Sequence[float] | None = None,
    colocated: bool = False,
) -> float:
    """Bytes the busiest link carries each way for one step of every node's worker (``B`` = ``nbytes``).

    Every node pulls ``B`` and pushes ``B``; server ``j`` holds ``shares[j]`` of the variables (even shares
    over ``servers`` when not given; ``servers`` defaults to one per node).

    - Servers on hosts of their own (``colocated=False``): a server's link carries its share of every
      node's traffic, and a worker's link its own: ``max(B, nodes·B·max share)``.
    - Servers on the workers' nodes (``colocated=True``, server ``j`` on node ``j mod nodes``, as
      TensorFlow clusters often place them): a node's own worker reaches its local servers without the
      link: ``max over nodes of B·((nodes − 1)·s + 1 − s)`` with ``s`` the share it holds
      (``ps_load.link_bytes_per_step``): one server beside one of 4 workers carries ``3B``, not ``4B``.
    """
    from workbench.analysis.ps_load import link_bytes_per_step

    if nodes <= 1 or nbytes <= 0:
        return 0.0
    normalised, _held = server_shares_by_node(nodes, servers=servers, shares=shares, colocated=colocated)
    if colocated:
        return max(link_bytes_per_step("ps", nodes, nbytes, normalised))
    return max(nbytes, nodes * nbytes * max(normalised))


def _nodes_and_local(nbytes: float, ranks: int, net: Network) -> tuple[int, float]:
    """Nodes the ranks fill, and the seconds their ranks take to combine gradients inside a node first."""
    per_node = min(net.ranks_per_node, ranks)
    local = ring_allreduce_seconds(nbytes, per_node, net.intra_latency_s, net.intra_bandwidth_bytes_per_s)
    return math.ceil(ranks / per_node), local


def parameter_server_seconds(
    nbytes: float,
    ranks: int,
    net: Network,
    *,
    servers: int | None = None,
    shares: Sequence[float] | None = None,
    colocated: bool = False,
) -> float:
    """Seconds per synchronous step to push gradients to parameter servers and pull the variables back.

    The ranks of a node first combine their gradients over the node's link (an allreduce inside the
    node); then every node pulls and pushes, and the busiest link carries ``b`` each way
    (``parameter_server_link_bytes``, where the servers sit and what they hold): ``2·(α + b/β)``.
    One node with one rank: 0.
    """
    nodes, local = _nodes_and_local(nbytes, ranks, net)
    if nodes <= 1 or nbytes <= 0:
        return local
    busiest = parameter_server_link_bytes(nbytes, nodes, servers=servers, shares=shares, colocated=colocated)
    return local + 2.0 * (net.latency_s + busiest / net.bandwidth_bytes_per_s)


def asynchronous_parameter_server_seconds(
    nbytes: float,
    ranks: int,
    net: Network,
    compute_s: float,
    *,
    servers: int | None = None,
    shares: Sequence[float] | None = None,
    colocated: bool = False,
    exchange_s: float = 0.0,
) -> float:
    """Seconds per round (as many steps as nodes) beyond ``compute_s`` when workers step on their own.

    Asynchronous PS training (TF 2's ``ClusterCoordinator``, TF 1's between-graph replicas) has no step
    barrier: a step goes to whichever worker is free, so each worker runs at its own rate, one step per
    cycle: its compute, its side of the RPCs (``exchange_s / 2``), and pulling and pushing what its node
    does not hold over its link, ``2·(α + (1 − s)·B/β)``. Two kinds of shared capacity slow the workers
    that use them, in proportion, until none is over:

    - each node's link, each way (pulls and pushes of different workers use its two directions at once):
      ``B·(s·Σ other workers' rates + (1 − s)·own rate) ≤ β``;
    - each node's CPU (servers beside a worker share its cores): its worker's compute and RPC side, plus
      serving the share ``s`` it holds of every worker's pull and push, ``exchange_s / 2`` each;
    - on servers of their own hosts, each server's link (its share of every step's bytes, each way) and CPU.

    ``exchange_s``: node time one worker step's pull and push take through the RPCs, client and server
    sides together (a 1-node PS run's step less the same model's step without servers; 0: free). At one
    node with one rank a round is ``compute_s + exchange_s``. Returned less ``compute_s``, as the exposed
    transfer: ``nodes / Σ rates − compute_s``.
    """
    nodes, local = _nodes_and_local(nbytes, ranks, net)
    if nodes <= 1 or nbytes <= 0:
        return local + exchange_s
    normalised, held = server_shares_by_node(nodes, servers=servers, shares=shares, colocated=colocated)
    beta, half = net.bandwidth_bytes_per_s, exchange_s / 2.0
    worker = compute_s + half
    rates = np.array([1.0 / (worker + 2.0 * (net.latency_s + (1.0 - s) * nbytes / beta)) for s in held])
    # per resource, what one step of each worker uses of it and how much there is: links (bytes/s), CPUs (s/s)
    resources = []
    for node, s in enumerate(held):
        link = np.full(nodes, s * nbytes)
        link[node] = (1.0 - s) * nbytes
        resources.append((link, beta))
        if colocated:
            cpu = np.full(nodes, s * half)
            cpu[node] += worker
            resources.append((cpu, 1.0))
    if not colocated:  # servers on hosts of their own: each one's link and CPU serve its share of every step
        for share in normalised:
            resources += [(np.full(nodes, share * nbytes), beta), (np.full(nodes, share * half), 1.0)]
    for _ in range(100):  # slow the users of any resource over its capacity, until none is
        over = [(use, capacity) for use, capacity in resources if float(use @ rates) > capacity * (1 + 1e-9)]
        if not over:
            break
        for use, capacity in over:
            load = float(use @ rates)
            if load > capacity:
                rates = np.where(use > 0, rates * capacity / load, rates)
    return local + nodes / float(rates.sum()) - compute_s


def _fusion_chunks(nbytes: float, threshold: int, tensor_bytes: Sequence[int] | None) -> list[float]:
    if tensor_bytes:
        chunks: list[float] = []
        current = 0.0
        for size in tensor_bytes:
            if current and current + size > threshold:
                chunks.append(current)
                current = 0.0
            current += size
        return [*chunks, current] if current else chunks
    calls = fused_calls(nbytes, threshold)
    return [nbytes / calls] * calls


def _collective(nbytes: float, ranks: int, net: Network) -> float:
    cost = ring_allreduce_seconds if net.algorithm == "ring" else tree_allreduce_seconds
    per_node = min(net.ranks_per_node, ranks)
    nodes = math.ceil(ranks / per_node)
    if nodes == 1:
        return cost(nbytes, ranks, net.intra_latency_s, net.intra_bandwidth_bytes_per_s)
    if not net.hierarchical or per_node == 1:
        return cost(nbytes, ranks, net.latency_s, net.bandwidth_bytes_per_s)
    # reduce-scatter + allgather inside the node, a ring between nodes carrying the node's B bytes
    inside = ring_allreduce_seconds(nbytes, per_node, net.intra_latency_s, net.intra_bandwidth_bytes_per_s)
    return inside + cost(nbytes, nodes, net.latency_s, net.bandwidth_bytes_per_s)


#: The reference system's allreduce times: a 2-core VM (x86-64, 2 ranks over shared memory, Open MPI 5.0.11,
#: Horovod 0.28.1, `workbench bench allreduce --ranks 2 --json --min-seconds 0.05`, 2026-11-22): bytes ->
#: (MPI s, Horovod s). ``--network reference-vm``; the docs' projection checks were made on it. A user's own
#: machine is ``--network here`` (what ``workbench bench allreduce`` measured there).
REFERENCE_VM_ALLREDUCE: tuple[tuple[int, float, float], ...] = (
    (1024, 0.157e-3, 1.145e-3),
    (4096, 0.032e-3, 1.124e-3),
    (16384, 0.072e-3, 1.090e-3),
    (65536, 0.103e-3, 1.128e-3),
    (262144, 0.319e-3, 1.103e-3),
    (1048576, 0.679e-3, 1.193e-3),
    (4194304, 2.397e-3, 1.338e-3),
    (16777216, 13.368e-3, 10.683e-3),
    (67108864, 83.369e-3, 299.802e-3),
)


#: Cores' worth of a rank's compute Horovod's idle background thread took on the reference system (2 ranks
#: bound to a core each, HOROVOD_CYCLE_TIME 1 ms: `workbench bench allreduce --ranks 2`, 2026-11-24; 0.26-0.37
#: in five runs).
REFERENCE_VM_HOROVOD_THREAD_CORES = 0.34


def reference_vm_allreduce_rows() -> list[dict[str, Any]]:
    """``REFERENCE_VM_ALLREDUCE`` as ``workbench bench allreduce --json`` rows."""
    return [
        {
            "bytes": b,
            "ranks": 2,
            "mpi_seconds": m,
            "horovod_seconds": h,
            "horovod_thread_cores": REFERENCE_VM_HOROVOD_THREAD_CORES,
        }
        for b, m, h in REFERENCE_VM_ALLREDUCE
    ]
