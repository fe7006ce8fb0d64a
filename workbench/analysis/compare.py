"""Two runs side by side: per rank and phase, where the time went differently.

The question after a change ("evaluate less often", "one more rank", a new Horovod setting) is not
only "is it faster?" but "which phase on which rank got faster, and did something else get slower?".
This is the trace diff of Meta's HolisticTraceAnalysis, on phases: each run's per-rank breakdown
(``phase_breakdown``: every rank's seconds add up to that run's wall time), joined on rank and
phase, so a rank's deltas add up to the change in wall time.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from workbench.analysis.breakdown import phase_breakdown
from workbench.events import phase_order

COMPARISON_COLUMNS: tuple[str, ...] = (
    "scope",
    "rank",
    "phase",
    "seconds_a",
    "seconds_b",
    "delta_s",
    "ratio",
    "present",
)
#: ``scope`` values: one rank's phase, a phase summed over ranks, the runs' wall times.
SCOPE_RANK, SCOPE_TOTAL, SCOPE_WALL = "rank", "total", "wall"
#: ``rank`` of the rows that are not about one rank.
ALL_RANKS = -1


def compare_runs(
    events_a: pd.DataFrame,
    events_b: pd.DataFrame,
    *,
    ranks_a: Iterable[int] | None = None,
    ranks_b: Iterable[int] | None = None,
) -> pd.DataFrame:
    """Seconds per (rank, phase) in run A and run B, their difference ``B - A`` and ratio ``B / A``.

    Rows (columns ``COMPARISON_COLUMNS``), in this order:

    - ``scope="rank"``: one row per rank and phase seen in either run. A rank's ``delta_s`` over
      its phases adds up to the change in wall time (both runs count idle time to their end).
    - ``scope="total"`` (``rank=-1``): each phase summed over ranks (rank-seconds).
    - ``scope="wall"`` (``rank=-1``, ``phase="wall"``): the runs' wall times.

    ``present`` says where a rank (for ``rank`` rows) or a phase (for ``total`` rows) was recorded:
    ``both``, ``a only`` or ``b only``; the missing side counts as 0 s. ``ratio`` is NaN when both
    sides are 0 and inf when only A is. ``ranks_a`` / ``ranks_b`` add ranks without events (idle
    for the whole run). A run without events compares as 0 s everywhere. Each frame is taken as one
    run whatever its ``run_id`` column says (an importer may label its rows differently).
    """
    a = _per_rank(events_a, ranks_a)
    b = _per_rank(events_b, ranks_b)
    ranks_in_a, ranks_in_b = set(a["rank"]), set(b["rank"])
    phases_in_a, phases_in_b = set(a["phase"]), set(b["phase"])
    order = phase_order([*a["phase"], *b["phase"]])
    per_rank = a.merge(b, on=["rank", "phase"], how="outer", suffixes=("_a", "_b"))
    per_rank[["seconds_a", "seconds_b"]] = per_rank[["seconds_a", "seconds_b"]].fillna(0.0)
    per_rank["present"] = [_presence(r in ranks_in_a, r in ranks_in_b) for r in per_rank["rank"]]
    per_rank["scope"] = SCOPE_RANK
    per_rank = _sorted(per_rank, order)

    totals = per_rank.groupby("phase", sort=False)[["seconds_a", "seconds_b"]].sum().reset_index()
    totals["rank"] = ALL_RANKS
    totals["present"] = [_presence(p in phases_in_a, p in phases_in_b) for p in totals["phase"]]
    totals["scope"] = SCOPE_TOTAL
    totals = _sorted(totals, order)

    wall = pd.DataFrame(
        {
            "scope": [SCOPE_WALL],
            "rank": [ALL_RANKS],
            "phase": ["wall"],
            "seconds_a": [_wall_s(a)],
            "seconds_b": [_wall_s(b)],
            "present": [_presence(bool(len(a)), bool(len(b)))],
        }
    )
    frame = pd.concat([per_rank, totals, wall], ignore_index=True)
    frame["rank"] = frame["rank"].astype("int64")
    seconds_a = frame["seconds_a"].to_numpy(dtype=np.float64)
    seconds_b = frame["seconds_b"].to_numpy(dtype=np.float64)
    frame["delta_s"] = seconds_b - seconds_a
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["ratio"] = seconds_b / seconds_a
    return frame[list(COMPARISON_COLUMNS)]


def _per_rank(events: pd.DataFrame, ranks: Iterable[int] | None) -> pd.DataFrame:
    """``rank, phase, seconds`` of one run (one row per rank and phase seen in the run)."""
    breakdown = phase_breakdown(events.assign(run_id=""), by=("rank",), ranks=ranks)
    out = breakdown[["rank", "phase", "seconds"]].copy()
    out["rank"] = out["rank"].astype("int64")
    out["phase"] = out["phase"].astype(object)
    return out


def _wall_s(per_rank: pd.DataFrame) -> float:
    """A run's wall time: every rank's seconds add up to it, so the largest sum is it."""
    return float(per_rank.groupby("rank")["seconds"].sum().max()) if len(per_rank) else 0.0


def _presence(in_a: bool, in_b: bool) -> str:
    if in_a and in_b:
        return "both"
    return "a only" if in_a else "b only"


def _sorted(frame: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    position = {phase: index for index, phase in enumerate(order)}
    return (
        frame.assign(position=frame["phase"].map(position))
        .sort_values(["rank", "position"], kind="stable")
        .drop(columns="position")
        .reset_index(drop=True)
    )
