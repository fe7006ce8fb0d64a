"""How much of a step's allreduce hides behind its backward pass: Horovod's background loop, simulated.

Horovod does not wait for the whole backward pass: each gradient is handed to its background thread when
backprop produces it, and every cycle (``HOROVOD_CYCLE_TIME``) the thread takes the gradients ready by then,
packs them into buffers of at most the fusion threshold (``HOROVOD_FUSION_THRESHOLD``), in the order they
became ready, and allreduces the buffers one after another. The last layers' gradients come first, so their
communication runs while the first layers still compute; what is left when backprop ends is the step's
exposed communication.

``backprop_overlap`` plays that loop for one step from the gradients in backprop order (their bytes and when
each is ready), one allreduce's cost for a buffer of a given size, the threshold and the cycle. Given the
same inputs it gives the same answer; it is the building block for the projection's overlap from evidence
(issue 58): the ready times from a model's layers or a recorded timeline, the cost from the network model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Horovod's default cycle (HOROVOD_CYCLE_TIME, 1 ms since Horovod 0.21).
HOROVOD_CYCLE_S = 1e-3


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
