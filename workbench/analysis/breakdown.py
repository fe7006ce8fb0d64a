"""Where each rank's wall time went: seconds per phase, without double counting.

Spans nest (a ``train_step`` holds its ``allreduce`` calls) and sometimes overlap. To make seconds
add up, every instant on a rank is given to exactly one span, the *innermost* one: among the spans
covering the instant, the one that started latest; on a tie the shorter one; on an exact duplicate
the later row. Instants covered by no span are ``idle``.

The sweep is vectorised (numpy) and runs one lane (rank) at a time: a rank's arrays fit in the
CPU's caches and no composite key can overflow (one global sort of 10 M spans took 5-8 s and
2.8 GB here; per rank, 0.7 s). Spans that nest (no two cross: what recorders and Horovod's
timeline write) take the fast path: in start order every span's parent is the nearest earlier
span one level up (``np.searchsorted``), and its own time is its length minus its children's. A
lane whose spans cross falls back to the general sweep: boundaries sorted once, every span covers
a range of elementary intervals, and a segment tree gives each interval its highest-priority
covering span. Both give the same seconds. String columns may be object or categorical
(``Run.load(..., categorical=True)``): categorical codes are used as they are instead of hashing
10 M strings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.events import NS_PER_S, phase_order

#: Columns ``phase_breakdown`` can group by. ``run_id``, ``rank`` and ``host`` name a rank's
#: timeline ("lane"); ``epoch`` and ``step`` cut that timeline into pieces.
LANE_COLUMNS: tuple[str, ...] = ("run_id", "rank", "host")
TIMELINE_COLUMNS: tuple[str, ...] = ("epoch", "step")
GROUP_COLUMNS: tuple[str, ...] = LANE_COLUMNS + TIMELINE_COLUMNS

_SPAN_COLUMNS = ("run_id", "rank", "phase", "name", "start_ns", "end_ns")


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def effective_phase(events: pd.DataFrame) -> pd.Series:
    """The phase analysis uses: communication spans that wait are ``communication_wait``.

    Horovod's timeline splits a collective into waiting (negotiation, waiting for other ranks'
    data) and moving bytes; keeping them apart tells "the network is slow" from "a rank is late".
    """
    codes, labels = _phase_codes(events)
    return pd.Series(np.asarray(labels, dtype=object)[codes], index=events.index, name="phase")


def phase_breakdown(
    events: pd.DataFrame,
    by: Sequence[str] = ("rank",),
    *,
    window: tuple[int, int] | None = None,
    ranks: Iterable[int] | None = None,
) -> pd.DataFrame:
    """Seconds and fraction of wall time per phase, in long format ``[*by, phase, seconds, fraction]``.

    - Every instant on a rank goes to its innermost span (see the module docstring), so a rank's
      seconds sum to its wall time and nested ``allreduce`` time is not also counted as compute.
    - Wall time of every rank is the run's extent: first start to last end over *all* ranks. A rank
      that finishes early, or one listed in ``ranks`` with no events at all, shows ``idle`` for the
      rest, because that is time the job paid for.
    - ``by`` may hold ``run_id``, ``rank``, ``host``, ``epoch``, ``step``. With ``epoch``/``step``
      the extent is that epoch's (step's) extent over all ranks, and idle is the part of it the rank
      spent in none of that epoch's spans. Spans are given to the epoch/step they carry (``-1``
      when unknown forms a group of its own). Without ``rank`` in ``by``, seconds are summed over
      ranks (rank-seconds) and fractions are of that sum.
    - ``window=(start_ns, end_ns)`` clips spans to the window first; wall time is then the extent of
      the clipped spans.
    - Communication spans named in ``events.COMMUNICATION_WAIT_ACTIVITIES`` appear as
      ``communication_wait``. Every group lists every phase seen (0 where absent) plus ``idle``.
    - Spans in ``events.OVERLAP_PHASES`` (Horovod's collectives in flight) overlap the rank's own
      time and are left out (see ``analysis.communication_overlap``).
    - No events (or none in the window): an empty frame with the same columns. A group whose extent
      is zero (only zero-length spans) has fraction 0.
    """
    by = _check_by(by)
    table = lane_table(events, tuple(c for c in by if c in TIMELINE_COLUMNS), window=window, ranks=ranks)
    return breakdown_from_lanes(table, by)


def breakdown_from_lanes(table: pd.DataFrame, by: Sequence[str] = ("rank",)) -> pd.DataFrame:
    """``phase_breakdown``'s long format from a ``lane_table`` (which must hold the columns of ``by``).

    Apart so that lane tables computed where the data is (one per rank group, see
    ``workbench.rank_groups``) are reshaped by the same code as a whole run's.
    """
    by = _check_by(by)
    runs = table["run_id"].unique()
    if len(runs) > 1 and "run_id" not in by:
        shown = ", ".join(repr(r) for r in runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise ValueError(
            f"events hold {len(runs)} runs ({shown}): add 'run_id' to by or select one run first"
        )
    columns = [*by, "phase", "seconds", "fraction"]
    if table.empty:
        return pd.DataFrame({c: pd.Series(dtype=_dtype_of(c)) for c in columns})
    keys = list(by)
    order = phase_order(table["phase"].unique())
    if keys:
        sums = table.groupby([*keys, "phase"], sort=False)["ns"].sum()
        wide = sums.unstack("phase", fill_value=0.0).reindex(columns=order, fill_value=0.0).sort_index()
        long = wide.stack(future_stack=True).rename("ns").reset_index()
        totals = long.groupby(keys, sort=False)["ns"].transform("sum").to_numpy()
    else:
        long = table.groupby("phase")["ns"].sum().reindex(order, fill_value=0.0).rename("ns").reset_index()
        totals = np.full(len(long), long["ns"].sum())
    ns = long["ns"].to_numpy(dtype=np.float64)
    long["seconds"] = ns / NS_PER_S
    long["fraction"] = np.divide(ns, totals, out=np.zeros_like(ns), where=totals > 0)
    return long[columns].reset_index(drop=True)


def rank_wall_time(
    events: pd.DataFrame, *, window: tuple[int, int] | None = None, ranks: Iterable[int] | None = None
) -> pd.DataFrame:
    """Per rank: when it was active, how long it was busy, and the run's wall time.

    Columns: ``run_id, rank, first_start_ns, last_end_ns, busy_s, wall_s, idle_s``. ``busy_s`` is the
    union of the rank's spans; ``wall_s`` is the run's extent over all ranks (the same on every rank
    of a run) and ``idle_s = wall_s - busy_s``. A rank listed in ``ranks`` with no events has
    ``first_start_ns = last_end_ns = -1`` and is idle for the whole run.
    """
    columns = ["run_id", "rank", "first_start_ns", "last_end_ns", "busy_s", "wall_s", "idle_s"]
    table = lane_table(events, (), window=window, ranks=ranks)
    if table.empty:
        return pd.DataFrame({c: pd.Series(dtype=_dtype_of(c)) for c in columns})
    keys = ["run_id", "rank"]
    wall = table.groupby(keys)["ns"].sum()
    idle = table[table["phase"] == ev.IDLE].groupby(keys)["ns"].sum().reindex(wall.index, fill_value=0.0)
    frame = pd.DataFrame(
        {"busy_s": (wall - idle) / NS_PER_S, "wall_s": wall / NS_PER_S, "idle_s": idle / NS_PER_S}
    ).reset_index()
    spans = _clip(own_time_spans(_check_events(events)), window)
    active = spans.groupby(keys).agg(first_start_ns=("start_ns", "min"), last_end_ns=("end_ns", "max"))
    frame = frame.merge(active.reset_index(), on=keys, how="left")
    for column in ("first_start_ns", "last_end_ns"):
        frame[column] = frame[column].fillna(-1).astype("int64")
    return frame[columns]


def own_time_spans(events: pd.DataFrame) -> pd.DataFrame:
    """The spans that take a rank's own time: without ``events.OVERLAP_PHASES`` (collectives in flight).

    Horovod's activities run on its background thread while the rank computes; counting them as the
    rank's time would take that time from compute (on the one rank whose view the timeline is).
    """
    overlap = events["phase"].isin(ev.OVERLAP_PHASES)
    return events.loc[~overlap] if overlap.any() else events


# --------------------------------------------------------------------------------------------
# The per-lane table every analysis builds on
# --------------------------------------------------------------------------------------------


def lane_table(
    events: pd.DataFrame,
    timeline_columns: Sequence[str] = (),
    *,
    window: tuple[int, int] | None = None,
    ranks: Iterable[int] | None = None,
) -> pd.DataFrame:
    """Nanoseconds per (run_id, rank, host, *timeline_columns, phase), ``idle`` included.

    The building block of ``phase_breakdown``: one row per lane, timeline piece and phase that has
    time, plus an ``idle`` row for every lane and piece (0 when the rank was always busy). Lanes are
    every rank with events in a run plus ``ranks``.
    """
    timeline_columns = tuple(timeline_columns)
    if not set(timeline_columns) <= set(TIMELINE_COLUMNS):
        raise ValueError(f"timeline_columns={timeline_columns}: use a subset of {TIMELINE_COLUMNS}")
    frame = _clip(own_time_spans(_check_events(events, timeline_columns)), window)
    columns = ["run_id", "rank", "host", *timeline_columns, "phase", "ns"]
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=_dtype_of(c)) for c in columns})

    n = len(frame)
    run_codes, run_labels = _factorize(frame["run_id"])
    rank_values = frame["rank"].to_numpy()
    extra_ranks = np.asarray(sorted(set(int(r) for r in ranks)) if ranks is not None else [], dtype=np.int64)
    rank_codes, rank_labels = _factorize_int(rank_values, extra_ranks)
    n_ranks = len(rank_labels)
    # Row-sized arrays stay small integers (10 M rows: 40 MB for a lane code, not 80)
    lane = rank_codes if len(run_labels) == 1 else run_codes.astype(np.int64) * n_ranks + rank_codes
    lane = _narrow(lane, len(run_labels) * n_ranks)
    del rank_codes
    phase_codes, phase_labels = _phase_codes(frame)
    n_phases = len(phase_labels)

    piece, piece_labels, piece_values = _timeline_pieces(frame, timeline_columns)
    n_pieces = len(piece_labels)
    start = frame["start_ns"].to_numpy(np.int64)
    end = frame["end_ns"].to_numpy(np.int64)
    extent = _piece_extents(run_codes, len(run_labels), piece, n_pieces, start, end)

    # Busy time per (lane, piece, phase), summed lane by lane.
    cell = piece * n_phases + phase_codes if timeline_columns else phase_codes
    busy_lane, busy_cell, busy_ns, lanes_present, last_row = _busy_per_lane(lane, cell, start, end)
    del cell, phase_codes
    busy = pd.DataFrame(
        {
            "lane": busy_lane,
            "piece": busy_cell // n_phases,
            "phase_code": busy_cell % n_phases,
            "ns": busy_ns,
        }
    )

    # Every lane of a run meets every piece of that run: missing combinations are fully idle.
    lanes = pd.DataFrame({"lane": lanes_present, "run": lanes_present // n_ranks})
    if len(extra_ranks):
        extra_codes = pd.Index(rank_labels).get_indexer(extra_ranks)
        extra = pd.DataFrame(
            {
                "lane": (np.arange(len(run_labels))[:, None] * n_ranks + extra_codes[None, :]).ravel(),
                "run": np.repeat(np.arange(len(run_labels)), len(extra_codes)),
            }
        )
        lanes = pd.concat([lanes, extra]).drop_duplicates("lane")
    grid = lanes.merge(extent, on="run")
    covered = busy.groupby(["lane", "piece"], sort=False)["ns"].sum().rename("covered_ns").reset_index()
    grid = grid.merge(covered, on=["lane", "piece"], how="left")
    idle_ns = (grid["extent_ns"] - grid["covered_ns"].fillna(0.0)).clip(lower=0.0)
    idle = pd.DataFrame({"lane": grid["lane"], "piece": grid["piece"], "phase_code": n_phases, "ns": idle_ns})
    cells = pd.concat([busy, idle], ignore_index=True)

    # Back from codes to labels.
    lane_of = cells["lane"].to_numpy()
    # A rank's host is constant: take it from any row of the lane ("" for listed ranks without rows).
    row_of_lane = np.full(len(run_labels) * n_ranks, n, dtype=np.int64)
    row_of_lane[lanes_present] = last_row
    has_rows = row_of_lane < n
    host_of_lane = np.full(len(row_of_lane), "", dtype=object)
    host_of_lane[has_rows] = frame["host"].take(row_of_lane[has_rows]).to_numpy(dtype=object)
    out = pd.DataFrame(
        {
            "run_id": np.asarray(run_labels, dtype=object)[lane_of // n_ranks],
            "rank": np.asarray(rank_labels)[lane_of % n_ranks].astype(frame["rank"].dtype),
            "host": host_of_lane[lane_of],
        }
    )
    piece_of = piece_labels[cells["piece"].to_numpy()]
    for position, column in enumerate(timeline_columns):
        stride = int(np.prod([len(v) for v in piece_values[position + 1 :]], dtype=np.int64))
        out[column] = piece_values[position][(piece_of // stride) % len(piece_values[position])]
    out["phase"] = np.asarray([*list(phase_labels), ev.IDLE], dtype=object)[cells["phase_code"].to_numpy()]
    out["ns"] = cells["ns"].to_numpy(dtype=np.float64)
    return out[columns]


def _timeline_pieces(
    frame: pd.DataFrame, timeline_columns: tuple[str, ...]
) -> tuple[np.ndarray | int, np.ndarray, list[np.ndarray]]:
    """Timeline pieces (epoch, step, or both) as one integer code per row, their labels in code order, and each
    column's own labels; without timeline columns one piece, the scalar 0 (not a column of zeros)."""
    if not timeline_columns:
        return 0, np.zeros(1, dtype=np.int64), []
    combined: np.ndarray | int = 0
    piece_values: list[np.ndarray] = []
    for column in timeline_columns:
        codes, labels = _factorize_int(frame[column].to_numpy())
        combined = combined * len(labels) + codes.astype(np.int64)
        piece_values.append(np.asarray(labels))
    piece, piece_labels = _factorize_int(np.asarray(combined))
    return piece.astype(np.int64, copy=False), piece_labels, piece_values  # int64: multiplied by the phase count


def _piece_extents(
    run_codes: np.ndarray, n_runs: int, piece: np.ndarray | int, n_pieces: int, start: np.ndarray, end: np.ndarray
) -> pd.DataFrame:
    """``run, piece, extent_ns``: each (run, piece)'s first start to last end over all ranks, the wall time every
    lane of it is measured against."""
    if isinstance(piece, np.ndarray) or n_runs > 1:
        run_piece = run_codes.astype(np.int64) * n_pieces + piece if isinstance(piece, np.ndarray) else run_codes
        rp_codes, rp_labels = _factorize_int(np.asarray(run_piece, dtype=np.int64))
        extent_start = _group_reduce(np.minimum, rp_codes, len(rp_labels), start, np.iinfo(np.int64).max)
        extent_end = _group_reduce(np.maximum, rp_codes, len(rp_labels), end, np.iinfo(np.int64).min)
    else:  # one run, one piece: no per-row codes to build
        rp_labels = np.zeros(1, dtype=np.int64)
        extent_start, extent_end = np.asarray([start.min()]), np.asarray([end.max()])
    return pd.DataFrame(
        {"run": rp_labels // n_pieces, "piece": rp_labels % n_pieces, "extent_ns": (extent_end - extent_start)}
    )


# --------------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------------


def _check_by(by: Sequence[str]) -> tuple[str, ...]:
    if isinstance(by, str):
        by = (by,)
    by = tuple(by)
    unknown = [c for c in by if c not in GROUP_COLUMNS]
    if unknown:
        raise ValueError(f"cannot group by {unknown}: by may hold {', '.join(GROUP_COLUMNS)}")
    if len(set(by)) != len(by):
        raise ValueError(f"by={by} names a column twice: list each column once")
    return by


def _check_events(events: pd.DataFrame, extra: Sequence[str] = ()) -> pd.DataFrame:
    """Fill optional columns and reject spans that end before they start."""
    if not isinstance(events, pd.DataFrame):
        raise ValueError(f"events must be a pandas DataFrame, got {type(events).__name__}")
    missing = [c for c in ("rank", "phase", "start_ns", "end_ns", *extra) if c not in events]
    if missing:
        raise ValueError(f"events lack columns {missing}: build them with workbench.events.events_frame")
    defaults = {"run_id": "", "host": "", "name": None, "epoch": -1, "step": -1}
    absent = {c: v for c, v in defaults.items() if c not in events}
    if absent:  # on a shallow copy: assign would copy every column of millions of rows
        events = events.copy(deep=False)
        for column, value in absent.items():
            events[column] = events["phase"] if column == "name" else value
    start = events["start_ns"].to_numpy(np.int64)
    end = events["end_ns"].to_numpy(np.int64)
    backwards = end < start
    if backwards.any():
        first = int(np.argmax(backwards))
        rank, name = events["rank"].iloc[first], events["name"].iloc[first]
        raise ValueError(
            f"{int(backwards.sum())} span(s) end before they start (first: rank {rank}, {name!r}):"
            " fix clock alignment or drop them"
        )
    return events


def _clip(events: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    """Spans cut to ``window``; spans entirely outside it are dropped."""
    if window is None:
        return events
    low, high = (int(w) for w in window)
    if high <= low:
        raise ValueError(f"window {window} is empty: pass (start_ns, end_ns) with start_ns < end_ns")
    start = events["start_ns"].to_numpy(np.int64)
    end = events["end_ns"].to_numpy(np.int64)
    new_start, new_end = np.maximum(start, low), np.minimum(end, high)
    keep = (new_end > new_start) | ((start == end) & (start >= low) & (start <= high))
    clipped = events.loc[keep].copy()
    clipped["start_ns"] = new_start[keep]
    clipped["end_ns"] = new_end[keep]
    return clipped


def _factorize(column: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` (codes in order of first appearance), fast for categorical and one-value columns."""
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.CategoricalDtype):
        return _recode_first_seen(column.cat.codes.to_numpy(), np.asarray(column.cat.categories, dtype=object))
    values = column.to_numpy() if isinstance(column, pd.Series) else column
    if len(values) and values.dtype == object:
        first = values[0]
        if (values == first).all():
            return np.zeros(len(values), dtype=np.int64), np.asarray([first], dtype=object)
    codes, labels = pd.factorize(values)
    return codes.astype(np.int64), np.asarray(labels)


def _recode_first_seen(codes: np.ndarray, categories: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Categorical codes renumbered as ``pd.factorize`` numbers them: used values, first seen first."""
    if len(codes) == 0:
        return codes.astype(np.int64), categories[:0]
    if (codes < 0).any():  # missing values: let pandas decide, as it does for object columns
        new, labels = pd.factorize(pd.Categorical.from_codes(codes, categories).to_numpy(dtype=object))
        return new.astype(np.int64), np.asarray(labels, dtype=object)
    if len(categories) == 1:  # one label (a run's id): nothing to renumber
        return codes, categories
    if len(categories) <= 16:  # a phase column: where each label first appears, a pass per label (no hashing)
        first = {}
        for label in range(len(categories)):
            hits = codes == label
            at = int(np.argmax(hits))
            if hits[at]:
                first[at] = label
        seen = np.asarray([first[at] for at in sorted(first)], dtype=np.int64)
    else:
        seen = pd.unique(codes)  # in order of appearance; a hash over small integers
    if (seen == np.arange(len(seen))).all():
        return codes, categories[: len(seen)]  # the categorical's own small codes, no copy
    lookup = np.full(len(categories), -1, dtype=codes.dtype)
    lookup[seen] = np.arange(len(seen), dtype=codes.dtype)
    return lookup[codes], categories[seen]


def _factorize_int(values: np.ndarray, extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes for int64 keys, labels sorted ascending (a lookup table when the range is small).

    ``extra`` values join the labels without codes of their own (ranks listed but without rows).
    """
    extra = np.zeros(0, dtype=np.int64) if extra is None else np.asarray(extra, dtype=np.int64)
    if len(values) > 1 and (values[1:] >= values[:-1]).all():  # sorted (ranks as the store orders them)
        change = np.flatnonzero(values[1:] != values[:-1]) + 1
        seen = values[np.concatenate([[0], change])].astype(np.int64)
        labels = np.union1d(seen, extra).astype(np.int64)
        counts = np.diff(np.concatenate([[0], change, [len(values)]]))
        codes = _narrow(np.searchsorted(labels, seen), len(labels))
        return np.repeat(codes, counts), labels  # small integers: 10 M rows of ranks take 10 MB, not 80
    ends = [int(v) for a in (values, extra) if len(a) for v in (a.min(), a.max())]
    if not ends:
        return values.astype(np.int64), values.astype(np.int64)
    bottom, top = min(ends), max(ends)
    if bottom == top:  # one value (one run, one piece): nothing to look up
        return np.zeros(len(values), dtype=np.int64), np.asarray([bottom], dtype=np.int64)
    if top - bottom < 4 * (len(values) + len(extra)) + 1024:
        shifted = values - bottom
        present = np.zeros(top - bottom + 1, dtype=bool)
        present[shifted] = True
        present[extra - bottom] = True
        labels = np.flatnonzero(present) + bottom
        lookup = np.cumsum(present) - 1
        return lookup[shifted], labels
    labels, codes = np.unique(np.concatenate([values.astype(np.int64), extra]), return_inverse=True)
    return codes[: len(values)].astype(np.int64), labels.astype(np.int64)


def _group_reduce(
    ufunc: np.ufunc, codes: np.ndarray, size: int, values: np.ndarray, initial: int
) -> np.ndarray:
    """Per-group min or max without pandas' overhead for the common one-group case."""
    if size == 1:
        return np.asarray([ufunc.reduce(values)], dtype=np.int64)
    out = np.full(size, initial, dtype=np.int64)
    ufunc.at(out, codes, values)
    return out


def _phase_codes(events: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Integer phase per span, communication waits split out as ``communication_wait``."""
    codes, labels = _factorize(events["phase"])
    labels = [str(p) for p in labels]
    if ev.COMMUNICATION in labels:
        communication = codes == labels.index(ev.COMMUNICATION)
        if communication.any():
            names = events["name"]
            waits = list(ev.COMMUNICATION_WAIT_ACTIVITIES)
            if isinstance(names.dtype, pd.CategoricalDtype):  # test each name once, not each row
                known = np.isin(np.asarray(names.cat.categories, dtype=object), waits)
                known = np.append(known, False)  # code -1 (missing) is no wait
                waiting = communication & known[names.cat.codes.to_numpy()] if known.any() else None
            else:
                name_codes, name_labels = pd.factorize(names.to_numpy()[communication])
                is_wait = np.isin(np.asarray(name_labels, dtype=object), waits)[name_codes]
                waiting = np.zeros(len(codes), dtype=bool)
                waiting[communication] = is_wait
            if waiting is not None and waiting.any():
                if ev.COMMUNICATION_WAIT not in labels:
                    labels.append(ev.COMMUNICATION_WAIT)
                codes = codes.copy()  # may be the events' own categorical codes
                codes[waiting] = labels.index(ev.COMMUNICATION_WAIT)
    return codes, labels


def _busy_per_lane(
    lane: np.ndarray, cell: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Own time per (lane, cell) where the lane has rows in that cell, lane by lane.

    Returns ``(lane, cell, ns)`` per such pair in ascending order, the lanes that have rows, and each
    lane's last row. Lanes are independent, so each is swept on its own: its arrays fit in the
    CPU's caches, times never need a composite key that could overflow, and no array the size of
    all rows is made (on 10 M rows that was 0.5 GB of temporaries). Rows grouped by lane (as the
    store returns them) are read in place; otherwise a stable order groups them first.
    """
    n = len(start)
    order: np.ndarray | None = None
    change = np.flatnonzero(lane[1:] != lane[:-1]) + 1
    if len(change) and not (lane[change] > lane[change - 1]).all():  # lanes interleave: group them
        order = np.argsort(lane, kind="stable")
        change = np.flatnonzero(np.diff(lane[order]) != 0) + 1
    bounds = [0, *change.tolist(), n]
    lanes, cells, seconds, present, last = [], [], [], [], []
    for low, high in itertools.pairwise(bounds):
        rows = slice(low, high) if order is None else order[low:high]
        own = _lane_exclusive(start[rows], end[rows])
        key = cell[rows].astype(np.int64)
        size = int(key.max()) + 1
        if size <= 4 * len(key) + 1024:
            counted = np.flatnonzero(np.bincount(key, minlength=size))
            sums = np.bincount(key, weights=own, minlength=size)[counted]
        else:
            counted, codes = np.unique(key, return_inverse=True)
            sums = np.bincount(codes.ravel(), weights=own, minlength=len(counted))
        lane_id = int(lane[low] if order is None else lane[order[low]])
        lanes.append(np.full(len(counted), lane_id, dtype=np.int64))
        cells.append(counted)
        seconds.append(sums)
        present.append(lane_id)
        last.append(high - 1 if order is None else int(order[high - 1]))
    return (
        np.concatenate(lanes),
        np.concatenate(cells),
        np.concatenate(seconds).astype(np.float64, copy=False),
        np.asarray(present, dtype=np.int64),
        np.asarray(last, dtype=np.int64),
    )


def _narrow(codes: np.ndarray, size: int) -> np.ndarray:
    """Integer codes below ``size`` in the smallest signed type that holds them."""
    for dtype in (np.int8, np.int16, np.int32):
        if size <= np.iinfo(dtype).max:
            return codes.astype(dtype, copy=False)
    return codes.astype(np.int64, copy=False)


def _lane_exclusive(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Own time of every span of one lane: the nested fast path, else the general sweep."""
    own = _nested_exclusive(start, end)
    return own if own is not None else _swept_exclusive(start, end)


def _nested_exclusive(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Own time of every span of one lane if no two of its spans cross, else None.

    A span's own time is its length minus its direct children's (``nesting_parents``); zero-length
    spans own nothing.
    """
    parent = nesting_parents(start, end)
    if parent is None:
        return None
    duration = np.where(end > start, end - start, 0).astype(np.float64)
    inner = parent >= 0
    if not inner.any():
        return duration
    return duration - np.bincount(parent[inner], weights=duration[inner], minlength=len(start))


def nesting_parents(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Row of every span's innermost enclosing span (-1: none) if no two spans cross, else None.

    Spans sorted by (start, longer first, row) form a tree when no two cross: one level deep (a step
    and its calls) in one pass, deeper by levels (``_deeper_parents``). Every span is checked to lie
    inside its parent, which holds only if no two spans cross. Zero-length spans enclose nothing and
    have no parent.
    """
    n = len(start)
    parent_of = np.full(n, -1, dtype=np.int64)
    positive = end > start
    rows: np.ndarray | None = None
    if positive.all():
        ks, ke = start, end
    else:
        rows = np.flatnonzero(positive)
        if len(rows) == 0:
            return parent_of
        ks, ke = start[rows], end[rows]
    step = np.diff(ks)
    if not ((step >= 0).all() and ((step > 0) | (ke[1:] <= ke[:-1])).all()):
        order = np.lexsort((-ke, ks))  # stable: equal spans keep row order, the later row inside
        rows = order if rows is None else rows[order]
        ks, ke = ks[order], ke[order]
    one_level = _one_level_parents(ks, ke)
    if one_level is not None:
        child, parent = one_level
    else:
        deeper = _deeper_parents(ks, ke)
        if deeper is None:
            return None
        child, parent = deeper
    if rows is None:
        parent_of[child] = parent
    else:
        parent_of[rows[child]] = rows[parent]
    return parent_of


def _one_level_parents(ks: np.ndarray, ke: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(child, parent)`` positions of spans sorted by (start, longer first) when every span is top level or
    directly inside one that is (a step and its calls), none crossing; else None.

    One pass, no sort: a span starting before every earlier span has ended lies inside the last top-level span
    (a real recording's usual shape, and 20x cheaper than the general levels)."""
    reach = np.maximum.accumulate(ke)
    inner = np.zeros(len(ks), dtype=bool)
    np.less(ks[1:], reach[:-1], out=inner[1:])
    child = np.flatnonzero(inner)
    parent = np.maximum.accumulate(np.where(inner, -1, np.arange(len(ks))))[child]
    if not (ke[child] <= ke[parent]).all():
        return None  # crosses its parent's end
    same = parent[1:] == parent[:-1]
    if not (ks[child[1:]] >= ke[child[:-1]])[same].all():
        return None  # a span inside another inner one: two levels or more
    return child, parent


def _deeper_parents(ks: np.ndarray, ke: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(child, parent)`` positions of spans sorted by (start, longer first) nested to any depth, or None if
    two cross: a span's depth is the spans before it minus those ended by its start, its parent the nearest
    earlier span one level up, checked to hold it."""
    m = len(ks)
    depth = np.arange(m, dtype=np.int64)
    depth -= np.searchsorted(np.sort(ke, kind="stable"), ks, side="right")
    if int(depth.max()) >= 2**15:  # deeper than any real call stack: the spans cross
        return None
    by_depth = np.argsort(depth.astype(np.int16), kind="stable")  # radix sort; row order kept per level
    level_key = depth[by_depth] * m + by_depth
    first_inner = int(np.searchsorted(level_key, m))  # depth >= 1 from here: these have a parent
    found = np.searchsorted(level_key, level_key[first_inner:] - m) - 1
    if len(found) and found[0] < 0:
        return None
    child = by_depth[first_inner:]
    parent = by_depth[found]
    if not ((level_key[found] // m == depth[child] - 1).all() and (ke[parent] >= ke[child]).all()):
        return None
    return child, parent


def _swept_exclusive(key_start: np.ndarray, key_end: np.ndarray) -> np.ndarray:
    """Own time of every span by the general sweep (segment tree over elementary intervals)."""
    n = len(key_start)
    bounds = np.concatenate([key_start, key_end])
    order = np.argsort(bounds, kind="stable")
    sorted_bounds = bounds[order]
    is_new = np.empty(2 * n, dtype=bool)
    is_new[0] = True
    np.not_equal(sorted_bounds[1:], sorted_bounds[:-1], out=is_new[1:])
    position = np.empty(2 * n, dtype=np.int64)
    position[order] = np.cumsum(is_new) - 1
    first, last = position[:n], position[n:]
    edges = sorted_bounds[is_new]
    n_intervals = len(edges) - 1
    if n_intervals <= 0:
        return np.zeros(n, dtype=np.float64)
    # Priority: later start wins, then shorter, then the later row (stable sort keeps row order).
    priority_key = first * (n_intervals + 2) + (n_intervals + 1 - last)
    by_priority = np.argsort(priority_key, kind="stable")
    priority = np.empty(n, dtype=np.int64)
    priority[by_priority] = np.arange(n, dtype=np.int64)
    winner = _range_max(first, last, priority, n_intervals)
    covered = winner >= 0
    widths = np.diff(edges)[covered].astype(np.float64)
    return np.bincount(by_priority[winner[covered]], weights=widths, minlength=n)


def _range_max(low: np.ndarray, high: np.ndarray, value: np.ndarray, size: int) -> np.ndarray:
    """For every point 0..size-1, the largest ``value`` among ranges ``[low, high)`` holding it (-1: none).

    Offline range-max with a bottom-up segment tree: each range marks O(log size) nodes, then the
    marks are pushed down to the leaves, level by level. All vectorised.
    """
    leaves = 1 << max(0, int(size - 1).bit_length())
    tree = np.full(2 * leaves, -1, dtype=np.int64)
    width = high - low
    single = width == 1  # most spans cover one interval: mark their leaf directly
    np.maximum.at(tree, low[single] + leaves, value[single])
    wide = width > 1
    left, right, value = low[wide] + leaves, high[wide] + leaves, value[wide]
    while left.size:
        odd = (left & 1).astype(bool)
        if odd.any():
            np.maximum.at(tree, left[odd], value[odd])
            left = left + odd
        odd = (right & 1).astype(bool)
        if odd.any():
            right = right - odd
            np.maximum.at(tree, right[odd], value[odd])
        left >>= 1
        right >>= 1
        live = left < right
        if not live.all():
            left, right, value = left[live], right[live], value[live]
    level = 1
    while level < leaves:
        parents = tree[level : 2 * level]
        for child in (tree[2 * level : 4 * level : 2], tree[2 * level + 1 : 4 * level : 2]):
            np.maximum(child, parents, out=child)
        level *= 2
    return tree[leaves : leaves + size]


def _dtype_of(column: str) -> str:
    if column in ("run_id", "host", "phase"):
        return "object"
    if column == "rank":
        return "int32"
    if column in ("epoch", "step", "first_start_ns", "last_end_ns"):
        return "int64"
    return "float64"
