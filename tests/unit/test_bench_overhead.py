"""The overhead bench's statistics by hand, and the recorder-cost table's shape (no timings asserted)."""

from __future__ import annotations

import pytest

from workbench.bench.overhead import SPANS_PER_STEP, median_interval, recorder_costs
from workbench.recorder import Recorder
from workbench.store import Run, create_run


def test_median_interval_uses_order_statistics():
    # n = 20: P(Binomial(20, 1/2) <= 5) = 0.0207 <= 0.025 < P(<= 6) = 0.0577, so the 6th smallest
    # and the 6th largest bound the median with 95.9 % confidence.
    values = [float(v) for v in range(20, 0, -1)]
    assert median_interval(values) == (6.0, 15.0)
    # too few pairs for 95 %: the whole range
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    with pytest.raises(ValueError, match="no values"):
        median_interval([])


def test_recorder_costs_cover_1_8_64_spans_per_step_and_write_the_rows(tmp_path):
    recorder = Recorder(create_run(tmp_path, "costs", ranks=1), rank=0)
    try:
        rows = recorder_costs(recorder, steps_per_s=20.0)
    finally:
        recorder.close()
    assert [row["spans_per_step"] for row in rows] == list(SPANS_PER_STEP)
    assert [row["rows_per_flush"] for row in rows] == [10, 80, 640]  # 20 steps/s x 0.5 s x spans
    for row in rows:
        assert row["ns_per_span"] > 0 and row["ms_per_flush"] > 0
        assert row["cpu_ratio"] == pytest.approx(1 / (1 + row["cpu_share"]))
    # every flushed row reached the store: 20 000 timed spans + 7 flushes per spans-per-step setting
    assert len(Run.load(recorder.run_path).events) == 20_000 + 7 * (10 + 80 + 640)
