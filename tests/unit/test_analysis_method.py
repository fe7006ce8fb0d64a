"""The benchmark method on hand-computed examples: warm-up, trimmed mean, intervals, efficiency."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.analysis import BenchmarkMethod, measured_step_seconds, scaling_efficiency
from workbench.analysis.benchmark_method import student_t


def steps(durations_s: list[float], run_id: str = "r") -> pd.DataFrame:
    """One rank's train_step spans back to back with the given durations."""
    rows, start = [], 0
    for step, seconds in enumerate(durations_s):
        end = start + int(seconds * 1e9)
        rows.append(
            {
                "run_id": run_id,
                "rank": 0,
                "phase": "compute",
                "name": "train_step",
                "step": step,
                "start_ns": start,
                "end_ns": end,
            }
        )
        start = end
    return pd.DataFrame(rows)


def test_defaults_are_the_seeds_and_are_stated():
    method = BenchmarkMethod()
    assert (method.warmup_steps, method.measured_steps, method.repetitions) == (10, 100, 5)
    text = method.describe()
    assert "10 warm-up steps excluded" in text and "100 timed" in text and "5 repetitions" in text
    assert "trimmed mean" in text and method.as_dict()["repetitions"] == 5


def test_warmup_is_excluded_from_the_throughput():
    # two slow warm-up steps of 1 s, then four steps of 0.5 s: 8 samples per step -> 16 samples/s
    method = BenchmarkMethod(warmup_steps=2, measured_steps=3, repetitions=1)
    table = method.repetition_throughput(steps([1, 1, 0.5, 0.5, 0.5, 0.5]), samples_per_step=8)
    assert table["samples_per_s"].iloc[0] == pytest.approx(16.0)
    assert table["measured_steps"].iloc[0] == 3
    assert list(measured_step_seconds(steps([1, 1, 0.5, 0.5, 0.5, 0.5]), method)) == pytest.approx([0.5] * 3)


def test_trimmed_mean_and_student_interval_over_repetitions():
    method = BenchmarkMethod(repetitions=5)
    summary = method.summarise([10.0, 11.0, 12.0, 13.0, 30.0])
    assert summary["value"] == pytest.approx(12.0)  # 10 and 30 dropped
    assert summary["mean"] == pytest.approx(15.2)
    std = pd.Series([10.0, 11.0, 12.0, 13.0, 30.0]).std()
    half = 2.7764451 * std / math.sqrt(5)  # t(0.975, 4)
    assert summary["ci_low"] == pytest.approx(15.2 - half, rel=1e-6)
    assert summary["ci_high"] == pytest.approx(15.2 + half, rel=1e-6)
    assert summary["basis"] == "repetitions" and summary["trimmed"]
    assert student_t(0.95, 4) == pytest.approx(2.7764451, rel=1e-6)


def test_one_repetition_takes_its_interval_from_the_steps():
    method = BenchmarkMethod(warmup_steps=0, measured_steps=4, repetitions=1)
    summary = method.summarise([10.0], step_seconds=[0.9, 1.1, 0.9, 1.1], samples_per_step=10)
    half = 3.1824463 * pd.Series([0.9, 1.1, 0.9, 1.1]).std() / 2  # t(0.975, 3) * s / sqrt(4)
    assert summary["ci_low"] == pytest.approx(10 / (1 + half))
    assert summary["ci_high"] == pytest.approx(10 / (1 - half))
    assert summary["basis"] == "steps of one repetition"
    assert math.isnan(method.summarise([10.0])["ci_low"])


def test_efficiency_is_relative_to_one_worker_per_group_with_crosswise_interval():
    table = pd.DataFrame(
        {
            "scheme": ["ps", "ps", "allreduce", "allreduce", "orphan"],
            "workers": [1, 2, 1, 4, 2],
            "images_per_s": [10.0, 15.0, 10.0, 32.0, 5.0],
            "ci_low": [9.0, 14.0, 10.0, 30.0, 4.0],
            "ci_high": [11.0, 16.0, 10.0, 34.0, 6.0],
        }
    )
    out = scaling_efficiency(table, by=["scheme"]).set_index(["scheme", "workers"])
    assert out.loc[("ps", 2), "efficiency"] == pytest.approx(0.75)
    assert out.loc[("ps", 2), "efficiency_low"] == pytest.approx(14 / 22)
    assert out.loc[("ps", 2), "efficiency_high"] == pytest.approx(16 / 18)
    assert out.loc[("allreduce", 4), "efficiency"] == pytest.approx(0.8)
    assert math.isnan(out.loc[("orphan", 2), "efficiency"])


def test_bad_method_is_one_clear_error():
    with pytest.raises(ValueError, match="repetitions >= 1"):
        BenchmarkMethod(repetitions=0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        BenchmarkMethod(confidence=95)
