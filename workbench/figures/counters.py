"""Counter tracks: a named quantity over time per rank (input queue depth, ...), as steps."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.events import EXTRA_COLOURS, NS_PER_S


def counter_figure(
    counters: pd.DataFrame,
    *,
    t0_ns: int | None = None,
    names: list[str] | None = None,
    reference: tuple[float, str] | None = None,
    title: str | None = None,
    height: int = 300,
) -> go.Figure:
    """One step-shaped line per rank and counter (``rank``, ``name``, ``time_ns``, ``value``).

    ``t0_ns`` puts time zero where the timeline has it (default: the first value);
    ``reference`` = (value, label) draws a dashed line such as the queue's capacity.
    """
    fig = go.Figure()
    if names is not None:
        counters = counters[counters["name"].isin(names)]
    if len(counters):
        t0 = int(counters["time_ns"].min()) if t0_ns is None else t0_ns
        several = counters["name"].nunique() > 1
        for index, ((name, rank), group) in enumerate(counters.sort_values("time_ns").groupby(["name", "rank"])):
            fig.add_scatter(
                x=(group["time_ns"] - t0) / NS_PER_S,
                y=group["value"],
                mode="lines",
                line={"shape": "hv", "color": EXTRA_COLOURS[index % len(EXTRA_COLOURS)]},
                name=f"{name}, rank {rank}" if several else f"rank {rank}",
            )
    if reference is not None:
        fig.add_hline(y=reference[0], line={"dash": "dash", "color": "#888888"}, annotation_text=reference[1])
    shown = names or sorted(counters["name"].unique()) if len(counters) else names or []
    fig.update_xaxes(title="seconds")
    fig.update_yaxes(title=", ".join(shown) or "value", rangemode="tozero")
    fig.update_layout(title=title or "Counters", height=height, legend={"orientation": "h"})
    return fig


__all__ = ["counter_figure"]
