"""A benchmark method users can trust: warm-up excluded, repetitions, trimmed mean, an interval.

The published study (004) and Google's tf_cnn_benchmarks measure a configuration the same way: the first 10
steps (graph tracing, allocator and cache warm-up) are skipped, the next 100 are timed, and the test
is repeated 5 times. MLPerf reports a trimmed mean: the fastest and the slowest repetition dropped.
``BenchmarkMethod`` holds those choices, measures the repetitions of a run from its recorded step
spans (``workbench.analysis.scaling.step_throughput``) and summarises them as one number with a
Student-t confidence interval. ``describe()`` is the sentence every table built with it states.

Throughput and its interval:

- per repetition: samples in the measured steps / their wall time (time between steps counts);
- headline: the trimmed mean of the repetitions (the plain mean when fewer than 3);
- interval: mean ± t(confidence, R − 1) · s / √R over the R repetitions; with one repetition the
  interval comes from the measured steps' durations instead (``basis`` says which), which ignores
  drift between runs and is therefore narrower than it should be.

Scaling efficiency is ``T(n) / (n · T(1))``; its interval divides the interval ends crosswise (the
widest ratio the two intervals allow).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.scaling import step_throughput, summarise_repetitions
from workbench.events import NS_PER_S


@dataclass(frozen=True)
class BenchmarkMethod:
    """How a configuration is measured; defaults are the published study's and tf_cnn_benchmarks' 10 / 100 / 5."""

    warmup_steps: int = 10
    measured_steps: int = 100
    repetitions: int = 5
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or self.measured_steps < 1 or self.repetitions < 1:
            raise ValueError(
                f"benchmark method {self.warmup_steps}/{self.measured_steps}/{self.repetitions}: "
                "need warm-up >= 0, measured steps >= 1 and repetitions >= 1"
            )
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence={self.confidence}: give a level between 0 and 1, e.g. 0.95")

    @property
    def steps_per_repetition(self) -> int:
        return self.warmup_steps + self.measured_steps

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "statistic": self.statistic}

    @property
    def statistic(self) -> str:
        if self.repetitions >= 3:
            return "trimmed mean (fastest and slowest repetition dropped)"
        return "mean"

    def describe(self) -> str:
        """The sentence a table built with this method states under it."""
        reps = f"{self.repetitions} repetition{'s' if self.repetitions != 1 else ''}"
        interval = (
            f"{self.confidence:.0%} Student-t interval over the repetitions"
            if self.repetitions > 1
            else f"{self.confidence:.0%} interval from the measured steps of the one repetition"
        )
        return (
            f"Method: {self.warmup_steps} warm-up steps excluded, the next {self.measured_steps} timed, "
            f"{reps}; throughput = {self.statistic}; {interval}."
        )

    # -- measuring ------------------------------------------------------------------------------
    def repetition_throughput(
        self,
        events: pd.DataFrame,
        *,
        samples_per_step: float,
        step_name: str = "train_step",
        step_phase: str = ev.COMPUTE,
    ) -> pd.DataFrame:
        """One row per repetition (``run_id``) of a run's events: samples/s over the measured steps."""
        return step_throughput(
            events,
            warmup_steps=self.warmup_steps,
            measured_steps=self.measured_steps,
            samples_per_step=samples_per_step,
            step_name=step_name,
            step_phase=step_phase,
        )

    def summarise(
        self,
        values: Sequence[float] | np.ndarray,
        *,
        step_seconds: Sequence[float] | None = None,
        samples_per_step: float | None = None,
    ) -> dict[str, object]:
        """The headline throughput of R repetitions and its interval (see the module docstring).

        ``step_seconds`` (the measured steps' durations) and ``samples_per_step`` give the interval
        when there is only one repetition. Keys: ``value, mean, std, ci_low, ci_high, repetitions,
        trimmed, basis``.
        """
        stats = summarise_repetitions(values).iloc[0]
        count = int(stats["n"])
        mean, std = float(stats["mean"]), float(stats["std"])
        if count > 1:
            half = student_t(self.confidence, count - 1) * std / np.sqrt(count)
            low, high, basis = mean - half, mean + half, "repetitions"
        elif step_seconds is not None and samples_per_step and len(step_seconds) > 1:
            low, high = step_interval(step_seconds, samples_per_step, self.confidence)
            basis = "steps of one repetition"
        else:
            low, high, basis = float("nan"), float("nan"), "one value: no interval"
        return {
            "value": float(stats["trimmed_mean"]),
            "mean": mean,
            "std": std,
            "ci_low": float(low),
            "ci_high": float(high),
            "repetitions": count,
            "trimmed": bool(stats["trimmed"]),
            "basis": basis,
        }


def student_t(confidence: float, dof: int) -> float:
    """The two-sided Student-t quantile for ``confidence`` with ``dof`` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, dof))


def step_interval(step_seconds: Sequence[float], samples_per_step: float, confidence: float) -> tuple[float, float]:
    """Throughput interval from one run's step durations: samples / (mean step ± t · s / √n)."""
    steps = np.asarray(step_seconds, dtype=float)
    mean, half = steps.mean(), student_t(confidence, len(steps) - 1) * steps.std(ddof=1) / np.sqrt(len(steps))
    slow = mean + half
    fast = max(mean - half, 1e-12)
    return samples_per_step / slow, samples_per_step / fast


def measured_step_seconds(
    events: pd.DataFrame, method: BenchmarkMethod, *, step_name: str = "train_step", step_phase: str = ev.COMPUTE
) -> np.ndarray:
    """Durations of the measured steps of one run: start of a step to the start of the next, over all ranks."""
    steps = events.loc[(events["phase"] == step_phase) & (events["name"] == step_name)]
    per_step = steps.groupby("step", sort=True)["start_ns"].min().to_numpy()
    starts = per_step[method.warmup_steps : method.warmup_steps + method.measured_steps + 1]
    return np.diff(starts) / NS_PER_S


def scaling_efficiency(table: pd.DataFrame, *, by: Sequence[str] = (), workers: str = "workers") -> pd.DataFrame:
    """``efficiency = T(n) / (n · T(1))`` per group of ``by``, with the interval's ends divided crosswise.

    ``table`` has ``workers``, ``images_per_s``, ``ci_low``, ``ci_high``; a group without a
    1-worker row gets NaN (the reference is missing, and the table says so by leaving it empty).
    """
    missing = [c for c in (workers, "images_per_s", "ci_low", "ci_high", *by) if c not in table]
    if missing:
        raise ValueError(f"table lacks columns {missing}: one row per configuration with its throughput")
    out = table.copy()
    out["efficiency"] = np.nan
    out["efficiency_low"] = np.nan
    out["efficiency_high"] = np.nan
    groups = out.groupby(list(by), sort=False) if by else [((), out)]
    for _, group in groups:
        single = group[group[workers] == 1]
        if single.empty:
            continue
        reference = single.iloc[0]
        n = group[workers].astype(float)
        out.loc[group.index, "efficiency"] = group["images_per_s"] / (n * reference["images_per_s"])
        out.loc[group.index, "efficiency_low"] = group["ci_low"] / (n * reference["ci_high"])
        out.loc[group.index, "efficiency_high"] = group["ci_high"] / (n * reference["ci_low"])
    return out


__all__ = [
    "BenchmarkMethod",
    "measured_step_seconds",
    "scaling_efficiency",
    "step_interval",
    "student_t",
]
