"""Timeline: one row per rank, one bar per span, coloured by phase.

Drawing is what makes a live timeline slow, so this module keeps the figure cheap: ONE trace per
phase (not per span), numeric 1-D arrays (sent to the browser as binary buffers by FigureWidget),
and a draw-side decimation that merges neighbouring same-phase spans of a rank that are closer than
about one pixel, so that a window never carries more than ``max_spans`` bars. The decimation only
changes what is drawn; merged bars say in their hover how many spans and how much busy time they
stand for; where phases interleave below a pixel, a bar per pixel-ish bucket takes the colour of
its busiest phase and its hover lists every phase's share.

Ranks on more than one host are drawn host by host: lanes ordered by host then rank, labelled
``node1 · rank 0``, every other host on a light band with its name once in the right margin. That
costs a shape and an annotation per host, nothing per span; on one host the figure is as before.

Two styles are offered: ``"bar"`` (horizontal ``go.Bar`` with ``base=start``, ``x=duration``;
exact hover per bar, the default) and ``"gl"`` (``go.Scattergl`` thick line segments separated by
gaps; WebGL, for very many spans, hover only at the segment ends).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
from typing import Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.events import NS_PER_S, OVERLAP_PHASES, host_count, rank_hosts
from workbench.figures.style import colours_for, phase_order

#: Bars drawn at most per window before neighbouring same-phase spans are merged.
DEFAULT_MAX_SPANS = 5_000
#: Rows a timeline shows readably: past this many ranks the dashboard and the report draw the rank × time
#: heatmap of every rank (``figures.rank_time_figure``) and the timeline of the slowest only.
MAX_TIMELINE_RANKS = 64
#: Horizontal resolution assumed for the merge: gaps narrower than window/width_px are not visible.
DEFAULT_WIDTH_PX = 1_600

SPAN_COLUMNS = ("rank", "phase", "name", "step", "last_step", "epoch", "start_s", "end_s", "count", "busy_s")

_HOVER = (
    "rank %{y} · %{hovertext}<br>step %{customdata[1]}, epoch %{customdata[2]}"
    "<br>start %{customdata[0]:.6f} s, %{x:.6f} s long"
    "<br>%{customdata[3]} span(s), busy %{customdata[4]:.6f} s"
)


def spans_frame(events: pd.DataFrame, *, t0_ns: int | None = None) -> pd.DataFrame:
    """Events as drawable spans in seconds since ``t0_ns`` (default: the earliest start).

    Integer nanoseconds are subtracted before the conversion to float so that microsecond spans a
    day into the epoch keep their precision.
    """
    if events is None or len(events) == 0:
        return pd.DataFrame({c: pd.Series(dtype=_span_dtype(c)) for c in SPAN_COLUMNS})
    start = events["start_ns"].to_numpy(dtype=np.int64)
    end = events["end_ns"].to_numpy(dtype=np.int64)
    t0 = int(start.min()) if t0_ns is None else int(t0_ns)
    step = events["step"].to_numpy(dtype=np.int64)
    return pd.DataFrame(
        {
            "rank": events["rank"].to_numpy(dtype=np.int64),
            "phase": events["phase"].astype(str).to_numpy(),
            "name": events["name"].astype(str).to_numpy(),
            "step": step,
            "last_step": step,
            "epoch": events["epoch"].to_numpy(dtype=np.int64),
            "start_s": (start - t0) / NS_PER_S,
            "end_s": (end - t0) / NS_PER_S,
            "count": np.ones(len(events), dtype=np.int64),
            "busy_s": (end - start) / NS_PER_S,
        }
    )


def _span_dtype(column: str) -> str:
    if column in ("phase", "name"):
        return "object"
    return "float64" if column.endswith("_s") else "int64"


def _merge_adjacent(spans: pd.DataFrame, resolution_s: float, limit: int) -> pd.DataFrame | None:
    """Merge time-adjacent spans of a rank that share a phase and are less than ``resolution_s`` apart.

    Only neighbours in time order merge, so interleaved phases are never hidden under one bar.
    Returns None, before the costly aggregation, when more than ``limit`` bars would remain.
    """
    spans = _by_rank_and_start(spans).reset_index(drop=True)
    rank = spans["rank"].to_numpy()
    phase = spans["phase"].to_numpy()
    start = spans["start_s"].to_numpy()
    reach = spans.groupby("rank", sort=False)["end_s"].cummax().to_numpy()
    new_segment = np.ones(len(spans), dtype=bool)
    new_segment[1:] = (rank[1:] != rank[:-1]) | (phase[1:] != phase[:-1]) | (start[1:] - reach[:-1] >= resolution_s)
    if int(new_segment.sum()) > limit:
        return None
    merged = spans.groupby(np.cumsum(new_segment), sort=False).agg(
        rank=("rank", "first"),
        phase=("phase", "first"),
        name=("name", "first"),
        step=("step", "first"),
        last_step=("last_step", "last"),
        epoch=("epoch", "first"),
        start_s=("start_s", "first"),
        end_s=("end_s", "max"),
        count=("count", "sum"),
        busy_s=("busy_s", "sum"),
    )
    return merged.reset_index(drop=True)


def _bin(spans: pd.DataFrame, lo: float, hi: float, buckets: int) -> pd.DataFrame:
    """One bar per (rank, time bucket) in the phase that was busiest there (a pixel's colour).

    The bar's hover names every phase's share of the bucket, so the minority phases stay visible
    in numbers until the user zooms in far enough to see them drawn. Sums go through dense
    (rank, bucket, phase) arrays, not group-bys: a live timeline is binned at every refresh.
    """
    width = (hi - lo) / buckets
    start = spans["start_s"].to_numpy().clip(lo, hi)
    end = spans["end_s"].to_numpy().clip(lo, hi)
    first = np.clip(((start - lo) // width).astype(np.int64), 0, buckets - 1)
    last = np.clip(((end - lo) // width).astype(np.int64), 0, buckets - 1)
    pieces = last - first + 1
    index = np.repeat(np.arange(len(spans)), pieces)
    bucket = first[index] + (np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces))
    bucket_lo = lo + bucket * width
    piece_start = np.maximum(start[index], bucket_lo)
    piece_end = np.minimum(end[index], bucket_lo + width)
    busy = np.maximum(piece_end - piece_start, 0.0)

    rank_labels, rank_codes = np.unique(spans["rank"].to_numpy(), return_inverse=True)
    phase_codes, phase_labels = pd.factorize(spans["phase"].to_numpy())
    n_cells, n_phases = len(rank_labels) * buckets, len(phase_labels)
    cell = rank_codes.ravel()[index] * buckets + bucket
    by_phase = cell * n_phases + phase_codes[index]
    seconds = np.bincount(by_phase, weights=busy, minlength=n_cells * n_phases).reshape(n_cells, n_phases)
    present = np.bincount(by_phase, minlength=n_cells * n_phases).reshape(n_cells, n_phases) > 0
    cells = np.flatnonzero(present.any(axis=1))
    score = np.where(present[cells], seconds[cells], -1.0)
    ranking = np.argsort(-score, axis=1, kind="stable")  # busiest phase first, first seen on a tie
    total = seconds[cells].sum(axis=1)

    by_cell = np.argsort(cell, kind="stable")  # pieces come nearly in cell order: a cheap sort
    bounds = np.flatnonzero(np.r_[True, np.diff(cell[by_cell]) != 0])  # one per cell in ``cells``

    def extreme(ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        return ufunc.reduceat(values[by_cell], bounds)

    texts = []
    for row, order in enumerate(ranking):
        parts = [
            f"{phase_labels[p]} {(seconds[cells[row], p] / total[row] if total[row] > 0 else 0.0):.0%}"
            for p in order
            if present[cells[row], p]
        ]
        texts.append(", ".join(parts))
    dominant = ranking[:, 0]
    return pd.DataFrame(
        {
            "rank": rank_labels[cells // buckets],
            "phase": np.asarray(phase_labels, dtype=object)[dominant],
            "name": ["binned: " + text for text in texts],
            "step": extreme(np.minimum, spans["step"].to_numpy()[index]),
            "last_step": extreme(np.maximum, spans["last_step"].to_numpy()[index]),
            "epoch": extreme(np.minimum, spans["epoch"].to_numpy()[index]),
            "start_s": extreme(np.minimum, piece_start),
            "end_s": extreme(np.maximum, piece_end),
            "count": np.bincount(cell, weights=spans["count"].to_numpy()[index], minlength=n_cells)[cells].astype(
                np.int64
            ),
            "busy_s": seconds[cells, dominant],
        }
    )[list(SPAN_COLUMNS)]


def decimate_spans(
    spans: pd.DataFrame,
    *,
    max_spans: int | None = DEFAULT_MAX_SPANS,
    window: tuple[float, float] | None = None,
    width_px: int = DEFAULT_WIDTH_PX,
) -> tuple[pd.DataFrame, float]:
    """Spans overlapping ``window`` (seconds), reduced to at most ``max_spans`` bars.

    First, time-adjacent same-phase spans of a rank closer than one pixel (window / width_px) are
    merged. If phases interleave below a pixel, that is not enough, so each rank's window is cut
    into at most max_spans / ranks buckets drawn in their busiest phase; each rank's longest span, and
    every span at least a bucket wide, stays a bar of its own (``_long_spans``). Returns the bars and the
    resolution in seconds (0.0 when every span is drawn as it is). A dense window thus degrades
    to coarser bars instead of to a frozen browser; zooming in brings the detail back.
    """
    if window is not None:
        lo, hi = window
        spans = spans[(spans["end_s"] >= lo) & (spans["start_s"] <= hi)]
    if max_spans is None or len(spans) <= max_spans:
        return spans.reset_index(drop=True), 0.0
    lo = float(spans["start_s"].min()) if window is None else float(window[0])
    hi = float(spans["end_s"].max()) if window is None else float(window[1])
    hi = max(hi, lo + 1e-9)
    resolution = (hi - lo) / max(int(width_px), 1)
    merged = _merge_adjacent(spans, resolution, int(max_spans))
    if merged is not None:
        return merged, resolution
    n_ranks = max(int(spans["rank"].nunique()), 1)
    buckets = max(1, min(int(width_px), int(max_spans) // n_ranks))
    kept = _long_spans(spans, (hi - lo) / buckets, int(max_spans) // 2)
    if len(kept) + buckets * n_ranks > max_spans:  # make room for them: fewer, wider buckets
        buckets = max(1, (int(max_spans) - len(kept)) // n_ranks)
        kept = _long_spans(spans, (hi - lo) / buckets, int(max_spans) // 2)
    rest = spans.drop(index=kept.index) if len(kept) else spans
    binned = _bin(rest, lo, hi, buckets) if len(rest) else rest.iloc[0:0]
    drawn = pd.concat([kept[list(SPAN_COLUMNS)], binned], ignore_index=True) if len(kept) else binned
    return _by_rank_and_start(drawn).reset_index(drop=True), (hi - lo) / buckets


def _long_spans(spans: pd.DataFrame, bucket_s: float, limit: int) -> pd.DataFrame:
    """Spans that stay bars of their own when the rest is binned: each rank's longest, and any as wide as a bucket.

    A stall, a checkpoint or an evaluation is what a user looks for on a dense timeline; binned, it
    would only colour the buckets it covers. Of the wide spans at most ``limit``, the longest, are kept.
    """
    duration = spans["end_s"].to_numpy() - spans["start_s"].to_numpy()
    keep = np.zeros(len(spans), dtype=bool)
    wide = np.flatnonzero(duration >= bucket_s)
    if len(wide) > limit:
        wide = wide[np.argsort(-duration[wide], kind="stable")[:limit]]
    keep[wide] = True
    longest = spans.assign(_duration=duration).groupby("rank", sort=False)["_duration"].idxmax()
    keep[spans.index.get_indexer(longest.to_numpy())] = True
    return spans[keep]


def _phase_trace(spans: pd.DataFrame, phase: str, colour: str, style: str, visible: bool) -> go.Bar | go.Scattergl:
    start = spans["start_s"].to_numpy(dtype=np.float64)
    duration = spans["end_s"].to_numpy(dtype=np.float64) - start
    rank = spans["rank"].to_numpy(dtype=np.float64)
    custom = np.column_stack(
        [
            start,
            spans["step"].to_numpy(dtype=np.float64),
            spans["epoch"].to_numpy(dtype=np.float64),
            spans["count"].to_numpy(dtype=np.float64),
            spans["busy_s"].to_numpy(dtype=np.float64),
        ]
    )
    names = spans["name"].to_numpy(dtype=object)
    template = _HOVER + f"<extra>{phase}</extra>"
    if style == "bar":
        return go.Bar(
            name=phase,
            orientation="h",
            y=rank,
            x=duration,
            base=start,
            width=0.8,
            marker={"color": colour, "line": {"width": 0}},
            customdata=custom,
            hovertext=names,
            hovertemplate=template,
            visible=visible,
        )
    # Scattergl: each span is a segment start->end; NaN separates segments.
    n = len(spans)
    xs = np.full(3 * n, np.nan)
    xs[0::3], xs[1::3] = start, start + duration
    ys = np.full(3 * n, np.nan)
    ys[0::3], ys[1::3] = rank, rank
    custom3 = np.repeat(custom, 3, axis=0)
    return go.Scattergl(
        name=phase,
        x=xs,
        y=ys,
        mode="lines",
        connectgaps=False,
        line={"color": colour, "width": 14},
        customdata=custom3,
        hovertext=np.repeat(names, 3),
        hovertemplate=template.replace("%{x:.6f} s long", "%{customdata[4]:.6f} s busy"),
        visible=visible,
    )


def in_flight_lane(rank: int) -> str:
    """The row label of rank ``rank``'s collectives in flight (Horovod's timeline, TF's profiler)."""
    return f"{rank} in flight"


def timeline_figure(
    events: pd.DataFrame,
    *,
    t0_ns: int | None = None,
    window: tuple[float, float] | None = None,
    max_spans: int | None = DEFAULT_MAX_SPANS,
    width_px: int = DEFAULT_WIDTH_PX,
    ranks: list[int] | None = None,
    phases: list[str] | None = None,
    known_phases: list[str] | None = None,
    style: Literal["bar", "gl"] = "bar",
    title: str | None = None,
    height: int | None = None,
    label_blocks: bool = True,
    hosts: Mapping[int, str] | None = None,
) -> go.Figure:
    """Per-rank timeline of ``events`` (the events.py schema), time in seconds since ``t0_ns``.

    ``label_blocks``: a run of at least ``MIN_BLOCK_SPANS`` consecutive spans of one name on a rank
    (40 ``predict`` calls, an evaluation's batches) is labelled with that name on the bar, when the
    figure has at most ``MAX_BLOCK_LABELS`` such runs; hovering still names every span.

    ``ranks`` fixes the rows (a rank without events still gets its row); ``phases`` lists the
    phases to show; the others keep an empty, hidden trace so that the trace list (one per phase
    seen) stays stable across live updates. ``window`` = (start_s, end_s) limits and fixes the
    x range. ``layout.meta`` records ``spans``, ``drawn`` and ``resolution_s`` of the decimation.

    ``hosts`` (``{rank: host}``; default: the events' ``host`` column) with more than one host
    orders the lanes by host then rank and groups them per host (see the module docstring); a
    live caller passes the hosts it has seen so that a redraw does not look them up again.
    """
    if style not in ("bar", "gl"):
        raise ValueError(f"style must be 'bar' or 'gl', not {style!r}")
    spans = spans_frame(events, t0_ns=t0_ns)
    order = phase_order([*(known_phases or ()), *pd.unique(spans["phase"])])
    colours = colours_for(order)
    shown = set(order if phases is None else phases)
    visible_spans = _by_rank_and_start(spans[spans["phase"].isin(shown)])
    drawn, resolution = decimate_spans(visible_spans, max_spans=max_spans, window=window, width_px=width_px)
    by_phase = dict(tuple(drawn.groupby("phase", sort=False))) if len(drawn) else {}
    empty = drawn.iloc[0:0]
    traces = [_phase_trace(by_phase.get(p, empty), p, colours[p], style, visible=p in shown) for p in order]
    row_ranks = sorted(int(r) for r in pd.unique(spans["rank"])) if ranks is None else [int(r) for r in ranks]
    # Collectives in flight overlap the rank's own spans: each rank that has them gets a lane below its own.
    in_flight = {int(r) for r in spans.loc[spans["phase"].isin(OVERLAP_PHASES), "rank"].unique()}
    for trace in traces:
        if trace.name in OVERLAP_PHASES and trace.y is not None:
            trace.y = [None if v is None or v != v else in_flight_lane(int(v)) for v in trace.y]
    hosts = rank_hosts(events) if hosts is None and events is not None else (hosts or {})
    several_hosts = host_count({r: hosts.get(r, "") for r in row_ranks}) > 1
    if several_hosts:
        row_ranks = sorted(row_ranks, key=lambda rank: (*host_sort_key(hosts.get(rank, "")), rank))
    rows, labels, lane_hosts = _lanes(row_ranks, in_flight, hosts, several_hosts)
    fig = go.Figure(data=traces)
    fig.update_layout(
        title=title,
        barmode="overlay",
        bargap=0.2,
        height=height or max(260, 36 * len(rows) + 140),
        margin={
            "l": max(70, 30 + 7 * max(map(len, labels))) if several_hosts else 70,
            "r": _right_margin(hosts, row_ranks) if several_hosts else 20,
            "t": 60 if title else 30,
            "b": 50,
        },
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "traceorder": "normal"},
        hovermode="closest",
        uirevision="timeline",
        meta={"spans": len(spans), "drawn": len(drawn), "resolution_s": float(resolution)},
    )
    fig.update_yaxes(
        title="host · rank" if several_hosts else "rank",
        type="category",
        categoryorder="array",
        categoryarray=rows,
        tickvals=rows,
        ticktext=labels,
        autorange="reversed",
    )
    if several_hosts:
        _group_by_host(fig, lane_hosts)
    fig.update_xaxes(title="seconds since run start", range=list(window) if window is not None else None)
    if len(spans) == 0:
        fig.add_annotation(text="no events", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    elif label_blocks:
        _label_blocks(fig, visible_spans[~visible_spans["phase"].isin(OVERLAP_PHASES)], rows, window)
    return fig


def _lanes(
    row_ranks: list[int], in_flight: set[int], hosts: Mapping[int, str], several_hosts: bool
) -> tuple[list[int | str], list[str], list[str]]:
    """The y lanes top down (each rank, and below it its collectives in flight where it has them), their labels
    and their hosts."""
    rows: list[int | str] = []
    labels: list[str] = []
    lane_hosts: list[str] = []
    for rank in row_ranks:
        lanes = [rank, in_flight_lane(rank)] if rank in in_flight else [rank]
        rows += lanes
        labels += [_lane_label(lane, hosts.get(rank, ""), several_hosts) for lane in lanes]
        lane_hosts += [hosts.get(rank, "")] * len(lanes)
    return rows, labels, lane_hosts


def _label_blocks(
    fig: go.Figure, own: pd.DataFrame, rows: list[int | str], window: tuple[float, float] | None
) -> None:
    """Each run of spans of one name on a rank (``name_blocks``) labelled on its bar."""
    # an annotation's number on a category axis is a lane's position, not its name: place by position
    position = {lane: index for index, lane in enumerate(rows) if not isinstance(lane, str)}
    for block in name_blocks(own, window=window):
        if block["rank"] not in position:
            continue
        fig.add_annotation(
            x=block["middle_s"],
            y=position[block["rank"]],
            text=block["name"],
            showarrow=False,
            font={"size": 10, "color": "#222222"},
            bgcolor="rgba(255,255,255,0.6)",
        )


#: Every other host's lanes lie on this band, so the hosts of a multi-host run read as groups.
HOST_BAND_COLOUR = "rgba(0, 0, 0, 0.05)"
HOST_SEPARATOR_COLOUR = "rgba(0, 0, 0, 0.25)"
#: Shown for a rank whose host is not known, among ranks whose hosts are.
UNKNOWN_HOST_LABEL = "?"


@functools.lru_cache(maxsize=4096)
def host_sort_key(host: str) -> tuple[int, tuple]:
    """Hosts in natural order (node2 before node10), unknown ones ("") last."""
    if not host:
        return (1, ())
    return (0, tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", host)))


def _lane_label(lane: int | str, host: str, several_hosts: bool) -> str:
    """``"0"`` on one host; ``"node1 · rank 0"`` (``"node1 · rank 0 in flight"``) on several."""
    if not several_hosts:
        return str(lane)
    return f"{host or UNKNOWN_HOST_LABEL} · rank {lane}"


def _right_margin(hosts: Mapping[int, str], ranks: list[int]) -> int:
    """Room for the host names written once per host at the right edge (about 7 px a character)."""
    longest = max((len(hosts.get(r, "") or UNKNOWN_HOST_LABEL) for r in ranks), default=1)
    return 20 + 7 * longest


def _group_by_host(fig: go.Figure, lane_hosts: list[str]) -> None:
    """A band on every other host's lanes, a line between hosts, each host's name once (right margin).

    Positions are lane indices on the category axis, at half steps (``i - 0.5``): never a rank's own
    category name, so they cannot be mistaken for one. One shape and one annotation per host.
    """
    boundaries = [0, *(i for i in range(1, len(lane_hosts)) if lane_hosts[i] != lane_hosts[i - 1]), len(lane_hosts)]
    shapes = []
    for number, (first, end) in enumerate(itertools.pairwise(boundaries)):
        top, bottom = first - 0.5, end - 0.5
        if number % 2:
            shapes.append(
                {
                    "type": "rect",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "yref": "y",
                    "y0": top,
                    "y1": bottom,
                    "fillcolor": HOST_BAND_COLOUR,
                    "line": {"width": 0},
                    "layer": "below",
                }
            )
        if number:
            shapes.append(
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "yref": "y",
                    "y0": top,
                    "y1": top,
                    "line": {"width": 1, "color": HOST_SEPARATOR_COLOUR},
                    "layer": "below",
                }
            )
        fig.add_annotation(
            text=f"<b>{lane_hosts[first] or UNKNOWN_HOST_LABEL}</b>",
            xref="paper",
            x=1,
            xanchor="left",
            y=top,
            yanchor="top",
            showarrow=False,
            font={"size": 11, "color": "#444444"},
        )
    fig.update_layout(shapes=shapes)


#: A run of at least this many consecutive same-name spans on a rank is labelled on the timeline.
MIN_BLOCK_SPANS = 3
#: More labelled runs than this and none is drawn (they would cover the bars).
MAX_BLOCK_LABELS = 24


def name_blocks(spans: pd.DataFrame, *, window: tuple[float, float] | None = None) -> list[dict]:
    """Runs of ``MIN_BLOCK_SPANS`` or more consecutive spans with one name on one rank: rank, name, middle_s.

    Empty when there are more than ``MAX_BLOCK_LABELS`` (alternating steps never form runs). One
    vectorised pass, not a group-by over every span: it runs at every live refresh.
    """
    if spans.empty:
        return []
    ordered = _by_rank_and_start(spans)
    rank, name = ordered["rank"].to_numpy(), ordered["name"].to_numpy()
    start, end = ordered["start_s"].to_numpy(), ordered["end_s"].to_numpy()
    first = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (name[1:] != name[:-1])])
    length = np.diff(np.r_[first, len(ordered)])
    long = length >= MIN_BLOCK_SPANS
    if not long.any():
        return []
    block_end = np.maximum.reduceat(end, first)[long]
    first, length = first[long], length[long]
    block_start = start[first]  # ordered by start within a rank: a run's first span starts it
    keep = np.ones(len(first), dtype=bool)
    if window is not None:
        keep = (block_end > window[0]) & (block_start < window[1])
    if int(keep.sum()) > MAX_BLOCK_LABELS:
        return []
    return [
        {"rank": int(rank[f]), "name": str(name[f]), "middle_s": float((lo + hi) / 2), "spans": int(n)}
        for f, n, lo, hi in zip(first[keep], length[keep], block_start[keep], block_end[keep])
    ]


def _by_rank_and_start(spans: pd.DataFrame) -> pd.DataFrame:
    """``spans`` ordered by rank then start (stable); as they are when they already are."""
    rank, start = spans["rank"].to_numpy(), spans["start_s"].to_numpy()
    if len(rank) < 2:
        return spans
    same = rank[1:] == rank[:-1]
    if ((rank[1:] > rank[:-1]) | (same & (start[1:] >= start[:-1]))).all():
        return spans
    return spans.take(np.lexsort((start, rank)))
