"""POP Centre of Excellence efficiency metrics for one run and across runs.

The POP model splits parallel efficiency into two factors that point at different fixes:

- load balance (``LB = mean(useful) / max(useful)``): ranks do unequal amounts of useful work;
- communication efficiency (``CommE = max(useful) / runtime``): even the busiest rank spends time
  outside useful work (communicating, waiting, idle);
- parallel efficiency ``PE = LB * CommE = mean(useful) / runtime``.

Across runs with different rank counts, computation scalability (``CompSc``) says whether the total
useful work grows with the rank count, and global efficiency is ``PE * CompSc``.
See https://pop-coe.eu/node/69 for the definitions.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import lane_table
from workbench.events import NS_PER_S

POP_COLUMNS: tuple[str, ...] = (
    "run_id",
    "ranks",
    "runtime_s",
    "useful_mean_s",
    "useful_max_s",
    "useful_total_s",
    "load_balance",
    "communication_efficiency",
    "parallel_efficiency",
    "useful_phases",
    "note",
)


def useful_phase_set(
    input_is_useful: bool = True, useful_phases: Iterable[str] | None = None
) -> tuple[str, ...]:
    """The phases that count as useful work: compute (+ input), or exactly ``useful_phases``.

    Evaluation is not useful by default: it does not advance training, and when one rank does it
    the others wait, which is exactly the loss the metrics should show.
    """
    if useful_phases is not None:
        chosen = tuple(dict.fromkeys(useful_phases))
        if not chosen:
            raise ValueError("useful_phases is empty: name at least one phase, e.g. ('compute',)")
        return chosen
    return (ev.COMPUTE, ev.INPUT) if input_is_useful else (ev.COMPUTE,)


def pop_metrics(
    events: pd.DataFrame,
    *,
    input_is_useful: bool = True,
    useful_phases: Iterable[str] | None = None,
    ranks: Iterable[int] | None = None,
    breakdown: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per run: runtime, useful time and the POP efficiencies (columns ``POP_COLUMNS``).

    Useful time per rank is the time its innermost span is in a useful phase (``useful_phase_set``);
    runtime is the run's wall time (first start to last end over all ranks). ``ranks`` adds ranks
    with no events (they count with zero useful time). Pass ``breakdown`` (``phase_breakdown(events,
    by=("run_id", "rank"))``) to skip recomputing it.

    A run the metrics cannot describe still gets its row, with the efficiencies NaN and ``note``
    saying why and what to record: zero wall time (only zero-length spans) or no time in a useful
    phase (no compute spans). A one-rank run's note says that load balance is 1 by definition and
    that communication efficiency is then just the share of time in the useful phases. No events:
    an empty frame. ``note`` is "" otherwise.
    """
    useful = useful_phase_set(input_is_useful, useful_phases)
    useful_label = "+".join(useful)
    if breakdown is None:  # the per-lane table is all POP needs: skip the long-format reshaping
        table = lane_table(events, ranks=ranks)
        breakdown = table.assign(seconds=table["ns"] / NS_PER_S)[["run_id", "rank", "phase", "seconds"]]
    missing = [c for c in ("run_id", "rank", "phase", "seconds") if c not in breakdown]
    if missing:
        raise ValueError(
            f"breakdown lacks columns {missing}: pass phase_breakdown(events, by=('run_id', 'rank'))"
        )
    per_rank = breakdown.assign(useful_s=np.where(breakdown["phase"].isin(useful), breakdown["seconds"], 0.0))
    per_rank = per_rank.groupby(["run_id", "rank"], sort=True).agg(
        wall_s=("seconds", "sum"), useful_s=("useful_s", "sum")
    )
    rows = []
    for run_id, run in per_rank.groupby(level="run_id", sort=True):
        runtime = float(run["wall_s"].max())
        useful_max = float(run["useful_s"].max())
        useful_mean = float(run["useful_s"].mean())
        load_balance = communication_efficiency = float("nan")
        if runtime <= 0:
            note = "zero wall time: every span is zero-length; record spans with their real start and end"
        elif useful_max <= 0:
            note = (
                f"no time in the useful phases ({useful_label}): record the training steps as"
                " compute spans (Recorder.phase('compute'), the Keras callback) or pass useful_phases"
            )
        else:
            load_balance = useful_mean / useful_max
            communication_efficiency = useful_max / runtime
            note = (
                f"1 rank: load balance is 1 by definition; communication efficiency is the share of"
                f" wall time in the useful phases ({useful_label})"
                if len(run) == 1
                else ""
            )
        rows.append(
            {
                "run_id": run_id,
                "ranks": len(run),
                "runtime_s": runtime,
                "useful_mean_s": useful_mean,
                "useful_max_s": useful_max,
                "useful_total_s": float(run["useful_s"].sum()),
                "load_balance": load_balance,
                "communication_efficiency": communication_efficiency,
                "parallel_efficiency": load_balance * communication_efficiency,
                "useful_phases": useful_label,
                "note": note,
            }
        )
    return pd.DataFrame(rows, columns=list(POP_COLUMNS))


def pop_scaling(
    per_run: pd.DataFrame, *, kind: str = "strong", reference_ranks: int | None = None
) -> pd.DataFrame:
    """Add computation scalability and global efficiency to ``pop_metrics`` rows of several runs.

    - strong scaling (same total work): ``computation_scalability = useful_total(ref) / useful_total(n)``;
      1.0 means adding ranks did not add work (no extra instructions, no cache losses).
    - weak scaling (same work per rank): the reference total is scaled by ``n / ref`` first,
      ``computation_scalability = useful_total(ref) * n / ref / useful_total(n)``.
    - ``global_efficiency = parallel_efficiency * computation_scalability``.

    The reference is the smallest rank count (or ``reference_ranks``); several runs at the reference
    count (repetitions) are averaged. Output: the input columns plus ``reference_ranks``,
    ``computation_scalability``, ``global_efficiency``, sorted by ``ranks``.
    """
    if kind not in ("strong", "weak"):
        raise ValueError(f"kind={kind!r}: use 'strong' (same total work) or 'weak' (same work per rank)")
    needed = ("ranks", "useful_total_s", "parallel_efficiency")
    missing = [c for c in needed if c not in per_run]
    if missing:
        raise ValueError(f"per_run lacks columns {missing}: pass the output of pop_metrics")
    if per_run.empty:
        raise ValueError("per_run is empty: pass pop_metrics rows of at least one run")
    reference = int(per_run["ranks"].min()) if reference_ranks is None else int(reference_ranks)
    at_reference = per_run.loc[per_run["ranks"] == reference, "useful_total_s"]
    if at_reference.empty:
        raise ValueError(
            f"no run with {reference} ranks: reference_ranks must be one of {sorted(per_run['ranks'])}"
        )
    reference_useful = float(at_reference.mean())
    if (per_run["useful_total_s"] <= 0).any():
        raise ValueError("a run has zero useful time: computation scalability would divide by zero")
    out = per_run.sort_values("ranks", kind="stable").reset_index(drop=True).copy()
    expected = reference_useful * (out["ranks"] / reference if kind == "weak" else 1.0)
    out["reference_ranks"] = reference
    out["computation_scalability"] = expected / out["useful_total_s"]
    out["global_efficiency"] = out["parallel_efficiency"] * out["computation_scalability"]
    return out
