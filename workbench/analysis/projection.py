"""Scaling projection: from a run on a few ranks to 8–128, with a network model and what-ifs.

Users ask what N ranks will give them before they have N ranks. The model is built from one
recorded run (``step_costs``) and a network (``Network``: a named one from ``NETWORKS`` or one
fitted to ``workbench bench allreduce`` with ``fit_network``), then evaluated at other rank counts
(``project``). Every piece is a formula a reader can check by hand:

- **Per step**, each rank is busy for ``compute + input wait`` seconds, drawn from the measured
  steps (warm-up excluded). Ranks meet in every step's allreduce, so a step lasts as long as the
  slowest of ``n`` ranks: ``E[max of n draws]`` from the measured per-step distribution (exact for
  the empirical distribution: ``sum_i x_(i) ((i/m)^n - ((i-1)/m)^n)``). That is how step-to-step
  variance turns into waiting at scale.
- **Collective**: ring allreduce ``2(n-1)/n · B/β + 2(n-1)·α``, or a pipelined tree
  ``2·ceil(log2 n)·α + 2·B/β``, plus Horovod's fixed cost per fused call (``per_call_s``) times
  ``ceil(B / fusion threshold)`` calls. With several ranks per node the allreduce is hierarchical:
  a ring inside the node on the node's link, then a ring between nodes that carries the node's
  ``B`` bytes (each of its ``g`` ranks sends ``B/g``). Parameter servers (``scheme="ps"``): every
  node pushes its gradients and pulls the variables, ``2·(α + max(B, nodes·B/servers)/β)``.
  ``overlap`` lets the collective hide behind a share of the step's compute (Horovod and TF send
  gradients while the backward pass goes on); 0 by default, as the workloads here reduce after the step.
- **Input** overlaps the step (a queue or ``prefetch`` fills while the rank computes). A run whose
  steps waited for input for >= 5 % of their time is input-bound: its step period is the input
  pipeline's period per step, which stays per rank unless ``shared_input_batches_per_s`` caps what
  all ranks of one node can read together. When the run sampled its CPU use, that period slows with
  core sharing like compute does (readers that kept ``P`` cores busy are CPU-bound; readers that
  wait on I/O keep ``P`` low and their period); without samples it is kept as measured.
- **Evaluation** (and checkpoint) per epoch: by the ranks that did it in the measured run. When one
  rank evaluates alone, the others wait (serial time per epoch); sharded evaluation is split over
  all ranks. Weak scaling (per-rank batch fixed, dataset fixed) makes epochs ``n`` times shorter,
  so a serial evaluation weighs more at scale: the seeds' story.
- **Threads**: on nodes with ``cores_per_node`` cores, ``g`` ranks per node get ``cores/g`` threads
  each (at most what they had); compute scales by ``(threads_measured/threads)^thread_scaling``,
  or, when the run sampled CPU use, by ``(min(P, threads_measured)/min(P, threads))^thread_scaling``
  with ``P`` the cores a rank really kept busy (a rank that used one core loses nothing to a
  neighbour on the other). From 2 ranks on, Horovod's background thread takes ``horovod_thread_cores``
  of each rank's cores (``Network``; measured by ``workbench bench allreduce``): training compute that
  kept ``b`` of ``t`` cores busy runs ``max(1, b / (t - h))`` times longer (allreduce scheme only).
- Whatever the model leaves out of the measured run (start-up, the last barrier) stays as
  measured: ``wall(n) = other_s + epochs · epoch(n)``.

Error bars: the projection is repeated on bootstrap resamples of the measured steps and
evaluations; ``*_low`` / ``*_high`` are the 2.5 and 97.5 percentiles. They cover the measured
variance, not the model's own error (``workbench bench projection`` measures that).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.events import BYTES_PER_MB, NS_PER_S

#: Bytes per gigabyte (SI), for bandwidths written as GB/s.
BYTES_PER_GB = 1000 * BYTES_PER_MB
#: Horovod's default tensor-fusion buffer (HOROVOD_FUSION_THRESHOLD): 64 MiB.
HOROVOD_FUSION_THRESHOLD_BYTES = 64 * 1024 * 1024
#: Input share of step time from which a run counts as input-bound (TF Profiler's "moderately").
INPUT_BOUND_SHARE = 0.05
#: Steps left out at the start of a run: graph tracing and first allocations.
WARMUP_STEPS = 2
ALGORITHMS = ("ring", "tree")
SCHEMES = ("allreduce", "ps")
KINDS = ("weak", "strong")
#: What can limit scaling, in the order the limits table lists them.
LIMITS = ("communication", "per_call", "waiting", "input", "evaluation", "checkpoint")

PROJECTION_COLUMNS: tuple[str, ...] = (
    "ranks",
    "nodes",
    "kind",
    "step_s",
    "step_s_low",
    "step_s_high",
    "epoch_s",
    "epoch_s_low",
    "epoch_s_high",
    "wall_s",
    "wall_s_low",
    "wall_s_high",
    "throughput",
    "unit",
    "speedup",
    "efficiency",
    "load_balance",
    "communication_efficiency",
    "parallel_efficiency",
    "compute_s",
    "input_s",
    "waiting_s",
    "communication_s",
    "per_call_s",
    "evaluation_s",
    "checkpoint_s",
    "limiter",
)


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

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={self.algorithm!r}: use one of {', '.join(ALGORITHMS)}")
        if self.bandwidth_bytes_per_s <= 0 or self.intra_bandwidth_bytes_per_s <= 0:
            raise ValueError(f"network {self.name!r}: bandwidths must be > 0 bytes/s")
        if self.latency_s < 0 or self.intra_latency_s < 0 or self.per_call_s < 0:
            raise ValueError(f"network {self.name!r}: latencies and per-call cost must be >= 0 s")
        if not self.horovod_thread_cores >= 0:
            raise ValueError(f"network {self.name!r}: horovod_thread_cores must be >= 0 cores")
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


def network(name: str | Network, **changes: Any) -> Network:
    """A named network (``NETWORKS``), with fields changed (``ranks_per_node=4``) if given."""
    if isinstance(name, Network):
        chosen = name
    else:
        key = name.lower().replace("_", "-")
        if key not in NETWORKS:
            raise ValueError(f"unknown network {name!r}: use one of {', '.join(NETWORKS)} or build a Network")
        chosen = NETWORKS[key]
    return replace(chosen, **changes) if changes else chosen


def fit_network(
    rows: Sequence[Mapping[str, Any]],
    *,
    name: str = "measured here",
    ranks_per_node: int | None = None,
    cores_per_node: int | None = None,
) -> Network:
    """α–β (and Horovod's per-call cost) fitted to ``workbench bench allreduce --json`` rows.

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


def parameter_server_seconds(nbytes: float, ranks: int, net: Network, *, servers: int | None = None) -> float:
    """Seconds per step to push gradients to parameter servers and pull the variables back.

    The ranks of a node first combine their gradients over the node's link (an allreduce inside the
    node), then every node pushes ``B`` and pulls ``B``; the servers hold ``B/servers`` each, so the
    busiest card carries ``max(B, nodes·B/servers)`` each way: ``2·(α + that/β)``. ``servers``
    defaults to one per node. One node with one rank: 0.
    """
    per_node = min(net.ranks_per_node, ranks)
    nodes = math.ceil(ranks / per_node)
    local = ring_allreduce_seconds(nbytes, per_node, net.intra_latency_s, net.intra_bandwidth_bytes_per_s)
    if nodes <= 1 or nbytes <= 0:
        return local
    servers = nodes if servers is None else int(servers)
    if servers < 1:
        raise ValueError("servers must be >= 1")
    busiest = max(nbytes, nodes * nbytes / servers)
    return local + 2.0 * (net.latency_s + busiest / net.bandwidth_bytes_per_s)


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


def expected_max(samples: np.ndarray, n: int) -> float:
    """``E[max of n independent draws]`` from the empirical distribution of ``samples`` (exact)."""
    values = np.sort(np.asarray(samples, dtype=float))
    m = len(values)
    if m == 0:
        return float("nan")
    if n <= 1:
        return float(values.mean())
    grid = np.arange(m + 1, dtype=float) / m
    weights = np.diff(grid**n)
    return float((values * weights).sum())


# --------------------------------------------------------------------------------------------
# The measured run, reduced to what the model needs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepCosts:
    """Per-rank phase costs of one measured run (seconds), the inputs of ``project``."""

    ranks: int
    #: Per measured (rank, step): compute seconds and input-wait seconds (warm-up excluded).
    compute_s: np.ndarray
    input_s: np.ndarray
    #: Mean seconds per step the measured ranks spent in communication (transfer + waiting).
    communication_s: float
    #: Training steps per rank in the run, and per epoch (== steps when the run has no epochs).
    steps: int
    steps_per_epoch: float
    epochs: int
    #: Seconds of every evaluation on the ranks that evaluated, and which ranks they were.
    evaluation_s: np.ndarray
    evaluating_ranks: tuple[int, ...]
    #: Evaluations per epoch in the measured run (1 = every epoch).
    evaluations_per_epoch: float
    checkpoint_per_epoch_s: float
    #: Gradient bytes allreduced per step (0 when not recorded) and the tensors' sizes when known.
    gradient_bytes: float
    tensor_bytes: tuple[int, ...]
    #: TF threads per rank in the measured run (None: not recorded).
    threads_per_rank: int | None
    #: Cores a rank kept busy while it stepped (mean CPU % / 100 of its memory samples; None: not sampled).
    cores_used: float | None
    #: Samples per rank per step (None: unknown; throughput is then in rank-steps/s).
    batch_per_rank: int | None
    #: Measured wall time, and the part of it the model does not describe (kept as measured).
    wall_s: float
    other_s: float
    #: Mean useful time (compute + input) over max, across ranks (1.0 on one rank).
    load_balance: float
    #: Missing data and what to record, in words.
    notes: tuple[str, ...] = ()

    @property
    def input_bound(self) -> bool:
        """True when the measured steps waited for input for at least ``INPUT_BOUND_SHARE`` of their time."""
        busy = float(self.compute_s.sum() + self.input_s.sum())
        return busy > 0 and float(self.input_s.sum()) / busy >= INPUT_BOUND_SHARE

    @property
    def step_period_s(self) -> float:
        """Mean measured seconds per step (compute + input + communication)."""
        if not len(self.compute_s):
            return float("nan")
        return float(self.compute_s.mean() + self.input_s.mean()) + self.communication_s

    def summary(self) -> dict[str, Any]:
        """The profile's scalars (for JSON and reports)."""
        return {
            "ranks": self.ranks,
            "steps": self.steps,
            "epochs": self.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "compute_s_per_step": float(self.compute_s.mean()) if len(self.compute_s) else None,
            "input_s_per_step": float(self.input_s.mean()) if len(self.input_s) else None,
            "communication_s_per_step": self.communication_s,
            "input_bound": self.input_bound,
            "evaluation_s_each": float(self.evaluation_s.mean()) if len(self.evaluation_s) else 0.0,
            "evaluating_ranks": list(self.evaluating_ranks),
            "evaluations_per_epoch": self.evaluations_per_epoch,
            "checkpoint_per_epoch_s": self.checkpoint_per_epoch_s,
            "gradient_bytes": self.gradient_bytes,
            "threads_per_rank": self.threads_per_rank,
            "cores_used": self.cores_used,
            "batch_per_rank": self.batch_per_rank,
            "wall_s": self.wall_s,
            "other_s": self.other_s,
            "load_balance": self.load_balance,
            "notes": list(self.notes),
        }


def step_costs(
    events: pd.DataFrame,
    meta: Mapping[str, Any] | None = None,
    memory: pd.DataFrame | None = None,
    *,
    warmup_steps: int = WARMUP_STEPS,
    gradient_bytes: float | None = None,
    tensor_bytes: Sequence[int] | None = None,
    batch_per_rank: int | None = None,
) -> StepCosts:
    """Reduce one recorded run to per-step phase costs (``StepCosts``); never raises on a real run.

    Steps are the spans with ``step >= warmup_steps``: compute, input and communication seconds per
    (rank, step). Evaluation and checkpoint spans are counted per epoch. Gradient bytes come from
    the ``bytes`` of the communication spans (the largest per-step sum) unless ``gradient_bytes`` is
    given. ``meta`` (``run.json``) gives threads per rank (``config.cluster.threads``) and the rank
    count; ``memory`` samples (``cpu_percent``) say how many cores a rank really kept busy. What is
    missing becomes a note that says what to record.
    """
    meta = dict(meta or {})
    notes: list[str] = []
    events = events if len(events) else ev.empty_events()
    step_col = events["step"] if "step" in events else pd.Series(-1, index=events.index)
    epoch_col = events["epoch"] if "epoch" in events else pd.Series(-1, index=events.index)
    duration = (events["end_ns"] - events["start_ns"]).clip(lower=0).astype("float64") / NS_PER_S
    frame = pd.DataFrame(
        {
            "rank": events["rank"].astype("int64"),
            "phase": events["phase"].astype(str),
            "name": events["name"].astype(str) if "name" in events else events["phase"].astype(str),
            "step": step_col.astype("int64"),
            "epoch": epoch_col.astype("int64"),
            "seconds": duration,
            "bytes": events["bytes"].astype("int64") if "bytes" in events else -1,
        }
    )
    declared = meta.get("ranks")
    ranks = int(declared) if isinstance(declared, int) and declared > 0 else max(int(frame["rank"].nunique()), 1)
    wall_s = float((events["end_ns"].max() - events["start_ns"].min()) / NS_PER_S) if len(events) else 0.0

    in_step = frame[frame["step"] >= 0]
    stepped = in_step[in_step["step"] >= warmup_steps]
    if stepped.empty and len(in_step):
        notes.append(
            f"the run has only {in_step['step'].nunique()} step(s), not more than warmup_steps={warmup_steps}:"
            " every step was used, warm-up included"
        )
        stepped = in_step
    if in_step.empty:
        notes.append(
            "no spans carry a step number: record steps (Recorder.step, the Keras callback)"
            " so that per-step costs can be measured; nothing can be projected"
        )
    per_step = (
        stepped.assign(
            kind=np.select(
                [stepped["phase"] == ev.COMPUTE, stepped["phase"] == ev.INPUT, stepped["phase"] == ev.COMMUNICATION],
                ["compute", "input", "communication"],
                default="other",
            )
        )
        .pivot_table(index=["rank", "step"], columns="kind", values="seconds", aggfunc="sum", fill_value=0.0)
        .reindex(columns=["compute", "input", "communication"], fill_value=0.0)
    )
    compute = per_step["compute"].to_numpy(dtype=float)
    wait = per_step["input"].to_numpy(dtype=float)
    communication = float(per_step["communication"].mean()) if len(per_step) else 0.0
    if len(per_step) and compute.sum() <= 0:
        notes.append(
            "no compute spans inside steps: record the training step as a compute span"
            " (Recorder.phase('compute', 'train_step'))"
        )
    steps = int(in_step.groupby("rank")["step"].nunique().max()) if len(in_step) else 0

    epochs_seen = frame.loc[frame["epoch"] >= 0, "epoch"]
    epochs = int(epochs_seen.nunique()) if len(epochs_seen) else 1
    if not len(epochs_seen):
        notes.append("no epochs recorded: the run is one 'epoch' (evaluation and checkpoint per run)")
    steps_per_epoch = steps / epochs if epochs else float(steps)

    evaluation = frame[frame["phase"] == ev.EVALUATION]
    evaluating = tuple(sorted(int(r) for r in evaluation["rank"].unique()))
    if len(evaluation):
        key = ["rank", "epoch"] if len(epochs_seen) else ["rank", "name"]
        per_eval = evaluation.groupby(key)["seconds"].sum()
        busiest = per_eval.groupby(level="rank").sum().idxmax()
        evaluation_s = per_eval.loc[busiest].to_numpy(dtype=float)
        evaluations_per_epoch = len(evaluation_s) / epochs if len(epochs_seen) else 1.0 / max(epochs, 1)
        if not len(epochs_seen):
            evaluation_s = np.array([evaluation_s.sum()])
    else:
        evaluation_s, evaluations_per_epoch = np.zeros(0), 0.0
    checkpoint = frame[frame["phase"] == ev.CHECKPOINT]
    checkpoint_per_epoch = float(checkpoint.groupby("rank")["seconds"].sum().max() / epochs) if len(checkpoint) else 0.0

    if gradient_bytes is None:
        comm = in_step[(in_step["phase"] == ev.COMMUNICATION) & (in_step["bytes"] > 0)]
        gradient_bytes = float(comm.groupby(["rank", "step"])["bytes"].sum().max()) if len(comm) else 0.0
        if tensor_bytes is None and len(comm):
            first = comm[(comm["rank"] == comm["rank"].min()) & (comm["step"] == comm["step"].min())]
            tensor_bytes = tuple(int(b) for b in first["bytes"]) if len(first) > 1 else None
        if not gradient_bytes:
            notes.append(
                "no gradient bytes recorded on the communication spans: the allreduce is projected as"
                " free; record them (Recorder.phase('communication', 'allreduce', nbytes=...)) or pass"
                " gradient_bytes="
            )
    threads = _threads(meta)
    if threads is None:
        notes.append(
            "threads per rank not recorded (run.json config.cluster.threads): core sharing between"
            " ranks on one node is not modelled"
        )
    if batch_per_rank is None:
        batch_per_rank = _batch(meta)
    cores_used = None
    if memory is not None and len(memory) and "cpu_percent" in memory and len(stepped):
        window = events[events["step"] >= warmup_steps] if "step" in events else events
        inside = memory[(memory["time_ns"] >= window["start_ns"].min()) & (memory["time_ns"] <= window["end_ns"].max())]
        usage = inside["cpu_percent"].astype(float).dropna()
        cores_used = float(usage.mean()) / 100 if len(usage) else None
    if cores_used is None and threads is not None:
        notes.append(
            "no CPU samples: how many cores a rank really uses is unknown, so sharing cores between ranks"
            " is modelled with thread_scaling; sample them (Recorder(memory_interval_s=0.5))"
        )

    useful = (per_step["compute"] + per_step["input"]).groupby(level="rank").sum() if len(per_step) else pd.Series()
    load_balance = float(useful.mean() / useful.max()) if len(useful) > 1 and useful.max() > 0 else 1.0
    if ranks == 1:
        notes.append(
            "measured on 1 rank: load balance is taken as 1 and the collective's cost comes from the network"
            " model alone; waiting at scale comes from the step-to-step variance"
        )
    steps_total = steps * (float(compute.mean() + wait.mean()) + communication) if len(compute) else 0.0
    evaluated = float(evaluation_s.sum()) * (epochs * evaluations_per_epoch / max(len(evaluation_s), 1))
    other = max(wall_s - steps_total - evaluated - checkpoint_per_epoch * epochs, 0.0)
    return StepCosts(
        ranks=ranks,
        compute_s=compute,
        input_s=wait,
        communication_s=communication,
        steps=steps,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        evaluation_s=evaluation_s,
        evaluating_ranks=evaluating,
        evaluations_per_epoch=evaluations_per_epoch,
        checkpoint_per_epoch_s=checkpoint_per_epoch,
        gradient_bytes=float(gradient_bytes),
        tensor_bytes=tuple(tensor_bytes or ()),
        threads_per_rank=threads,
        cores_used=cores_used,
        batch_per_rank=batch_per_rank,
        wall_s=wall_s,
        other_s=other,
        load_balance=load_balance,
        notes=tuple(notes),
    )


def _threads(meta: Mapping[str, Any]) -> int | None:
    cluster = (meta.get("config") or {}).get("cluster") if isinstance(meta.get("config"), Mapping) else None
    if isinstance(cluster, Mapping):
        for key in ("threads_per_rank", "threads"):
            value = cluster.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


def _batch(meta: Mapping[str, Any]) -> int | None:
    config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    for source in ((config or {}).get("settings"), (config or {}).get("workload")):
        if isinstance(source, Mapping):
            value = source.get("batch")
            if isinstance(value, int) and value > 0:
                return value
    return None


# --------------------------------------------------------------------------------------------
# What-ifs and the projection
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharedStorage:
    """A file system that every reader of every job draws from, read through each node's link.

    Fair by request, as a busy file server is: each reader (a thread with a read outstanding) gets an
    equal share of ``bandwidth_bytes_per_s`` with the ``other_readers`` of other jobs, and a node's
    readers together get at most ``node_link_bytes_per_s``. More ranks on a node bring more readers,
    so the node's share grows until its link is full, then each rank's share shrinks.
    """

    bandwidth_bytes_per_s: float
    other_readers: int
    readers_per_rank: int
    bytes_per_read: float
    node_link_bytes_per_s: float | None = None
    #: One read feeds this many steps (batch repetition k).
    steps_per_read: int = 1
    #: Readers that run only on the rank's TensorFlow threads (``tf.numpy_function`` in ``map``): at most those.
    readers_bound_by_threads: bool = False

    @classmethod
    def node_cap(cls, reads_per_s: float) -> SharedStorage:
        """What all ranks of one node can read together, however many readers they have."""
        return cls(bandwidth_bytes_per_s=reads_per_s, other_readers=0, readers_per_rank=1, bytes_per_read=1.0)

    def __post_init__(self) -> None:
        if self.bandwidth_bytes_per_s <= 0 or self.bytes_per_read <= 0 or self.readers_per_rank < 1:
            raise ValueError("SharedStorage needs a positive bandwidth, bytes per read and >= 1 reader per rank")

    def node_reads_per_s(self, readers_on_node: int) -> float:
        """Reads per second all readers of one node get together."""
        rate = self.bandwidth_bytes_per_s * readers_on_node / (readers_on_node + max(self.other_readers, 0))
        if self.node_link_bytes_per_s:
            rate = min(rate, self.node_link_bytes_per_s)
        return rate / self.bytes_per_read

    def describe(self) -> str:
        link = f", node link {self.node_link_bytes_per_s / BYTES_PER_MB:.3g} MB/s" if self.node_link_bytes_per_s else ""
        bound = " (at most its TensorFlow threads)" if self.readers_bound_by_threads else ""
        return (
            f"shared storage {self.bandwidth_bytes_per_s / BYTES_PER_MB:.3g} MB/s fair per reader with"
            f" {self.other_readers} other jobs' readers{link}; {self.readers_per_rank} reader(s) per rank{bound},"
            f" {self.bytes_per_read / BYTES_PER_MB:.3g} MB per read, one read per {self.steps_per_read} step(s)"
        )


@dataclass(frozen=True)
class Changes:
    """What-if changes applied on top of the projection (None / defaults: as measured)."""

    #: Evaluate every k epochs (the measured interval is read from the run).
    eval_interval: int | None = None
    #: Split each evaluation evenly over all ranks (tf.data sharding) instead of the ranks that did it.
    shard_evaluation: bool = False
    #: Per-rank batch times this factor: compute and input per step scale with it, steps per epoch inversely.
    batch_scale: float = 1.0
    #: Horovod's fusion threshold (HOROVOD_FUSION_THRESHOLD) in bytes.
    fusion_threshold_bytes: int = HOROVOD_FUSION_THRESHOLD_BYTES

    def describe(self) -> str:
        parts = []
        if self.eval_interval is not None:
            parts.append(f"evaluate every {self.eval_interval} epoch(s)")
        if self.shard_evaluation:
            parts.append("evaluation sharded over all ranks")
        if self.batch_scale != 1.0:
            parts.append(f"per-rank batch x{self.batch_scale:g}")
        if self.fusion_threshold_bytes != HOROVOD_FUSION_THRESHOLD_BYTES:
            parts.append(f"fusion threshold {self.fusion_threshold_bytes / BYTES_PER_MB:.3g} MB")
        return ", ".join(parts) or "as measured"


@dataclass(frozen=True)
class Projection:
    """Projected scaling: one row per rank count (``PROJECTION_COLUMNS``) and what limits it."""

    table: pd.DataFrame
    #: Long format: ranks, limit, seconds (per epoch), share (of the epoch).
    limits: pd.DataFrame
    network: Network
    kind: str
    changes: Changes
    scheme: str
    notes: tuple[str, ...]
    assumptions: tuple[str, ...]
    profile: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as None)."""
        from workbench.analysis.run_analysis import json_ready, json_records

        return {
            "network": json_ready(self.network.__dict__),
            "kind": self.kind,
            "scheme": self.scheme,
            "changes": self.changes.describe(),
            "projection": json_records(self.table),
            "limits": json_records(self.limits),
            "profile": json_ready(self.profile),
            "notes": list(self.notes),
            "assumptions": list(self.assumptions),
        }


def project(
    profile: StepCosts,
    ranks: Iterable[int],
    net: Network | str,
    *,
    kind: str = "weak",
    changes: Changes | None = None,
    scheme: str = "allreduce",
    servers: int | None = None,
    thread_scaling: float = 1.0,
    shared_input_batches_per_s: float | None = None,
    shared_storage: SharedStorage | None = None,
    overlap: float = 0.0,
    input_is_useful: bool = True,
    bootstrap: int = 200,
    seed: int = 0,
) -> Projection:
    """Step time, epoch and wall time, throughput, efficiency, POP metrics and phase shares per rank count.

    ``kind="weak"``: per-rank batch fixed, the dataset fixed, so epochs have ``n0/n`` as many steps;
    ``"strong"``: global batch fixed, so each rank's batch (compute, input per step) is ``n0/n`` of the
    measured one. ``n0`` is the measured rank count. ``speedup`` and ``efficiency`` are relative to the
    model at ``n0`` (throughput in samples/s when the batch is known, else rank-steps/s).
    ``shared_input_batches_per_s``: what all ranks of one node can read together (None: input is per rank).
    ``shared_storage``: a contested file system read fairly per reader (``SharedStorage``); the step
    period is then at least what each rank's share of it allows at that rank count.
    ``overlap``: the share of a step's compute the collective can hide behind (gradients sent while the
    backward pass goes on; ~2/3 when the backward pass is two thirds of the step); 0 = after the step,
    as the workloads here do. ``input_is_useful`` as in ``pop_metrics``: False counts waiting for input
    as lost (a GPU waiting for data is idle), which lowers the projected POP efficiencies.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: use 'weak' (per-rank batch fixed) or 'strong' (global batch fixed)")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}: use 'allreduce' or 'ps' (parameter servers)")
    net = network(net)
    changes = changes or Changes()
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap={overlap}: a share of the step's compute between 0 and 1")
    if changes.batch_scale <= 0 or (changes.eval_interval is not None and changes.eval_interval < 1):
        raise ValueError("batch_scale must be > 0 and eval_interval >= 1")
    counts = sorted({int(n) for n in ranks})
    if not counts or counts[0] < 1:
        raise ValueError("ranks must be whole numbers >= 1, e.g. 8,16,32,64")
    notes = list(profile.notes)
    assumptions = _assumptions(profile, net, kind, changes, scheme, thread_scaling, shared_input_batches_per_s)
    storage = shared_storage
    if shared_storage is not None:
        if shared_input_batches_per_s:
            raise ValueError("give shared_storage or shared_input_batches_per_s, not both (a node cap is a storage)")
        assumptions = (*assumptions, shared_storage.describe())
    elif shared_input_batches_per_s and shared_input_batches_per_s > 0:
        storage = SharedStorage.node_cap(shared_input_batches_per_s)
    if overlap:
        assumptions = (*assumptions, f"the collective hides behind up to {overlap:.0%} of each step's compute")
    if not len(profile.compute_s):
        empty = pd.DataFrame(
            [{**dict.fromkeys(PROJECTION_COLUMNS, math.nan), "ranks": n, "kind": kind} for n in counts]
        )
        limits = pd.DataFrame(columns=["ranks", "limit", "seconds", "share"])
        return Projection(
            empty[list(PROJECTION_COLUMNS)],
            limits,
            net,
            kind,
            changes,
            scheme,
            (*notes, "no measured steps: nothing to project"),
            assumptions,
            profile.summary(),
        )

    model = _Model(
        profile,
        net,
        kind,
        changes,
        scheme,
        servers,
        thread_scaling,
        overlap,
        input_is_useful,
        storage,
    )
    reference = model.at(profile.ranks, profile.compute_s, profile.input_s, profile.evaluation_s)
    rng = np.random.default_rng(seed)
    resamples = []
    for _ in range(max(int(bootstrap), 0)):
        pick = rng.integers(0, len(profile.compute_s), len(profile.compute_s))
        evals = (
            profile.evaluation_s[rng.integers(0, len(profile.evaluation_s), len(profile.evaluation_s))]
            if len(profile.evaluation_s)
            else profile.evaluation_s
        )
        resamples.append((profile.compute_s[pick], profile.input_s[pick], evals))
    rows, limit_rows = [], []
    for n in counts:
        point = model.at(n, profile.compute_s, profile.input_s, profile.evaluation_s)
        spread = (
            np.array(
                [[m["step_s"], m["epoch_s"], m["wall_s"]] for m in (model.at(n, c, i, e) for c, i, e in resamples)]
            )
            if resamples
            else None
        )
        low = (
            np.percentile(spread, 2.5, axis=0)
            if spread is not None
            else [point["step_s"], point["epoch_s"], point["wall_s"]]
        )
        high = np.percentile(spread, 97.5, axis=0) if spread is not None else low
        speedup = (point["throughput"] / reference["throughput"]) if reference["throughput"] > 0 else math.nan
        losses = {limit: point[f"{limit}_s"] for limit in LIMITS}
        limiter = max(losses, key=losses.get) if max(losses.values()) > 0 else "none"
        rows.append(
            {
                **point,
                "ranks": n,
                "kind": kind,
                "step_s_low": float(low[0]),
                "step_s_high": float(high[0]),
                "epoch_s_low": float(low[1]),
                "epoch_s_high": float(high[1]),
                "wall_s_low": float(low[2]),
                "wall_s_high": float(high[2]),
                "speedup": speedup,
                "efficiency": speedup / (n / profile.ranks),
                "limiter": limiter,
            }
        )
        for limit in ("compute", *LIMITS):
            seconds = point[f"{limit}_s"]
            limit_rows.append(
                {
                    "ranks": n,
                    "limit": limit,
                    "seconds": seconds,
                    "share": seconds / point["epoch_s"] if point["epoch_s"] > 0 else math.nan,
                }
            )
    return Projection(
        table=pd.DataFrame(rows)[list(PROJECTION_COLUMNS)],
        limits=pd.DataFrame(limit_rows, columns=["ranks", "limit", "seconds", "share"]),
        network=net,
        kind=kind,
        changes=changes,
        scheme=scheme,
        notes=tuple(notes),
        assumptions=assumptions,
        profile=profile.summary(),
    )


@dataclass(frozen=True)
class _Model:
    profile: StepCosts
    net: Network
    kind: str
    changes: Changes
    scheme: str
    servers: int | None
    thread_scaling: float
    overlap: float = 0.0
    input_is_useful: bool = True
    storage: SharedStorage | None = None

    def threads_at(self, n: int) -> int | None:
        """TensorFlow threads each rank gets at ``n`` ranks (None: not recorded or no core count)."""
        measured = self.profile.threads_per_rank
        if measured is None or self.net.cores_per_node is None:
            return None
        return max(1, min(measured, self.net.cores_per_node // min(self.net.ranks_per_node, n)))

    def storage_period(self, n: int) -> float:
        """Seconds per step each rank's share of the shared storage allows at ``n`` ranks (0: none)."""
        storage = self.storage
        if storage is None:
            return 0.0
        readers = storage.readers_per_rank
        threads = self.threads_at(n)
        if storage.readers_bound_by_threads and threads is not None:
            readers = min(readers, threads)
        per_node = min(self.net.ranks_per_node, n)
        return per_node / storage.node_reads_per_s(per_node * readers) / storage.steps_per_read

    def thread_factor(self, n: int) -> float:
        """Compute slowdown at ``n`` ranks from the CPU a rank has: cores shared on a node, Horovod's thread."""
        return self._sharing_factor(n) * self.horovod_factor(n)

    def _sharing_factor(self, n: int) -> float:
        """Compute slowdown when ranks on one node share its cores."""
        measured = self.profile.threads_per_rank
        threads = self.threads_at(n)
        if measured is None or threads is None:
            return 1.0
        used = self.profile.cores_used
        if used is not None and used > 0:  # a rank that used P cores runs at min(P, threads) cores' speed
            # raised to thread_scaling too: ranks contending for a full node (caches, memory, the
            # collective's threads) can slow more than the cores they lose (1 = exactly that)
            return (min(used, measured) / min(used, threads)) ** self.thread_scaling
        return (measured / threads) ** self.thread_scaling

    def horovod_factor(self, n: int) -> float:
        """Compute slowdown from Horovod's background thread at ``n`` ranks (1 on one rank or without it).

        A rank whose compute keeps ``busy`` of its ``threads`` cores busy keeps that speed while the
        thread's ``h`` cores fit beside it, and otherwise runs at ``(threads - h) / busy`` of it.
        """
        h = self.net.horovod_thread_cores if self.scheme == "allreduce" and n >= 2 else 0.0
        threads = self.threads_at(n) or self.profile.threads_per_rank
        if h <= 0 or threads is None:
            return 1.0
        busy = min(self.profile.cores_used or threads, threads)
        return max(1.0, busy / max(threads - h, 0.05 * threads))

    def at(self, n: int, compute: np.ndarray, wait: np.ndarray, evaluation: np.ndarray) -> dict[str, Any]:
        """Every projected quantity at ``n`` ranks from one sample of the measured costs."""
        p, c = self.profile, self.changes
        n0 = p.ranks
        batch = c.batch_scale * (n0 / n if self.kind == "strong" else 1.0)
        factor = self.thread_factor(n) / self.thread_factor(n0)
        compute_n = compute * factor * batch
        input_bound = p.input_bound
        # input overlaps the step; an input-bound run's period is the pipeline's period per step
        busy = compute_n if input_bound else compute_n + wait * batch
        mean_busy = float(busy.mean())
        # the slowest rank: step-to-step variance (E[max] of n draws), or a measured imbalance, whichever is larger
        slowest = max(expected_max(busy, n), mean_busy / p.load_balance) if n > 1 else mean_busy
        if self.scheme == "ps":
            transfer, per_call = parameter_server_seconds(p.gradient_bytes, n, self.net, servers=self.servers), 0.0
        else:
            transfer, per_call = allreduce_seconds(
                p.gradient_bytes,
                n,
                self.net,
                fusion_threshold_bytes=c.fusion_threshold_bytes,
                tensor_bytes=p.tensor_bytes or None,
            )
        hidden = min(self.overlap * float(compute_n.mean()), transfer + per_call)
        transfer, per_call = _exposed(transfer, per_call, hidden)
        step_compute = slowest + transfer + per_call
        period = float((compute + wait).mean()) + (p.communication_s if n0 == 1 else 0.0) if input_bound else 0.0
        if input_bound and p.cores_used:  # measured CPU use says how CPU-bound the readers are
            period *= factor
        period = max(period, self.storage_period(n)) * batch
        step = max(step_compute, period)
        steps_per_epoch = p.steps_per_epoch * (n0 / n if self.kind == "weak" else 1.0) / c.batch_scale
        # evaluation per epoch: serial on the ranks that did it, or split over all ranks
        each = float(evaluation.mean()) if len(evaluation) else 0.0
        # core sharing slows evaluation as it slows compute; Horovod's thread does not: measured here, a
        # rank evaluating while the others wait in the next collective kept its 1-rank speed
        each *= self._sharing_factor(n) / self._sharing_factor(n0)
        measured_sharded = n0 > 1 and len(p.evaluating_ranks) == n0
        if measured_sharded:
            each *= n0  # measured per rank on its shard: the whole evaluation's work
        share_over = n if (c.shard_evaluation or measured_sharded) else 1
        per_epoch_evals = p.evaluations_per_epoch if c.eval_interval is None else 1.0 / c.eval_interval
        evaluation_epoch = each / share_over * per_epoch_evals
        training = steps_per_epoch * step
        epoch = training + evaluation_epoch + p.checkpoint_per_epoch_s
        wall = p.other_s + p.epochs * epoch
        samples = steps_per_epoch * n * (p.batch_per_rank or 1) * batch
        throughput = samples / epoch if epoch > 0 else math.nan
        useful_step = max(mean_busy, period - transfer - per_call) if input_bound else mean_busy
        if not self.input_is_useful:
            useful_step = float(compute_n.mean())
        useful = steps_per_epoch * useful_step
        input_loss = max(period - step_compute, 0.0)
        return {
            "nodes": math.ceil(n / min(self.net.ranks_per_node, n)),
            "step_s": step,
            "epoch_s": epoch,
            "wall_s": wall,
            "throughput": throughput,
            "unit": "samples/s" if p.batch_per_rank else "rank-steps/s",
            "load_balance": p.load_balance,
            "communication_efficiency": (useful / p.load_balance) / epoch if epoch > 0 else math.nan,
            "parallel_efficiency": useful / epoch if epoch > 0 else math.nan,
            "compute_s": steps_per_epoch * float(compute_n.mean()),
            "input_s": steps_per_epoch * (input_loss + (float((wait * batch).mean()) if not input_bound else 0.0)),
            "waiting_s": steps_per_epoch * (slowest - mean_busy),
            "communication_s": steps_per_epoch * transfer,
            "per_call_s": steps_per_epoch * per_call,
            "evaluation_s": evaluation_epoch,
            "checkpoint_s": p.checkpoint_per_epoch_s,
        }


def _exposed(transfer: float, per_call: float, hidden: float) -> tuple[float, float]:
    """What is left of transfer and per-call cost after ``hidden`` seconds overlap compute (pro rata)."""
    total = transfer + per_call
    if total <= 0 or hidden <= 0:
        return transfer, per_call
    keep = (total - hidden) / total
    return transfer * keep, per_call * keep


def _assumptions(
    profile: StepCosts,
    net: Network,
    kind: str,
    changes: Changes,
    scheme: str,
    thread_scaling: float,
    shared_input: float | None,
) -> tuple[str, ...]:
    items = [
        net.describe(),
        f"{kind} scaling from the run on {profile.ranks} rank(s); what-ifs: {changes.describe()}",
        "a step lasts as long as the slowest rank (E[max] of the measured per-step times) plus the collective",
        "per-rank compute scales linearly with the per-rank batch",
    ]
    if scheme == "ps":
        items.append(
            "parameter servers: one per node unless servers= is given; nodes combine their ranks' gradients first"
        )
    if profile.input_bound:
        items.append(
            "input-bound run: the input pipeline's measured period per step stays per rank"
            + (", slowed by core sharing as compute is (CPU use sampled)" if profile.cores_used else "")
            + ("" if shared_input is None else f", capped at {shared_input:.3g} batches/s per node")
        )
    if net.cores_per_node is not None and profile.threads_per_rank is not None:
        rule = (
            f"(min(P, threads measured) / min(P, threads))^{thread_scaling:g}"
            f" with P = {profile.cores_used:.2g} cores used"
            if profile.cores_used
            else f"(threads measured / threads)^{thread_scaling:g}"
        )
        items.append(f"ranks on one node share its {net.cores_per_node} cores; compute grows as {rule}")
    if net.horovod_thread_cores and scheme == "allreduce":
        items.append(
            f"from 2 ranks on, Horovod's background thread takes {net.horovod_thread_cores:.2g} of a core from"
            " each rank's training compute where it keeps every core busy"
            + ("" if profile.threads_per_rank is not None else " (not applied: the run recorded no thread count)")
        )
    if len(profile.evaluation_s) and (len(profile.evaluating_ranks) < profile.ranks or profile.ranks == 1):
        items.append("evaluation by one rank while the others wait (serial), unless sharded")
    return tuple(items)


def limits_table(projection: Projection) -> pd.DataFrame:
    """What limits scaling at each rank count: the loss beside compute with the largest share first."""
    losses = projection.limits[projection.limits["limit"] != "compute"]
    return losses.sort_values(["ranks", "seconds"], ascending=[True, False]).reset_index(drop=True)


__all__ = [
    "ALGORITHMS",
    "BYTES_PER_GB",
    "HOROVOD_FUSION_THRESHOLD_BYTES",
    "INPUT_BOUND_SHARE",
    "LIMITS",
    "NETWORKS",
    "PROJECTION_COLUMNS",
    "Changes",
    "Network",
    "Projection",
    "StepCosts",
    "allreduce_seconds",
    "expected_max",
    "fit_network",
    "fused_calls",
    "limits_table",
    "network",
    "parameter_server_seconds",
    "project",
    "ring_allreduce_seconds",
    "step_costs",
    "tree_allreduce_seconds",
]

#: Old names of ``StepCosts`` / ``step_costs`` ("profile" now means only recording a run, as
#: ``workbench profile`` does); ``workbench/cases`` still calls ``profile_run``.
RunProfile = StepCosts
profile_run = step_costs
