"""Plain-language findings, ranked by the wall time they cost.

Each finding is one sentence a user can act on, with ``seconds_lost``: the wall-clock seconds the
problem costs, computed from the breakdown (how is stated per kind below). Findings look at the same
time from different angles, so they can overlap (ranks waiting for rank 0's evaluation are also
communication waiting): do not add their seconds up.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import phase_breakdown
from workbench.analysis.pop import pop_metrics

FINDING_COLUMNS: tuple[str, ...] = ("order", "kind", "text", "seconds_lost", "fraction_of_wall", "ranks")


def findings(
    events: pd.DataFrame,
    *,
    pop: pd.DataFrame | None = None,
    ranks: Iterable[int] | None = None,
    min_fraction: float = 0.02,
    efficiency_target: float = 0.8,
) -> pd.DataFrame:
    """Findings for one run, largest ``seconds_lost`` first (columns ``FINDING_COLUMNS``).

    Kinds and what their ``seconds_lost`` is (``W`` = wall time, ``R`` = ranks, per-rank seconds
    from ``phase_breakdown``):

    - ``serial_evaluation``: some ranks evaluate, others do not. ``max(eval) - sum(eval) / R``:
      the time saved if evaluation were shared evenly.
    - ``load_imbalance``: ``max(compute) - mean(compute)``: the time ranks wait for the slowest.
    - ``communication``: mean over ranks of communication (transfer + waiting) seconds.
    - ``input_pipeline``: mean over ranks of input seconds (waiting for the next batch).
    - ``idle``: mean over ranks of idle seconds (time in no span).
    - ``low_parallel_efficiency`` (POP PE below ``efficiency_target``): ``W * (1 - PE)``.

    A finding is reported when its ``seconds_lost / W`` is at least ``min_fraction`` (low
    parallel efficiency: whenever PE is below the target). ``pop`` is ``pop_metrics`` of the same
    run (computed when not given). No findings: an empty frame with the same columns.
    """
    breakdown = phase_breakdown(events, by=("run_id", "rank"), ranks=ranks)
    if breakdown.empty:
        raise ValueError("no events: record a run before asking for findings")
    runs = breakdown["run_id"].unique()
    if len(runs) > 1:
        raise ValueError(f"events hold {len(runs)} runs: select one (events[events.run_id == ...])")
    seconds = breakdown.pivot_table(
        index="rank", columns="phase", values="seconds", aggfunc="sum", fill_value=0.0
    )
    phase = {p: seconds[p] if p in seconds else pd.Series(0.0, index=seconds.index) for p in _PHASES}
    wall = float(seconds.sum(axis=1).max())
    if wall <= 0:
        raise ValueError("the run has zero wall time: its spans are all zero-length")
    n_ranks = len(seconds)
    rows: list[dict] = []

    def add(kind: str, text: str, lost: float, involved: Iterable[int] | str) -> None:
        rows.append(
            {
                "kind": kind,
                "text": text,
                "seconds_lost": float(lost),
                "fraction_of_wall": float(lost) / wall,
                "ranks": involved if isinstance(involved, str) else rank_list(involved),
            }
        )

    evaluation = phase[ev.EVALUATION]
    # Serial evaluation is imbalance, not presence: ranks that evaluate for under half the busiest
    # rank's time (often an empty span around a skipped evaluation) count as waiting for it.
    evaluators = evaluation.index[(evaluation > 0) & (evaluation >= 0.5 * evaluation.max())]
    if 0 < len(evaluators) < n_ranks:
        lost = float(evaluation.max() - evaluation.sum() / n_ranks)
        others = seconds.index.difference(evaluators)
        waiting = phase[ev.COMMUNICATION] + phase[ev.COMMUNICATION_WAIT] + phase[ev.IDLE]
        wait_share = float(waiting[others].mean()) / wall
        if lost / wall >= min_fraction:
            verb = "evaluates" if len(evaluators) == 1 else "evaluate"
            add(
                "serial_evaluation",
                f"{_ranks_word(evaluators)} {rank_list(evaluators)} {verb} for {evaluation.max() / wall:.0%}"
                f" of wall time while {_ranks_word(others)} {rank_list(others)} wait (communication or idle:"
                f" {wait_share:.0%} of their time); sharing evaluation over all ranks would save about"
                f" {lost:.1f} s",
                lost,
                evaluators,
            )

    compute = phase[ev.COMPUTE]
    if n_ranks > 1 and compute.max() > 0:
        lost = float(compute.max() - compute.mean())
        if lost / wall >= min_fraction:
            most, least = compute.idxmax(), compute.idxmin()
            shortfall = 1 - compute.min() / compute.max()
            add(
                "load_imbalance",
                f"load imbalance: rank {least} computes {shortfall:.0%} less than rank {most}"
                f" ({compute.min():.1f} s vs {compute.max():.1f} s); the others wait for rank {most}",
                lost,
                [least, most],
            )

    transfer, waiting = phase[ev.COMMUNICATION], phase[ev.COMMUNICATION_WAIT]
    lost = float((transfer + waiting).mean())
    if lost / wall >= min_fraction:
        detail = f" ({waiting.mean() / wall:.0%} waiting)" if waiting.max() > 0 else ""
        add("communication", f"communication takes {lost / wall:.0%} of wall time{detail}", lost, "all")

    input_s = phase[ev.INPUT]
    lost = float(input_s.mean())
    if lost / wall >= min_fraction:
        add(
            "input_pipeline",
            f"input pipeline: ranks wait {lost / wall:.0%} of time for the next batch"
            f" (most: rank {input_s.idxmax()}, {input_s.max() / wall:.0%})",
            lost,
            _busy_ranks(input_s),
        )

    idle = phase[ev.IDLE]
    lost = float(idle.mean())
    if lost / wall >= min_fraction:
        add(
            "idle",
            f"idle: ranks spend {lost / wall:.0%} of wall time in no recorded span"
            f" (most: rank {idle.idxmax()}, {idle.max() / wall:.0%})",
            lost,
            _busy_ranks(idle),
        )

    if pop is None:
        pop = pop_metrics(events, ranks=ranks, breakdown=breakdown)
    if len(pop) != 1:
        raise ValueError(f"pop has {len(pop)} rows: pass pop_metrics of this one run")
    metrics = pop.iloc[0]
    efficiency = float(metrics["parallel_efficiency"])
    if efficiency < efficiency_target:
        runtime = float(metrics["runtime_s"])
        add(
            "low_parallel_efficiency",
            f"parallel efficiency is {efficiency:.2f} (below {efficiency_target:.2f}): load balance"
            f" {metrics['load_balance']:.2f} x communication efficiency"
            f" {metrics['communication_efficiency']:.2f}",
            runtime * (1.0 - efficiency),
            "all",
        )
    return _ranked(rows)


def oversubscription_finding(
    ranks: int, threads_per_rank: int, cores: int, *, wall_s: float | None = None
) -> pd.DataFrame:
    """A finding when ``ranks * threads_per_rank`` exceeds the cores: threads queue for a core.

    With ``demand = ranks * threads_per_rank > cores`` only ``cores / demand`` of the threads can
    run at once, so a compute-bound run loses up to ``wall_s * (1 - cores / demand)`` seconds
    (``seconds_lost``; 0.0 when ``wall_s`` is not given, ``fraction_of_wall`` is then still
    ``1 - cores / demand``). Empty frame when there is no oversubscription.
    """
    for name, value in (("ranks", ranks), ("threads_per_rank", threads_per_rank), ("cores", cores)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name}={value} must be a whole number >= 1")
    if wall_s is not None and wall_s < 0:
        raise ValueError(f"wall_s={wall_s} must be >= 0")
    demand = int(ranks) * int(threads_per_rank)
    if demand <= cores:
        return _ranked([])
    share = 1.0 - cores / demand
    lost = 0.0 if wall_s is None else float(wall_s) * share
    advice = max(1, int(cores) // int(ranks))
    text = (
        f"oversubscription: {ranks} ranks x {threads_per_rank} threads = {demand} threads on {cores} cores"
        f" ({demand / cores:.1f}x); set {advice} thread(s) per rank (TF intra-op threads, OMP_NUM_THREADS)"
    )
    if wall_s is None:
        text += "; pass wall_s to estimate the seconds lost"
    row = {
        "kind": "oversubscription",
        "text": text,
        "seconds_lost": lost,
        "fraction_of_wall": share,
        "ranks": "all",
    }
    return _ranked([row])


def rank_list(ranks: Iterable[int]) -> str:
    """Compact rank list for sentences: ``[1, 2, 3, 5]`` -> ``"1–3, 5"``."""
    values = sorted({int(r) for r in ranks})
    parts: list[str] = []
    start = previous = None
    for value in [*values, None]:
        if start is not None and (value is None or value != previous + 1):
            parts.append(str(start) if start == previous else f"{start}–{previous}")
            start = None
        if value is not None and start is None:
            start = value
        previous = value
    return ", ".join(parts)


_PHASES = (ev.COMPUTE, ev.COMMUNICATION, ev.COMMUNICATION_WAIT, ev.EVALUATION, ev.INPUT, ev.IDLE)


def _ranks_word(ranks: Iterable[int]) -> str:
    return "rank" if len(list(ranks)) == 1 else "ranks"


def _busy_ranks(seconds: pd.Series) -> str:
    return rank_list(seconds.index[seconds > 0])


def _ranked(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=[c for c in FINDING_COLUMNS if c != "order"])
    frame = frame.sort_values(["seconds_lost", "kind"], ascending=[False, True], kind="stable").reset_index(
        drop=True
    )
    frame.insert(0, "order", np.arange(1, len(frame) + 1))
    return frame.astype({"seconds_lost": "float64", "fraction_of_wall": "float64"})
