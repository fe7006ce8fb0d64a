"""How much of a step's allreduce hides behind its backward pass: Horovod's background loop, simulated.

Horovod does not wait for the whole backward pass: each gradient is handed to its background thread when
backprop produces it, and every cycle (``HOROVOD_CYCLE_TIME``) the thread takes the gradients ready by then,
packs them into buffers of at most the fusion threshold (``HOROVOD_FUSION_THRESHOLD``), in the order they
became ready, and allreduces the buffers one after another. The last layers' gradients come first, so their
communication runs while the first layers still compute; what is left when backprop ends is the step's
exposed communication.

``backprop_overlap`` plays that loop for one step from the gradients in backprop order (their bytes and when
each is ready), one allreduce's cost for a buffer of a given size, the threshold and the cycle. Given the
same inputs it gives the same answer. ``GradientLayout`` is what it needs to know of a model: its gradient
tensors in backprop order, their bytes and when each is ready (a share of the backward pass), from the
model's layers (``workbench.gradients`` builds it from a Keras model) or a list the user gives;
``layout_overlap`` plays the loop for a layout, a backward pass and a network.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.events import BYTES_PER_MB

#: Horovod's default cycle (HOROVOD_CYCLE_TIME): 1 ms since Horovod 0.21, 5 ms before (its changelog, #2468).
HOROVOD_CYCLE_S = 1e-3
#: The backward pass's share of a training step's compute: it does about twice the forward pass's
#: arithmetic (the gradient with respect to the inputs and to the weights), so 2/3 of the step.
BACKWARD_SHARE = 2.0 / 3.0


@dataclass(frozen=True)
class StepOverlap:
    """One step's communication against its backward pass, seconds after the backward pass began."""

    backward_s: float
    #: when the last buffer's allreduce ended
    communication_end_s: float
    #: the allreduces' own time, summed
    communication_s: float
    #: buffers sent (fused allreduces) and background cycles that sent something
    buffers: int
    cycles: int

    @property
    def exposed_s(self) -> float:
        """Communication left after the backward pass ended: what the step waits for."""
        return max(0.0, self.communication_end_s - self.backward_s)

    @property
    def hidden_s(self) -> float:
        """Communication that ran while the backward pass computed."""
        return max(0.0, self.communication_s - self.exposed_s)

    @property
    def hidden_share(self) -> float:
        """The share of the communication hidden behind compute (nan with no communication)."""
        return self.hidden_s / self.communication_s if self.communication_s > 0 else float("nan")


@dataclass(frozen=True, eq=False)
class GradientLayout:
    """A model's gradient tensors in the order backprop produces them: each one's bytes, and the share of
    the backward pass done when it is ready (non-decreasing, the last 1)."""

    names: tuple[str, ...]
    tensor_bytes: np.ndarray
    ready_share: np.ndarray
    #: Where the layout comes from, in words (a Keras model built here, a user's file, a recorded timeline).
    source: str = ""
    #: The backward pass's share of one step's compute.
    backward_share: float = BACKWARD_SHARE
    #: Forward arithmetic of one sample (multiply-adds x 2), when the layout was built from a model.
    forward_flops: float | None = None
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        sizes = np.asarray(self.tensor_bytes, dtype=np.float64)
        shares = np.asarray(self.ready_share, dtype=np.float64)
        problems = []
        if not len(sizes) or len(sizes) != len(shares) or len(self.names) != len(sizes):
            problems.append("give one name, size and ready share per gradient tensor, at least one")
        elif (sizes <= 0).any() or (shares < 0).any() or (shares > 1 + 1e-9).any() or (np.diff(shares) < -1e-12).any():
            problems.append("sizes must be > 0 and ready shares non-decreasing between 0 and 1, in backprop order")
        if not 0 < self.backward_share <= 1:
            problems.append("backward_share is a share of the step, between 0 and 1")
        if problems:
            raise ValueError(f"gradient layout {self.source or ''!s}: " + "; ".join(problems))
        object.__setattr__(self, "tensor_bytes", sizes)
        object.__setattr__(self, "ready_share", shares)

    @classmethod
    def from_costs(
        cls, names: Sequence[str], tensor_bytes: Sequence[float], costs: Sequence[float], **rest: Any
    ) -> GradientLayout:
        """A layout whose tensors are ready as the backward pass's work (``costs``, in backprop order) is done."""
        return cls(tuple(names), np.asarray(tensor_bytes, dtype=np.float64), ready_times(costs, 1.0), **rest)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, source: str = "") -> GradientLayout:
        """A layout from a file's mapping: ``tensors`` in backprop order, each ``name``, ``bytes`` or
        ``parameters`` (fp32), and ``flops`` (the backward work its layer does; without it, its parameters)."""
        tensors = values.get("tensors")
        if not isinstance(tensors, list) or not tensors:
            raise ValueError(f"{source or 'gradient layout'}: expected 'tensors', a list in backprop order")
        names, sizes, costs = [], [], []
        for index, tensor in enumerate(tensors):
            if not isinstance(tensor, Mapping) or not ({"bytes", "parameters"} & set(tensor)):
                raise ValueError(
                    f"{source or 'gradient layout'}: tensor {index} needs 'bytes' or 'parameters' (and 'name', 'flops')"
                )
            size = float(tensor["bytes"]) if "bytes" in tensor else 4.0 * float(tensor["parameters"])
            names.append(str(tensor.get("name", f"tensor {index}")))
            sizes.append(size)
            costs.append(float(tensor.get("flops", size)))
        guessed = not all("flops" in t for t in tensors)
        notes = ("no FLOPs given: each tensor's bytes stand for its work",) if guessed else ()
        return cls.from_costs(
            names,
            sizes,
            costs,
            source=str(values.get("source") or source),
            backward_share=float(values.get("backward_share", BACKWARD_SHARE)),
            forward_flops=float(values["forward_flops"]) if values.get("forward_flops") else None,
            notes=notes,
        )

    @property
    def total_bytes(self) -> float:
        return float(self.tensor_bytes.sum())

    def describe(self) -> str:
        """One line: how many tensors, their bytes, how early the gradients arrive, and where from."""
        half = float(self.ready_share[np.searchsorted(np.cumsum(self.tensor_bytes), self.total_bytes / 2)])
        return (
            f"{len(self.names)} gradient tensors, {self.total_bytes / BYTES_PER_MB:.3g} MB, half of the bytes ready"
            f" {half:.0%} into the backward pass (the backward pass {self.backward_share:.0%} of a step)"
            + (f"; {self.source}" if self.source else "")
        )


def ready_times(costs: Sequence[float], backward_s: float) -> np.ndarray:
    """When each gradient is ready, in backprop order: the backward pass spread over the tensors by their cost
    (FLOPs, or parameters as a stand-in), each ready once its layer's share is done."""
    weights = np.asarray(costs, dtype=np.float64)
    if len(weights) == 0:
        return weights
    if (weights < 0).any() or not weights.sum() > 0:
        raise ValueError("costs must be >= 0 with a positive sum: pass each gradient's FLOPs or parameters")
    return backward_s * np.cumsum(weights) / weights.sum()


def backprop_overlap(
    gradient_bytes: Sequence[float],
    ready_s: Sequence[float],
    *,
    backward_s: float,
    allreduce_s: Callable[[float], float],
    fusion_bytes: float,
    cycle_s: float = HOROVOD_CYCLE_S,
) -> StepOverlap:
    """Play Horovod's background loop over one step's gradients (``gradient_bytes`` in backprop order, each ready
    at ``ready_s`` after the backward pass began; ``allreduce_s(bytes)``: one fused allreduce's seconds).

    The thread wakes every ``cycle_s`` (its first wake one cycle after the backward pass began), takes what is
    ready and not yet sent, packs it in ready order into buffers of at most ``fusion_bytes`` (a larger
    gradient alone), and allreduces them one after another; it wakes again a cycle after its last wake, or
    when its last allreduce ends if that is later.
    """
    sizes = np.asarray(gradient_bytes, dtype=np.float64)
    ready = np.asarray(ready_s, dtype=np.float64)
    if len(sizes) != len(ready):
        raise ValueError(f"{len(sizes)} gradients but {len(ready)} ready times: give one time per gradient")
    if not cycle_s > 0 or not fusion_bytes > 0:
        raise ValueError("the cycle and the fusion threshold must be > 0")
    order = np.argsort(ready, kind="stable")
    sizes, ready = sizes[order], ready[order]
    sent = 0
    wake = cycle_s
    busy_until = 0.0
    communication = 0.0
    buffers = cycles = 0
    tolerance = 1e-9 * cycle_s  # times on the cycle's grid compare equal despite float sums
    while sent < len(sizes):
        if ready[sent] > wake + tolerance:  # nothing ready: the thread wakes whole cycles later, until something is
            wake += cycle_s * float(np.ceil((ready[sent] - wake) / cycle_s - 1e-9))
        last = int(np.searchsorted(ready, wake + tolerance, side="right"))
        clock = max(wake, busy_until)
        buffer = 0.0
        for index in range(sent, last):
            if buffer and buffer + sizes[index] > fusion_bytes:
                seconds = allreduce_s(buffer)
                communication += seconds
                clock += seconds
                buffers += 1
                buffer = 0.0
            buffer += sizes[index]
        seconds = allreduce_s(buffer)
        communication += seconds
        clock += seconds
        buffers += 1
        busy_until = clock
        cycles += 1
        sent = last
        wake = max(wake + cycle_s, busy_until)
    return StepOverlap(
        backward_s=float(backward_s),
        communication_end_s=busy_until,
        communication_s=communication,
        buffers=buffers,
        cycles=cycles,
    )


def layout_overlap(
    layout: GradientLayout,
    compute_s: float,
    allreduce_s: Callable[[float], float],
    *,
    fusion_bytes: float,
    cycle_s: float = HOROVOD_CYCLE_S,
) -> StepOverlap:
    """``backprop_overlap`` for a step of ``compute_s`` seconds whose backward pass is ``layout.backward_share``
    of it: when the gradients are ready follows from the layout."""
    backward = compute_s * layout.backward_share
    return backprop_overlap(
        layout.tensor_bytes,
        layout.ready_share * backward,
        backward_s=backward,
        allreduce_s=allreduce_s,
        fusion_bytes=fusion_bytes,
        cycle_s=cycle_s,
    )
