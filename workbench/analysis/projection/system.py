"""Projection from a system description, without a run: what a user planning a cluster knows.

Before there is a cluster there is no run to record, but there are numbers: the model's size
(parameters, so gradient bytes), one device's speed (seconds per step, or samples per second, at a
batch), how many devices share a node, how many nodes, and the network. ``SystemSpec`` holds them,
each with where it came from (``sources``), and ``project_system`` turns them into the same
``Projection`` a recorded run gives: the one-device ``StepCosts`` are built from the description and
the model of ``analysis.projection`` does the rest.

What a description cannot know is left out and said so: step-to-step variance (``step_spread``, 0
unless given), an input pipeline slower than the device (``input_period_s``), an evaluation per
epoch (``evaluation_s``). ``sources`` names each number's origin so a report can show it beside the
result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from workbench.analysis.projection.costs import StepCosts
from workbench.analysis.projection.model import Changes, Projection, project
from workbench.analysis.projection.networks import Network, network
from workbench.analysis.projection.overlap import GradientLayout

#: Bytes of one gradient value (fp32), unless the description says otherwise.
FP32_BYTES = 4
#: Steps per epoch when the description gives no dataset size: epochs then mean nothing, steps do.
NOMINAL_STEPS_PER_EPOCH = 1000.0
#: Per-step draws the description's step time is spread over (``step_spread``).
_DRAWS = 101


@dataclass(frozen=True)
class SystemSpec:
    """A training job described by numbers, not recorded: one device's costs, the nodes, the network.

    ``step_s``: a device's compute seconds per training step at ``batch`` samples (forward, backward
    and optimizer). ``gradient_bytes``: what each step reduces. ``input_period_s``: seconds per step
    the input pipeline of one device needs (0: never the limit). ``step_spread``: steps vary
    uniformly by ± this share (stragglers at scale come from it). ``samples_per_epoch``: the
    training set (None: a nominal ``NOMINAL_STEPS_PER_EPOCH`` steps). ``evaluation_s``: seconds per
    epoch of an evaluation one device runs while the others wait (what-ifs can shard it).
    """

    gradient_bytes: float
    step_s: float
    batch: int
    devices_per_node: int = 1
    network: Network | str = "10gbe"
    input_period_s: float = 0.0
    step_spread: float = 0.0
    samples_per_epoch: float | None = None
    epochs: int = 1
    evaluation_s: float = 0.0
    name: str = "described system"
    #: The gradient tensors in backprop order (None: the allreduce is taken to start after the backward pass).
    gradients: GradientLayout | None = None
    #: Where each number comes from (field name -> source, in words).
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        if not self.gradient_bytes > 0:
            problems.append("gradient bytes must be > 0 (give parameters or gradient bytes)")
        if not self.step_s > 0:
            problems.append("the step time must be > 0 s (give a step time or a throughput)")
        if self.batch < 1:
            problems.append("the batch must be >= 1 sample per device")
        if self.devices_per_node < 1:
            problems.append("devices per node must be >= 1")
        if not 0.0 <= self.step_spread < 1.0:
            problems.append("step_spread is a share of the step time, between 0 and 1")
        if self.input_period_s < 0 or self.evaluation_s < 0:
            problems.append("the input period and evaluation seconds must be >= 0")
        if self.samples_per_epoch is not None and not self.samples_per_epoch > 0:
            problems.append("samples per epoch must be > 0")
        if self.epochs < 1:
            problems.append("epochs must be >= 1")
        if problems:
            raise ValueError(f"system {self.name!r}: " + "; ".join(problems))

    @property
    def steps_per_epoch(self) -> float:
        """One device's steps per epoch (the whole training set through one device)."""
        if self.samples_per_epoch is None:
            return NOMINAL_STEPS_PER_EPOCH
        return self.samples_per_epoch / self.batch

    def resolved_network(self) -> Network:
        """The network with ``devices_per_node`` ranks on each node."""
        return network(self.network, ranks_per_node=self.devices_per_node)

    def costs(self) -> StepCosts:
        """The one-device ``StepCosts`` the description implies (what a 1-rank run would have recorded)."""
        compute = np.linspace(self.step_s * (1 - self.step_spread), self.step_s * (1 + self.step_spread), _DRAWS)
        wait = np.clip(self.input_period_s - compute, 0.0, None)
        steps_per_epoch = self.steps_per_epoch
        notes = ["from a system description, not a recorded run"]
        if self.samples_per_epoch is None:
            notes.append(
                f"no training-set size given: an epoch is a nominal {NOMINAL_STEPS_PER_EPOCH:g} steps of one"
                " device; step times, throughput and efficiency hold, epoch and wall times do not"
            )
        if self.step_spread == 0:
            notes.append(
                "no step-to-step spread given: every step lasts the same, so no rank waits for a slower one;"
                " give step_spread to see stragglers at scale"
            )
        return StepCosts(
            ranks=1,
            compute_s=compute,
            input_s=wait,
            communication_s=0.0,
            steps=math.ceil(steps_per_epoch * self.epochs),
            steps_per_epoch=steps_per_epoch,
            epochs=self.epochs,
            evaluation_s=np.array([self.evaluation_s]) if self.evaluation_s else np.zeros(0),
            evaluating_ranks=(0,) if self.evaluation_s else (),
            evaluations_per_epoch=1.0 if self.evaluation_s else 0.0,
            checkpoint_per_epoch_s=0.0,
            gradient_bytes=float(self.gradient_bytes),
            tensor_bytes=(),
            threads_per_rank=None,
            cores_used=None,
            batch_per_rank=int(self.batch),
            wall_s=0.0,
            other_s=0.0,
            load_balance=1.0,
            notes=tuple(notes),
            gradient_layout=self.gradients,
        )

    def describe(self, *, with_network: bool = True) -> list[str]:
        """The inputs, one line each, with their sources where given (the network's line optional)."""
        values = {
            "gradient_bytes": f"{self.gradient_bytes / 1e6:.3g} MB of gradients per step",
            "step_s": f"{self.step_s * 1e3:.3g} ms per step of {self.batch} samples on one device"
            f" ({self.batch / self.step_s:.3g} samples/s)",
            "devices_per_node": f"{self.devices_per_node} device(s) per node",
            "network": self.resolved_network().describe(),
            "input_period_s": (
                f"input pipeline {self.input_period_s * 1e3:.3g} ms per step per device"
                if self.input_period_s
                else "input never the limit"
            ),
            "step_spread": f"steps vary by ±{self.step_spread:.0%}",
            "samples_per_epoch": (
                f"{self.samples_per_epoch:.6g} training samples per epoch"
                if self.samples_per_epoch
                else "no training-set size"
            ),
            "evaluation_s": (
                f"{self.evaluation_s:.3g} s of serial evaluation per epoch" if self.evaluation_s else "no evaluation"
            ),
        }
        if not with_network:
            values.pop("network")
        return [f"{text} ({self.sources[key]})" if key in self.sources else text for key, text in values.items()]


def system_spec(
    *,
    batch: int,
    parameters: float | None = None,
    gradient_bytes: float | None = None,
    bytes_per_parameter: int = FP32_BYTES,
    step_s: float | None = None,
    samples_per_s: float | None = None,
    **rest: Any,
) -> SystemSpec:
    """A ``SystemSpec`` from what users usually have: parameters or gradient bytes, step time or throughput.

    Exactly one of ``parameters`` / ``gradient_bytes`` and one of ``step_s`` / ``samples_per_s``
    (one device's samples per second at ``batch``); with ``gradients`` (a ``GradientLayout``) the bytes
    may be left out, they are the layout's. Other keywords are ``SystemSpec`` fields.
    """
    name = rest.get("name", "described system")
    layout = rest.get("gradients")
    if parameters is None and gradient_bytes is None and isinstance(layout, GradientLayout):
        gradient_bytes = layout.total_bytes
    if (parameters is None) == (gradient_bytes is None):
        raise ValueError(f"system {name!r}: give the model's parameters or its gradient bytes (one of them)")
    if (step_s is None) == (samples_per_s is None):
        raise ValueError(f"system {name!r}: give one device's step time or its throughput (samples/s), one of them")
    if samples_per_s is not None and not samples_per_s > 0:
        raise ValueError(f"system {name!r}: the throughput must be > 0 samples/s")
    unknown = set(rest) - {f.name for f in fields(SystemSpec)}
    if unknown:
        raise ValueError(f"system {name!r}: unknown field(s) {', '.join(sorted(unknown))}")
    return SystemSpec(
        gradient_bytes=float(gradient_bytes if gradient_bytes is not None else parameters * bytes_per_parameter),
        step_s=float(step_s if step_s is not None else batch / samples_per_s),
        batch=int(batch),
        **rest,
    )


def system_from_mapping(values: Mapping[str, Any]) -> SystemSpec:
    """A ``SystemSpec`` from a file's mapping (JSON or YAML): ``system_spec``'s keywords; ``network`` a
    name or a mapping of ``Network`` fields (``name`` and bandwidths in bytes/s)."""
    values = dict(values)
    if isinstance(values.get("gradients"), Mapping):
        values["gradients"] = GradientLayout.from_mapping(values["gradients"], source="the system's gradients")
    net = values.get("network")
    if isinstance(net, Mapping):
        base = net.get("base")
        allowed = {f.name for f in fields(Network)}
        extra = set(net) - allowed - {"base"}
        if extra:
            raise ValueError(f"network: unknown field(s) {', '.join(sorted(extra))}; use {', '.join(sorted(allowed))}")
        settings = {k: v for k, v in net.items() if k != "base"}
        values["network"] = network(base, **settings) if base else Network(**settings)
    if "batch" not in values:
        raise ValueError("the system description needs batch (samples per device per step)")
    return system_spec(**values)


def project_system(
    spec: SystemSpec,
    nodes: Iterable[int],
    *,
    kind: str = "weak",
    changes: Changes | None = None,
    input_is_useful: bool = False,
    bootstrap: int = 0,
) -> Projection:
    """The projection table for ``nodes`` nodes of ``spec.devices_per_node`` devices (1 device = the reference).

    ``input_is_useful`` is False by default: a device waiting for its input is idle, as the POP
    metrics of GPU runs count it. No bootstrap by default: a description has no measured variance.
    """
    counts = sorted({int(n) for n in nodes})
    if not counts or counts[0] < 1:
        raise ValueError("nodes must be whole numbers >= 1, e.g. 1,2,4,8")
    ranks = sorted({n * spec.devices_per_node for n in counts})
    result = project(
        spec.costs(),
        ranks,
        spec.resolved_network(),
        kind=kind,
        changes=changes,
        input_is_useful=input_is_useful,
        bootstrap=bootstrap,
    )
    # the projection's own assumptions start with the network's line
    return replace(result, assumptions=(*spec.describe(with_network=False), *result.assumptions))
