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
  so a serial evaluation weighs more at scale: the published studies' story.
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

Without a run, ``system`` builds the same one-device costs from a description (``SystemSpec``: parameters,
a device's step time or throughput, devices per node, the network) and ``project_system`` projects them to
a number of nodes: a cluster planned before it exists.

Modules: ``networks`` (the network catalogue, its fit and collective costs), ``costs`` (a run's per-step
costs, ``step_costs``), ``model`` (``project``, its what-ifs ``Changes`` and the ``Projection`` it returns)
and ``system`` (a described system instead of a run).
This package re-exports their public names, so ``projection.project(...)`` reads as before.
"""

from __future__ import annotations

from workbench.analysis.projection.costs import INPUT_BOUND_SHARE, WARMUP_STEPS, StepCosts, step_costs
from workbench.analysis.projection.model import (
    KINDS,
    LIMITS,
    PROJECTION_COLUMNS,
    SCHEMES,
    Changes,
    Projection,
    SharedStorage,
    expected_max,
    limits_table,
    project,
)
from workbench.analysis.projection.networks import (
    ALGORITHMS,
    BYTES_PER_GB,
    HOROVOD_FUSION_THRESHOLD_BYTES,
    NAMED_PER_CALL_S,
    NETWORKS,
    Network,
    allreduce_seconds,
    asynchronous_parameter_server_seconds,
    fit_network,
    fused_allreduce_seconds,
    fused_calls,
    network,
    parameter_server_link_bytes,
    parameter_server_seconds,
    reference_vm_allreduce_rows,
    ring_allreduce_seconds,
    tree_allreduce_seconds,
)
from workbench.analysis.projection.overlap import (
    BACKWARD_SHARE,
    HOROVOD_CYCLE_S,
    GradientLayout,
    StepOverlap,
    backprop_overlap,
    layout_overlap,
    ready_times,
)
from workbench.analysis.projection.system import (
    SystemSpec,
    project_system,
    system_from_mapping,
    system_spec,
)

__all__ = [
    "ALGORITHMS",
    "BACKWARD_SHARE",
    "BYTES_PER_GB",
    "HOROVOD_CYCLE_S",
    "HOROVOD_FUSION_THRESHOLD_BYTES",
    "INPUT_BOUND_SHARE",
    "KINDS",
    "LIMITS",
    "NAMED_PER_CALL_S",
    "NETWORKS",
    "PROJECTION_COLUMNS",
    "SCHEMES",
    "WARMUP_STEPS",
    "Changes",
    "GradientLayout",
    "Network",
    "Projection",
    "SharedStorage",
    "StepCosts",
    "StepOverlap",
    "SystemSpec",
    "allreduce_seconds",
    "asynchronous_parameter_server_seconds",
    "backprop_overlap",
    "expected_max",
    "fit_network",
    "fused_allreduce_seconds",
    "fused_calls",
    "layout_overlap",
    "limits_table",
    "network",
    "parameter_server_link_bytes",
    "parameter_server_seconds",
    "project",
    "project_system",
    "ready_times",
    "reference_vm_allreduce_rows",
    "ring_allreduce_seconds",
    "step_costs",
    "system_from_mapping",
    "system_spec",
    "tree_allreduce_seconds",
]
