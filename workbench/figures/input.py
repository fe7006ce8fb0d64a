"""Input-pipeline figures: step time against the batch-repetition interval (queue depth: ``counter_figure``)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.events import EXTRA_COLOURS, INPUT, PHASE_COLOURS


def interval_figure(runs: pd.DataFrame, *, title: str | None = None, height: int = 380) -> go.Figure:
    """ms per step against interval k (log 2 axis), one line per enqueue-thread count.

    ``runs``: rows with ``source``, ``threads``, ``interval``, ``step_ms``; rows of source
    ``memory`` and ``tf.data`` become horizontal reference lines.
    """
    fig = go.Figure()
    contested = runs[runs["source"] == "contested"].sort_values("interval")
    for index, (threads, group) in enumerate(contested.groupby("threads")):
        fig.add_scatter(
            x=group["interval"],
            y=group["step_ms"],
            mode="lines+markers",
            name=f"queue, {threads} enqueue thread{'s' if threads != 1 else ''}",
            line={"color": EXTRA_COLOURS[index % len(EXTRA_COLOURS)]},
            hovertemplate="k=%{x}: %{y:.3g} ms/step<extra></extra>",
        )
    # reference levels as dashed traces across the plotted k (shapes on a log axis take log coordinates)
    ks = sorted(contested["interval"].unique()) or [1]
    span = [min(ks), max(ks)]
    for source, dash in (("memory", "dash"), ("tf.data", "dot")):
        for row in runs[runs["source"] == source].itertuples():
            label = "data in memory" if source == "memory" else f"tf.data, {row.threads} parallel reads"
            fig.add_scatter(
                x=span,
                y=[row.step_ms, row.step_ms],
                mode="lines",
                name=f"{label}: {row.step_ms:.3g} ms",
                line={"dash": dash, "color": PHASE_COLOURS[INPUT] if source == "memory" else "#555555"},
                hoverinfo="name",
            )
    fig.update_xaxes(type="log", dtick=0.30103, title="batch-repetition interval k (new batch every k steps)")
    fig.update_yaxes(type="log", title="ms per step")
    fig.update_layout(
        title=title or "Step time against batch-repetition interval",
        height=height,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        margin={"t": 90},
    )
    return fig


__all__ = ["interval_figure"]
