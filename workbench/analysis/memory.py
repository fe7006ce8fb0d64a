"""Memory growth (leaks) and memory skew between ranks, from memory samples.

A leak shows as memory that keeps growing with the number of calls (``predict`` called in a loop)
or with time. A straight-line fit with a confidence interval turns "it looks like it grows" into a
verdict that says how sure it is.

Resident memory grows in steps (the allocator maps a new arena, a cache fills), so the residuals
of a straight line are autocorrelated and OLS's interval is too narrow: the default interval is
Newey–West's (heteroscedasticity and autocorrelation consistent, Bartlett kernel), and no verdict
is given before ``min_samples`` calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from workbench.events import BYTES_PER_MB, NS_PER_S

#: Samples (calls) a group needs before ``memory_growth`` gives a verdict: a few RSS steps are not a trend.
MIN_SAMPLES_FOR_VERDICT = 10

GROWTH_COLUMNS: tuple[str, ...] = (
    "n",
    "slope_mb_per_x",
    "ci_low",
    "ci_high",
    "peak_mb",
    "start_mb",
    "end_mb",
    "x_unit",
    "verdict",
)


def memory_growth(
    samples: pd.DataFrame,
    *,
    x: str = "iteration",
    by: Sequence[str] = ("rank", "label"),
    warmup: int = 0,
    leak_threshold_mb: float = 0.01,
    memory: str = "rss_bytes",
    confidence: float = 0.95,
    interval: str = "hac",
    min_samples: int = MIN_SAMPLES_FOR_VERDICT,
) -> pd.DataFrame:
    """Least-squares slope of memory against ``x`` per group, with a confidence interval and a verdict.

    - ``x="iteration"`` uses call-site samples only (``iteration >= 0``), slope in MB per call;
      ``x="time_ns"`` uses all samples, slope in MB per second since the group's first sample.
    - The first ``warmup`` samples of each group (in ``x`` order) are dropped: the first calls
      build graphs and fill caches, which is growth but not a leak.
    - ``memory`` is ``rss_bytes`` or ``gpu_bytes`` (rows with -1, unknown, are dropped).
    - ``interval="hac"`` (default): Newey–West standard error with ``hac_lags`` lags, so
      step-shaped growth does not pass for certainty; ``"ols"``: the classic i.i.d. interval.
    - Fewer than ``min_samples`` samples after warm-up: slope and interval are reported, the verdict
      is ``too few calls for a verdict (n=.., need ..)``.
    - Verdict: ``leak`` when ``ci_low > leak_threshold_mb``; ``no leak`` when
      ``ci_high < leak_threshold_mb``; ``inconclusive`` otherwise (more samples will decide).
      Fewer than 3 samples (no interval possible), or ``x`` constant: slope and interval are
      reported as 0.0 and the verdict says so (``too few samples (n=2)``, ``x does not vary``).

    Columns: ``[*by, n, slope_mb_per_x, ci_low, ci_high, peak_mb, start_mb, end_mb, x_unit, verdict]``.
    """
    by = [by] if isinstance(by, str) else list(by)
    if x not in ("iteration", "time_ns"):
        raise ValueError(f"x={x!r}: use 'iteration' (per call) or 'time_ns' (per second)")
    if memory not in ("rss_bytes", "gpu_bytes"):
        raise ValueError(f"memory={memory!r}: use 'rss_bytes' or 'gpu_bytes'")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be between 0 and 1, e.g. 0.95")
    if warmup < 0:
        raise ValueError(f"warmup={warmup} must be >= 0")
    if interval not in ("hac", "ols"):
        raise ValueError(f"interval={interval!r}: use 'hac' (Newey–West) or 'ols'")
    missing = [c for c in (*by, x, memory) if c not in samples]
    if missing:
        raise ValueError(f"samples lack columns {missing}: pass a memory frame (workbench.events.MEMORY_COLUMNS)")
    keep = samples[memory] >= 0
    if x == "iteration":
        keep &= samples["iteration"] >= 0
    data = samples.loc[keep, [*by, x, memory]]
    columns = [*by, *GROWTH_COLUMNS]
    if data.empty:
        what = "call-site samples (iteration >= 0)" if x == "iteration" else "samples"
        raise ValueError(f"no {what} with known {memory}: record memory at a call site or use x='time_ns'")
    data = data.sort_values([*by, x], kind="stable")
    data = data[data.groupby(by, sort=False).cumcount() >= warmup] if by else data.iloc[warmup:]
    if data.empty:
        raise ValueError(f"warmup={warmup} drops every sample: lower warmup")
    xs = data[x].to_numpy(dtype=np.float64)
    if x == "time_ns":
        first = data.groupby(by, sort=False)[x].transform("min") if by else data[x].min()
        xs = (data[x] - first).to_numpy(dtype=np.float64) / NS_PER_S
    frame = pd.DataFrame({"x": xs, "y": data[memory].to_numpy(dtype=np.float64) / BYTES_PER_MB})
    for column in by:
        frame[column] = data[column].to_numpy()
    groups = frame.groupby(by, sort=True) if by else frame.groupby(np.zeros(len(frame)), sort=True)
    rows = []
    for key, group in groups:
        row = dict(zip(by, key if isinstance(key, tuple) else (key,))) if by else {}
        fit = _fit(group["x"].to_numpy(), group["y"].to_numpy(), leak_threshold_mb, confidence, interval)
        if len(group) < min_samples and fit["verdict"] in ("leak", "no leak", "inconclusive"):
            fit["verdict"] = f"too few calls for a verdict (n={len(group)}, need {min_samples})"
        row.update(fit)
        row["x_unit"] = "call" if x == "iteration" else "second"
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def hac_lags(scores: np.ndarray) -> int:
    """Lags of the Newey–West sum: Andrews' (1991) AR(1) plug-in bandwidth for the Bartlett kernel.

    ``1.1447 (alpha n)^(1/3)`` with ``alpha = 4 rho^2 / ((1 - rho)^2 (1 + rho)^2)`` and ``rho`` the lag-1
    autocorrelation of the scores (clipped to ±0.95), at most ``n - 1``: the more the residuals
    persist (RSS in steps), the more lags, where a fixed rule would keep the interval too narrow.
    """
    n = len(scores)
    energy = float(scores @ scores)
    if n < 3 or energy == 0.0:
        return 0
    rho = float(np.clip((scores[1:] @ scores[:-1]) / energy, -0.95, 0.95))
    alpha = 4 * rho**2 / ((1 - rho) ** 2 * (1 + rho) ** 2)
    return int(min(np.floor(1.1447 * (alpha * n) ** (1 / 3)), n - 1))


def slope_standard_error(x: np.ndarray, y: np.ndarray, *, interval: str = "hac") -> tuple[float, float]:
    """Least-squares slope of ``y`` on ``x`` and its standard error: Newey–West (``hac``) or i.i.d. (``ols``).

    HAC: ``sqrt(n/(n-2) * S) / Sxx`` with ``S = sum_l w_l sum_t u_t u_{t-l}`` over lags ``|l| <= L``,
    ``u_t = (x_t - mean x) * residual_t``, Bartlett weights ``w_l = 1 - |l| / (L + 1)`` and
    ``L = hac_lags(u)``.
    """
    n = len(x)
    x_centred = x - x.mean()
    sxx = float(x_centred @ x_centred)
    slope = float(x_centred @ (y - y.mean())) / sxx
    residuals = (y - y.mean()) - slope * x_centred
    if interval == "ols":
        return slope, float(np.sqrt((residuals @ residuals) / (n - 2) / sxx))
    scores = x_centred * residuals
    long_run = float(scores @ scores)
    lags = hac_lags(scores)
    for lag in range(1, min(lags, n - 1) + 1):
        long_run += 2 * (1 - lag / (lags + 1)) * float(scores[lag:] @ scores[:-lag])
    return slope, float(np.sqrt(max(long_run, 0.0) * n / (n - 2))) / sxx


def _fit(x: np.ndarray, y: np.ndarray, threshold: float, confidence: float, interval: str = "hac") -> dict:
    """Slope, confidence interval and verdict for one group (never NaN)."""
    n = len(x)
    summary = {"n": n, "peak_mb": float(y.max()), "start_mb": float(y[0]), "end_mb": float(y[-1])}
    x_centred = x - x.mean()
    sxx = float(x_centred @ x_centred)
    if n < 3:
        return {
            **summary,
            "slope_mb_per_x": 0.0,
            "ci_low": 0.0,
            "ci_high": 0.0,
            "verdict": f"too few samples (n={n}, need 3): slope not estimated",
        }
    if sxx == 0.0:
        return {
            **summary,
            "slope_mb_per_x": 0.0,
            "ci_low": 0.0,
            "ci_high": 0.0,
            "verdict": "x does not vary: slope not estimated",
        }
    slope, standard_error = slope_standard_error(x, y, interval=interval)
    half_width = float(stats.t.ppf(0.5 + confidence / 2, n - 2)) * standard_error
    low, high = slope - half_width, slope + half_width
    if low > threshold:
        verdict = "leak"
    elif high < threshold:
        verdict = "no leak"
    else:
        verdict = "inconclusive"
    return {**summary, "slope_mb_per_x": slope, "ci_low": low, "ci_high": high, "verdict": verdict}


def memory_skew(samples: pd.DataFrame, *, memory: str = "rss_bytes") -> pd.DataFrame:
    """Peak memory per rank and how uneven it is: ``skew = max peak / mean peak`` over the run's ranks.

    Skew 1.0 means every rank peaks equally; rank 0 holding the evaluation data or the checkpoint
    shows as skew > 1 and limits how many ranks fit on a node. Columns: ``run_id, rank, peak_mb,
    peak_over_mean, skew`` (``skew`` repeated on every row of the run).
    """
    if memory not in ("rss_bytes", "gpu_bytes"):
        raise ValueError(f"memory={memory!r}: use 'rss_bytes' or 'gpu_bytes'")
    missing = [c for c in ("rank", memory) if c not in samples]
    if missing:
        raise ValueError(f"samples lack columns {missing}: pass a memory frame (workbench.events.MEMORY_COLUMNS)")
    data = samples.loc[samples[memory] >= 0]
    data = data.assign(run_id=data.get("run_id", ""))
    if data.empty:
        raise ValueError(f"no samples with known {memory}: record memory samples first")
    peaks = data.groupby(["run_id", "rank"], sort=True)[memory].max().rename("peak_mb").reset_index()
    peaks["peak_mb"] = peaks["peak_mb"].astype(np.float64) / BYTES_PER_MB
    mean_peak = peaks.groupby("run_id")["peak_mb"].transform("mean")
    if (mean_peak <= 0).any():
        raise ValueError(f"every rank's peak {memory} is 0 in a run: the samples carry no memory data")
    peaks["peak_over_mean"] = peaks["peak_mb"] / mean_peak
    peaks["skew"] = peaks.groupby("run_id")["peak_over_mean"].transform("max")
    return peaks[["run_id", "rank", "peak_mb", "peak_over_mean", "skew"]]


MEMORY_SUMMARY_COLUMNS: tuple[str, ...] = ("rank", "samples", "first_mb", "last_mb", "peak_mb", "gpu_peak_mb")


def memory_summary(samples: pd.DataFrame) -> pd.DataFrame:
    """Per rank: how many samples, resident memory at the first and last sample, its peak.

    A glance before any fit: a rank whose last value sits far above its first, or whose peak is far
    above the other ranks', is where to look with ``memory_growth`` / ``memory_skew``. Samples with
    unknown memory (-1) are left out; ``gpu_peak_mb`` is NaN when the rank had no GPU reading. No
    samples: an empty frame with columns ``MEMORY_SUMMARY_COLUMNS``.
    """
    columns = list(MEMORY_SUMMARY_COLUMNS)
    if samples is None or len(samples) == 0:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("rank", "samples") else "float64") for c in columns})
    missing = [c for c in ("rank", "time_ns", "rss_bytes") if c not in samples]
    if missing:
        raise ValueError(f"samples lack columns {missing}: pass a memory frame (workbench.events.MEMORY_COLUMNS)")
    rss = samples.loc[samples["rss_bytes"] >= 0].sort_values(["rank", "time_ns"], kind="stable")
    per_rank = rss.groupby("rank", sort=True)["rss_bytes"].agg(["size", "first", "last", "max"])
    gpu = samples["gpu_bytes"] if "gpu_bytes" in samples else pd.Series(-1, index=samples.index)
    gpu_peak = gpu.where(gpu >= 0).groupby(samples["rank"]).max()
    ranks = sorted(set(per_rank.index) | set(gpu_peak.index))
    per_rank = per_rank.reindex(ranks)
    return pd.DataFrame(
        {
            "rank": np.asarray(ranks, dtype=np.int64),
            "samples": per_rank["size"].fillna(0).to_numpy(dtype=np.int64),
            "first_mb": per_rank["first"].to_numpy(dtype=np.float64) / BYTES_PER_MB,
            "last_mb": per_rank["last"].to_numpy(dtype=np.float64) / BYTES_PER_MB,
            "peak_mb": per_rank["max"].to_numpy(dtype=np.float64) / BYTES_PER_MB,
            "gpu_peak_mb": gpu_peak.reindex(ranks).to_numpy(dtype=np.float64) / BYTES_PER_MB,
        }
    )
