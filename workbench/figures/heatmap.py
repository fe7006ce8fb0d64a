"""Heatmap of a two-parameter sweep (e.g. OMP threads x ranks -> throughput), values in the cells."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go


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
    in their hover: the seed's white cells, with why.
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
