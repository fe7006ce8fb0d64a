"""The overhead bench's statistics by hand, and the recorder-cost table's shape (no timings asserted)."""

from __future__ import annotations

import pytest

from workbench.bench.overhead import SPANS_PER_STEP, median_interval, ratio_of_totals, recorder_costs
from workbench.recorder import Recorder
from workbench.store import RunData, create_run


def test_median_interval_uses_order_statistics():
    # n = 20: P(Binomial(20, 1/2) <= 5) = 0.0207 <= 0.025 < P(<= 6) = 0.0577, so the 6th smallest
    # and the 6th largest bound the median with 95.9 % confidence.
    values = [float(v) for v in range(20, 0, -1)]
    assert median_interval(values) == (6.0, 15.0)
    # too few pairs for 95 %: the whole range
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    with pytest.raises(ValueError, match="no values"):
        median_interval([])


def test_ratio_of_totals_weights_every_block_and_resamples_pairs():
    # 3 pairs of blocks (plain s, recorded s): totals 3.0 / 3.3, so recorded keeps 0.909 of the
    # throughput; the one block a flush landed in (1.3 s) counts in full, where the median of
    # the pair ratios (1.0, 1.0, 0.769) would say 1.0, i.e. no cost at all
    plain, recorded = [1.0, 1.0, 1.0], [1.0, 1.0, 1.3]
    estimate, (low, high) = ratio_of_totals(plain, recorded)
    assert estimate == pytest.approx(3.0 / 3.3)
    # every resample is a mix of those pairs: between all-flush (1/1.3) and no-flush (1.0)
    assert 1 / 1.3 - 1e-12 <= low <= estimate <= high <= 1.0
    assert ratio_of_totals(plain, recorded) == ratio_of_totals(plain, recorded)  # seeded
    # identical pairs leave nothing to resample: the interval is the point
    assert ratio_of_totals([2.0] * 5, [2.5] * 5) == (pytest.approx(0.8), (pytest.approx(0.8), pytest.approx(0.8)))
    with pytest.raises(ValueError, match="paired blocks"):
        ratio_of_totals([1.0], [1.0, 2.0])


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
    assert len(RunData.load(recorder.run_path).events) == 20_000 + 7 * (10 + 80 + 640)
