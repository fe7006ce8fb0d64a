"""Steps that take far longer than the rest after the first one: TensorFlow tracing the step function again.

A ``tf.function`` is traced on its first call (seconds, where a step then takes milliseconds); every call
with a new Python argument value, or an input of a new shape or dtype, traces it again. A retrace per step is
among the commonest ways a TF2 training loop runs 10–100x slower than it should, and it hides in the mean
step. The evidence here is the step spans alone: a later step that lasts many times the median one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from workbench import events as ev

#: A step after the first is counted as a retrace when it lasts this many times the rank's median step ...
RETRACE_TIMES_MEDIAN = 10.0
#: ... and at least this many seconds more than it (a garbage collection or a page fault stays under it).
RETRACE_MIN_EXTRA_S = 0.05


def retracing_finding(
    events: pd.DataFrame,
    hosts: Mapping[int, str] | None = None,
    *,
    wall_s: float | None = None,
    step_name: str = "train_step",
    step_phase: str = ev.COMPUTE,
) -> pd.DataFrame | None:
    """The steps after each rank's first that look traced again, and the seconds they cost over the median.

    ``seconds_lost``: the largest rank's sum of (step − median step) over those steps; ``None`` when no
    rank has one (the first step's trace is expected and not reported).
    """
    return retracing_finding_of(
        retraced_steps(events, step_name=step_name, step_phase=step_phase), hosts, wall_s=wall_s
    )


#: ``retraced_steps`` columns.
RETRACED_COLUMNS: tuple[str, ...] = ("rank", "lost_s", "steps", "median_s")


def retraced_steps(
    events: pd.DataFrame, *, step_name: str = "train_step", step_phase: str = ev.COMPUTE
) -> pd.DataFrame:
    """Per rank with steps that look traced again: the seconds over its median step, their step numbers, the median.

    Rank by rank: rank groups' tables, concatenated, are the whole run's."""
    empty = pd.DataFrame({c: pd.Series(dtype=object if c == "steps" else "float64") for c in RETRACED_COLUMNS})
    if len(events) == 0:
        return empty
    steps = events[(events["phase"] == step_phase) & (events["name"] == step_name)]
    if len(steps) < 3:
        return empty
    steps = steps.assign(seconds=(steps["end_ns"] - steps["start_ns"]) / ev.NS_PER_S).sort_values(["rank", "start_ns"])
    rows = []
    for rank, mine in steps.groupby("rank", observed=True):
        seconds = mine["seconds"].to_numpy(dtype=float)
        if len(seconds) < 3:
            continue
        median = float(np.median(seconds[1:]))
        later = seconds[1:]
        traced = (later > RETRACE_TIMES_MEDIAN * median) & (later - median >= RETRACE_MIN_EXTRA_S)
        if traced.any():
            index = np.flatnonzero(traced) + 1
            step_numbers = mine["step"].to_numpy()[index] if "step" in mine else index
            rows.append((int(rank), float((later[traced] - median).sum()), [int(n) for n in step_numbers], median))
    return pd.DataFrame(rows, columns=list(RETRACED_COLUMNS)) if rows else empty


def retracing_finding_of(
    table: pd.DataFrame, hosts: Mapping[int, str] | None = None, *, wall_s: float | None = None
) -> pd.DataFrame | None:
    """``retracing_finding`` from the run's ``retraced_steps``."""
    if table.empty:
        return None
    lost = {int(r): float(v) for r, v in zip(table["rank"], table["lost_s"])}
    numbers = dict(zip(lost, table["steps"]))
    medians = dict(zip(lost, table["median_s"]))
    worst = max(lost, key=lost.get)
    shown = numbers[worst][:5]
    more = f" and {len(numbers[worst]) - len(shown)} more" if len(numbers[worst]) > len(shown) else ""
    text = (
        f"{ev.ranks_with_hosts(lost, hosts)}: {len(numbers[worst])} step(s) after the first took over"
        f" {RETRACE_TIMES_MEDIAN:g}x the median step ({ev.ranks_with_hosts([worst], hosts)}: step(s)"
        f" {', '.join(map(str, shown))}{more}, {ev.format_seconds(lost[worst])} over a median of"
        f" {ev.format_seconds(medians[worst])}). The usual cause is TensorFlow tracing the step function again:"
        " a Python value passed to the tf.function that changes (pass a tensor), inputs of a new shape or dtype"
        " (a last partial batch: drop_remainder=True, or an input_signature), or a new variable or optimizer"
        " slot. A slow step right after an evaluation or a checkpoint can also be caches and memory warming up"
    )
    return pd.DataFrame(
        [
            {
                "kind": "retracing",
                "text": text,
                "seconds_lost": lost[worst],
                "fraction_of_wall": lost[worst] / wall_s if wall_s else np.nan,
                "ranks": ev.rank_list(lost),
            }
        ]
    )
