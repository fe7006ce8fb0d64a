"""Scaling: measured speedup against ideal, and parallel efficiency, per number of ranks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures.style import GOOD_EFFICIENCY


def scaling_figure(table: pd.DataFrame, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Two panels from [ranks, throughput_mean, throughput_std, speedup, efficiency, ideal_speedup].

    Error bars use ``speedup_std`` / ``efficiency_std`` when the table has them, otherwise the
    throughput's relative spread (std / mean) carried over to speedup and efficiency, which is
    what a reader needs to judge whether two points differ.
    """
    table = table.sort_values("ranks")
    ranks = table["ranks"].to_numpy()
    mean = table["throughput_mean"].to_numpy(dtype=float)
    std = table["throughput_std"].to_numpy(dtype=float) if "throughput_std" in table else np.zeros(len(table))
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(mean > 0, std / mean, np.nan)
    speedup = table["speedup"].to_numpy(dtype=float)
    efficiency = table["efficiency"].to_numpy(dtype=float)
    speedup_err = table["speedup_std"].to_numpy(dtype=float) if "speedup_std" in table else speedup * relative
    eff_err = table["efficiency_std"].to_numpy(dtype=float) if "efficiency_std" in table else efficiency * relative
    ideal = table["ideal_speedup"].to_numpy(dtype=float) if "ideal_speedup" in table else None

    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup", "parallel efficiency"))
    if ideal is not None:
        fig.add_scatter(
            x=ranks,
            y=ideal,
            mode="lines",
            name="ideal",
            line={"color": "#888888", "dash": "dash"},
            row=1,
            col=1,
        )
    fig.add_scatter(
        x=ranks,
        y=speedup,
        mode="lines+markers",
        name="measured speedup",
        line={"color": "#0072B2"},
        error_y={"type": "data", "array": np.nan_to_num(speedup_err), "visible": True},
        customdata=np.column_stack([mean, std]),
        hovertemplate="%{x} ranks: %{y:.2f}x<br>throughput %{customdata[0]:.4g} ± %{customdata[1]:.2g}<extra></extra>",
        row=1,
        col=1,
    )
    fig.add_scatter(
        x=ranks,
        y=efficiency,
        mode="lines+markers",
        name="efficiency",
        line={"color": "#D55E00"},
        error_y={"type": "data", "array": np.nan_to_num(eff_err), "visible": True},
        hovertemplate="%{x} ranks: %{y:.1%}<extra></extra>",
        row=1,
        col=2,
    )
    fig.add_hline(y=1.0, line={"color": "#888888", "dash": "dash", "width": 1}, row=1, col=2)
    fig.add_hline(
        y=GOOD_EFFICIENCY,
        line={"color": "#009E73", "dash": "dot", "width": 1},
        row=1,
        col=2,
        annotation_text=f"{GOOD_EFFICIENCY:.0%}",
        annotation_position="bottom right",
    )
    ticks = [int(r) for r in ranks]
    fig.update_xaxes(title="ranks", tickvals=ticks, ticktext=[str(r) for r in ticks])
    fig.update_yaxes(title="speedup", row=1, col=1)
    fig.update_yaxes(title="efficiency", tickformat=".0%", rangemode="tozero", row=1, col=2)
    fig.update_layout(
        title=title,
        height=height or 380,
        margin={"l": 60, "r": 20, "t": 80 if title else 50, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": -0.35, "x": 0},
    )
    return fig
