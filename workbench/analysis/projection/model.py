"""The projection model: a run's ``StepCosts`` on a ``Network`` at other rank counts, with what-ifs.

The formulas are described in ``workbench.analysis.projection`` (the package docstring).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench.analysis.projection.costs import StepCosts
from workbench.analysis.projection.networks import (
    HOROVOD_FUSION_THRESHOLD_BYTES,
    Network,
    allreduce_seconds,
    asynchronous_parameter_server_seconds,
    fused_allreduce_seconds,
    network,
    parameter_server_seconds,
)
from workbench.analysis.projection.overlap import HOROVOD_CYCLE_S, GradientLayout, StepOverlap, layout_overlap
from workbench.events import BYTES_PER_MB

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
    "hidden_s",
    "hidden_share",
)


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
    """What-if changes applied on top of the projection (None / defaults: as measured).

    All of ``project``'s what-ifs in one value, so a caller names a scenario once and the
    ``Projection`` carries it. ``describe()`` lists the run-level ones (evaluation, batch, fusion);
    the scheme, overlap and shared input are spelled out in the projection's assumptions.
    """

    #: Evaluate every k epochs (the measured interval is read from the run).
    eval_interval: int | None = None
    #: Split each evaluation evenly over all ranks (tf.data sharding) instead of the ranks that did it.
    shard_evaluation: bool = False
    #: Per-rank batch times this factor: compute and input per step scale with it, steps per epoch inversely.
    batch_scale: float = 1.0
    #: Horovod's fusion threshold (HOROVOD_FUSION_THRESHOLD) in bytes.
    fusion_threshold_bytes: int = HOROVOD_FUSION_THRESHOLD_BYTES
    #: Horovod's cycle (HOROVOD_CYCLE_TIME) in seconds: how often its thread sends the gradients ready.
    cycle_s: float = HOROVOD_CYCLE_S
    #: Samples in one epoch of the whole training set. Given, each rank takes whole batches of its shard,
    #: ceil(samples / ranks) // batch steps an epoch (the partial batch dropped, as Horovod's examples and
    #: tf.data's ``drop_remainder`` do): at 8 ranks 1 437 samples in batches of 64 are 2 steps, not 2.8.
    #: None: the measured steps per epoch shared out between the ranks.
    epoch_samples: int | None = None
    #: How gradients are combined: ``"allreduce"`` (Horovod) or ``"ps"`` (parameter servers).
    scheme: str = "allreduce"
    #: Parameter servers (``scheme="ps"``); None: one per node.
    servers: int | None = None
    #: Each server's share of the variables (``scheme="ps"``), in task order; None: even over ``servers``.
    #: TensorFlow's round-robin can put nearly all bytes on server 0 (``ps_load.placements``).
    server_shares: tuple[float, ...] | None = None
    #: The servers run on the workers' nodes (server j on node j mod nodes) rather than hosts of their own:
    #: a node's worker then reaches its local servers without the link.
    servers_colocated: bool = False
    #: The workers step on their own (asynchronous PS training: TF 2's ``ClusterCoordinator``): no barrier,
    #: so a round of steps lasts the longer of one worker's cycle and what the busiest link carries each way.
    servers_asynchronous: bool = False
    #: Node time (s) one worker step's pull and push take through the servers' RPCs, client and server sides
    #: together (``servers_asynchronous``): a 1-node PS run's step less the same model's step without servers.
    #: Servers beside workers share their node's cores, so serving every worker's share can be the limit.
    server_exchange_s: float = 0.0
    #: The share of a step's compute the collective can hide behind (gradients sent while the backward
    #: pass goes on; ~2/3 when the backward pass is two thirds of the step); 0 = after the step.
    overlap: float = 0.0
    #: What all ranks of one node can read together (None: input is per rank). Exclusive with ``shared_storage``.
    shared_input_batches_per_s: float | None = None
    #: A contested file system read fairly per reader; the step period is then at least what each rank's
    #: share of it allows at that rank count. Exclusive with ``shared_input_batches_per_s``.
    shared_storage: SharedStorage | None = None

    def __post_init__(self) -> None:
        if self.server_shares is not None and (
            not self.server_shares or min(self.server_shares) < 0 or sum(self.server_shares) <= 0
        ):
            raise ValueError(
                f"server_shares={self.server_shares!r}: give each parameter server's share of the variables,"
                " e.g. (0.5, 0.5)"
            )
        if not self.cycle_s > 0:
            raise ValueError(f"cycle_s={self.cycle_s}: Horovod's cycle (HOROVOD_CYCLE_TIME) in seconds, > 0")
        if self.server_exchange_s < 0:
            raise ValueError(f"server_exchange_s={self.server_exchange_s}: the RPCs' node seconds per step, 0 or more")
        if self.epoch_samples is not None and self.epoch_samples < 1:
            raise ValueError(f"epoch_samples {self.epoch_samples} must be the training set's size, at least 1 sample")
        if self.shared_storage is not None and self.shared_input_batches_per_s:
            raise ValueError(
                "give shared_storage or shared_input_batches_per_s, not both: keep shared_storage for a contested"
                " file system, or shared_input_batches_per_s for a plain per-node read cap"
            )

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
        if self.cycle_s != HOROVOD_CYCLE_S:
            parts.append(f"Horovod cycle {self.cycle_s * 1e3:.3g} ms")
        if self.epoch_samples:
            parts.append(f"whole batches of {self.epoch_samples} samples an epoch")
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
    costs: dict[str, Any] = field(default_factory=dict)

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
            "costs": json_ready(self.costs),
            "notes": list(self.notes),
            "assumptions": list(self.assumptions),
        }


def project(
    costs: StepCosts,
    ranks: Iterable[int],
    net: Network | str,
    *,
    kind: str = "weak",
    changes: Changes | None = None,
    thread_scaling: float = 1.0,
    input_is_useful: bool = True,
    bootstrap: int = 200,
    seed: int = 0,
) -> Projection:
    """Step time, epoch and wall time, throughput, efficiency, POP metrics and phase shares per rank count.

    ``kind="weak"``: per-rank batch fixed, the dataset fixed, so epochs have ``n0/n`` as many steps;
    ``"strong"``: global batch fixed, so each rank's batch (compute, input per step) is ``n0/n`` of the
    measured one. ``n0`` is the measured rank count. ``speedup`` and ``efficiency`` are relative to the
    model at the fewest ranks, ``n0`` or a smaller count asked (throughput in samples/s when the batch is
    known, else rank-steps/s): a 1-rank row is 1x and 100 %, as users read scaling tables.
    ``changes``: the what-ifs (``Changes``: evaluation, batch, fusion, scheme, overlap, shared input).
    ``thread_scaling``: the exponent of the compute slowdown when ranks share a node's cores.
    ``input_is_useful`` as in ``pop_metrics``: False counts waiting for input as lost (a GPU waiting for
    data is idle), which lowers the projected POP efficiencies.
    """
    changes = changes or Changes()
    scheme, overlap = changes.scheme, changes.overlap
    shared_input_batches_per_s, shared_storage = changes.shared_input_batches_per_s, changes.shared_storage
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: use 'weak' (per-rank batch fixed) or 'strong' (global batch fixed)")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}: use 'allreduce' or 'ps' (parameter servers)")
    net = network(net)
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap={overlap}: a share of the step's compute between 0 and 1")
    if changes.batch_scale <= 0 or (changes.eval_interval is not None and changes.eval_interval < 1):
        raise ValueError("batch_scale must be > 0 and eval_interval >= 1")
    counts = sorted({int(n) for n in ranks})
    if not counts or counts[0] < 1:
        raise ValueError("ranks must be whole numbers >= 1, e.g. 8,16,32,64")
    notes = list(costs.notes)
    assumptions = _assumptions(costs, net, kind, changes, scheme, thread_scaling, shared_input_batches_per_s)
    storage = shared_storage
    if shared_storage is not None:
        assumptions = (*assumptions, shared_storage.describe())
    elif shared_input_batches_per_s and shared_input_batches_per_s > 0:
        storage = SharedStorage.node_cap(shared_input_batches_per_s)
    if overlap:
        assumptions = (*assumptions, f"the collective hides behind up to {overlap:.0%} of each step's compute")
    elif scheme == "allreduce":
        assumptions = (*assumptions, _overlap_assumption(costs.gradient_layout, changes))
    if not len(costs.compute_s):
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
            costs.summary(),
        )

    model = _Model(
        costs,
        net,
        kind,
        changes,
        scheme,
        changes.servers,
        thread_scaling,
        overlap,
        input_is_useful,
        storage,
    )
    reference_ranks = min(counts[0], costs.ranks)
    reference = model.at(reference_ranks, costs.compute_s, costs.input_s, costs.evaluation_s)
    resamples = _resamples(costs, bootstrap, seed)
    rows, limit_rows = [], []
    for n in counts:
        point = model.at(n, costs.compute_s, costs.input_s, costs.evaluation_s)
        low, high = _interval(point, [model.at(n, c, i, e) for c, i, e in resamples])
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
                "efficiency": speedup / (n / reference_ranks),
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
        costs=costs.summary(),
    )


def _resamples(costs: StepCosts, bootstrap: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``bootstrap`` resamples of the measured steps (compute and input together) and evaluations."""
    rng = np.random.default_rng(seed)
    resamples = []
    for _ in range(max(int(bootstrap), 0)):
        pick = rng.integers(0, len(costs.compute_s), len(costs.compute_s))
        evals = (
            costs.evaluation_s[rng.integers(0, len(costs.evaluation_s), len(costs.evaluation_s))]
            if len(costs.evaluation_s)
            else costs.evaluation_s
        )
        resamples.append((costs.compute_s[pick], costs.input_s[pick], evals))
    return resamples


def _interval(point: Mapping[str, Any], resampled: list[dict[str, Any]]) -> tuple[Sequence[float], Sequence[float]]:
    """The 2.5 and 97.5 percentiles of step, epoch and wall seconds over the resamples (the point without any)."""
    if not resampled:
        value = [point["step_s"], point["epoch_s"], point["wall_s"]]
        return value, value
    spread = np.array([[m["step_s"], m["epoch_s"], m["wall_s"]] for m in resampled])
    return np.percentile(spread, 2.5, axis=0), np.percentile(spread, 97.5, axis=0)


@dataclass(frozen=True)
class _Model:
    costs: StepCosts
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
        measured = self.costs.threads_per_rank
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
        """Compute slowdown at ``n`` ranks from the CPU a rank has: cores shared on a node, Horovod's thread,
        and what collectives between the compute take from it (``Network.compute_factor_beside_collectives``)."""
        beside = self.net.compute_factor_beside_collectives if n >= 2 else 1.0
        return self._sharing_factor(n) * self.horovod_factor(n) * beside

    def _sharing_factor(self, n: int) -> float:
        """Compute slowdown when ranks on one node share its cores."""
        measured = self.costs.threads_per_rank
        threads = self.threads_at(n)
        if measured is None or threads is None:
            return 1.0
        used = self.costs.cores_used
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
        threads = self.threads_at(n) or self.costs.threads_per_rank
        if h <= 0 or threads is None:
            return 1.0
        busy = min(self.costs.cores_used or threads, threads)
        return max(1.0, busy / max(threads - h, 0.05 * threads))

    def at(self, n: int, compute: np.ndarray, wait: np.ndarray, evaluation: np.ndarray) -> dict[str, Any]:
        """Every projected quantity at ``n`` ranks from one sample of the measured costs."""
        p, c = self.costs, self.changes
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
        if self.scheme == "ps" and c.servers_asynchronous:
            slowest = mean_busy  # no barrier: nobody waits for the slowest worker's step
        transfer, per_call, hidden = self.communication(n, slowest, mean_busy, float(compute_n.mean()))
        communicated = transfer + per_call
        transfer, per_call = _exposed(transfer, per_call, hidden)
        step_compute = slowest + transfer + per_call
        period = float((compute + wait).mean()) + (p.communication_s if n0 == 1 else 0.0) if input_bound else 0.0
        if input_bound and p.cores_used:  # measured CPU use says how CPU-bound the readers are
            period *= factor
        period = max(period, self.storage_period(n)) * batch
        step = max(step_compute, period)
        if c.epoch_samples and p.batch_per_rank:
            per_rank_batch = max(1, round(p.batch_per_rank * batch))
            steps_per_epoch = float(max(1, math.ceil(c.epoch_samples / n) // per_rank_batch))
        else:
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
            "hidden_s": steps_per_epoch * hidden,
            "hidden_share": hidden / communicated if communicated > 0 else math.nan,
        }

    def communication(self, n: int, slowest: float, mean_busy: float, compute: float) -> tuple[float, float, float]:
        """Seconds per step of the scheme's transfer and fixed per-call cost at ``n`` ranks, and how much of
        them hides behind compute (Horovod's loop played over the step, or the imposed ``overlap`` share)."""
        p, c = self.costs, self.changes
        if self.scheme == "ps":
            if c.servers_asynchronous:
                transfer = asynchronous_parameter_server_seconds(
                    p.gradient_bytes,
                    n,
                    self.net,
                    mean_busy,
                    servers=self.servers,
                    shares=c.server_shares,
                    colocated=c.servers_colocated,
                    exchange_s=c.server_exchange_s,
                )
            else:
                transfer = parameter_server_seconds(
                    p.gradient_bytes,
                    n,
                    self.net,
                    servers=self.servers,
                    shares=c.server_shares,
                    colocated=c.servers_colocated,
                )
            return transfer, 0.0, min(self.overlap * compute, transfer)
        if self.simulates_overlap and n > 1:
            played = self.backprop(slowest, n)
            per_call = played.buffers * self.net.per_call_s
            return max(played.communication_s - per_call, 0.0), per_call, played.hidden_s
        transfer, per_call = allreduce_seconds(
            p.gradient_bytes,
            n,
            self.net,
            fusion_threshold_bytes=c.fusion_threshold_bytes,
            tensor_bytes=p.tensor_bytes or None,
        )
        return transfer, per_call, min(self.overlap * compute, transfer + per_call)

    @property
    def simulates_overlap(self) -> bool:
        """Horovod's loop is played over the step when the gradients' layout is known and no share is imposed."""
        return (
            self.costs.gradient_layout is not None
            and self.scheme == "allreduce"
            and not self.overlap
        )

    def backprop(self, compute_s: float, n: int) -> StepOverlap:
        """One step's allreduces at ``n`` ranks against a backward pass in a step of ``compute_s`` seconds."""
        layout = self.costs.gradient_layout
        assert layout is not None
        return layout_overlap(
            layout,
            compute_s,
            lambda nbytes: fused_allreduce_seconds(nbytes, n, self.net),
            fusion_bytes=self.changes.fusion_threshold_bytes,
            cycle_s=self.changes.cycle_s,
        )


def _exposed(transfer: float, per_call: float, hidden: float) -> tuple[float, float]:
    """What is left of transfer and per-call cost after ``hidden`` seconds overlap compute (pro rata)."""
    total = transfer + per_call
    if total <= 0 or hidden <= 0:
        return transfer, per_call
    keep = (total - hidden) / total
    return transfer * keep, per_call * keep


def _overlap_assumption(layout: GradientLayout | None, changes: Changes) -> str:
    """How the allreduce meets the backward pass: played from the gradients' layout, or after it."""
    if layout is None:
        return (
            "the allreduce starts once the backward pass has ended (no gradient layout: give the model's"
            " tensors, e.g. --model resnet50 or --gradients FILE, to play Horovod's overlap with backprop)"
        )
    return (
        f"Horovod's loop played over each step: every {changes.cycle_s * 1e3:.3g} ms its thread sends the"
        f" gradients ready, fused up to {changes.fusion_threshold_bytes / BYTES_PER_MB:.3g} MB a buffer;"
        f" what runs while the backward pass computes is hidden (hidden_share); {layout.describe()}"
    )


def _assumptions(
    costs: StepCosts,
    net: Network,
    kind: str,
    changes: Changes,
    scheme: str,
    thread_scaling: float,
    shared_input: float | None,
) -> tuple[str, ...]:
    items = [
        net.describe(),
        f"{kind} scaling from the run on {costs.ranks} rank(s); what-ifs: {changes.describe()}",
        "a step lasts as long as the slowest rank (E[max] of the measured per-step times) plus the collective",
        "per-rank compute scales linearly with the per-rank batch",
    ]
    if scheme == "ps":
        where = (
            "on the workers' nodes (server j on node j mod nodes)"
            if changes.servers_colocated
            else "on hosts of their own"
        )
        held = (
            "holding " + ", ".join(f"{share:.3g}" for share in changes.server_shares) + " of the variables"
            if changes.server_shares
            else "holding even shares"
        )
        steps = (
            "workers step on their own (asynchronous), each at its own rate (compute, its RPCs, pull and push),"
            " slowed where a node's link or CPU is full (a node's CPU runs its worker and serves its servers'"
            f" share at {changes.server_exchange_s:.3g} s of RPCs a step)"
            if changes.servers_asynchronous
            else "every worker waits for the slowest (synchronous steps)"
        )
        count = f"{changes.servers}" if changes.servers else "one per node"
        items.append(
            f"parameter servers ({count}) {where}, {held}; nodes combine their ranks' gradients first; {steps}"
        )
    if costs.input_bound:
        items.append(
            "input-bound run: the input pipeline's measured period per step stays per rank"
            + (", slowed by core sharing as compute is (CPU use sampled)" if costs.cores_used else "")
            + ("" if shared_input is None else f", capped at {shared_input:.3g} batches/s per node")
        )
    if net.cores_per_node is not None and costs.threads_per_rank is not None:
        rule = (
            f"(min(P, threads measured) / min(P, threads))^{thread_scaling:g}"
            f" with P = {costs.cores_used:.2g} cores used"
            if costs.cores_used
            else f"(threads measured / threads)^{thread_scaling:g}"
        )
        items.append(f"ranks on one node share its {net.cores_per_node} cores; compute grows as {rule}")
    if net.horovod_thread_cores and scheme == "allreduce":
        items.append(
            f"from 2 ranks on, Horovod's background thread takes {net.horovod_thread_cores:.2g} of a core from"
            " each rank's training compute where it keeps every core busy"
            + ("" if costs.threads_per_rank is not None else " (not applied: the run recorded no thread count)")
        )
    if net.compute_factor_beside_collectives != 1.0:
        items.append(
            f"from 2 ranks on, compute takes x{net.compute_factor_beside_collectives:.3g} as long with collectives"
            " between it (measured on these nodes: waiting in MPI polls, and the node's CPU is capped)"
        )
    if len(costs.evaluation_s) and (len(costs.evaluating_ranks) < costs.ranks or costs.ranks == 1):
        items.append("evaluation by one rank while the others wait (serial), unless sharded")
    return tuple(items)


def limits_table(projection: Projection) -> pd.DataFrame:
    """What limits scaling at each rank count: the loss beside compute with the largest share first."""
    losses = projection.limits[projection.limits["limit"] != "compute"]
    return losses.sort_values(["ranks", "seconds"], ascending=[True, False]).reset_index(drop=True)
