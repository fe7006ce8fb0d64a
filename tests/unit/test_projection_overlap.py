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


# --------------------------------------------------------------------------------------------
# A model's layout, and the projection that plays the loop over it
# --------------------------------------------------------------------------------------------


def test_a_layout_from_a_file_is_ready_as_the_backward_work_is_done():
    from workbench.analysis.projection import GradientLayout

    layout = GradientLayout.from_mapping(
        {"tensors": [{"name": "dense", "parameters": 10, "flops": 1}, {"name": "conv", "bytes": 8, "flops": 3}]}
    )
    assert layout.tensor_bytes.tolist() == [40.0, 8.0]
    assert layout.ready_share.tolist() == pytest.approx([0.25, 1.0])
    assert layout.total_bytes == 48.0 and not layout.notes
    # without FLOPs, the bytes stand for the work, and that is said
    guessed = GradientLayout.from_mapping({"tensors": [{"bytes": 30}, {"bytes": 10}]})
    assert guessed.ready_share.tolist() == pytest.approx([0.75, 1.0]) and guessed.notes
    with pytest.raises(ValueError, match="needs 'bytes' or 'parameters'"):
        GradientLayout.from_mapping({"tensors": [{"name": "x"}]})
    with pytest.raises(ValueError, match="expected 'tensors'"):
        GradientLayout.from_mapping({"layers": []})


def _two_ranks(per_call_s: float = 0.0):
    from workbench.analysis import projection as pj

    # 2 ranks, one per node: a ring allreduce of B bytes takes B / 1 MB/s (2(n-1)/n = 1), no latency
    return pj.Network("test", latency_s=0.0, bandwidth_bytes_per_s=1e6, per_call_s=per_call_s)


def test_the_projection_hides_what_the_loop_sends_during_the_backward_pass():
    from workbench.analysis import projection as pj

    # a 30 ms step: backward 20 ms. 10 kB ready at 5 ms (10 ms of allreduce, done by 16 ms: hidden), then
    # 10 kB ready at 20 ms (sent at the 20 ms wake, 10 ms after the backward pass: exposed)
    layout = pj.GradientLayout(("top", "bottom"), [1e4, 1e4], [0.25, 1.0], source="hand-made")
    spec = pj.system_spec(step_s=0.030, batch=1, gradients=layout, network=_two_ranks())
    assert spec.gradient_bytes == 2e4  # the layout's bytes when none are given
    row = pj.project_system(spec, [2]).table.set_index("ranks").loc[2]
    assert row["step_s"] == pytest.approx(0.040)
    assert row["hidden_share"] == pytest.approx(0.5)
    steps = row["epoch_s"] / row["step_s"]  # per epoch: hidden and exposed 10 ms each a step
    assert row["hidden_s"] / steps == pytest.approx(0.010) and row["communication_s"] / steps == pytest.approx(0.010)
    # the same gradients all ready at the end: nothing hidden, the step of the projection without a layout
    late = pj.GradientLayout(("top", "bottom"), [1e4, 1e4], [1.0, 1.0])
    without = pj.system_spec(step_s=0.030, batch=1, gradient_bytes=2e4, network=_two_ranks())
    at_end = pj.project_system(pj.system_spec(step_s=0.030, batch=1, gradients=late, network=_two_ranks()), [2])
    assert at_end.table["step_s"].iloc[-1] == pytest.approx(pj.project_system(without, [2]).table["step_s"].iloc[-1])
    assert at_end.table["hidden_share"].iloc[-1] == pytest.approx(0.0)
    assert "Horovod's loop played over each step" in " ".join(at_end.assumptions)
    assert "no gradient layout" in " ".join(pj.project_system(without, [2]).assumptions)


def test_an_imposed_overlap_share_replaces_the_played_loop():
    from workbench.analysis import projection as pj

    layout = pj.GradientLayout(("top", "bottom"), [1e4, 1e4], [0.25, 1.0])
    spec = pj.system_spec(step_s=0.030, batch=1, gradients=layout, network=_two_ranks())
    # overlap=0.5: up to 15 ms of the 20 ms allreduce hides, whatever the layout
    row = pj.project_system(spec, [2], changes=pj.Changes(overlap=0.5)).table.iloc[-1]
    assert row["step_s"] == pytest.approx(0.035)
    # a longer cycle sends later: the first gradient waits for the 10 ms wake, 10-20 ms hidden; the second
    # at 20 ms, exposed as before
    slow = pj.project_system(spec, [2], changes=pj.Changes(cycle_s=0.010)).table.iloc[-1]
    assert slow["step_s"] == pytest.approx(0.040) and "Horovod cycle 10 ms" in pj.Changes(cycle_s=0.010).describe()


def test_a_recorded_timeline_gives_each_tensor_its_readiness_in_the_step():
    import pandas as pd

    from workbench.analysis.projection.costs import timeline_layout

    ms = 1_000_000
    rows = []
    for rank in (0, 1):
        for step in range(2, 6):
            start = step * 100 * ms
            # a 40 ms step; "top" ready 10 ms in, "bottom" 30 ms in (rank 1 a bit later): the last gradient at 75 %
            rows.append({"rank": rank, "phase": "compute", "name": "train_step", "detail": "", "step": step,
                         "start_ns": start, "end_ns": start + 40 * ms})
            for detail, offset in (("top", 10 + rank), ("bottom", 30)):
                rows.append({"rank": rank, "phase": "in_flight", "name": "NEGOTIATE_ALLREDUCE", "detail": detail,
                             "step": -1, "start_ns": start + offset * ms, "end_ns": start + 31 * ms})
    events = pd.DataFrame(rows)
    layout = timeline_layout(events, {"top": 400, "bottom": 4000})
    assert layout is not None and layout.names == ("top", "bottom")
    assert layout.tensor_bytes.tolist() == [400.0, 4000.0]
    assert layout.ready_share.tolist() == pytest.approx([10.5 / 30, 1.0])
    assert layout.backward_share == pytest.approx(0.75)
    # the warm-up steps are left out; a tensor the timeline gave no size, or no steps at all: no layout
    assert timeline_layout(events, {"nothing": 1}) is None
    assert timeline_layout(events[events["phase"] != "compute"], {"top": 400}) is None
