"""Input pipeline signals: how much of each step waits for data, and whether the input queue ran dry.

Thresholds follow TensorFlow Profiler's input-pipeline analyser: a job whose steps spend under 5 %
waiting for input is not input-bound, 5–20 % is moderately, 20 % or more highly input-bound. The
queue signal is the depth the training loop found when it came to dequeue (counter
``queue_depth_at_dequeue``): zero means the step waited for the readers.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from workbench.events import COMMUNICATION, COMPUTE, INPUT, NS_PER_S, rank_hosts, rank_list, ranks_with_hosts

#: TensorFlow Profiler's bands of the input share of step time.
INPUT_BOUND_MODERATE, INPUT_BOUND_HIGH = 0.05, 0.20
STEP_PHASES: tuple[str, ...] = (INPUT, COMPUTE, COMMUNICATION)
DEQUEUE_DEPTH = "queue_depth_at_dequeue"
#: Input spans that are a step's wait for its batch (not a one-off such as ``load_into_memory``).
PER_STEP_INPUT: tuple[str, ...] = ("dequeue", "next_batch")


def input_bound_level(share: float) -> str:
    """TensorFlow Profiler's words for an input share of step time."""
    if not np.isfinite(share):
        return "unknown"
    if share >= INPUT_BOUND_HIGH:
        return "highly input-bound"
    if share >= INPUT_BOUND_MODERATE:
        return "moderately input-bound"
    return "not input-bound"


def step_times(events: pd.DataFrame, *, warmup_steps: int = 1) -> pd.DataFrame:
    """Per rank: steps after warm-up and their mean / median duration in ms (input + compute + communication).

    A step's duration is the sum of its spans in those phases, so an evaluation between steps does
    not count, and the first ``warmup_steps`` (graph tracing, first allocations) are left out.
    Columns: rank, steps, mean_ms, median_ms.
    """
    columns = ["rank", "steps", "mean_ms", "median_ms"]
    spans = events[events["phase"].isin(STEP_PHASES) & (events["step"] >= warmup_steps)]
    spans = spans[(spans["phase"] != INPUT) | spans["name"].isin(PER_STEP_INPUT)]
    if spans.empty:
        return pd.DataFrame(columns=columns)
    per_step = (
        (spans["end_ns"] - spans["start_ns"]).astype("int64").groupby([spans["rank"].astype(int), spans["step"]]).sum()
    )
    table = per_step.groupby(level=0).agg(steps="size", mean_ns="mean", median_ns="median")
    table["mean_ms"], table["median_ms"] = table["mean_ns"] / NS_PER_S * 1e3, table["median_ns"] / NS_PER_S * 1e3
    return table.rename_axis("rank").reset_index()[columns]


def input_share(events: pd.DataFrame, *, input_names: tuple[str, ...] | None = PER_STEP_INPUT) -> pd.DataFrame:
    """Per rank: seconds in training steps (input + compute + communication), of them waiting for input.

    ``input_names`` keeps only the per-step waits (not a one-off ``load_into_memory``); None keeps
    every input span. Columns: rank, step_s, input_s, input_share, level.
    """
    columns = ["rank", "step_s", "input_s", "input_share", "level"]
    spans = events[events["phase"].isin(STEP_PHASES)]
    if input_names is not None:
        spans = spans[(spans["phase"] != INPUT) | spans["name"].isin(input_names)]
    if spans.empty:
        return pd.DataFrame(columns=columns)
    # sums in integer ns, divided once: a share of exactly 20 % is not 19.999... %
    duration = (spans["end_ns"] - spans["start_ns"]).astype("int64")
    frame = pd.DataFrame({"rank": spans["rank"].astype(int), "step_ns": duration})
    frame["input_ns"] = duration.where(spans["phase"] == INPUT, 0)
    table = frame.groupby("rank")[["step_ns", "input_ns"]].sum()
    table["step_s"], table["input_s"] = table["step_ns"] / NS_PER_S, table["input_ns"] / NS_PER_S
    table["input_share"] = np.where(table["step_ns"] > 0, table["input_ns"] / table["step_ns"].clip(lower=1), np.nan)
    table["level"] = [input_bound_level(share) for share in table["input_share"]]
    return table.reset_index()[columns]


def queue_exhaustion(counters: pd.DataFrame, *, name: str = DEQUEUE_DEPTH) -> pd.DataFrame:
    """Per rank: how often the training loop found the queue empty, and when it first ran dry.

    Columns: rank, dequeues, empty_fraction (of all dequeues), ran_dry_after_s (from the first
    dequeue to the first empty one; NaN if never), empty_fraction_after (of the dequeues from then on).
    """
    columns = ["rank", "dequeues", "empty_fraction", "ran_dry_after_s", "empty_fraction_after"]
    found = counters[counters["name"] == name] if len(counters) else counters
    if found is None or found.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for rank, group in found.sort_values(["rank", "time_ns"]).groupby("rank"):
        empty = group["value"].to_numpy() <= 0
        times = group["time_ns"].to_numpy()
        first = int(np.argmax(empty)) if empty.any() else -1
        rows.append(
            {
                "rank": int(rank),
                "dequeues": len(group),
                "empty_fraction": float(empty.mean()),
                "ran_dry_after_s": float((times[first] - times[0]) / NS_PER_S) if first >= 0 else float("nan"),
                "empty_fraction_after": float(empty[first:].mean()) if first >= 0 else 0.0,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def input_findings(
    events: pd.DataFrame, counters: pd.DataFrame, *, hosts: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """Findings rows (kind, ranks, seconds_lost, fraction_of_wall, text) for an input-bound run.

    ``hosts`` (``{rank: host}``, default: the events' and counters' ``host`` columns): on more than
    one host the texts name the rank's host, since one host's slow disk starves only its ranks.
    """
    columns = ["kind", "ranks", "seconds_lost", "fraction_of_wall", "text"]
    hosts = rank_hosts(events, counters) if hosts is None else hosts
    rows = []
    shares = input_share(events)
    bound = shares[shares["input_share"] >= INPUT_BOUND_MODERATE]
    if len(bound):
        worst = bound.loc[bound["input_share"].idxmax()]
        rows.append(
            {
                "kind": "input_bound",
                "ranks": rank_list(bound["rank"]),
                "seconds_lost": float(bound["input_s"].max()),
                "fraction_of_wall": float(worst["input_share"]),
                "text": (
                    f"{worst['level']}: {ranks_with_hosts([int(worst['rank'])], hosts)} waits for input"
                    f" {worst['input_share']:.0%} of its "
                    f"step time ({worst['input_s']:.3g} s of {worst['step_s']:.3g} s); TensorFlow Profiler calls "
                    f"{INPUT_BOUND_MODERATE:.0%}–{INPUT_BOUND_HIGH:.0%} moderately and ≥ {INPUT_BOUND_HIGH:.0%} "
                    "highly input-bound"
                ),
            }
        )
    dry = queue_exhaustion(counters)
    dry = dry[dry["ran_dry_after_s"].notna()]
    if len(dry):
        worst = dry.loc[dry["empty_fraction_after"].idxmax()]
        waiting = shares.set_index("rank")["input_s"] if len(shares) else pd.Series(dtype=float)
        rows.append(
            {
                "kind": "queue_exhaustion",
                "ranks": rank_list(dry["rank"]),
                "seconds_lost": float(waiting.reindex(dry["rank"]).max()) if len(waiting) else float("nan"),
                "fraction_of_wall": float(worst["empty_fraction_after"]),
                "text": (
                    f"input queue empty at {worst['empty_fraction_after']:.0%} of dequeues on "
                    f"{ranks_with_hosts([int(worst['rank'])], hosts)} after {worst['ran_dry_after_s']:.3g} s: the"
                    " readers fill it slower than "
                    "training empties it; "
                    "more enqueue threads only delay this — read from memory, cache, or dequeue a new batch only "
                    "every k steps (batch repetition)"
                ),
            }
        )
    return pd.DataFrame(rows, columns=columns)


__all__ = [
    "DEQUEUE_DEPTH",
    "INPUT_BOUND_HIGH",
    "INPUT_BOUND_MODERATE",
    "PER_STEP_INPUT",
    "input_bound_level",
    "input_findings",
    "input_share",
    "queue_exhaustion",
    "step_times",
]
