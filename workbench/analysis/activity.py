"""Where every rank's time went, bin by bin: the rank × time grid that still reads at 1 024 ranks.

A timeline with one row per rank is unreadable past ~100 rows, and its bar budget is shared by all
ranks. The grid keeps, per phase, the seconds each rank spent in it in each time bin: 1 024 ranks
× a few hundred bins is a few MB whatever the run's length, so a live view can colour every rank's
waiting share over time, spot the ranks and nodes that never wait (the slow ones the others wait
for), and hand those to the timeline.

Seconds are each instant's *innermost* span, as in ``analysis.breakdown`` (a ``train_step``'s
allreduce is communication, not compute too); time in no span is idle. ``RankTimeGrid`` takes the
events in chunks, as a live feed delivers them, and bins each chunk once: its cost follows the new
events, not the run's length. Spans of one chunk nest exactly. A span whose children arrived in an
earlier chunk (a recorder flushed between a child's end and its parent's) loses their time exactly
in the bins it covers whole and proportionally in its first bin, the one bin where the grid cannot
tell its children from the spans before it. When the run outgrows ``max_bins`` bins, the bins
double in width (pairs summed), so the grid stays the same size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.breakdown import effective_phase, nesting_parents
from workbench.events import NS_PER_S, phase_order

#: Phases in which a rank waits for others or for nothing, rather than doing its own work; time in
#: no span is idle too. The heatmap's default colour is the share of a bin spent so.
WAITING_PHASES: tuple[str, ...] = (ev.COMMUNICATION, ev.COMMUNICATION_WAIT, ev.IDLE)
#: The value that colours the grid by waiting time rather than by one phase.
WAITING = "waiting"
#: The bins a grid starts with (seconds) and the most it keeps before doubling their width. Half a second
#: holds a step or a few: narrower, every bin of a synchronous job is all waiting or all work, and the
#: stripes hide which ranks wait least.
DEFAULT_BIN_S = 0.5
DEFAULT_MAX_BINS = 160
#: How many of the slowest ranks are marked and given to the timeline.
DEFAULT_SLOWEST = 16
#: ``rank_activity``'s columns.
ACTIVITY_COLUMNS: tuple[str, ...] = ("rank", "host", "known_s", "waiting_s", "work_s", "work_share", "slowest")


class RankTimeGrid:
    """Seconds per (phase, rank, time bin) of a run, fed chunk by chunk (``add``).

    ``bin_s`` is the starting bin width; the grid doubles it whenever the run would need more than
    ``max_bins`` bins. Ranks are rows by their number; hosts are remembered from the events.
    """

    def __init__(self, bin_s: float = DEFAULT_BIN_S, max_bins: int = DEFAULT_MAX_BINS) -> None:
        if not bin_s > 0 or max_bins < 2:
            raise ValueError(f"need bin_s > 0 and max_bins >= 2, got {bin_s=} {max_bins=}")
        self.bin_ns = max(1, round(bin_s * NS_PER_S))
        self.max_bins = int(max_bins)
        #: start of bin 0 (ns since the epoch), set by the first events
        self.origin_ns: int | None = None
        self.phases: list[str] = []
        #: seconds, shape (phases, ranks, bins)
        self._seconds = np.zeros((0, 0, 0), dtype=np.float64)
        #: per rank row: first start and last end seen (ns), -1 before any
        self._first = np.zeros(0, dtype=np.int64)
        self._last = np.zeros(0, dtype=np.int64)
        self.hosts: dict[int, str] = {}

    # ------------------------------------------------------------------ shape
    @property
    def bins(self) -> int:
        return self._seconds.shape[2]

    @property
    def bin_s(self) -> float:
        return self.bin_ns / NS_PER_S

    @property
    def ranks(self) -> list[int]:
        """Ranks that sent at least one span, in order."""
        return [int(r) for r in np.flatnonzero(self._last >= 0)]

    def _phase_index(self, phase: str) -> int:
        if phase not in self.phases:
            self.phases.append(phase)
            grown = np.zeros((len(self.phases), *self._seconds.shape[1:]), dtype=np.float64)
            grown[:-1] = self._seconds
            self._seconds = grown
        return self.phases.index(phase)

    def _fit(self, max_rank: int, low_ns: int, high_ns: int) -> None:
        """Grow the grid to hold rank ``max_rank`` and the times ``low_ns .. high_ns``."""
        phases, ranks, bins = self._seconds.shape
        if max_rank >= ranks:
            grown = np.zeros((phases, max_rank + 1, bins), dtype=np.float64)
            grown[:, :ranks] = self._seconds
            self._seconds = grown
            self._first = np.concatenate([self._first, np.full(max_rank + 1 - ranks, -1, dtype=np.int64)])
            self._last = np.concatenate([self._last, np.full(max_rank + 1 - ranks, -1, dtype=np.int64)])
        if self.origin_ns is None:
            self.origin_ns = low_ns - low_ns % self.bin_ns
        if low_ns < self.origin_ns:  # a rank whose first events start before the others': bins in front
            before = -(-(self.origin_ns - low_ns) // self.bin_ns)
            self.origin_ns -= before * self.bin_ns
            self._seconds = np.concatenate(
                [np.zeros((*self._seconds.shape[:2], before), dtype=np.float64), self._seconds], axis=2
            )
        needed = -(-(high_ns - self.origin_ns) // self.bin_ns)
        while needed > self.max_bins:
            self._coarsen()
            needed = -(-(high_ns - self.origin_ns) // self.bin_ns)
        if needed > self.bins:
            extra = np.zeros((*self._seconds.shape[:2], needed - self.bins), dtype=np.float64)
            self._seconds = np.concatenate([self._seconds, extra], axis=2)

    def _coarsen(self) -> None:
        """Double the bin width: bins summed in pairs, the origin on an edge of the wider bins."""
        wider = 2 * self.bin_ns
        assert self.origin_ns is not None
        shift = (self.origin_ns % wider) // self.bin_ns  # 0 or 1 bin in front to align the origin
        seconds = self._seconds
        if shift:
            seconds = np.concatenate([np.zeros((*seconds.shape[:2], 1)), seconds], axis=2)
            self.origin_ns -= self.bin_ns
        if seconds.shape[2] % 2:
            seconds = np.concatenate([seconds, np.zeros((*seconds.shape[:2], 1))], axis=2)
        self._seconds = seconds.reshape(*seconds.shape[:2], -1, 2).sum(axis=3)
        self.bin_ns = wider

    # ------------------------------------------------------------------ feeding
    def add(self, events: pd.DataFrame | None) -> None:
        """Bin a chunk of events (the events.py schema); spans in ``OVERLAP_PHASES`` are left out."""
        if events is None or len(events) == 0:
            return
        spans = events[~events["phase"].isin(ev.OVERLAP_PHASES)]
        spans = spans[(spans["end_ns"] > spans["start_ns"]).to_numpy()]
        if len(spans) == 0:
            return
        rank = spans["rank"].to_numpy().astype(np.int64)
        start = spans["start_ns"].to_numpy().astype(np.int64)
        end = spans["end_ns"].to_numpy().astype(np.int64)
        codes, names = pd.factorize(effective_phase(spans), sort=False)
        phase = np.asarray([self._phase_index(str(name)) for name in names], dtype=np.int64)[codes]
        if "host" in spans and not set(pd.unique(rank).tolist()) <= set(self.hosts):
            for r, host in ev.rank_hosts(spans).items():
                self.hosts.setdefault(int(r), host)
        self._fit(int(rank.max()), int(start.min()), int(end.max()))
        parent = _parents_per_rank(rank, start, end)
        # Spans received before this chunk that a new span may enclose: only where it starts before
        # its rank's last end so far (a span is written when it ends, its parent after it).
        earlier_end = self._last[rank]
        roots = (parent < 0) & (start < earlier_end)
        before = self._seconds.sum(axis=0) if roots.any() else None
        self._add_spans(phase, rank, start, end, 1.0)
        inner = parent >= 0
        if inner.any():  # a child's time is its own, not its parent's
            self._add_spans(phase[parent[inner]], rank[inner], start[inner], end[inner], -1.0)
        if before is not None:  # children that arrived before their parent: their time leaves the parent's bins
            for p, r, low, high in zip(phase[roots], rank[roots], start[roots], earlier_end[roots], strict=True):
                self._take_earlier(before, int(p), int(r), int(low), int(high))
        np.clip(self._seconds, 0.0, None, out=self._seconds)  # float rounding of the subtractions
        never = np.iinfo(np.int64).max
        first = np.where(self._first < 0, never, self._first)
        np.minimum.at(first, rank, start)
        self._first = np.where(first == never, -1, first)
        np.maximum.at(self._last, rank, end)

    def _bin_of(self, ns: np.ndarray) -> np.ndarray:
        assert self.origin_ns is not None
        return (ns - self.origin_ns) // self.bin_ns

    def _add_spans(self, phase: np.ndarray, rank: np.ndarray, start: np.ndarray, end: np.ndarray, sign: float) -> None:
        """Add (sign +1) or take away (-1) each span's seconds from the bins it overlaps."""
        phases, ranks, bins = self._seconds.shape
        flat = self._seconds.reshape(-1)
        row = (phase * ranks + rank) * bins
        first, last = self._bin_of(start), self._bin_of(end - 1)
        edge = self.origin_ns + (first + 1) * self.bin_ns  # end of each span's first bin
        one = first == last
        weights = np.where(one, end - start, edge - start) * (sign / NS_PER_S)
        _accumulate(flat, row + first, weights)
        many = ~one
        if not many.any():
            return
        row, first, last = row[many], first[many], last[many]
        tail = (end[many] - (self.origin_ns + last * self.bin_ns)) * (sign / NS_PER_S)
        _accumulate(flat, row + last, tail)
        whole = last - first > 1
        if whole.any():  # bins covered whole: +bin at the first, -bin after the last, summed along time
            steps = np.zeros(flat.size + 1, dtype=np.float64)
            width = sign * self.bin_s
            np.add.at(steps, row[whole] + first[whole] + 1, width)
            np.add.at(steps, row[whole] + last[whole], -width)
            flat += np.cumsum(steps[:-1].reshape(phases * ranks, bins), axis=1).reshape(-1)

    def _take_earlier(self, before: np.ndarray, phase: int, rank: int, low: int, high: int) -> None:
        """Take the time of earlier chunks' spans in ``low .. high`` from ``phase``'s bins of ``rank``.

        ``before``: seconds per (rank, bin) before this chunk. Under nesting, what a rank recorded
        between a new span's start and the rank's previous last end lies inside that span. Bins the
        range covers whole lose all of it; a bin it covers in part loses the part's share of the
        rank's known time there (the grid keeps no finer detail).
        """
        assert self.origin_ns is not None
        first, last = int(self._bin_of(np.int64(low))), int(self._bin_of(np.int64(high - 1)))
        edges = self.origin_ns + np.arange(first, last + 2, dtype=np.int64) * self.bin_ns
        inside = np.minimum(edges[1:], high) - np.maximum(edges[:-1], low)
        known = np.minimum(edges[1:], high) - np.maximum(edges[:-1], int(self._first[rank]))
        share = np.clip(inside / np.maximum(known, 1), 0.0, 1.0)
        self._seconds[phase, rank, first : last + 1] -= before[rank, first : last + 1] * share

    # ------------------------------------------------------------------ reading
    def bin_starts_s(self) -> np.ndarray:
        """Each bin's start in seconds since ``t0_ns`` (default: the grid's origin)."""
        return np.arange(self.bins) * self.bin_s

    def known_seconds(self) -> np.ndarray:
        """Per (rank, bin): seconds between the rank's first span and its last end (0 outside)."""
        ranks, bins = self._seconds.shape[1:]
        if not ranks or not bins:
            return np.zeros((ranks, bins))
        assert self.origin_ns is not None
        edges = self.origin_ns + np.arange(bins + 1, dtype=np.int64) * self.bin_ns
        low = np.maximum(edges[None, :-1], self._first[:, None])
        high = np.minimum(edges[None, 1:], self._last[:, None])
        known = np.clip(high - low, 0, None) / NS_PER_S
        known[self._last < 0] = 0.0
        return known

    def seconds(self, phases: Iterable[str] | str) -> np.ndarray:
        """Per (rank, bin): seconds in ``phases`` (``WAITING``: the waiting phases and time in no span)."""
        if isinstance(phases, str):
            phases = [phases]
        wanted = list(phases)
        ranks, bins = self._seconds.shape[1:]
        chosen = [self.phases.index(p) for p in wanted if p in self.phases and p != WAITING]
        total = self._seconds[chosen].sum(axis=0) if chosen else np.zeros((ranks, bins))
        if WAITING in wanted:
            working = [i for i, p in enumerate(self.phases) if p not in WAITING_PHASES]
            work = self._seconds[working].sum(axis=0) if working else np.zeros((ranks, bins))
            total = total + np.clip(self.known_seconds() - work, 0.0, None)
        return total

    def share(self, value: str = WAITING) -> pd.DataFrame:
        """Share of each (rank, bin) spent in ``value`` (a phase or ``WAITING``), NaN where the rank sent nothing.

        Index: the ranks that sent spans; columns: bin starts (seconds since the grid's origin).
        """
        known = self.known_seconds()
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(known > 0, self.seconds(value) / known, np.nan)
        ranks = self.ranks
        return pd.DataFrame(
            np.clip(share[ranks], 0.0, 1.0), index=pd.Index(ranks, name="rank"), columns=self.bin_starts_s()
        )

    def values(self) -> list[str]:
        """What the grid can be coloured by: ``WAITING`` then the phases seen, in display order."""
        return [WAITING, *phase_order(self.phases)]


def rank_time_grid(
    events: pd.DataFrame, *, bin_s: float = DEFAULT_BIN_S, max_bins: int = DEFAULT_MAX_BINS
) -> RankTimeGrid:
    """A ``RankTimeGrid`` of a whole run's events at once (every span and its children together: exact)."""
    grid = RankTimeGrid(bin_s, max_bins)
    grid.add(events)
    return grid


def grid_frame(grid: RankTimeGrid) -> pd.DataFrame:
    """The grid as a long table: ``rank, bin_start_s, phase, seconds`` (``idle`` for time in no span)."""
    rows = []
    starts = grid.bin_starts_s()
    known = grid.known_seconds()
    covered = np.zeros_like(known)
    ranks = grid.ranks
    for index, phase in enumerate(grid.phases):
        seconds = grid._seconds[index]
        covered += seconds
        rows.append(_long(seconds[ranks], ranks, starts, phase))
    rows.append(_long(np.clip(known - covered, 0.0, None)[ranks], ranks, starts, "idle (no span)"))
    table = pd.concat(rows, ignore_index=True)
    return table[table["seconds"] > 0].reset_index(drop=True)


def _long(values: np.ndarray, ranks: list[int], starts: np.ndarray, phase: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": np.repeat(ranks, len(starts)),
            "bin_start_s": np.tile(starts, len(ranks)),
            "phase": phase,
            "seconds": values.reshape(-1),
        }
    )


def rank_activity(
    grid: RankTimeGrid,
    *,
    slowest: int = DEFAULT_SLOWEST,
    window_bins: int | None = None,
    hosts: Mapping[int, str] | None = None,
) -> pd.DataFrame:
    """Per rank: known, waiting and working seconds, and whether it is among the ``slowest``.

    In a synchronous data-parallel job every rank takes the same step time, and the others wait for
    the slow ones: the slowest ranks are those that wait least, i.e. with the largest share of their
    time in their own work (``work_share``). ``window_bins``: only the last that many bins (the recent
    past of a live run); default the whole grid.
    """
    ranks = grid.ranks
    if not ranks:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in ACTIVITY_COLUMNS})
    part = slice(-window_bins, None) if window_bins else slice(None)
    known = grid.known_seconds()[ranks, part].sum(axis=1)
    waiting = grid.seconds(WAITING)[ranks, part].sum(axis=1)
    work = np.clip(known - waiting, 0.0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(known > 0, work / known, np.nan)
    hosts = {**grid.hosts, **(hosts or {})}
    table = pd.DataFrame(
        {
            "rank": ranks,
            "host": [hosts.get(r, "") for r in ranks],
            "known_s": known,
            "waiting_s": waiting,
            "work_s": work,
            "work_share": share,
        }
    )
    table["slowest"] = table["rank"].isin(slowest_ranks(table, slowest))
    return table


def heatmap_marks(activity: pd.DataFrame) -> dict[str, Any]:
    """What ``figures.rank_time_figure`` marks, from ``rank_activity``: the slowest ranks (in rank order),
    the slowest host (None on one host) and every rank's work share."""
    by_host = host_activity(activity)
    return {
        "marked": sorted(int(r) for r in activity.loc[activity["slowest"], "rank"]),
        "marked_host": str(by_host["host"].iloc[0]) if len(by_host) else None,
        "work_share": dict(zip(activity["rank"], activity["work_share"], strict=True)),
    }


def slowest_ranks(activity: pd.DataFrame, count: int) -> list[int]:
    """The ``count`` ranks with the largest ``work_share`` (ties by rank number), slowest first."""
    ranked = activity.dropna(subset=["work_share"]).sort_values(["work_share", "rank"], ascending=[False, True])
    return [int(r) for r in ranked["rank"].head(max(0, count))]


def host_activity(activity: pd.DataFrame) -> pd.DataFrame:
    """Per host: its ranks, their mean ``work_share``, slowest host first (empty on one host)."""
    known = activity[activity["host"].astype(str) != ""]
    if known["host"].nunique() < 2:
        return pd.DataFrame({"host": pd.Series(dtype=object), "ranks": pd.Series(dtype="int64"), "work_share": []})
    table = known.groupby("host").agg(ranks=("rank", "size"), work_share=("work_share", "mean")).reset_index()
    return table.sort_values(["work_share", "host"], ascending=[False, True]).reset_index(drop=True)


def describe_slowest(activity: pd.DataFrame, count: int = 3) -> str:
    """One line: the slowest ranks (and host, on several) by work share, beside the median rank's."""
    slow = slowest_ranks(activity, count)
    if not slow:
        return "no spans yet"
    shares = activity.set_index("rank")["work_share"]
    hosts = dict(zip(activity["rank"], activity["host"], strict=True))
    named = ", ".join(f"{ev.ranks_with_hosts([rank], hosts)} {shares[rank]:.0%}" for rank in slow)
    line = f"slowest (waits least): {named} in own work; median rank {float(shares.median()):.0%}"
    by_host = host_activity(activity)
    if len(by_host):
        top = by_host.iloc[0]
        line += f"; slowest host {top['host']} ({int(top['ranks'])} ranks, {top['work_share']:.0%})"
    return line


def _parents_per_rank(rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each span's innermost enclosing span on its own rank within this chunk (-1: none or spans cross)."""
    parent = np.full(len(rank), -1, dtype=np.int64)
    order = np.argsort(rank, kind="stable")
    bounds = np.flatnonzero(np.diff(rank[order])) + 1
    for rows in np.split(order, bounds):
        found = nesting_parents(start[rows], end[rows])
        if found is None:  # crossing spans: each counts whole (shares are clipped at 1)
            continue
        inner = found >= 0
        parent[rows[inner]] = rows[found[inner]]
    return parent


def _accumulate(flat: np.ndarray, index: np.ndarray, weights: np.ndarray) -> None:
    """``flat[index] += weights`` with repeats summed: ``np.add.at`` for a few, one bincount for many."""
    if len(index) * 16 < flat.size:
        np.add.at(flat, index, weights)
    else:
        flat += np.bincount(index, weights=weights, minlength=flat.size)
