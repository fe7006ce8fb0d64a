"""Heatmaps: a two-parameter sweep (e.g. OMP threads x ranks -> throughput), values in the cells; and
the rank × time grid of a large job (every rank's waiting share over time, slowest ranks marked)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.events import host_count
from workbench.figures.timeline import UNKNOWN_HOST_LABEL, host_sort_key


def heatmap_figure(
    frame: pd.DataFrame,
    x: str,
    y: str,
    value: str,
    *,
    fmt: str = ".3g",
    colorscale: str = "Viridis",
    title: str | None = None,
    height: int | None = None,
    failed: pd.DataFrame | None = None,
) -> go.Figure:
    """Cells at (x, y) coloured and annotated with ``value``.

    Parameters are drawn as categories (1, 2, 4, 8 evenly spaced). Repeated (x, y) pairs are an
    error: averaging repeats is analysis and belongs before this call. ``failed`` (columns ``x``,
    ``y``, ``reason``) marks the points that did not run as grey cells saying "failed", the reason
    in their hover: the published study's white cells, with why.
    """
    missing = [c for c in (x, y, value) if c not in frame]
    if missing:
        raise ValueError(f"heatmap frame lacks column(s) {missing}")
    if frame.duplicated([x, y]).any():
        raise ValueError(f"several rows share one ({x}, {y}) pair: aggregate the repeats first")
    failed = failed if failed is not None and len(failed) else None
    if failed is not None:
        lacking = [c for c in (x, y, "reason") if c not in failed]
        if lacking:
            raise ValueError(f"heatmap's failed points lack column(s) {lacking}")
        failed = failed[~failed.set_index([x, y]).index.isin(frame.set_index([x, y]).index)]
        failed = failed if len(failed) else None
    cells = pd.concat([frame[[x, y, value]], failed[[x, y]]] if failed is not None else [frame[[x, y, value]]])
    grid = cells.pivot(index=y, columns=x, values=value).sort_index().sort_index(axis=1)
    xs = [str(v) for v in grid.columns]
    ys = [str(v) for v in grid.index]
    fig = go.Figure(
        go.Heatmap(
            x=xs,
            y=ys,
            z=grid.to_numpy(dtype=float),
            colorscale=colorscale,
            texttemplate=f"%{{z:{fmt}}}",
            hovertemplate=f"{x} %{{x}}<br>{y} %{{y}}<br>{value} %{{z:{fmt}}}<extra></extra>",
            colorbar={"title": {"text": value}},
        )
    )
    if failed is not None:
        fig.add_heatmap(
            x=[str(v) for v in failed[x]],
            y=[str(v) for v in failed[y]],
            z=[0.0] * len(failed),
            customdata=[[str(reason)] for reason in failed["reason"]],
            colorscale=[[0, "#d9d9d9"], [1, "#d9d9d9"]],
            showscale=False,
            text=["failed"] * len(failed),
            texttemplate="%{text}",
            hovertemplate=f"{x} %{{x}}<br>{y} %{{y}}<br>failed: %{{customdata[0]}}<extra></extra>",
            name="failed",
        )
    fig.update_xaxes(title=x, type="category")
    fig.update_yaxes(title=y, type="category")
    fig.update_layout(
        title=title,
        height=height or max(300, 50 * len(ys) + 150),
        margin={"l": 70, "r": 20, "t": 60 if title else 30, "b": 50},
    )
    return fig


#: Rows at most labelled one by one on the rank × time heatmap; above, one label per host (or every k-th rank).
MAX_ROW_LABELS = 64
#: What marks the slowest ranks and host.
MARK_COLOUR = "#000000"


def rank_rows(ranks: Sequence[int], hosts: Mapping[int, str] | None = None) -> list[int]:
    """The ranks in the heatmap's order, top down: grouped by host (natural order) on several hosts, else by number."""
    hosts = hosts or {}
    ranks = sorted(int(r) for r in ranks)
    if host_count({r: hosts.get(r, "") for r in ranks}) > 1:
        return sorted(ranks, key=lambda rank: (*host_sort_key(hosts.get(rank, "")), rank))
    return ranks


def rank_time_figure(
    share: pd.DataFrame,
    *,
    value: str = "waiting",
    hosts: Mapping[int, str] | None = None,
    marked: Sequence[int] = (),
    marked_host: str | None = None,
    work_share: Mapping[int, float] | None = None,
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """Rank × time heatmap of ``share`` (``RankTimeGrid.share``: index rank, columns bin starts in s, 0..1).

    Rows are ranks in ``rank_rows`` order (grouped by host), with a line between hosts; ``marked`` ranks get
    a black triangle at the right edge (hover: their ``work_share``) and ``marked_host``'s rows a frame.
    Up to ``MAX_ROW_LABELS`` rows each rank is labelled; above, each host (or every k-th rank). Cells a
    rank has not reached yet are blank (NaN).

    The cells go as three 1-D float32 columns (x, y, z), which plotly's widget sends as binary buffers:
    a 2-D z goes as nested lists, 250 000 numbers that ipywidgets walked for 0.2 s of every refresh at
    1 024 ranks. A row's y is its rank when the rows are in rank order (hover: "rank 17"), else its
    position top down (``layout.meta["rank_order"]`` says which).
    """
    hosts = hosts or {}
    ranks = rank_rows(list(share.index), hosts)
    several = host_count({r: hosts.get(r, "") for r in ranks}) > 1
    row_hosts = [hosts.get(r, "") or UNKNOWN_HOST_LABEL for r in ranks]
    labels = [f"{host} · {r}" if several else str(r) for r, host in zip(ranks, row_hosts, strict=True)]
    in_rank_order = ranks == sorted(ranks)
    position = {rank: (rank if in_rank_order else index) for index, rank in enumerate(ranks)}
    starts = np.asarray(share.columns, dtype=float)
    width = float(starts[1] - starts[0]) if len(starts) > 1 else 1.0
    right = float(starts[-1] + width) if len(starts) else 1.0
    z = share.loc[ranks].to_numpy(dtype=np.float32) if ranks else np.zeros((0, 0), np.float32)
    ys = np.asarray([position[r] for r in ranks], dtype=np.float32)
    fig = go.Figure(
        go.Heatmap(
            x=np.tile((starts + width / 2).astype(np.float32), len(ranks)),
            y=np.repeat(ys, len(starts)),
            z=np.round(z, 3).ravel(),
            zmin=0.0,
            zmax=1.0,
            colorscale="Reds" if value == "waiting" else "Blues",
            colorbar={"title": {"text": f"{value} share"}, "tickformat": ".0%", "len": 0.8},
            hovertemplate=f"{'rank' if in_rank_order else 'row'} %{{y}}<br>%{{x:.1f}} s<br>{value} %{{z:.0%}}"
            "<extra></extra>",
            name=value,
        )
    )
    shown = [r for r in marked if r in position]
    fig.add_scatter(
        x=np.full(len(shown), right, dtype=np.float32),
        y=np.asarray([position[r] for r in shown], dtype=np.float32),
        mode="markers",
        marker={"symbol": "triangle-left", "size": 9, "color": MARK_COLOUR},
        name="slowest ranks",
        customdata=[[labels[ranks.index(r)], (work_share or {}).get(r, float("nan"))] for r in shown],
        hovertemplate="%{customdata[0]}: %{customdata[1]:.0%} of its time in own work (waits least)<extra></extra>",
        showlegend=bool(shown),
    )
    _add_host_lines(fig, [position[r] for r in ranks], row_hosts, right)
    framed = [position[r] for r in ranks if several and marked_host is not None and hosts.get(r, "") == marked_host]
    if framed:
        _frame_rows(fig, min(framed), max(framed), f"slowest host {marked_host}")
    ticks = _row_ticks(row_hosts, several)
    top, bottom = (min(ys) - 0.5, max(ys) + 0.5) if len(ys) else (-0.5, 0.5)
    fig.update_yaxes(
        title="host · rank" if several else "rank",
        tickvals=[float(ys[t]) for t in ticks],
        ticktext=[row_hosts[t] if several and len(ranks) > MAX_ROW_LABELS else labels[t] for t in ticks],
        range=[float(bottom), float(top)],
        zeroline=False,
        showgrid=False,
    )
    fig.update_xaxes(title="seconds since run start", range=[float(starts[0]) if len(starts) else 0.0, right])
    fig.update_layout(
        title=title,
        height=height or int(min(700, max(300, 14 * len(ranks) + 150))),
        margin={"l": 110 if several else 60, "r": 20, "t": 60 if title else 30, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        uirevision="ranks-time",
        meta={"value": value, "bin_s": width, "rank_order": in_rank_order},
    )
    return fig


def _add_host_lines(fig: go.Figure, rows: list[float], row_hosts: list[str], right: float) -> None:
    """A line between each two rows of different hosts: one trace for all (128 hosts as shapes took plotly 0.3 s to
    validate)."""
    between = [
        (rows[index - 1] + rows[index]) / 2 for index in range(1, len(rows)) if row_hosts[index] != row_hosts[index - 1]
    ]
    fig.add_scatter(
        x=np.tile(np.asarray([0.0, right, np.nan], dtype=np.float32), len(between)),
        y=np.repeat(np.asarray(between, dtype=np.float32), 3),
        mode="lines",
        line={"width": 1, "color": "rgba(0, 0, 0, 0.35)"},
        hoverinfo="skip",
        showlegend=False,
        name="hosts",
    )


def _frame_rows(fig: go.Figure, low: float, high: float, text: str) -> None:
    """A frame around rows ``low``..``high`` across the whole width, ``text`` at its corner."""
    fig.add_shape(
        type="rect",
        xref="paper",
        x0=0,
        x1=1,
        y0=low - 0.5,
        y1=high + 0.5,
        line={"width": 2, "color": MARK_COLOUR},
        fillcolor="rgba(0, 0, 0, 0)",
    )
    fig.add_annotation(
        text=text,
        xref="paper",
        x=0,
        xanchor="left",
        y=low - 0.5,
        yanchor="bottom",
        showarrow=False,
        font={"size": 11, "color": MARK_COLOUR},
        bgcolor="rgba(255, 255, 255, 0.7)",
    )


def _row_ticks(row_hosts: list[str], several: bool) -> list[int]:
    """Rows to label: all up to ``MAX_ROW_LABELS``; else each host's first row, or every k-th row on one host."""
    rows = list(range(len(row_hosts)))
    if len(rows) <= MAX_ROW_LABELS:
        return rows
    if several:
        rows = [i for i in rows if i == 0 or row_hosts[i] != row_hosts[i - 1]]
        if len(rows) <= MAX_ROW_LABELS:
            return rows
    return rows[:: -(-len(rows) // MAX_ROW_LABELS)]
