"""Memory growth fits (slope, t-interval, verdict) and skew between ranks, by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from workbench.analysis import memory_growth, memory_skew, memory_summary
from workbench.analysis.memory import (
    MEMORY_SUMMARY_COLUMNS,
    MIN_SAMPLES_FOR_VERDICT,
    hac_lags,
    slope_standard_error,
)

MB = 1_000_000
S = 1_000_000_000


def samples(rss_mb, *, rank=0, label="predict", iterations=None, time_s=None, gpu_mb=None):
    n = len(rss_mb)
    return pd.DataFrame(
        {
            "run_id": "r",
            "rank": rank,
            "host": "h",
            "time_ns": (np.arange(n) if time_s is None else np.asarray(time_s)) * S,
            "rss_bytes": (np.asarray(rss_mb, dtype=float) * MB).astype(np.int64),
            "gpu_bytes": -1 if gpu_mb is None else (np.asarray(gpu_mb) * MB).astype(np.int64),
            "cpu_percent": 0.0,
            "label": label,
            "iteration": np.arange(n) if iterations is None else iterations,
        }
    )


def test_hand_computed_slope_and_interval():
    # x = 0..3, y = 0, 1, 1, 2 MB. mean x 1.5, mean y 1; Sxx = 2.25+0.25+0.25+2.25 = 5;
    # Sxy = (-1.5)(-1) + 0 + 0 + (1.5)(1) = 3 -> slope 0.6 MB/call.
    # fitted 0.1, 0.7, 1.3, 1.9 -> residuals -0.1, 0.3, -0.3, 0.1 -> SSR 0.2; s^2 = 0.2/2 = 0.1;
    # se = sqrt(0.1 / 5) = 0.1414; t(0.975, 2) = 4.3027 -> half width 0.6085 -> CI [-0.0085, 1.2085].
    result = memory_growth(samples([0, 1, 1, 2]), interval="ols", min_samples=3)
    row = result.iloc[0]
    assert list(result.columns) == [
        "rank",
        "label",
        "n",
        "slope_mb_per_x",
        "ci_low",
        "ci_high",
        "peak_mb",
        "start_mb",
        "end_mb",
        "x_unit",
        "verdict",
    ]
    half = stats.t.ppf(0.975, 2) * np.sqrt(0.02)
    assert half == pytest.approx(0.6085, abs=1e-4)
    assert row["slope_mb_per_x"] == pytest.approx(0.6)
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(0.6 - half), pytest.approx(0.6 + half))
    assert (row["peak_mb"], row["start_mb"], row["end_mb"]) == (2, 0, 2)
    # ci_low < 0.01 < ci_high -> inconclusive
    assert row["verdict"] == "inconclusive"
    assert row["x_unit"] == "call"


def test_step_shaped_growth_gets_a_newey_west_interval_wider_than_ols():
    # 40 calls whose RSS rises in two 4 MB steps (after calls 13 and 27), as the issue's `predict`
    # verdict did: the residuals of a straight line run in long same-sign stretches.
    x = np.arange(40.0)
    y = np.repeat([100.0, 104.0, 108.0], [13, 14, 13])
    xc = x - x.mean()
    slope = (xc @ (y - y.mean())) / (xc @ xc)
    residuals = y - y.mean() - slope * xc
    scores = xc * residuals
    rho = (scores[1:] @ scores[:-1]) / (scores @ scores)
    alpha = 4 * rho**2 / ((1 - rho) ** 2 * (1 + rho) ** 2)
    lags = int(1.1447 * (alpha * 40) ** (1 / 3))
    assert hac_lags(scores) == lags and lags >= 5  # persistent residuals: many lags, not a fixed 3
    long_run = scores @ scores
    for lag in range(1, lags + 1):  # Bartlett weights 1 - l / (L + 1), written out
        long_run += 2 * (1 - lag / (lags + 1)) * sum(scores[t] * scores[t - lag] for t in range(lag, 40))
    hac_se = np.sqrt(long_run * 40 / 38) / (xc @ xc)
    ols_se = np.sqrt(residuals @ residuals / 38 / (xc @ xc))
    assert slope_standard_error(x, y) == (pytest.approx(slope), pytest.approx(hac_se))
    assert slope_standard_error(x, y, interval="ols") == (pytest.approx(slope), pytest.approx(ols_se))
    assert hac_se > 1.25 * ols_se  # OLS's i.i.d. interval is too narrow on steps
    t = stats.t.ppf(0.975, 38)
    row = memory_growth(samples(list(y))).iloc[0]
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(slope - t * hac_se), pytest.approx(slope + t * hac_se))
    ols = memory_growth(samples(list(y)), interval="ols").iloc[0]
    assert ols["ci_high"] - ols["ci_low"] == pytest.approx(2 * t * ols_se)
    # a straight leak with white noise: few lags, about the OLS interval
    rng = np.random.default_rng(1)
    noisy = 100 + 0.5 * x + rng.normal(0, 0.5, 40)
    ols_noisy = slope_standard_error(x, noisy, interval="ols")[1]
    assert slope_standard_error(x, noisy)[1] == pytest.approx(ols_noisy, rel=0.3)


def test_no_verdict_before_the_minimum_number_of_calls():
    values = 100 + np.arange(9.0)  # a clear 1 MB/call, but only 9 calls
    row = memory_growth(samples(list(values))).iloc[0]
    assert row["slope_mb_per_x"] == pytest.approx(1.0)
    assert row["verdict"] == f"too few calls for a verdict (n=9, need {MIN_SAMPLES_FOR_VERDICT})"
    assert memory_growth(samples(list(values)), min_samples=5).iloc[0]["verdict"] == "leak"
    with pytest.raises(ValueError, match="interval="):
        memory_growth(samples(list(values)), interval="bootstrap")


def test_clear_leak_and_clear_no_leak():
    rng = np.random.default_rng(0)
    x = np.arange(50)
    # 1 MB per call plus 0.01 MB noise: the interval sits far above 0.01 -> leak
    leak = memory_growth(samples(100 + x + rng.normal(0, 0.01, 50))).iloc[0]
    assert leak["slope_mb_per_x"] == pytest.approx(1.0, abs=0.01)
    assert leak["verdict"] == "leak"
    # flat: exactly constant -> slope 0, interval [0, 0] < 0.01 -> no leak
    flat = memory_growth(samples(np.full(50, 100.0))).iloc[0]
    assert (flat["slope_mb_per_x"], flat["ci_low"], flat["ci_high"], flat["verdict"]) == (0, 0, 0, "no leak")


def test_warmup_drops_the_first_samples_per_group():
    # growth only in the first 3 calls (graph building), then flat: warm-up 3 -> no leak.
    values = [10, 20, 30] + [30] * 10
    assert memory_growth(samples(values), warmup=3).iloc[0]["verdict"] == "no leak"
    assert memory_growth(samples(values), warmup=3).iloc[0]["n"] == 10
    assert memory_growth(samples(values)).iloc[0]["slope_mb_per_x"] > 0
    with pytest.raises(ValueError, match="drops every sample"):
        memory_growth(samples(values), warmup=20, by=())


def test_too_few_samples_and_constant_x_give_zero_not_nan():
    two = memory_growth(samples([1, 5])).iloc[0]
    assert (two["slope_mb_per_x"], two["ci_low"], two["ci_high"]) == (0.0, 0.0, 0.0)
    assert two["verdict"].startswith("too few samples (n=2")
    same_x = memory_growth(samples([1, 2, 3], iterations=[4, 4, 4])).iloc[0]
    assert same_x["verdict"].startswith("x does not vary")
    assert not memory_growth(samples([1, 5])).isna().any().any()


def test_groups_interval_samples_and_time_axis():
    frame = pd.concat(
        [
            samples([0, 1, 2, 3], rank=0),
            samples([0, 0, 0, 0], rank=1),
            samples([5, 6, 7], label="interval", iterations=[-1, -1, -1]),
        ]
    )
    by_iteration = memory_growth(frame)
    # interval samples have no iteration: left out of the per-call fit
    assert by_iteration[["rank", "label"]].values.tolist() == [[0, "predict"], [1, "predict"]]
    assert by_iteration["slope_mb_per_x"].tolist() == pytest.approx([1.0, 0.0])
    # x = time: samples 2 s apart, 1 MB each -> 0.5 MB per second
    timed = memory_growth(samples([0, 1, 2, 3], time_s=[10, 12, 14, 16]), x="time_ns", by=())
    assert timed.iloc[0]["slope_mb_per_x"] == pytest.approx(0.5)
    assert timed.iloc[0]["x_unit"] == "second"


def test_gpu_memory_and_errors():
    gpu = memory_growth(samples([1, 1, 1], gpu_mb=[0, 2, 4]), memory="gpu_bytes").iloc[0]
    assert gpu["slope_mb_per_x"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no call-site samples"):
        memory_growth(samples([1, 2, 3], iterations=[-1, -1, -1]))
    with pytest.raises(ValueError, match="no call-site samples"):
        memory_growth(samples([1, 2, 3]), memory="gpu_bytes")
    with pytest.raises(ValueError, match="x="):
        memory_growth(samples([1, 2, 3]), x="step")
    with pytest.raises(ValueError, match="lack columns"):
        memory_growth(samples([1, 2, 3]).drop(columns="label"))


def test_memory_skew():
    # peaks 2000, 1000, 1000 MB: mean 1333.3 -> rank 0 at 1.5x the mean, skew 1.5
    frame = pd.concat([samples([1500, 2000], rank=0), samples([1000, 900], rank=1), samples([1000, 1000], rank=2)])
    result = memory_skew(frame)
    assert list(result.columns) == ["run_id", "rank", "peak_mb", "peak_over_mean", "skew"]
    assert result["peak_mb"].tolist() == [2000, 1000, 1000]
    assert result["peak_over_mean"].tolist() == pytest.approx([1.5, 0.75, 0.75])
    assert result["skew"].tolist() == pytest.approx([1.5, 1.5, 1.5])
    with pytest.raises(ValueError, match="no samples"):
        memory_skew(frame, memory="gpu_bytes")
    with pytest.raises(ValueError, match="peak"):
        memory_skew(samples([0, 0]))


def test_memory_summary_per_rank():
    # rank 0: 100, 130, 120 MB; rank 1: 50, 40 MB with a GPU reading of 7 MB, and one unknown (-1) RSS
    frame = pd.concat(
        [
            samples([100, 130, 120], rank=0),
            samples([50, 40], rank=1, gpu_mb=[7, -1]),
        ],
        ignore_index=True,
    )
    frame.loc[len(frame)] = {**frame.iloc[-1].to_dict(), "rss_bytes": -1, "time_ns": 9 * S}
    result = memory_summary(frame)
    assert list(result.columns) == ["rank", "samples", "first_mb", "last_mb", "peak_mb", "gpu_peak_mb"]
    assert result["samples"].tolist() == [3, 2]
    assert result["first_mb"].tolist() == [100, 50]
    assert result["last_mb"].tolist() == [120, 40]
    assert result["peak_mb"].tolist() == [130, 50]
    assert np.isnan(result["gpu_peak_mb"].iloc[0]) and result["gpu_peak_mb"].iloc[1] == 7


def test_memory_summary_without_samples_is_empty():
    assert memory_summary(None).empty
    empty = memory_summary(samples([]))
    assert empty.empty and tuple(empty.columns) == MEMORY_SUMMARY_COLUMNS
