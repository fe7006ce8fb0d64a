"""Memory: resident set size per rank over time or iteration, with the analysis' growth fit.

A leak shows as a steady slope; drawing the fitted slope (and its verdict) beside the samples lets a
reader check the verdict against the raw curve instead of trusting a number.

With several labels (methods) the colour says the method and each rank gets its own panel, so the
legend stays one entry per method (5 methods x 2 ranks + fits was 20 entries and squeezed the plot);
the fits share their method's colour, dashed, with the verdict in their hover. Method colours come
from a palette apart from the phase colours, so no method looks like the "evaluation" phase.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.events import BYTES_PER_MB, NS_PER_S

_RANK_COLOURS = plotly.colors.qualitative.Dark24
_LABEL_COLOURS = plotly.colors.qualitative.Dark2
#: Rank panels per row when a figure has several labels.
PANELS_PER_ROW = 4


def rank_colour(rank: int) -> str:
    """Stable colour of a rank in memory plots (ranks are not phases, so another palette)."""
    return _RANK_COLOURS[int(rank) % len(_RANK_COLOURS)]


def label_colour(label: str, labels: list[str]) -> str:
    """Stable colour of a label (method) among ``labels``, from a palette apart from the phases'."""
    return _LABEL_COLOURS[labels.index(label) % len(_LABEL_COLOURS)]


def memory_figure(
    samples: pd.DataFrame,
    growth: pd.DataFrame | None = None,
    *,
    x: Literal["auto", "time", "iteration"] = "auto",
    t0_ns: int | None = None,
    ranks: list[int] | None = None,
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """RSS in MB per (rank, label) against time (s since ``t0_ns``) or iteration.

    ``growth`` = [rank, label, n, slope_mb_per_x, ci_low, ci_high, peak_mb, start_mb, end_mb,
    verdict] adds, per row, a dashed line with that slope through the centroid of the matching
    samples (where an ordinary least-squares fit passes) and puts the verdict in its legend entry.
    The slope's unit must match ``x``: MB per second for time, MB per call for iteration.
    ``x="auto"`` uses iteration when every sample has one (call-site sampling), else time.
    """
    if x not in ("auto", "time", "iteration"):
        raise ValueError(f"x must be 'auto', 'time' or 'iteration', not {x!r}")
    fig = go.Figure()
    if samples is None or len(samples) == 0:
        fig.add_annotation(text="no memory samples", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
        return _layout(fig, title, height, "seconds since run start")
    if x == "auto":
        has_iteration = "iteration" in samples and bool((samples["iteration"] >= 0).all())
        x = "iteration" if has_iteration else "time"
    if x == "iteration":
        samples = samples[samples["iteration"] >= 0]
        xs = samples["iteration"].to_numpy(dtype=np.float64)
        x_title, unit = "iteration", "call"
    else:
        time_ns = samples["time_ns"].to_numpy(dtype=np.int64)
        t0 = int(time_ns.min()) if t0_ns is None else int(t0_ns)
        xs = (time_ns - t0) / NS_PER_S
        x_title, unit = "seconds since run start", "s"
    if ranks is not None:
        keep = samples["rank"].isin(ranks).to_numpy()
        samples, xs = samples[keep], xs[keep]
    data = pd.DataFrame(
        {
            "rank": samples["rank"].to_numpy(dtype=np.int64),
            "label": samples["label"].astype(str).to_numpy() if "label" in samples else "",
            "x": xs,
            "mb": samples["rss_bytes"].to_numpy(dtype=np.float64) / BYTES_PER_MB,
        }
    ).sort_values(["rank", "label", "x"], kind="stable")
    labels = sorted(pd.unique(data["label"]))
    fits = _growth_rows(growth)
    if len(labels) > 1:
        return _by_label(data, labels, fits, title, height, x_title, unit)
    for (rank, label), group in data.groupby(["rank", "label"], sort=True):
        colour = rank_colour(rank)
        name = f"rank {rank}"
        fig.add_scatter(
            x=group["x"].to_numpy(),
            y=group["mb"].to_numpy(),
            mode="lines+markers" if len(group) <= 200 else "lines",
            name=name,
            legendgroup=name,
            line={"color": colour, "width": 1.5},
            marker={"size": 4},
            hovertemplate=f"{name}<br>{x_title} %{{x}}<br>%{{y:.1f}} MB<extra></extra>",
        )
        fit = fits.get((int(rank), str(label))) or fits.get((int(rank), None))
        if fit is not None and len(group) >= 2:
            fig.add_trace(_fit_trace(group, fit, name, colour, unit))
    return _layout(fig, title, height, x_title)


def _by_label(
    data: pd.DataFrame,
    labels: list[str],
    fits: dict[tuple[int, str | None], dict],
    title: str | None,
    height: int | None,
    x_title: str,
    unit: str,
) -> go.Figure:
    """Colour by label, one panel per rank, one legend entry per label (fits dashed, verdict in hover)."""
    ranks = sorted(int(r) for r in pd.unique(data["rank"]))
    cols = min(len(ranks), PANELS_PER_ROW)
    rows = -(-len(ranks) // cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        shared_yaxes=True,
        subplot_titles=[f"rank {r}" for r in ranks],
        horizontal_spacing=0.04,
        vertical_spacing=0.12 if rows > 1 else 0.0,
    )
    for index, rank in enumerate(ranks):
        row, col = index // cols + 1, index % cols + 1
        for label in labels:
            group = data[(data["rank"] == rank) & (data["label"] == label)]
            if group.empty:
                continue
            colour = label_colour(label, labels)
            fig.add_scatter(
                x=group["x"].to_numpy(),
                y=group["mb"].to_numpy(),
                mode="lines+markers" if len(group) <= 200 else "lines",
                name=label,
                legendgroup=label,
                showlegend=index == 0,
                line={"color": colour, "width": 1.5},
                marker={"size": 3},
                hovertemplate=f"rank {rank} · {label}<br>{x_title} %{{x}}<br>%{{y:.1f}} MB<extra></extra>",
                row=row,
                col=col,
            )
            fit = fits.get((rank, str(label))) or fits.get((rank, None))
            if fit is not None and len(group) >= 2:
                trace = _fit_trace(group, fit, f"rank {rank} · {label}", colour, unit)
                trace.update(legendgroup=label, showlegend=False)
                fig.add_trace(trace, row=row, col=col)
    _layout(fig, title, height or max(380, 300 * rows + 80), x_title)
    fig.update_layout(
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.04 + 0.04 * rows, "x": 0, "title": {"text": ""}},
        margin={"t": 110 if title else 80},
    )
    fig.update_yaxes(title=None)
    fig.update_yaxes(title="RSS (MB)", col=1)
    if fits:
        fig.add_annotation(
            text="dashed: fitted slope (verdict in its hover)",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=1,
            y=1.04 + 0.04 * rows,  # on the legend's row, at its right end: clear of the x-axis titles
            xanchor="right",
            yanchor="bottom",
            font={"size": 11, "color": "#555"},
        )
    return fig


def _growth_rows(growth: pd.DataFrame | None) -> dict[tuple[int, str | None], dict]:
    """Growth rows keyed by (rank, label); a table without labels applies to all of a rank."""
    if growth is None or len(growth) == 0:
        return {}
    rows = {}
    for row in growth.to_dict("records"):
        label = str(row["label"]) if "label" in row and pd.notna(row["label"]) else None
        rows[(int(row["rank"]), label)] = row
    return rows


def _fit_trace(group: pd.DataFrame, fit: dict, name: str, colour: str, unit: str) -> go.Scatter:
    """Dashed line with the fitted slope through the samples' centroid, verdict in the legend."""
    slope = float(fit["slope_mb_per_x"])
    x0, x1 = float(group["x"].min()), float(group["x"].max())
    xm, ym = float(group["x"].mean()), float(group["mb"].mean())
    ci = ""
    if pd.notna(fit.get("ci_low")) and pd.notna(fit.get("ci_high")):
        ci = f" [{float(fit['ci_low']):+.3g}, {float(fit['ci_high']):+.3g}]"
    verdict = str(fit.get("verdict", ""))
    label = f"{name}: {verdict} {slope:+.3g} MB/{unit}{ci}".replace("  ", " ")
    return go.Scatter(
        x=[x0, x1],
        y=[ym + slope * (x0 - xm), ym + slope * (x1 - xm)],
        mode="lines",
        name=label,
        legendgroup=name,
        line={"color": colour, "dash": "dash", "width": 2},
        hovertemplate=f"{label}<extra>fit</extra>",
    )


def _layout(fig: go.Figure, title: str | None, height: int | None, x_title: str) -> go.Figure:
    fig.update_layout(
        title=title,
        height=height or 380,
        margin={"l": 60, "r": 20, "t": 60 if title else 30, "b": 50},
        uirevision="memory",
        hovermode="closest",
    )
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title="RSS (MB)")
    return fig
