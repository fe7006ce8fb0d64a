"""Throughput and scaling with method: warm-up excluded, repetitions summarised, speedup defined.

Definitions used throughout (``T`` = throughput in steps/s or samples/s, ``n`` = ranks, ``ref`` =
the reference rank count, normally the smallest measured):

- ``speedup(n) = T(n) / T(ref)``. For strong scaling (fixed global work: fixed global batch and
  number of steps) this equals ``time(ref) / time(n)``, the textbook speedup, because time to
  finish the fixed work is work / throughput. For weak scaling (fixed work per rank: fixed
  per-rank batch) it is the "scaled speedup", the growth of total throughput.
- ``ideal_speedup(n) = n / ref``.
- ``efficiency(n) = speedup / ideal_speedup = (T(n) / n) / (T(ref) / ref)``: throughput per rank
  relative to the reference. For weak scaling this is the usual weak-scaling efficiency; for
  strong scaling it is the usual ``S / p`` parallel efficiency.

So the numbers are computed the same way for both kinds; ``kind`` states which experiment they
come from (and therefore how to read them), and is kept in the output.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.events import NS_PER_S


def step_throughput(
    events: pd.DataFrame,
    *,
    warmup_steps: int = 10,
    measured_steps: int = 100,
    samples_per_step: float | None = None,
    step_name: str = "train_step",
    step_phase: str = ev.COMPUTE,
) -> pd.DataFrame:
    """Steps per second (and samples per second) of each run, measured after a warm-up.

    A step's time span is first start to last end over all ranks (ranks run steps in lock step).
    Steps are identified by the ``step`` column; when a run's step spans carry ``step = -1`` they
    are numbered per rank in start order. The first ``warmup_steps`` steps (graph tracing, cache
    warm-up) are skipped and up to ``measured_steps`` of the rest are measured, from the start of the
    first measured step to the start of the step after the last measured one (its end when none
    follows), so time between steps (waiting for input) counts.

    Columns: ``run_id, ranks, warmup_steps, measured_steps, seconds, steps_per_s, throughput, unit``
    (+ ``samples_per_s`` when ``samples_per_step`` is given; ``throughput`` is then samples/s).
    ``measured_steps`` is the number actually measured (fewer when the run is short).
    """
    if warmup_steps < 0 or measured_steps < 1:
        raise ValueError(
            f"need warmup_steps >= 0 and measured_steps >= 1, got {warmup_steps}, {measured_steps}"
        )
    if samples_per_step is not None and samples_per_step <= 0:
        raise ValueError(f"samples_per_step={samples_per_step} must be positive (global batch size per step)")
    missing = [c for c in ("rank", "phase", "name", "start_ns", "end_ns") if c not in events]
    if missing:
        raise ValueError(f"events lack columns {missing}: build them with workbench.events.events_frame")
    steps = events.loc[(events["phase"] == step_phase) & (events["name"] == step_name)]
    if steps.empty:
        raise ValueError(
            f"no {step_phase!r} spans named {step_name!r}: pass step_name= the name of your step spans"
        )
    steps = steps.assign(run_id=steps.get("run_id", ""), step=steps.get("step", -1))
    rows = []
    for run_id, run in steps.groupby("run_id", sort=True):
        if (run["step"] < 0).any():
            run = run.sort_values(["rank", "start_ns"], kind="stable")
            run = run.assign(step=run.groupby("rank").cumcount())
        per_step = run.groupby("step", sort=True).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        if len(per_step) <= warmup_steps:
            raise ValueError(
                f"run {run_id!r} has {len(per_step)} {step_name!r} steps, not more than warmup_steps="
                f"{warmup_steps}: record more steps or lower warmup_steps"
            )
        window = per_step.iloc[warmup_steps : warmup_steps + measured_steps]
        after = per_step.iloc[warmup_steps + measured_steps : warmup_steps + measured_steps + 1]
        stop = int(after["start_ns"].iloc[0]) if len(after) else int(window["end_ns"].iloc[-1])
        seconds = (stop - int(window["start_ns"].iloc[0])) / NS_PER_S
        if seconds <= 0:
            raise ValueError(
                f"run {run_id!r}: the measured steps take zero time; check the step spans' times"
            )
        steps_per_s = len(window) / seconds
        row = {
            "run_id": run_id,
            "ranks": int(run["rank"].nunique()),
            "warmup_steps": int(warmup_steps),
            "measured_steps": len(window),
            "seconds": seconds,
            "steps_per_s": steps_per_s,
            "throughput": steps_per_s if samples_per_step is None else steps_per_s * samples_per_step,
            "unit": "steps/s" if samples_per_step is None else "samples/s",
        }
        if samples_per_step is not None:
            row["samples_per_s"] = steps_per_s * samples_per_step
        rows.append(row)
    return pd.DataFrame(rows)


STEP_COLUMNS: tuple[str, ...] = ("rank", "steps", "seconds", "steps_per_s", "mean_step_s", "median_step_s")


def steps_per_rank(
    events: pd.DataFrame,
    *,
    ranks: Iterable[int] | None = None,
    step_name: str = "train_step",
    step_phase: str = ev.COMPUTE,
) -> pd.DataFrame:
    """Training steps each rank recorded and its pace: a straggler shows as fewer steps per second.

    Steps are the ``step_phase`` spans named ``step_name`` (what the recorder's Keras callback and
    the case studies write). Per rank: ``steps``; ``seconds`` from its first step's start to its
    last step's end (so time between steps counts); ``steps_per_s = steps / seconds``;
    ``mean_step_s``, the mean step span, and ``median_step_s``, the median one: the first step traces the
    step function (seconds, where a step then takes milliseconds), which the median leaves out. Ranks in
    ``ranks`` without steps get ``steps = 0`` and NaN rates; no steps at all: an empty frame with columns
    ``STEP_COLUMNS``.
    """
    missing = [c for c in ("rank", "phase", "name", "start_ns", "end_ns") if c not in events]
    if missing:
        raise ValueError(f"events lack columns {missing}: build them with workbench.events.events_frame")
    rows = np.flatnonzero((events["phase"] == step_phase).to_numpy() & (events["name"] == step_name).to_numpy())
    listed = sorted({int(r) for r in ranks}) if ranks is not None else []
    if len(rows) == 0 and not listed:
        dtypes = {c: "int64" if c in ("rank", "steps") else "float64" for c in STEP_COLUMNS}
        return pd.DataFrame({c: pd.Series(dtype=dtype) for c, dtype in dtypes.items()})
    # only the step rows' columns, not whole rows of events (millions on a large run)
    per_rank = _step_totals(
        events["rank"].to_numpy()[rows], events["start_ns"].to_numpy()[rows], events["end_ns"].to_numpy()[rows]
    )
    all_ranks = sorted(set(int(r) for r in per_rank.index) | set(listed))
    # in int64 before ranks without steps (NaN) are added: ns since 1970 as floats are 256 ns apart
    per_rank["seconds"] = (per_rank["last_ns"] - per_rank["first_ns"]) / NS_PER_S
    per_rank = per_rank.reindex(all_ranks)
    count = per_rank["steps"].fillna(0).astype("int64")
    seconds = per_rank["seconds"].astype("float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where((count > 0) & (seconds > 0), count / seconds, np.nan)
        mean_step = np.where(count > 0, per_rank["busy_ns"] / NS_PER_S / count, np.nan)
    return pd.DataFrame(
        {
            "rank": np.asarray(all_ranks, dtype=np.int64),
            "steps": count.to_numpy(),
            "seconds": seconds.to_numpy(),
            "steps_per_s": rate.astype(np.float64),
            "mean_step_s": np.asarray(mean_step, dtype=np.float64),
            "median_step_s": (per_rank["median_ns"] / NS_PER_S).to_numpy(dtype=np.float64),
        }
    )


def _step_totals(rank: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> pd.DataFrame:
    """Per rank (the index): ``steps``, ``first_ns``, ``last_ns``, ``busy_ns`` and ``median_ns`` of its step spans; by
    array segments when the rows come rank by rank (as the store returns them), else by a group-by."""
    duration = end_ns - start_ns
    first = ev.ascending_runs(rank)
    if first is not None:
        return pd.DataFrame(
            {
                "steps": np.diff(np.append(first, len(rank))),
                "first_ns": np.minimum.reduceat(start_ns, first),
                "last_ns": np.maximum.reduceat(end_ns, first),
                "busy_ns": np.add.reduceat(duration, first),
                "median_ns": ev.run_medians(duration, first),
            },
            index=pd.Index(rank[first], name="rank"),
        )
    steps = pd.DataFrame({"rank": rank, "start_ns": start_ns, "end_ns": end_ns, "duration_ns": duration}, copy=False)
    return steps.groupby("rank", sort=True).agg(
        steps=("start_ns", "size"),
        first_ns=("start_ns", "min"),
        last_ns=("end_ns", "max"),
        busy_ns=("duration_ns", "sum"),
        median_ns=("duration_ns", "median"),
    )


def summarise_repetitions(values: Sequence[float] | np.ndarray | pd.Series) -> pd.DataFrame:
    """Mean, sample standard deviation and MLPerf-style trimmed mean of repeated measurements.

    The trimmed mean drops the fastest and the slowest repetition (one each), which needs at least
    3 values; with fewer, ``trimmed_mean`` equals the mean, ``trimmed`` is False and ``note`` says
    why. ``std`` uses ``ddof=1`` and is 0.0 for a single value (noted). One row, columns
    ``n, mean, std, trimmed_mean, trimmed, note``.
    """
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise ValueError("no repetitions to summarise: pass at least one measured value")
    if not np.isfinite(array).all():
        raise ValueError(f"repetitions contain NaN or inf ({array.tolist()}): drop failed runs first")
    mean = float(array.mean())
    std = float(array.std(ddof=1)) if array.size > 1 else 0.0
    if array.size >= 3:
        trimmed_mean, trimmed, note = float(np.sort(array)[1:-1].mean()), True, "dropped fastest and slowest"
    else:
        trimmed_mean, trimmed = mean, False
        note = f"{array.size} repetition(s): trimming needs >= 3, trimmed_mean = mean"
        if array.size == 1:
            note += "; std = 0 (one value)"
    return pd.DataFrame(
        [
            {
                "n": int(array.size),
                "mean": mean,
                "std": std,
                "trimmed_mean": trimmed_mean,
                "trimmed": trimmed,
                "note": note,
            }
        ]
    )


def scaling_table(
    runs: pd.DataFrame,
    kind: str = "strong",
    *,
    reference_ranks: int | None = None,
    statistic: str = "trimmed",
) -> pd.DataFrame:
    """Speedup and efficiency per rank count from measured throughputs (see the module docstring).

    ``runs`` holds columns ``ranks`` and ``throughput`` (one row per repetition; a ``repetition``
    column is allowed and ignored). Repetitions are summarised with ``summarise_repetitions``;
    speedups use the trimmed mean (``statistic="mean"`` to use the plain mean).

    Columns: ``ranks, repetitions, throughput_mean, throughput_std, throughput_trimmed, trimmed,
    throughput_per_rank, speedup, ideal_speedup, efficiency, kind``.
    """
    if kind not in ("strong", "weak"):
        raise ValueError(f"kind={kind!r}: use 'strong' (fixed global work) or 'weak' (fixed work per rank)")
    if statistic not in ("trimmed", "mean"):
        raise ValueError(f"statistic={statistic!r}: use 'trimmed' or 'mean'")
    missing = [c for c in ("ranks", "throughput") if c not in runs]
    if missing:
        raise ValueError(f"runs lack columns {missing}: pass one row per run with ranks and throughput")
    if runs.empty:
        raise ValueError("runs is empty: measure at least one rank count")
    if (runs["ranks"] < 1).any() or (runs["throughput"] <= 0).any():
        raise ValueError("ranks must be >= 1 and throughput > 0 in every row: drop failed runs first")
    rows = []
    for ranks, group in runs.groupby("ranks", sort=True):
        summary = summarise_repetitions(group["throughput"]).iloc[0]
        rows.append(
            {
                "ranks": int(ranks),
                "repetitions": int(summary["n"]),
                "throughput_mean": summary["mean"],
                "throughput_std": summary["std"],
                "throughput_trimmed": summary["trimmed_mean"],
                "trimmed": bool(summary["trimmed"]),
            }
        )
    table = pd.DataFrame(rows)
    reference = int(table["ranks"].min()) if reference_ranks is None else int(reference_ranks)
    if reference not in set(table["ranks"]):
        raise ValueError(
            f"no runs with {reference} ranks: reference_ranks must be one of {table['ranks'].tolist()}"
        )
    value = table["throughput_trimmed" if statistic == "trimmed" else "throughput_mean"]
    reference_value = float(value[table["ranks"] == reference].iloc[0])
    table["throughput_per_rank"] = value / table["ranks"]
    table["speedup"] = value / reference_value
    table["ideal_speedup"] = table["ranks"] / reference
    table["efficiency"] = table["speedup"] / table["ideal_speedup"]
    table["kind"] = kind
    return table


@dataclass(frozen=True)
class IoOverhead:
    """How much the real input pipeline slows training compared with synthetic (in-memory) data."""

    synthetic_throughput: float
    real_throughput: float
    #: real / synthetic: 1.0 means input costs nothing.
    ratio: float
    #: 1 - ratio: the share of synthetic throughput lost to input (negative: real was faster, noise).
    overhead: float


def io_overhead(synthetic_throughput: float, real_throughput: float) -> IoOverhead:
    """Compare throughput with real input against the same run fed synthetic data."""
    synthetic, real = float(synthetic_throughput), float(real_throughput)
    if not (np.isfinite(synthetic) and np.isfinite(real)) or synthetic <= 0 or real <= 0:
        raise ValueError(f"throughputs must be positive numbers, got synthetic={synthetic}, real={real}")
    ratio = real / synthetic
    return IoOverhead(synthetic_throughput=synthetic, real_throughput=real, ratio=ratio, overhead=1.0 - ratio)
