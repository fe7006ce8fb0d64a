"""Steps traced again after the first: named from the step spans, with the seconds over the median."""

from __future__ import annotations

import pytest

from workbench.analysis.retracing import retracing_finding
from workbench.events import events_frame

S = 1_000_000_000


def steps(*seconds: float, rank: int = 0):
    rows, t = [], 0
    for number, length in enumerate(seconds):
        rows.append({"rank": rank, "phase": "compute", "name": "train_step", "step": number, "epoch": 0,
                     "start_ns": t, "end_ns": t + int(length * S)})  # fmt: skip
        t += int(length * S) + S // 100
    return events_frame(rows)


def test_a_later_step_far_over_the_median_is_a_retrace_and_the_first_steps_trace_is_expected():
    found = retracing_finding(steps(2.0, 0.01, 0.5, 0.01, 0.01, 0.01), wall_s=4.0)
    assert len(found) == 1
    row = found.iloc[0]
    # the median of steps 1-5 is 10 ms; step 2 took 0.5 s: 0.49 s over it; step 0's 2 s trace is not counted
    assert row["kind"] == "retracing" and row["seconds_lost"] == pytest.approx(0.49)
    assert row["fraction_of_wall"] == pytest.approx(0.49 / 4.0) and row["ranks"] == "0"
    assert "step(s) 2, 490 ms over a median of 10.0 ms" in row["text"]


def test_steady_steps_and_small_bumps_are_no_retrace():
    assert retracing_finding(steps(2.0, 0.01, 0.012, 0.01, 0.011)) is None
    # 10x the median but under 50 ms more: a page fault or a collection, not a trace
    assert retracing_finding(steps(2.0, 0.001, 0.03, 0.001, 0.001)) is None
    assert retracing_finding(steps(2.0, 0.5)) is None  # too few steps to say
