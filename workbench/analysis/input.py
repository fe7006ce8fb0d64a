"""Input pipeline signals: how much of each step waits for data, and whether the input queue ran dry.

Thresholds follow TensorFlow Profiler's input-pipeline analyser: a job whose steps spend under 5 %
waiting for input is not input-bound, 5–20 % is moderately, 20 % or more highly input-bound. The
queue signal is the depth the training loop found when it came to dequeue (counter
``queue_depth_at_dequeue``): zero means the step waited for the readers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from workbench.events import (
    COMMUNICATION,
    COMPUTE,
    EVALUATION,
    INPUT,
    NS_PER_S,
    PYTHON_INPUT_BUSY,
    PYTHON_INPUT_ELEMENTS,
    format_seconds,
    rank_hosts,
    rank_list,
    ranks_with_hosts,
)

#: TensorFlow Profiler's bands of the input share of step time.
INPUT_BOUND_MODERATE, INPUT_BOUND_HIGH = 0.05, 0.20
STEP_PHASES: tuple[str, ...] = (INPUT, COMPUTE, COMMUNICATION)
DEQUEUE_DEPTH = "queue_depth_at_dequeue"
#: The share of a rank's training a serial Python generator behind tf.data must be busy to be named. Near
#: 100 % it sets the steps' pace whether tf.data prefetches or not; without prefetching, all of its time is
#: the steps' (a script reading 8 elements of 10 ms a step: 87 % and 71 % on its 2 ranks, steps 110 ms).
SERIAL_INPUT_SATURATED = 0.8
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


def python_input_busy(events: pd.DataFrame, counters: pd.DataFrame | None) -> pd.DataFrame:
    """Per rank: how much of its training the Python generators behind ``tf.data.Dataset.from_generator`` were busy.

    The training is each rank's time from its first training step's end (the first step traces: warm-up,
    whose elements ``workbench profile`` leaves out too) to its last one's end, less the evaluation inside
    it (intervals merged). Busy seconds and elements are the ``PYTHON_INPUT_BUSY`` /
    ``PYTHON_INPUT_ELEMENTS`` counters ``workbench profile`` writes. Columns: rank, busy_s, elements,
    training_s, busy_share.
    """
    columns = ["rank", "busy_s", "elements", "training_s", "busy_share"]
    if counters is None or counters.empty or events.empty:
        return pd.DataFrame(columns=columns)
    found = counters[counters["name"].isin([PYTHON_INPUT_BUSY, PYTHON_INPUT_ELEMENTS])]
    if found.empty:
        return pd.DataFrame(columns=columns)
    totals = found.pivot_table(index="rank", columns="name", values="value", aggfunc="sum").reindex(
        columns=[PYTHON_INPUT_BUSY, PYTHON_INPUT_ELEMENTS]
    )
    steps = events[events["name"].isin(["train_step", *PER_STEP_INPUT]) & events["phase"].isin(STEP_PHASES)]
    evaluation = events[events["phase"] == EVALUATION]
    rows = []
    for rank, total in totals.iterrows():
        mine = steps[steps["rank"] == rank]
        if mine.empty:
            continue
        first_step = mine[mine["name"] == "train_step"].nsmallest(1, "start_ns")
        first = int(first_step["end_ns"].iloc[0]) if len(first_step) else int(mine["start_ns"].min())
        last = int(mine["end_ns"].max())
        inside = evaluation[
            (evaluation["rank"] == rank) & (evaluation["end_ns"] > first) & (evaluation["start_ns"] < last)
        ]
        training_ns = (last - first) - _merged_ns(
            inside["start_ns"].clip(lower=first), inside["end_ns"].clip(upper=last)
        )
        if training_ns <= 0:
            continue
        busy = float(np.nan_to_num(total[PYTHON_INPUT_BUSY]))
        rows.append(
            {
                "rank": int(rank),
                "busy_s": busy,
                "elements": int(np.nan_to_num(total[PYTHON_INPUT_ELEMENTS])),
                "training_s": training_ns / NS_PER_S,
                "busy_share": busy / (training_ns / NS_PER_S),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def _merged_ns(starts: pd.Series, ends: pd.Series) -> int:
    """Length of the union of intervals (nested evaluation spans count once)."""
    total, reach = 0, None
    for start, end in sorted(zip(starts.astype("int64"), ends.astype("int64"))):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return int(total)


def python_input_finding(
    events: pd.DataFrame, counters: pd.DataFrame | None, hosts: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """A note when a serial Python generator behind tf.data was busy ``SERIAL_INPUT_SATURATED`` of a rank's training.

    ``from_generator`` calls the generator on one thread, an element at a time: busy nearly all the
    time, it is likely what the steps wait for, whatever the step spans say (the wait is inside TF's
    step function, where a script's own pipeline is not timed). How much of it the steps waited is not
    known, so it is a note; with Keras's own generator input the steps' waits are measured
    (``input_pipeline``), and a rank with such waits gets no note.
    """
    return python_input_finding_of(python_input_busy(events, counters), timed_input_ranks(events), hosts)


def timed_input_ranks(events: pd.DataFrame) -> list[int]:
    """The ranks whose steps' waits for input were timed (Keras's generator input): no serial-input note for them."""
    if events.empty:
        return []
    return sorted(
        int(r) for r in events.loc[(events["phase"] == INPUT) & events["name"].isin(PER_STEP_INPUT), "rank"].unique()
    )


def python_input_finding_of(
    table: pd.DataFrame, timed: Iterable[int], hosts: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """``python_input_finding`` from the run's ``python_input_busy`` and ``timed_input_ranks``."""
    columns = ["kind", "ranks", "seconds_lost", "fraction_of_wall", "text"]
    table = table[~table["rank"].isin(list(timed))]  # the steps' waits were timed (Keras's generator input)
    saturated = table[table["busy_share"] >= SERIAL_INPUT_SATURATED]
    if saturated.empty:
        return pd.DataFrame(columns=columns)
    worst = saturated.loc[saturated["busy_share"].idxmax()]
    each = worst["busy_s"] / worst["elements"] if worst["elements"] else float("nan")
    text = (
        f"the Python generator feeding tf.data (Dataset.from_generator) was busy {min(worst['busy_share'], 1):.0%} of"
        f" {ranks_with_hosts([int(worst['rank'])], hosts or {})}'s training ({format_seconds(worst['busy_s'])} of"
        f" {format_seconds(worst['training_s'])}, {int(worst['elements'])} elements, {format_seconds(each)} each):"
        " tf.data calls it on one thread, one element at a time, so this busy it likely sets the pace of the"
        " steps (its time includes waiting for Python's GIL; the steps' own wait for data is inside TF's step"
        " function, not timed here). Do the per-element work in Dataset.map(...,"
        " num_parallel_calls=tf.data.AUTOTUNE), read shards with interleave, prefetch, or cache what it decodes"
    )
    row = {
        "kind": "serial_python_input",
        "ranks": rank_list(saturated["rank"]),
        "seconds_lost": float("nan"),
        "fraction_of_wall": float("nan"),
        "text": text,
    }
    return pd.DataFrame([row], columns=columns)


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
    "SERIAL_INPUT_SATURATED",
    "input_bound_level",
    "input_findings",
    "input_share",
    "python_input_busy",
    "python_input_finding",
    "queue_exhaustion",
    "step_times",
]
