"""Caveats as findings: when a sweep's numbers are too short, too noisy or too contended for its claims.

A speedup printed with two decimals reads as a fact. These findings say, with the numbers that
justify it, when it is not one: ranks that made training slower (a scaling result below 1x), runs
so short that start-up weighs on every ratio, repetitions that spread more than the differences
being claimed, and more ranks than cores. They use the findings' columns (``FINDING_COLUMNS``) so
they sit in the same tables; their cost cannot be measured, so ``seconds_lost`` is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from workbench.analysis.findings import FINDING_COLUMNS, combine_findings

#: Runs shorter than this (seconds) are dominated by start-up, tracing and warm-up.
MIN_CREDIBLE_WALL_S = 10.0
#: Repetitions whose standard deviation exceeds this share of their mean are called noisy.
MAX_CREDIBLE_SPREAD = 0.10


def _finding(kind: str, text: str, ranks: str = "all") -> dict:
    return {"kind": kind, "text": text, "seconds_lost": math.nan, "fraction_of_wall": math.nan, "ranks": ranks}


def sweep_caveats(
    *,
    scaling: pd.DataFrame | None = None,
    walls_s: Iterable[float] = (),
    ranks: int | None = None,
    cores: int | None = None,
    label: str = "",
    min_wall_s: float = MIN_CREDIBLE_WALL_S,
    max_spread: float = MAX_CREDIBLE_SPREAD,
) -> pd.DataFrame:
    """Caveat findings for a sweep (columns ``FINDING_COLUMNS``; empty when nothing calls for one).

    - ``scaling`` (``analysis.scaling_table``: ranks, speedup, and optionally throughput_mean,
      throughput_std, repetitions): a rank count above 1 with speedup < 1 -> ``scaling_below_1x``;
      repetitions whose std / mean > ``max_spread`` -> ``noisy_repetitions``; a single repetition
      per rank count -> ``single_repetition`` (its spread is unknown).
    - ``walls_s``: the runs' wall times; the shortest below ``min_wall_s`` -> ``short_runs``.
    - ``ranks`` > ``cores`` -> ``more_ranks_than_cores``.
    ``label`` (``"horovod: "``) prefixes every text but the single-repetition one, which is the same
    for every group of a sweep (drop duplicate texts when combining groups).
    """
    rows: list[dict] = []
    contended = ranks is not None and cores is not None and ranks > cores
    if scaling is not None and len(scaling) and {"ranks", "speedup"} <= set(scaling.columns):
        for row in scaling.sort_values("ranks").itertuples():
            speedup = float(row.speedup)
            if row.ranks > 1 and math.isfinite(speedup) and speedup < 1:
                why = (
                    f"; {ranks} ranks share {cores} cores, so this measures contention, not scaling"
                    if contended
                    else "; the timeline shows what the added ranks wait on"
                )
                rows.append(
                    _finding(
                        "scaling_below_1x",
                        f"{label}{row.ranks} ranks ran at {speedup:.2f}x the throughput of 1 rank: adding ranks made "
                        f"training slower here, so this sweep shows no scaling gain{why}",
                        str(row.ranks),
                    )
                )
            mean, std = getattr(row, "throughput_mean", math.nan), getattr(row, "throughput_std", math.nan)
            if math.isfinite(mean) and mean > 0 and math.isfinite(std) and std / mean > max_spread:
                rows.append(
                    _finding(
                        "noisy_repetitions",
                        f"{label}repetitions at {row.ranks} rank(s) spread by ±{std / mean:.0%} of their mean "
                        f"throughput (more than {max_spread:.0%}): differences smaller than that are noise; run more "
                        "repetitions or a longer preset",
                        str(row.ranks),
                    )
                )
        repetitions = scaling["repetitions"] if "repetitions" in scaling else pd.Series(dtype=float)
        if len(repetitions) and int(repetitions.max()) <= 1:
            rows.append(
                _finding(
                    "single_repetition",
                    "one run per rank count: the spread between runs is unknown, so a speedup within about "
                    f"{max_spread:.0%} of another may be noise; repeat the sweep to measure it",
                )
            )
    walls = [float(w) for w in walls_s if w is not None and math.isfinite(float(w))]
    if walls and min(walls) < min_wall_s:
        rows.append(
            _finding(
                "short_runs",
                f"{label}the shortest run took {min(walls):.1f} s (under {min_wall_s:g} s): start-up, graph tracing "
                "and warm-up weigh on every ratio measured from it; use a longer preset before trusting the speedups",
            )
        )
    if contended:
        rows.append(
            _finding(
                "more_ranks_than_cores",
                f"{label}{ranks} ranks on {cores} cores: ranks take turns on the cores, so times and speedups at "
                "that size say more about the machine than about the training",
            )
        )
    return combine_findings(pd.DataFrame(rows, columns=[c for c in FINDING_COLUMNS if c != "order"]))


__all__ = ["MAX_CREDIBLE_SPREAD", "MIN_CREDIBLE_WALL_S", "sweep_caveats"]
