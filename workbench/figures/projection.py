"""Scaling projection: projected curves with their error bands and the measured points marked,
and what limits scaling at each rank count. Pure: frames from ``analysis.projection`` in, plotly out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.events import CHECKPOINT, COMMUNICATION, COMMUNICATION_WAIT, COMPUTE, EVALUATION, INPUT, PHASE_COLOURS
from workbench.figures.style import GOOD_EFFICIENCY

#: One colour per limit, borrowed from the phase it belongs to, so a limit looks like its phase.
LIMIT_COLOURS: dict[str, str] = {
    "compute": PHASE_COLOURS[COMPUTE],
    "communication": PHASE_COLOURS[COMMUNICATION],
    "per_call": "#A6400A",
    "waiting": PHASE_COLOURS[COMMUNICATION_WAIT],
    "input": PHASE_COLOURS[INPUT],
    "evaluation": PHASE_COLOURS[EVALUATION],
    "checkpoint": PHASE_COLOURS[CHECKPOINT],
}


def projection_figure(
    table: pd.DataFrame,
    measured: pd.DataFrame | None = None,
    *,
    quantity: str = "epoch_s",
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """Two panels: ``quantity`` (with its ``_low``/``_high`` band) and efficiency, against ranks (log 2).

    ``measured`` (columns ``ranks`` and the measured value of ``quantity``'s kind: ``wall_s``,
    ``step_s`` or ``epoch_s``) is drawn as markers on the same axes, so a reader sees at once where the
    model was checked.
    """
    table = table.sort_values("ranks")
    ranks = table["ranks"].to_numpy()
    fig = make_subplots(rows=1, cols=2, subplot_titles=(_label(quantity), "scaling efficiency"))
    low, high = f"{quantity}_low", f"{quantity}_high"
    if low in table and high in table:
        fig.add_scatter(
            x=np.concatenate([ranks, ranks[::-1]]),
            y=np.concatenate([table[high].to_numpy(), table[low].to_numpy()[::-1]]),
            fill="toself",
            fillcolor="rgba(0,114,178,0.15)",
            line={"width": 0},
            hoverinfo="skip",
            name="95 % band (measured variance)",
            row=1,
            col=1,
        )
    fig.add_scatter(
        x=ranks,
        y=table[quantity],
        mode="lines+markers",
        name="projected",
        line={"color": PHASE_COLOURS[COMPUTE]},
        customdata=table[["limiter"]].to_numpy() if "limiter" in table else None,
        hovertemplate="%{x} ranks: %{y:.3g} s<br>limited by %{customdata[0]}<extra></extra>",
        row=1,
        col=1,
    )
    if measured is not None and len(measured) and quantity in measured:
        fig.add_scatter(
            x=measured["ranks"],
            y=measured[quantity],
            mode="markers",
            name="measured",
            marker={"color": "#000000", "symbol": "x", "size": 11},
            hovertemplate="%{x} ranks: %{y:.3g} s measured<extra></extra>",
            row=1,
            col=1,
        )
    fig.add_scatter(
        x=ranks,
        y=table["efficiency"],
        mode="lines+markers",
        name="efficiency",
        line={"color": PHASE_COLOURS[COMMUNICATION]},
        hovertemplate="%{x} ranks: %{y:.1%}<extra></extra>",
        row=1,
        col=2,
    )
    if "parallel_efficiency" in table:
        fig.add_scatter(
            x=ranks,
            y=table["parallel_efficiency"],
            mode="lines",
            name="POP parallel efficiency",
            line={"color": PHASE_COLOURS[EVALUATION], "dash": "dot"},
            hovertemplate="%{x} ranks: PE %{y:.2f}<extra></extra>",
            row=1,
            col=2,
        )
    fig.add_hline(y=GOOD_EFFICIENCY, line={"color": "#009E73", "dash": "dot", "width": 1}, row=1, col=2)
    ticks = [int(r) for r in ranks]
    fig.update_xaxes(type="log", title="ranks", tickvals=ticks, ticktext=[str(t) for t in ticks])
    fig.update_yaxes(title="seconds", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="efficiency", tickformat=".0%", rangemode="tozero", row=1, col=2)
    fig.update_layout(
        title=title,
        height=height or 380,
        margin={"l": 60, "r": 20, "t": 80 if title else 50, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": -0.4, "x": 0},
    )
    return fig


def limits_figure(limits: pd.DataFrame, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """What limits scaling at N ranks: each rank count's epoch split into compute and the losses (shares)."""
    fig = go.Figure()
    ranks = sorted(limits["ranks"].unique()) if len(limits) else []
    labels = [str(int(r)) for r in ranks]
    for limit in [name for name in LIMIT_COLOURS if name in set(limits["limit"])]:
        rows = limits[limits["limit"] == limit].set_index("ranks").reindex(ranks)
        fig.add_bar(
            x=labels,
            y=rows["share"].fillna(0.0),
            name=limit.replace("_", " "),
            marker_color=LIMIT_COLOURS[limit],
            customdata=rows["seconds"].fillna(0.0),
            hovertemplate=f"{limit}: %{{y:.1%}} (%{{customdata:.3g}} s per epoch)<extra></extra>",
        )
    fig.update_layout(
        barmode="stack",
        title=title or "Where an epoch goes, by rank count",
        height=height or 360,
        xaxis_title="ranks",
        yaxis={"title": "share of the epoch", "tickformat": ".0%", "range": [0, 1]},
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
    )
    return fig


def _label(quantity: str) -> str:
    return {"epoch_s": "seconds per epoch", "step_s": "seconds per step", "wall_s": "wall time"}.get(quantity, quantity)
