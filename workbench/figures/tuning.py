"""CPU-tuning figures: the cumulative speedup of the tuning steps, and images/s against time-based speedup."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.events import EXTRA_COLOURS


def speedup_bars_figure(steps: pd.DataFrame, *, title: str | None = None, height: int = 360) -> go.Figure:
    """One bar per tuning step (``label``, ``images_per_s``), labelled with its speedup over the first bar.

    The published study's Figure 11: baseline -> tuned node -> scaled out.
    """
    first = float(steps["images_per_s"].iloc[0]) if len(steps) else 1.0
    speedups = steps["images_per_s"] / first
    fig = go.Figure(
        go.Bar(
            x=steps["label"],
            y=steps["images_per_s"],
            text=[f"{s:.2f}x" for s in speedups],
            textposition="outside",
            marker_color=[EXTRA_COLOURS[i % len(EXTRA_COLOURS)] for i in range(len(steps))],
            hovertemplate="%{x}: %{y:.3g} images/s (%{text})<extra></extra>",
        )
    )
    fig.update_layout(
        title=title or "Cumulative speedup of the tuning steps",
        yaxis_title="images/s",
        height=height,
        margin={"t": 60},
    )
    fig.update_yaxes(rangemode="tozero")
    return fig


def rate_vs_time_figure(table: pd.DataFrame, *, title: str | None = None, height: int = 360) -> go.Figure:
    """Speedup over 1 rank in training images/s beside the speedup in time, per evaluation schedule.

    ``table``: rows with ``ranks``, ``eval``, ``train_speedup`` (images/s while training) and
    ``time_speedup`` (images per second of wall time, evaluation included): the published study's "linear in
    images/s, sublinear in time".
    """
    fig = go.Figure()
    bars = (("train_speedup", "images/s while training", ""), ("time_speedup", "time (evaluation included)", "/"))
    for index, (schedule, group) in enumerate(table.groupby("eval", sort=True)):
        for column, what, pattern in bars:
            fig.add_bar(
                x=[f"{r} ranks" for r in group["ranks"]],
                y=group[column],
                name=f"{what}, {schedule}",
                marker_color=EXTRA_COLOURS[index % len(EXTRA_COLOURS)],
                marker_pattern_shape=pattern,
            )
    fig.update_layout(
        barmode="group",
        title=title or "Speedup over 1 rank: images/s while training vs wall time",
        yaxis_title="speedup over 1 rank",
        height=height,
        legend={"orientation": "h", "yanchor": "top", "y": -0.15, "x": 0},
        margin={"b": 110},
    )
    return fig


__all__ = ["rate_vs_time_figure", "speedup_bars_figure"]
