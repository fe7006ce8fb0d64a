"""Throughput after warm-up, repetition statistics, scaling tables and I/O overhead, by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.analysis import io_overhead, scaling_table, step_throughput, steps_per_rank, summarise_repetitions
from workbench.events import events_frame

S = 1_000_000_000


def steps_run(n_steps=15, ranks=1, step_column=True, run_id=""):
    """Step i: train_step [2i, 2i + 1.5) s, then input [2i + 1.5, 2i + 2) s, on every rank."""
    rows = []
    for rank in range(ranks):
        for i in range(n_steps):
            start = 2 * i * S
            rows.append(
                {
                    "run_id": run_id,
                    "rank": rank,
                    "phase": "compute",
                    "name": "train_step",
                    "step": i if step_column else -1,
                    "start_ns": start,
                    "end_ns": start + 3 * S // 2,
                }
            )
            rows.append(
                {
                    "run_id": run_id,
                    "rank": rank,
                    "phase": "input",
                    "start_ns": start + 3 * S // 2,
                    "end_ns": start + 2 * S,
                }
            )
    return events_frame(rows)


def test_throughput_after_warmup_counts_time_between_steps():
    # warm-up 2 steps, measure 10: from start of step 2 (4 s) to start of step 12 (24 s) = 20 s
    # -> 10 / 20 = 0.5 steps/s; 64 samples per step -> 32 samples/s.
    result = step_throughput(steps_run(), warmup_steps=2, measured_steps=10, samples_per_step=64)
    row = result.iloc[0]
    assert (row["measured_steps"], row["seconds"]) == (10, pytest.approx(20))
    assert row["steps_per_s"] == pytest.approx(0.5)
    assert row["samples_per_s"] == pytest.approx(32)
    assert (row["throughput"], row["unit"]) == (pytest.approx(32), "samples/s")


def test_short_run_measures_what_is_there_up_to_the_last_end():
    # 15 steps, warm-up 2, asks 100: measures 13 steps from 4 s to the end of step 14 (29.5 s) = 25.5 s.
    row = step_throughput(steps_run(), warmup_steps=2, measured_steps=100).iloc[0]
    assert row["measured_steps"] == 13
    assert row["seconds"] == pytest.approx(25.5)
    assert row["throughput"] == pytest.approx(13 / 25.5)
    assert row["unit"] == "steps/s"
    assert "samples_per_s" not in row.index


def test_steps_span_all_ranks_and_are_numbered_when_unknown():
    events = steps_run(ranks=2, step_column=False)
    # rank 1's steps end 1 s later: step 14 ends at 30.5 s; 13 steps from 4 s -> 26.5 s.
    late = events["rank"] == 1
    events.loc[late & (events["name"] == "train_step"), "end_ns"] += S
    row = step_throughput(events, warmup_steps=2, measured_steps=100).iloc[0]
    assert row["ranks"] == 2
    assert row["seconds"] == pytest.approx(26.5)


def test_throughput_errors():
    with pytest.raises(ValueError, match="no 'compute' spans named 'step'"):
        step_throughput(steps_run(), step_name="step")
    with pytest.raises(ValueError, match="not more than warmup_steps=15"):
        step_throughput(steps_run(), warmup_steps=15)
    with pytest.raises(ValueError, match="measured_steps"):
        step_throughput(steps_run(), measured_steps=0)


def test_one_row_per_run():
    events = pd.concat([steps_run(run_id="a"), steps_run(n_steps=20, run_id="b")], ignore_index=True)
    result = step_throughput(events, warmup_steps=0, measured_steps=5)
    # both: 5 steps from 0 s to the start of step 5 (10 s) -> 0.5 steps/s
    assert result["run_id"].tolist() == ["a", "b"]
    assert result["steps_per_s"].tolist() == pytest.approx([0.5, 0.5])


def test_summarise_repetitions_trims_fastest_and_slowest():
    # [10, 12, 14, 100]: mean 34; trimmed drops 10 and 100 -> (12 + 14) / 2 = 13
    row = summarise_repetitions([10, 12, 14, 100]).iloc[0]
    assert (row["n"], row["mean"], row["trimmed_mean"], row["trimmed"]) == (4, 34, 13, True)
    # sample std: deviations -24, -22, -20, 66 -> squares 576 + 484 + 400 + 4356 = 5816; /3 -> sqrt
    assert row["std"] == pytest.approx(math.sqrt(5816 / 3))


def test_summarise_repetitions_with_too_few_values():
    two = summarise_repetitions([10, 12]).iloc[0]
    assert (two["trimmed_mean"], two["trimmed"]) == (11, False)
    assert "needs >= 3" in two["note"]
    one = summarise_repetitions([5.0]).iloc[0]
    assert (one["std"], one["trimmed_mean"]) == (0.0, 5.0)
    with pytest.raises(ValueError, match="no repetitions"):
        summarise_repetitions([])
    with pytest.raises(ValueError, match="NaN"):
        summarise_repetitions([1.0, float("nan")])


def test_scaling_table_strong():
    runs = pd.DataFrame(
        {
            "ranks": [1, 1, 1, 2, 2, 2, 4, 4],
            "repetition": [0, 1, 2, 0, 1, 2, 0, 1],
            "throughput": [100, 100, 100, 170, 180, 190, 300, 320],
        }
    )
    table = scaling_table(runs)
    # trimmed: 100; 180; 310 (2 reps: mean). speedup 1, 1.8, 3.1; ideal 1, 2, 4; efficiency 1, 0.9, 0.775
    assert table["throughput_trimmed"].tolist() == pytest.approx([100, 180, 310])
    assert table["speedup"].tolist() == pytest.approx([1.0, 1.8, 3.1])
    assert table["ideal_speedup"].tolist() == pytest.approx([1, 2, 4])
    assert table["efficiency"].tolist() == pytest.approx([1.0, 0.9, 0.775])
    assert table["throughput_per_rank"].tolist() == pytest.approx([100, 90, 77.5])
    assert table["trimmed"].tolist() == [True, True, False]
    assert (table["kind"] == "strong").all()


def test_scaling_table_weak_and_reference():
    runs = pd.DataFrame({"ranks": [2, 4, 8], "throughput": [200.0, 380.0, 720.0]})
    table = scaling_table(runs, "weak")
    # reference 2 ranks: per-rank 100 -> 95, 90: efficiency 0.95, 0.9; speedup 1.9, 3.6; ideal 2, 4
    assert table["efficiency"].tolist() == pytest.approx([1.0, 0.95, 0.9])
    assert table["speedup"].tolist() == pytest.approx([1.0, 1.9, 3.6])
    assert table["ideal_speedup"].tolist() == pytest.approx([1.0, 2.0, 4.0])
    by_4 = scaling_table(runs, "weak", reference_ranks=4)
    assert by_4["speedup"].tolist() == pytest.approx([200 / 380, 1.0, 720 / 380])
    with pytest.raises(ValueError, match="reference_ranks must be one of"):
        scaling_table(runs, reference_ranks=3)
    with pytest.raises(ValueError, match="kind"):
        scaling_table(runs, "medium")
    with pytest.raises(ValueError, match="throughput > 0"):
        scaling_table(runs.assign(throughput=0.0))
    with pytest.raises(ValueError, match="lack columns"):
        scaling_table(runs[["ranks"]])


def test_io_overhead():
    # real 80 vs synthetic 100: ratio 0.8, overhead 0.2
    result = io_overhead(100.0, 80.0)
    assert (result.ratio, result.overhead) == (pytest.approx(0.8), pytest.approx(0.2))
    # real faster than synthetic (noise): negative overhead, reported as is
    assert io_overhead(100, 110).overhead == pytest.approx(-0.1)
    with pytest.raises(ValueError, match="positive"):
        io_overhead(0, 10)
    with pytest.raises(AttributeError):
        result.ratio = 1.0  # frozen


def test_steps_per_rank_counts_each_ranks_steps_and_pace():
    # rank 0: 15 steps from 0 to 29.5 s; rank 1: 3 steps of 1.5 s from 0 to 5.5 s; rank 2 listed, silent
    events = pd.concat([steps_run(15), steps_run(3, ranks=2).query("rank == 1")], ignore_index=True)
    result = steps_per_rank(events, ranks=[0, 1, 2])
    assert list(result.columns) == ["rank", "steps", "seconds", "steps_per_s", "mean_step_s", "median_step_s"]
    assert result["rank"].tolist() == [0, 1, 2]
    assert result["steps"].tolist() == [15, 3, 0]
    # rank 0: 15 / 29.5 s; rank 1: 3 / 5.5 s
    assert result["seconds"].tolist()[:2] == pytest.approx([29.5, 5.5])
    assert result["steps_per_s"].tolist()[:2] == pytest.approx([15 / 29.5, 3 / 5.5])
    assert result["mean_step_s"].tolist()[:2] == pytest.approx([1.5, 1.5])
    assert math.isnan(result["steps_per_s"].iloc[2]) and math.isnan(result["mean_step_s"].iloc[2])


def test_the_median_step_leaves_out_a_first_step_that_traced():
    events = steps_run(5)
    first = events.index[(events["name"] == "train_step")][0]
    events.loc[first, "end_ns"] += 10 * 1_000_000_000  # the first step traced for 10 s more
    result = steps_per_rank(events).iloc[0]
    assert result["mean_step_s"] == pytest.approx(1.5 + 10 / 5)  # the trace spread over 5 steps
    assert result["median_step_s"] == pytest.approx(1.5)


def test_steps_per_rank_without_steps_is_empty_and_names_are_configurable():
    events = steps_run(2)
    assert steps_per_rank(events, step_name="other").empty
    # input spans as "steps": 2 spans of 0.5 s from 1.5 s to 4 s
    custom = steps_per_rank(events, step_name="input", step_phase="input").iloc[0]
    assert (custom["steps"], custom["seconds"], custom["mean_step_s"]) == (2, 2.5, 0.5)


def test_steps_per_rank_is_the_same_whether_rows_come_rank_by_rank_or_mixed():
    """The store's rank-by-rank order takes array segments, any other order a group-by: the same table."""
    events = pd.concat([steps_run(7, ranks=3), steps_run(4, ranks=2)], ignore_index=True)
    events.loc[events.index[-1], "end_ns"] += 3 * 1_000_000_000  # an odd step: the median and mean tell apart
    in_order = events.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    mixed = events.sample(frac=1.0, random_state=3).reset_index(drop=True)
    segments, grouped = steps_per_rank(in_order, ranks=[0, 1, 2, 5]), steps_per_rank(mixed, ranks=[0, 1, 2, 5])
    pd.testing.assert_frame_equal(segments, grouped)
    assert segments["steps"].tolist() == [11, 11, 7, 0]
