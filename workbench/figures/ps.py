"""Parameter servers vs allreduce: efficiency against workers per scheme, and the PS tasks' load."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.events import BYTES_PER_MB, EXTRA_COLOURS

#: The two panels of ``efficiency_figure``: value, interval ends, how hovering shows the value.
EFFICIENCY_PANELS = (
    ("images_per_s", "ci_low", "ci_high", "%{y:.3g} images/s"),
    ("efficiency", "efficiency_low", "efficiency_high", "%{y:.0%}"),
)
SCHEME_LABELS = {"allreduce": "Horovod allreduce", "ps": "parameter servers"}


def _series_label(row: pd.Series | dict) -> str:
    label = SCHEME_LABELS.get(row["scheme"], row["scheme"])
    if row["scheme"] == "ps":
        label += f", {int(row['ps'])} PS"
        if row.get("placement", "round-robin") != "round-robin":
            label += f" ({row['placement']})"
    return f"{label}, {row['data']} data"


def interval_bars(value: pd.Series, low: pd.Series, high: pd.Series) -> dict:
    """Plotly error bars from an interval's ends (a missing end draws no bar)."""
    return {
        "type": "data",
        "symmetric": False,
        "array": np.nan_to_num(high - value),
        "arrayminus": np.nan_to_num(value - low),
    }


def efficiency_figure(table: pd.DataFrame, *, title: str | None = None, height: int = 400) -> go.Figure:
    """Images/s and scaling efficiency against workers, one line per scheme × PS count × data.

    ``table``: rows with ``scheme, data, workers, ps, images_per_s, ci_low, ci_high, efficiency``
    (+ ``efficiency_low/high`` for the error bars). Synthetic data solid, real data dashed.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("images/s", "scaling efficiency T(n) / (n T(1))"))
    keys = ["scheme", "ps", "placement", "data"] if "placement" in table else ["scheme", "ps", "data"]
    for index, (_, group) in enumerate(table.sort_values("workers").groupby(keys, sort=True)):
        first = group.iloc[0]
        colour = EXTRA_COLOURS[index % len(EXTRA_COLOURS)]
        dash = "dash" if first["data"] == "real" else "solid"
        label = _series_label(first)
        for col, (value, low, high, shown) in enumerate(EFFICIENCY_PANELS, start=1):
            fig.add_scatter(
                x=group["workers"],
                y=group[value],
                error_y=interval_bars(group[value], group[low], group[high]) if low in group else None,
                mode="lines+markers",
                name=label,
                legendgroup=label,
                showlegend=col == 1,
                line={"color": colour, "dash": dash},
                hovertemplate=f"%{{x}} workers: {shown}<extra>{label}</extra>",
                row=1,
                col=col,
            )
    workers = sorted(table["workers"].unique()) or [1]
    fig.add_scatter(
        x=[workers[0], workers[-1]],
        y=[1.0, 1.0],
        mode="lines",
        name="ideal",
        line={"color": "#888888", "dash": "dot"},
        row=1,
        col=2,
    )
    fig.update_xaxes(title="workers", dtick=1)
    fig.update_yaxes(title="images/s", rangemode="tozero", row=1, col=1)
    # intervals from few repetitions can reach far above 100 %: keep the axis where the values are
    top = float(np.nanmax(table["efficiency"])) if len(table) and table["efficiency"].notna().any() else 1.0
    fig.update_yaxes(title="efficiency", tickformat=".0%", range=[0, max(1.2, min(top * 1.3, 3.0))], row=1, col=2)
    fig.update_layout(
        title=title or "Throughput and scaling efficiency: parameter servers vs allreduce",
        height=height,
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0},
        margin={"b": 120},
    )
    return fig


def ps_load_figure(load: pd.DataFrame, *, title: str | None = None, height: int = 360) -> go.Figure:
    """MB each PS task moves per worker step (pull + push), grouped by placement.

    ``load``: rows with ``placement, ps, bytes_per_step, variables`` (``analysis.ps_load``).
    """
    fig = go.Figure()
    for index, (ps, group) in enumerate(load.groupby("ps", sort=True)):
        fig.add_bar(
            x=group["placement"],
            y=group["bytes_per_step"] / BYTES_PER_MB,
            name=f"PS task {int(ps)}",
            marker_color=EXTRA_COLOURS[index % len(EXTRA_COLOURS)],
            customdata=group["variables"],
            hovertemplate="%{x}: %{y:.3g} MB per step, %{customdata} variables<extra>PS task "
            + str(int(ps))
            + "</extra>",
        )
    fig.update_layout(
        barmode="group",
        title=title or "Bytes each parameter server moves per worker step (pull + push)",
        yaxis_title="MB per worker step",
        xaxis_title="placement of the variables",
        height=height,
    )
    return fig


__all__ = ["efficiency_figure", "ps_load_figure"]
