"""Horovod's background loop over one step's gradients (``projection.overlap``), on hand-computed timelines."""

from __future__ import annotations

import pytest

from workbench.analysis.projection.overlap import backprop_overlap, ready_times

MS = 1e-3


def test_a_gradient_ready_at_the_end_of_backprop_is_all_exposed():
    # ready at 10 ms; the thread wakes every 1 ms, so at 10 ms; 2 ms of allreduce after the backward pass
    step = backprop_overlap([100], [10 * MS], backward_s=10 * MS, allreduce_s=lambda b: 2 * MS, fusion_bytes=1e6)
    assert step.communication_end_s == pytest.approx(12 * MS)
    assert step.exposed_s == pytest.approx(2 * MS) and step.hidden_s == pytest.approx(0.0)
    assert (step.buffers, step.cycles) == (1, 1)


def test_gradients_ready_together_are_fused_up_to_the_threshold():
    # four 40-byte gradients at 0.5 ms, threshold 100 bytes: two buffers of 80 at the 1 ms wake, each 1 ms + 10 µs/B
    step = backprop_overlap(
        [40] * 4, [0.5 * MS] * 4, backward_s=2 * MS, allreduce_s=lambda b: 1 * MS + b * 1e-5, fusion_bytes=100
    )
    assert (step.buffers, step.cycles) == (2, 1)
    assert step.communication_s == pytest.approx(3.6 * MS)
    assert step.communication_end_s == pytest.approx(4.6 * MS)
    assert step.exposed_s == pytest.approx(2.6 * MS) and step.hidden_s == pytest.approx(1.0 * MS)


def test_the_last_layers_gradients_go_out_while_the_first_ones_compute():
    # three layers of equal cost over a 3 ms backward pass: ready at 1, 2, 3 ms; each allreduce 0.5 ms
    ready = ready_times([1, 1, 1], 3 * MS)
    assert ready.tolist() == pytest.approx([1 * MS, 2 * MS, 3 * MS])
    step = backprop_overlap([10] * 3, ready, backward_s=3 * MS, allreduce_s=lambda b: 0.5 * MS, fusion_bytes=1e6)
    assert step.cycles == 3 and step.communication_end_s == pytest.approx(3.5 * MS)
    assert step.exposed_s == pytest.approx(0.5 * MS) and step.hidden_share == pytest.approx(1 / 1.5)


def test_a_busy_link_delays_the_next_wake():
    # 1 ms cycle, allreduce 2 ms: the gradient ready at 1.5 ms waits for the first allreduce to end at 3 ms
    step = backprop_overlap([10, 10], [1 * MS, 1.5 * MS], backward_s=2 * MS, allreduce_s=lambda b: 2 * MS,
                            fusion_bytes=1e6)  # fmt: skip
    assert step.cycles == 2 and step.communication_end_s == pytest.approx(5 * MS)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="one time per gradient"):
        backprop_overlap([1, 2], [0.0], backward_s=1.0, allreduce_s=lambda b: 0.0, fusion_bytes=1.0)
    with pytest.raises(ValueError, match="FLOPs or parameters"):
        ready_times([0, 0], 1.0)
