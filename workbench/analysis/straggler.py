"""Which rank arrives last to the allreduce, and how long the others really wait for it.

Horovod's timeline shows collectives *in flight* on its background thread while the ranks keep
computing, so its spans are no measure of blocked time. Blocked time is derived here, per step
and rank, from one of these kinds of evidence (``evidence`` says which):

- ``lateness`` (Horovod's timeline): inside every ``NEGOTIATE_*`` the coordinator marks when each
  rank submitted the tensor. A rank's *arrival* in a step is when it submitted its last tensor of
  that step; after it, it cannot finish the step before the last rank has arrived too. So
  ``wait = latest arrival - own arrival``.
- ``tf_profiler`` (``--trace-steps``, a window of steps): TF's profiler shows each Horovod kernel
  from its start to its done on every rank; a rank's longest kernel wait in a step minus the
  shortest such wait over ranks (the last rank still waits for the transfer) is its blocked time.
  Preferred where present: it is measured on the rank itself.
- ``arrival`` (blocking collectives recorded as ``communication`` spans inside the step, e.g.
  ``Recorder.phase("communication", "allreduce")`` around ``MPI.Allreduce``): a rank's arrival is
  the start of its last such span in the step, and it is blocked until the last rank arrives:
  ``wait = latest arrival - own arrival``, at most the span's own length.
- ``between_collectives`` (blocking collectives recorded as ``communication`` spans after the step,
  e.g. ``Recorder.phase("communication", "allreduce")`` around ``MPI.Allreduce`` outside the step's
  span): the ranks leave a collective together, so a rank's work until its next collective is its
  arrival: ``wait = max(work over ranks) - own work``, at most its collective's length, and the wait
  lies in the collective, not in the step (``collective_intervals``). Where a run records its
  collectives so, step lengths say nothing of waits (the steps do not end together) and are not used.
- ``step_length`` (step spans only): ranks in lock step end a step together, so a rank whose step
  lasts longer than the shortest one of the same step spent the difference waiting:
  ``wait = duration - min(duration over ranks)``. Blind to imbalance *inside* the step (ranks
  then all last as long), which is why lateness is preferred where the timeline has it.

The rank with no wait in a step is that step's last arrival (``late_rank``). No wait is derived
in a rank's first step (``WARMUP_STEPS``): it traces and compiles the step function. Steps are the
``compute`` spans named ``train_step`` (what ``workbench profile`` and the Keras callback
record), matched across ranks by their ``step`` number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.events import NS_PER_S, events_frame, rank_list, ranks_with_hosts

STEP_NAME = "train_step"
#: ``step_waits`` columns.
STEP_WAIT_COLUMNS: tuple[str, ...] = (
    "rank",
    "step",
    "start_ns",
    "end_ns",
    "duration_s",
    "wait_s",
    "compute_s",
    "late_rank",
    "evidence",
    "wait_end_ns",
)
#: ``allreduce_lateness`` columns.
LATENESS_COLUMNS: tuple[str, ...] = ("step", "rank", "tensors", "arrival_ns", "lateness_s", "last")
#: Name of the derived wait spans ``wait_spans`` adds (phase ``communication_wait``).
WAIT_SPAN_NAME = "wait_for_late_rank"
LATENESS = "lateness"
ARRIVAL = "arrival"
STEP_LENGTH = "step_length"
BETWEEN_COLLECTIVES = "between_collectives"
TF_PROFILER = "tf_profiler"
#: How each kind of evidence is named in findings.
EVIDENCE_TEXT = {
    TF_PROFILER: "TF profiler's Horovod kernel waits",
    LATENESS: "Horovod's negotiation readiness (lateness)",
    ARRIVAL: "when each rank entered its blocking collective",
    STEP_LENGTH: "step lengths (the others' steps last longer)",
    BETWEEN_COLLECTIVES: "each rank's work between its collectives",
}
#: Each rank's first step traces and compiles the step function; ranks finish that at different
#: times, which is start-up, not a loss in steady state: no wait is derived in it.
WARMUP_STEPS = 1
#: A step counts towards naming its last rank only when someone waited at least this share of
#: the median step for it: a rank last by microseconds (the coordinator serves its own request
#: first) is no straggler.
SIGNIFICANT_WAIT_SHARE = 0.02
#: A rank is called a straggler when it is the last to arrive in at least this share of steps.
STRAGGLER_SHARE = 0.75


def step_spans(events: pd.DataFrame, *, step_name: str = STEP_NAME) -> pd.DataFrame:
    """One row per (rank, step): ``rank, step, start_ns, end_ns`` of the steps with a number."""
    chosen = (events["phase"] == ev.COMPUTE).to_numpy() & (events["name"] == step_name).to_numpy()
    chosen &= events["step"].to_numpy() >= 0
    rows = np.flatnonzero(chosen)
    rank = events["rank"].to_numpy()[rows].astype(np.int64)
    step = events["step"].to_numpy()[rows].astype(np.int64)
    start = events["start_ns"].to_numpy()[rows]
    same_rank = rank[1:] == rank[:-1]
    same_step = same_rank & (step[1:] == step[:-1])
    in_order = (rank[1:] > rank[:-1]) | (same_rank & (step[1:] > step[:-1])) | (same_step & (start[1:] >= start[:-1]))
    if not in_order.all():  # recorded out of order: sort (runs as the store returns them skip this)
        order = np.lexsort((start, step, rank))
        rows, rank, step = rows[order], rank[order], step[order]
        same_step = (rank[1:] == rank[:-1]) & (step[1:] == step[:-1])
    first = np.concatenate([[True], ~same_step]) if len(rows) else np.zeros(0, dtype=bool)
    rows = rows[first]
    return pd.DataFrame(
        {
            "rank": rank[first],
            "step": step[first],
            "start_ns": events["start_ns"].to_numpy()[rows],
            "end_ns": events["end_ns"].to_numpy()[rows],
        },
        copy=False,  # fresh arrays: not stacked into one block (a copy of millions of rows)
    )


def allreduce_lateness(events: pd.DataFrame, *, step_name: str = STEP_NAME) -> pd.DataFrame:
    """Per step and rank: when it submitted its last tensor (``arrival_ns``) and how late that was.

    Readiness comes from the per-rank ``NEGOTIATE_*`` spans of Horovod's timeline (start = the
    rank's readiness, end = the end of the negotiation, shared by every rank of one negotiation).
    A negotiation belongs to the step of the lowest rank with steps whose span holds its end.
    ``lateness_s`` is ``arrival - earliest arrival`` in that step; ``last`` marks the latest rank.
    Only steps where every rank of the negotiations has a readiness mark are kept. No timeline or
    no steps: an empty frame with ``LATENESS_COLUMNS``.
    """
    steps = step_spans(events, step_name=step_name)
    if steps.empty:
        return _empty_lateness()
    return lateness_table(readiness_marks(negotiation_spans(events), reference_of(steps)))


def _empty_lateness() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in LATENESS_COLUMNS})


def negotiation_spans(events: pd.DataFrame) -> pd.DataFrame:
    """``rank, start_ns, end_ns`` of the ``NEGOTIATE_*`` spans: each rank's readiness in Horovod's timeline."""
    names = events["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):  # test each name once, not each row
        chosen = np.asarray([str(c).startswith("NEGOTIATE") for c in names.cat.categories] + [False])
        rows = np.flatnonzero(chosen[names.cat.codes.to_numpy()])
    else:
        rows = np.flatnonzero(names.str.startswith("NEGOTIATE", na=False).to_numpy(dtype=bool))
    # built from arrays (not .loc, which takes every column's blocks), not stacked into one block
    columns = {column: events[column].to_numpy()[rows] for column in ("rank", "start_ns", "end_ns")}
    return pd.DataFrame(columns, copy=False)


def readiness_marks(negotiations: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Per step and rank with a negotiation (``negotiation_spans``) ending inside the ``reference``
    rank's step: ``step, rank, tensors, arrival_ns`` (the latest readiness in that step), rank by rank.

    The rank's own part of ``allreduce_lateness``: ranks apart (a rank group) give the same marks.
    """
    columns = ["step", "rank", "tensors", "arrival_ns"]
    if negotiations.empty or reference.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})
    reference = reference.sort_values("start_ns")
    starts = reference["start_ns"].to_numpy(np.int64)
    ends = reference["end_ns"].to_numpy(np.int64)
    negotiation_end = negotiations["end_ns"].to_numpy(np.int64)
    index = np.searchsorted(starts, negotiation_end, side="right") - 1
    inside = (index >= 0) & (negotiation_end <= ends[np.clip(index, 0, None)])
    rank = negotiations["rank"].to_numpy(np.int64)[inside]
    index = index[inside]
    arrival = negotiations["start_ns"].to_numpy(np.int64)[inside]
    # one row per (rank, step): the store's order (rank, then time) already groups them; sort if not
    key = rank * len(starts) + index
    if len(key) > 1 and not (key[1:] >= key[:-1]).all():
        order = np.argsort(key, kind="stable")
        key, rank, index, arrival = key[order], rank[order], index[order], arrival[order]
    first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if len(key) else np.zeros(0, np.int64)
    return pd.DataFrame(
        {
            "step": reference["step"].to_numpy(np.int64)[index[first]],
            "rank": rank[first],
            "tensors": np.diff(np.append(first, len(key))),
            "arrival_ns": np.maximum.reduceat(arrival, first) if len(first) else arrival[:0],
        }
    )


#: ``step_arrivals`` columns: per step, how many ranks marked it, the first and the latest arrival.
STEP_ARRIVAL_COLUMNS: tuple[str, ...] = ("step", "ranks", "first_ns", "latest_ns")


def step_arrivals(marks: pd.DataFrame) -> pd.DataFrame:
    """Per step of ``readiness_marks``: ranks that marked it, first and latest arrival (``STEP_ARRIVAL_COLUMNS``);
    the ``attrs["ranks"]`` count of ranks with any mark."""
    step = marks["step"].to_numpy(np.int64)
    rank = marks["rank"].to_numpy(np.int64)
    arrival = marks["arrival_ns"].to_numpy(np.int64)
    span = int(step.max() - step.min() + 1) if len(step) else 0
    if len(step) and span <= 4 * len(step) + 1024:  # step numbers dense, as steps are: arrays indexed by step
        at = step - step.min()
        counts = np.bincount(at, minlength=span)
        first = np.full(span, np.iinfo(np.int64).max)
        latest = np.full(span, np.iinfo(np.int64).min)
        np.minimum.at(first, at, arrival)
        np.maximum.at(latest, at, arrival)
        present = np.flatnonzero(counts)
        table = pd.DataFrame(
            {
                "step": present + step.min(),
                "ranks": counts[present],
                "first_ns": first[present],
                "latest_ns": latest[present],
            }
        )
    else:
        table = marks.groupby("step").agg(
            ranks=("rank", "size"), first_ns=("arrival_ns", "min"), latest_ns=("arrival_ns", "max")
        )
        table = table.reset_index()[list(STEP_ARRIVAL_COLUMNS)].astype({"step": "int64", "ranks": "int64"})
    in_order = len(rank) < 2 or bool((rank[1:] >= rank[:-1]).all())
    table.attrs["ranks"] = int(1 + (rank[1:] != rank[:-1]).sum()) if in_order and len(rank) else len(pd.unique(rank))
    return table


def lateness_of_marks(marks: pd.DataFrame, arrivals: pd.DataFrame) -> pd.DataFrame:
    """``allreduce_lateness`` rows of ``marks`` (some or all ranks) against the whole run's ``step_arrivals``.

    Only steps that every rank with marks marked are kept; fewer than 2 such ranks: empty. Rows in
    the order of ``marks``.
    """
    all_ranks = int(arrivals.attrs.get("ranks", 0))
    complete = arrivals[arrivals["ranks"] == all_ranks]
    if marks.empty or complete.empty or all_ranks < 2:
        return _empty_lateness()
    steps = complete["step"].to_numpy(np.int64)  # sorted (a groupby's keys)
    step = marks["step"].to_numpy(np.int64)
    at = np.clip(np.searchsorted(steps, step), 0, len(steps) - 1)
    kept = steps[at] == step
    if not kept.any():
        return _empty_lateness()
    at = at[kept]
    arrival = marks["arrival_ns"].to_numpy(np.int64)[kept]
    return pd.DataFrame(
        {
            "step": step[kept],
            "rank": marks["rank"].to_numpy(np.int64)[kept],
            "tensors": marks["tensors"].to_numpy()[kept],
            "arrival_ns": arrival,
            "lateness_s": (arrival - complete["first_ns"].to_numpy(np.int64)[at]) / NS_PER_S,
            "last": arrival == complete["latest_ns"].to_numpy(np.int64)[at],
        }
    )


@dataclass(frozen=True)
class StepEvidence:
    """What ``step_waits`` reads from the events, rank by rank: rank groups' evidence, concatenated in rank order
    (``merge``), is the whole run's, so waits derived from it are the same at any size.

    Every table is per (rank, step) at most: its size grows with ranks and steps, not with events.
    """

    #: ``step_spans``: ``rank, step, start_ns, end_ns``.
    steps: pd.DataFrame
    #: ``collective_steps``: each rank's blocking collectives per step, before the steps all ranks share are kept.
    collectives: pd.DataFrame
    #: The ranks with ``communication`` spans in a step (whether or not a step of theirs is kept).
    collective_ranks: tuple[int, ...]
    #: ``last_collectives``: per step and rank, the start and length of its last collective inside the step.
    arrivals: pd.DataFrame
    #: ``readiness_marks`` against the run's reference steps (None until the reference is known).
    marks: pd.DataFrame | None
    #: ``longest_kernels``: per step and rank, its longest Horovod kernel in TF's profiler.
    kernels: pd.DataFrame

    @staticmethod
    def merge(parts: Sequence[StepEvidence]) -> StepEvidence:
        """The evidence of disjoint rank groups, given in rank order, as one run's."""
        parts = list(parts)
        if not parts:
            return step_evidence(ev.empty_events())
        marks = [p.marks for p in parts if p.marks is not None]
        return StepEvidence(
            steps=concat_frames([p.steps for p in parts]),
            collectives=concat_frames([p.collectives for p in parts]),
            collective_ranks=tuple(sorted({r for p in parts for r in p.collective_ranks})),
            arrivals=concat_frames([p.arrivals for p in parts]),
            marks=concat_frames(marks) if len(marks) == len(parts) else None,
            kernels=concat_frames([p.kernels for p in parts]),
        )


def concat_frames(
    frames: Sequence[pd.DataFrame | None], empty: Callable[[], pd.DataFrame] | None = None
) -> pd.DataFrame:
    """Rank groups' frames of the same columns one after the other (the one with rows as it is, when it is alone);
    none with rows: ``empty()``, else the first frame."""
    kept = [f for f in frames if f is not None and len(f)]
    if not kept:
        return empty() if empty is not None else frames[0]
    return kept[0] if len(kept) == 1 else pd.concat(kept, ignore_index=True)


def reference_of(steps: pd.DataFrame) -> pd.DataFrame:
    """The run's reference steps (the lowest rank with steps) among ``step_spans`` rows."""
    return steps[steps["rank"] == steps["rank"].min()] if len(steps) else steps


def step_evidence(
    events: pd.DataFrame, reference: pd.DataFrame | str = "own", *, step_name: str = STEP_NAME
) -> StepEvidence:
    """``StepEvidence`` of ``events`` (some ranks or all). ``reference``: the run's reference steps for the
    readiness marks; ``"own"``: the lowest rank of ``events`` with steps (right for the whole run); ``"unknown"``:
    not known yet (``marks`` None, made later with ``readiness_marks``)."""
    steps = step_spans(events, step_name=step_name) if len(events) else _empty_steps()
    collectives = events[events["phase"] == ev.COMMUNICATION] if len(events) else events
    per_step, ranks = collective_steps(collectives, warmup_steps=0)
    if isinstance(reference, str):
        if reference not in ("own", "unknown"):
            raise ValueError(f"reference={reference!r}: use step spans, 'own' or 'unknown'")
        reference = reference_of(steps) if reference == "own" else None
    marks = readiness_marks(negotiation_spans(events), reference) if reference is not None else None
    return StepEvidence(
        steps=steps,
        collectives=per_step,
        collective_ranks=ranks,
        arrivals=last_collectives(collectives, steps),
        marks=marks,
        kernels=longest_kernels(events, steps),
    )


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("rank", "step", "start_ns", "end_ns")})


def step_waits(events: pd.DataFrame, *, step_name: str = STEP_NAME) -> pd.DataFrame:
    """Per rank and step: its duration, the time it waited for the last rank, and on what evidence.

    ``wait_s`` from lateness where the timeline covers the step, else from step length where every
    rank recorded the step (see the module docstring); ``compute_s = duration_s - wait_s``
    (clipped at 0), or the whole step where the wait lies in a collective after it
    (``between_collectives``). ``wait_end_ns``: where the wait ends (the step's end, or inside the
    collective). Steps some rank lacks and have no lateness get ``wait_s = 0`` and ``evidence``
    "". ``late_rank`` is the step's last arrival (-1 when unknown). No steps: an empty frame with
    ``STEP_WAIT_COLUMNS``. The same as ``waits_from_evidence(step_evidence(events))``.
    """
    return waits_from_evidence(step_evidence(events, step_name=step_name))


def waits_from_evidence(evidence: StepEvidence) -> pd.DataFrame:
    """``step_waits`` from the run's ``StepEvidence``: the part that sets ranks side by side, step by step."""
    steps = evidence.steps.copy()
    if steps.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "evidence" else "float64") for c in STEP_WAIT_COLUMNS})
    steps["duration_s"] = (steps["end_ns"] - steps["start_ns"]) / NS_PER_S
    n_ranks = steps["rank"].nunique()
    per_step = steps.groupby("step")["rank"].transform("nunique")
    shortest = steps.groupby("step")["duration_s"].transform("min")
    complete = (per_step == n_ranks) & (n_ranks > 1)
    steps["wait_s"] = np.where(complete, steps["duration_s"] - shortest, 0.0)
    steps["evidence"] = np.where(complete, STEP_LENGTH, "")
    shortest_rank = steps.loc[steps.groupby("step")["duration_s"].idxmin(), ["step", "rank"]]
    late = pd.Series(shortest_rank["rank"].to_numpy(), index=shortest_rank["step"].to_numpy())
    steps["late_rank"] = np.where(complete, steps["step"].map(late).to_numpy(), -1).astype("int64")

    steps["wait_end_ns"] = steps["end_ns"]
    _take_gap_waits(steps, intervals_of(evidence.collectives, len(evidence.collective_ranks)))
    _take_waits(steps, arrival_waits(evidence.arrivals, steps), "wait_from_arrival", ARRIVAL)
    lateness = lateness_table(evidence.marks)
    if len(lateness):
        latest = lateness.groupby("step")["arrival_ns"].transform("max")
        lateness = lateness.assign(wait_from_lateness=(latest - lateness["arrival_ns"]) / NS_PER_S)
        last_rank = lateness.loc[lateness["last"]].drop_duplicates("step").set_index("step")["rank"]
        from_lateness = _aligned(steps, lateness, "wait_from_lateness")
        covered = ~np.isnan(from_lateness)
        # a rank cannot wait longer than its step lasted
        steps["wait_s"] = np.where(covered, np.minimum(from_lateness, steps["duration_s"]), steps["wait_s"])
        steps["evidence"] = np.where(covered, LATENESS, steps["evidence"])
        from_lateness = steps["step"].map(last_rank)
        steps["late_rank"] = np.where(covered, from_lateness.fillna(-1), steps["late_rank"]).astype("int64")
    _take_waits(steps, kernel_waits(evidence.kernels), "wait_from_profiler", TF_PROFILER)
    warmup = steps["step"] < steps.groupby("rank")["step"].transform("min") + WARMUP_STEPS
    steps.loc[warmup, "wait_s"] = 0.0
    steps.loc[warmup, "evidence"] = ""
    steps.loc[warmup, "late_rank"] = -1
    in_step = steps["evidence"] != BETWEEN_COLLECTIVES
    steps["compute_s"] = (steps["duration_s"] - np.where(in_step, steps["wait_s"], 0.0)).clip(lower=0.0)
    steps["wait_end_ns"] = np.where(in_step, steps["end_ns"], steps["wait_end_ns"]).astype("int64")
    return steps[list(STEP_WAIT_COLUMNS)].reset_index(drop=True)


def lateness_table(marks: pd.DataFrame | None) -> pd.DataFrame:
    """``allreduce_lateness`` from the run's readiness marks (every rank's, in rank order)."""
    if marks is None or marks.empty:
        return _empty_lateness()
    table = lateness_of_marks(marks, step_arrivals(marks))
    return table.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)


def _row_of(steps: pd.DataFrame, table: pd.DataFrame) -> np.ndarray:
    """For each row of ``steps``, the row of ``table`` with its (step, rank), -1 where none: a left join's lookup
    without the join's copy of every column (millions of rank-steps on a large run)."""

    def key(frame: pd.DataFrame) -> np.ndarray:
        return (frame["step"].to_numpy(np.int64) << 32) | frame["rank"].to_numpy(np.int64)

    keys = key(table)
    first = ~pd.Index(keys).duplicated(keep="first")  # a left join would repeat the row: the first one, once
    rows = np.flatnonzero(first)
    at = pd.Index(keys[first]).get_indexer(key(steps))
    return np.where(at >= 0, rows[at.clip(0)] if len(rows) else -1, -1)


def _aligned(steps: pd.DataFrame, table: pd.DataFrame, column: str) -> np.ndarray:
    """``table[column]`` for each row of ``steps`` by (step, rank); NaN where ``table`` has no such row."""
    at = _row_of(steps, table)
    values = table[column].to_numpy(np.float64)
    return np.where(at >= 0, values[at.clip(0)] if len(values) else np.nan, np.nan)


def _take_gap_waits(steps: pd.DataFrame, intervals: pd.DataFrame) -> None:
    """``between_collectives`` waits (``collective_intervals`` with no warm-up left out) where a run records its
    collectives after its steps' spans; there step lengths say nothing of waits, so the steps this evidence does
    not cover keep none."""
    if intervals.empty:
        return
    slowest = intervals.groupby(["epoch", "step"])["between_s"].transform("max")
    wait = np.minimum(slowest - intervals["between_s"], intervals["collective_s"]).clip(lower=0.0).to_numpy()
    gaps = pd.DataFrame(
        {
            "step": intervals["step"].to_numpy(),
            "rank": intervals["rank"].to_numpy(),
            "wait_from_gap": wait,
            # nullable: a left merge must not turn nanoseconds since 1970 into floats (256 ns steps)
            "gap_end_ns": pd.array(
                intervals["start_ns"].to_numpy(np.int64) + np.round(wait * NS_PER_S).astype(np.int64), dtype="Int64"
            ),
        }
    )
    at = _row_of(steps, gaps)
    covered = at >= 0
    wait_from_gap = np.where(covered, gaps["wait_from_gap"].to_numpy(np.float64)[at.clip(0)], np.nan)
    # 0 where no gap covers the step (masked by covered), so the comparison stays in int64 ns
    gap_end_ns = np.where(covered, gaps["gap_end_ns"].to_numpy(np.int64, na_value=0)[at.clip(0)], 0)
    after_step = covered & (gap_end_ns > steps["end_ns"].to_numpy(np.int64))
    if not after_step.any():
        return  # the collectives lie inside the steps: arrivals and step lengths hold there
    steps["wait_s"] = np.where(covered, wait_from_gap, 0.0)
    steps["evidence"] = np.where(covered, BETWEEN_COLLECTIVES, "")
    steps["wait_end_ns"] = np.where(covered, gap_end_ns, steps["end_ns"])
    last = gaps[gaps["wait_from_gap"] == 0].drop_duplicates("step").set_index("step")["rank"]
    steps["late_rank"] = np.where(covered, steps["step"].map(last).fillna(-1), -1).astype("int64")


def _take_waits(steps: pd.DataFrame, waits: pd.DataFrame, column: str, evidence: str) -> None:
    """Where ``waits`` (``step, rank, column``) covers a rank-step, its wait (at most the step) and last rank win."""
    if not len(waits):
        return
    found = _aligned(steps, waits, column)
    covered = ~np.isnan(found)
    steps["wait_s"] = np.where(covered, np.minimum(found, steps["duration_s"]), steps["wait_s"])
    steps["evidence"] = np.where(covered, evidence, steps["evidence"])
    last_rank = waits.loc[waits[column] == 0].drop_duplicates("step").set_index("step")["rank"]
    steps["late_rank"] = np.where(covered, steps["step"].map(last_rank).fillna(-1), steps["late_rank"])
    steps["late_rank"] = steps["late_rank"].astype("int64")


#: ``collective_intervals`` columns.
COLLECTIVE_INTERVAL_COLUMNS: tuple[str, ...] = ("rank", "epoch", "step", "start_ns", "between_s", "collective_s")
#: ``collective_split`` columns.
COLLECTIVE_SPLIT_COLUMNS: tuple[str, ...] = (
    "epoch",
    "step",
    "ranks",
    "between_s",
    "slowest_s",
    "wait_s",
    "collective_s",
)


def collective_intervals(events: pd.DataFrame, *, warmup_steps: int = WARMUP_STEPS) -> pd.DataFrame:
    """Per rank and step of a run whose ranks meet in a blocking collective: when its collective started
    (``start_ns``, its own clock), its time since its previous collective (``between_s``) and its own
    collective's length (``collective_s``).

    Read on each rank's own clock, so no clock alignment is needed. A step's collective spans are its
    ``communication`` spans, first start to last end. Left out: steps across an epoch's end (evaluation
    lies between), the first ``warmup_steps``, each rank's last step (the run's end shares its number: a
    final barrier, the last evaluation) and steps some rank did not record. Fewer than 2 ranks, or no
    communication spans with a step: empty.
    """
    rows, ranks = collective_steps(events, warmup_steps=warmup_steps)
    return intervals_of(rows, len(ranks))


def _empty_intervals() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype="float64" if c.endswith("_s") else "int64") for c in COLLECTIVE_INTERVAL_COLUMNS}
    )


def collective_steps(events: pd.DataFrame, *, warmup_steps: int = WARMUP_STEPS) -> tuple[pd.DataFrame, tuple[int, ...]]:
    """The rank-by-rank part of ``collective_intervals``: each rank's kept steps (``COLLECTIVE_INTERVAL_COLUMNS``),
    and the ranks with ``communication`` spans in a step; ``intervals_of`` keeps the steps every such rank has."""
    if events.empty or "step" not in events:
        return _empty_intervals(), ()
    spans = events[(events["phase"] == ev.COMMUNICATION).to_numpy() & (events["step"].to_numpy() >= 0)]
    if spans.empty:
        return _empty_intervals(), ()
    ranks = tuple(sorted(int(r) for r in spans["rank"].unique()))
    epoch = spans["epoch"] if "epoch" in spans else pd.Series(-1, index=spans.index)
    per_step = (
        spans.assign(epoch=epoch)
        .groupby(["rank", "epoch", "step"], sort=False, observed=True)
        .agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        .reset_index()
        .sort_values(["rank", "start_ns"], kind="stable")
    )
    previous = per_step.groupby("rank", sort=False)[["end_ns", "epoch"]].shift()
    per_step["between_s"] = (per_step["start_ns"] - previous["end_ns"]) / NS_PER_S
    per_step["collective_s"] = (per_step["end_ns"] - per_step["start_ns"]) / NS_PER_S
    last = per_step.groupby("rank", sort=False)["start_ns"].transform("max") == per_step["start_ns"]
    kept = per_step[(previous["epoch"] == per_step["epoch"]) & (per_step["step"] >= warmup_steps) & ~last]
    return kept[list(COLLECTIVE_INTERVAL_COLUMNS)].reset_index(drop=True), ranks


def intervals_of(rows: pd.DataFrame, ranks: int) -> pd.DataFrame:
    """``collective_intervals`` from every rank's ``collective_steps``: the steps all ``ranks`` ranks kept."""
    if rows.empty or ranks < 2:
        return _empty_intervals()
    kept = rows[rows.groupby(["epoch", "step"])["rank"].transform("nunique") == ranks]
    return kept.reset_index(drop=True)


def collective_split(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per step (``collective_intervals``' steps): the ranks' mean time between collectives, the wait for
    the last of them, and the collective's own time once the last one has come.

    Why: a projection's step is the slowest rank's work plus the collective; checking it against a run
    needs the run's step split the same way, to tell a misjudged wait from a misjudged link. The ranks
    leave a collective together, so ``wait_s = slowest_s - between_s`` is the mean rank's wait (what
    ``project``'s ``waiting_s`` holds per step), and the step's shortest collective, the last arrival's,
    is the collective's own time (``collective_s``).
    """
    table = (
        intervals.groupby(["epoch", "step"], sort=True)
        .agg(
            ranks=("rank", "nunique"),
            between_s=("between_s", "mean"),
            slowest_s=("between_s", "max"),
            collective_s=("collective_s", "min"),
        )
        .reset_index()
    )
    table["wait_s"] = table["slowest_s"] - table["between_s"]
    return table[list(COLLECTIVE_SPLIT_COLUMNS)].astype({"epoch": "int64", "step": "int64", "ranks": "int64"})


#: The parts of a step ``collective_summary`` averages.
SPLIT_PARTS: tuple[str, ...] = ("between_s", "wait_s", "collective_s")


def collective_summary(intervals: pd.DataFrame) -> dict[str, float] | None:
    """A run's step in ``collective_split``'s parts (``SPLIT_PARTS``, means over its steps) and how its ranks'
    steps varied together (``correlation``, ``step_correlation``); None without intervals."""
    if intervals.empty:
        return None
    split = collective_split(intervals)
    return {**{name: float(split[name].mean()) for name in SPLIT_PARTS}, "correlation": step_correlation(intervals)}


def step_correlation(intervals: pd.DataFrame) -> float:
    """The mean correlation, over pairs of ranks, of their times between collectives step by step (NaN with
    fewer than 2 ranks or 3 steps).

    Why: the wait for the slowest rank is ``E[max]`` of the ranks' steps only where they vary independently;
    steps that slow together on every rank (a shared host, the same batch sizes) make less wait than that.
    """
    table = intervals.pivot_table(index=["epoch", "step"], columns="rank", values="between_s")
    if table.shape[1] < 2 or len(table) < 3:
        return float("nan")
    values = table.to_numpy(dtype=float, copy=True).T
    # a rank whose steps never varied (by less than the 1 ns the times are recorded in: rounding, whose
    # correlation numpy 2 computes as ~1) has no correlation: NaN, left out
    values[np.ptp(values, axis=1) < 1e-9] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = np.corrcoef(values)
    pairs = matrix[np.triu_indices(table.shape[1], 1)]
    pairs = pairs[np.isfinite(pairs)]
    return float(pairs.mean()) if pairs.size else float("nan")


def collective_arrivals(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step and rank: how long it was blocked in its last recorded collective for the last rank to arrive.

    Only steps where every rank recorded a ``communication`` span inside its step span: ``step,
    rank, wait_from_arrival`` (``latest arrival - own arrival``, at most that span's length; 0 for
    the last rank). Empty when no rank recorded its collectives.
    """
    return arrival_waits(last_collectives(events, steps), steps)


def _steps_by_rank(steps: pd.DataFrame) -> dict[int, dict[str, np.ndarray]]:
    """Each rank's ``step_spans`` as arrays in time order: one pass, not a filter of every rank's steps per rank."""
    if steps.empty:
        return {}
    rank = steps["rank"].to_numpy(np.int64)
    order = np.lexsort((steps["start_ns"].to_numpy(np.int64), rank))
    rank = rank[order]
    columns = {c: steps[c].to_numpy(np.int64)[order] for c in ("step", "start_ns", "end_ns")}
    bounds = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True])
    return {int(rank[a]): {c: values[a:b] for c, values in columns.items()} for a, b in pairwise(bounds)}


def last_collectives(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Rank by rank: per step, the start (``arrival_ns``) and length of its last ``communication`` span inside
    its step span (``step_spans`` rows)."""
    columns = ["step", "rank", "arrival_ns", "length_s"]
    spans = events[events["phase"] == ev.COMMUNICATION] if len(events) else events
    parts = []
    by_rank = _steps_by_rank(steps)
    for rank, own_spans in spans.groupby("rank", observed=True) if len(spans) and len(steps) else ():
        own = by_rank.get(int(rank))
        if own is None:
            continue
        starts = own_spans["start_ns"].to_numpy(np.int64)
        index = np.searchsorted(own["start_ns"], starts, "right") - 1
        inside = (index >= 0) & (own_spans["end_ns"].to_numpy(np.int64) <= own["end_ns"][index])
        part = pd.DataFrame(
            {
                "step": own["step"][index[inside]],
                "rank": np.int64(rank),
                "arrival_ns": starts[inside],
                "length_s": (own_spans["end_ns"].to_numpy(np.int64) - starts)[inside] / NS_PER_S,
            }
        )
        parts.append(part.sort_values("arrival_ns", kind="stable").groupby(["step", "rank"]).tail(1))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "length_s" else "int64") for c in columns})
    return pd.concat(parts, ignore_index=True)[columns]


def arrival_waits(arrivals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """``collective_arrivals`` from every rank's ``last_collectives``: the steps all ranks with steps have."""
    columns = ["step", "rank", "wait_from_arrival"]
    ranks = steps["rank"].nunique()
    if arrivals.empty or ranks < 2:
        return pd.DataFrame(columns=columns)
    found = arrivals.sort_values("arrival_ns", kind="stable")
    found = found[found.groupby("step")["rank"].transform("nunique") == ranks]
    if found.empty:
        return pd.DataFrame(columns=columns)
    latest = found.groupby("step")["arrival_ns"].transform("max")
    wait = np.minimum((latest - found["arrival_ns"]) / NS_PER_S, found["length_s"])
    return found.assign(wait_from_arrival=wait)[columns].astype({"step": "int64", "rank": "int64"})


def profiler_waits(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per traced step and rank: its longest Horovod kernel wait (TF's profiler) minus the shortest rank's.

    The rank that arrived last still waits for the transfer itself; subtracting its wait leaves
    the time the others were blocked for it. Only steps every rank traced: ``step, rank,
    wait_from_profiler``.
    """
    return kernel_waits(longest_kernels(events, steps))


def longest_kernels(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Rank by rank: per traced step, its longest Horovod kernel in TF's profiler (``step, rank, kernel_s``)."""
    columns = ["step", "rank", "kernel_s"]
    traced = (
        events[(events["phase"] == ev.IN_FLIGHT) & (events["name"] == ev.TF_PROFILER_SPAN)] if len(events) else events
    )
    if traced.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "kernel_s" else "int64") for c in columns})
    parts = []
    by_rank = _steps_by_rank(steps)
    for rank, spans in traced.groupby("rank", observed=True):
        own = by_rank.get(int(rank), {c: np.zeros(0, np.int64) for c in ("step", "start_ns", "end_ns")})
        index = np.searchsorted(own["start_ns"], spans["start_ns"].to_numpy(np.int64), "right") - 1
        inside = index >= 0
        kernel_s = (spans["end_ns"] - spans["start_ns"]).to_numpy()[inside] / NS_PER_S
        parts.append(pd.DataFrame({"step": own["step"][index[inside]], "rank": rank, "kernel_s": kernel_s}))
    longest = pd.concat(parts).groupby(["step", "rank"])["kernel_s"].max().reset_index()
    return longest.astype({"step": "int64", "rank": "int64"})[columns]


def kernel_waits(kernels: pd.DataFrame) -> pd.DataFrame:
    """``profiler_waits`` from every rank's ``longest_kernels``: the steps every traced rank has."""
    if kernels.empty:
        return pd.DataFrame(columns=["step", "rank", "wait_from_profiler"])
    longest = kernels.groupby(["step", "rank"])["kernel_s"].max().reset_index()
    ranks = longest["rank"].nunique()
    longest = longest[longest.groupby("step")["rank"].transform("nunique") == ranks]
    longest["wait_from_profiler"] = longest["kernel_s"] - longest.groupby("step")["kernel_s"].transform("min")
    return longest[["step", "rank", "wait_from_profiler"]].astype({"step": "int64", "rank": "int64"})


def wait_spans(waits: pd.DataFrame, *, run_id: str = "") -> pd.DataFrame:
    """The derived waits as ``communication_wait`` spans ending at ``wait_end_ns`` (events schema): the end
    of each step, or inside the collective after it (``between_collectives``).

    Added to a run's events they nest inside their step span (or collective span), so the breakdown gives
    the wait to ``communication_wait`` and only the rest of the step to compute (of the collective, to
    communication).
    """
    rows = waits[waits["wait_s"] > 0]
    if rows.empty:
        return ev.empty_events()
    end = (rows["wait_end_ns"] if "wait_end_ns" in rows else rows["end_ns"]).to_numpy(np.int64)
    start = end - np.round(rows["wait_s"].to_numpy() * NS_PER_S).astype(np.int64)
    return events_frame(
        pd.DataFrame(
            {
                "run_id": run_id,
                "rank": rows["rank"].to_numpy(),
                "phase": ev.COMMUNICATION_WAIT,
                "name": WAIT_SPAN_NAME,
                "detail": "evidence: " + rows["evidence"].astype(str),
                "step": rows["step"].to_numpy(),
                "start_ns": np.maximum(start, rows["start_ns"].to_numpy(np.int64)),
                "end_ns": end,
            }
        )
    )


def with_derived_waits(events: pd.DataFrame, waits: pd.DataFrame | None = None) -> pd.DataFrame:
    """``events`` plus ``wait_spans`` (computed from ``events`` when ``waits`` is not given)."""
    waits = step_waits(events) if waits is None else waits
    derived = wait_spans(waits, run_id=str(events["run_id"].iloc[0]) if len(events) else "")
    if derived.empty:
        return events
    return pd.concat([events, derived], ignore_index=True)


def straggler_rows(
    waits: pd.DataFrame, wall_s: float, *, min_fraction: float = 0.02, hosts: Mapping[int, str] | None = None
) -> list[dict]:
    """Finding rows (kind ``straggler``) for ranks that arrive last in most steps and cost the others time.

    A rank is named when it is the last arrival, with someone waiting at least
    ``SIGNIFICANT_WAIT_SHARE`` of the median step for it, in at least ``STRAGGLER_SHARE`` of the
    steps with evidence, and the others' mean wait for it is at least ``min_fraction`` of ``wall_s``.
    ``seconds_lost`` is the time each other rank lost because of it: per step, the gap between
    the next-to-last arrival and its own (the others would still have waited for the next-to-last
    rank), summed over the steps where it came last. With 2 ranks that is the other rank's wait. With ``hosts``
    (``{rank: host}``) on more than one host, the text names the ranks' hosts.
    """
    judged = waits[(waits["evidence"] != "") & (waits["late_rank"] >= 0)]
    if judged.empty or wall_s <= 0:
        return []
    n_steps = judged["step"].nunique()
    threshold = SIGNIFICANT_WAIT_SHARE * float(judged["duration_s"].median())
    longest_wait = judged.groupby("step")["wait_s"].max()
    significant = judged[judged["step"].map(longest_wait) >= threshold].drop_duplicates("step")
    rows = []
    for late_rank, count in significant["late_rank"].value_counts().items():
        share = count / n_steps
        others = judged[(judged["late_rank"] == late_rank) & (judged["rank"] != late_rank)]
        if share < STRAGGLER_SHARE or others.empty:
            continue
        # what it costs each other rank: in a step, everyone still waits for the next-to-last
        # arrival; only the gap from there to this rank is its doing (the least wait among the others)
        lost = float(others.groupby("step")["wait_s"].min().sum())
        if lost / wall_s < min_fraction:
            continue
        typical = float(others.groupby("step")["wait_s"].max().median())
        evidence = set(others["evidence"])
        source = "; ".join(
            f"{EVIDENCE_TEXT[kind]} in {int((others['evidence'] == kind).sum())} rank-steps"
            for kind in (TF_PROFILER, LATENESS, ARRIVAL, BETWEEN_COLLECTIVES, STEP_LENGTH)
            if kind in evidence
        )
        other_ranks = sorted(int(r) for r in others["rank"].unique())
        losers, each = ("loses", "") if len(other_ranks) == 1 else ("lose", " each")
        rows.append(
            {
                "kind": "straggler",
                "text": f"{ranks_with_hosts([int(late_rank)], hosts)} arrives last to the allreduce in {share:.0%}"
                f" of steps ({count} of {n_steps}), typically {_ms(typical)} after the others;"
                f" {ranks_with_hosts(other_ranks, hosts)} {losers} {lost:.3g} s{each} waiting for it"
                f" (evidence: {source})",
                "seconds_lost": lost,
                "fraction_of_wall": lost / wall_s,
                "ranks": rank_list([int(late_rank)]),
            }
        )
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


#: ``communication_overlap`` columns.
OVERLAP_COLUMNS: tuple[str, ...] = ("rank", "in_flight_s", "overlapped_s", "overlapped_share")


def communication_overlap(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank with collectives in flight: how long they were (union of the spans) and how much of it
    overlapped the rank's own spans (its steps, evaluation, ...).

    ``in_flight`` spans (Horovod's timeline: rank 0's view of every activity, each rank's own
    negotiation) are counted here and nowhere else, so they never take time from compute. No such
    spans: an empty frame with ``OVERLAP_COLUMNS``.
    """
    flight = events[events["phase"].isin(ev.OVERLAP_PHASES)]
    rows = []
    for rank, spans in flight.groupby("rank", sort=True):
        own = events[(events["rank"] == rank) & ~events["phase"].isin(ev.OVERLAP_PHASES)]
        f_start, f_end = _union(spans["start_ns"].to_numpy(np.int64), spans["end_ns"].to_numpy(np.int64))
        o_start, o_end = _union(own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64))
        total = float((f_end - f_start).sum()) / NS_PER_S
        overlapped = _intersection_ns(f_start, f_end, o_start, o_end) / NS_PER_S
        rows.append(
            {
                "rank": int(rank),
                "in_flight_s": total,
                "overlapped_s": overlapped,
                "overlapped_share": overlapped / total if total > 0 else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=list(OVERLAP_COLUMNS))


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same instants as ``[start, end)``."""
    if len(start) == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.r_[True, start[1:] > reach[:-1]]
    segment = np.cumsum(new) - 1
    merged_end = np.zeros(int(segment[-1]) + 1, np.int64)
    np.maximum.at(merged_end, segment, end)
    return start[new], merged_end


def _intersection_ns(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """Length of (union A) ∩ (union B) for disjoint sorted interval lists A and B."""
    if len(a_start) == 0 or len(b_start) == 0:
        return 0.0
    covered_before = np.r_[0, np.cumsum(b_end - b_start)]

    def covered(t: np.ndarray) -> np.ndarray:  # measure of B below t
        index = np.searchsorted(b_start, t, side="right") - 1
        inside = np.clip(t - b_start[np.clip(index, 0, None)], 0, None)
        inside = np.minimum(inside, (b_end - b_start)[np.clip(index, 0, None)])
        return np.where(index >= 0, covered_before[np.clip(index, 0, None)] + inside, 0)

    return float((covered(a_end) - covered(a_start)).sum())
