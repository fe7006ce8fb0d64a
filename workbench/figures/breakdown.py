"""Phase breakdown: where each rank's time went, as stacked bars (one colour per phase)."""

from __future__ import annotations

from typing import Literal

import pandas as pd
import plotly.graph_objects as go

from workbench.figures.style import colours_for, phase_order

_VALUE_COLUMNS = ("phase", "seconds", "fraction")


def breakdown_figure(
    frame: pd.DataFrame,
    *,
    value: Literal["seconds", "fraction"] = "seconds",
    phases: list[str] | None = None,
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """Stacked bars of ``frame`` = long table [*by, phase, seconds, fraction].

    ``by = ("rank",)`` gives one bar per rank; ``by = ("rank", "epoch")`` groups the rank bars
    by epoch on a two-level axis (epoch outside, rank inside), so slow epochs and slow ranks
    both stand out in one figure. ``phases`` limits the phases drawn.
    """
    if value not in ("seconds", "fraction"):
        raise ValueError(f"value must be 'seconds' or 'fraction', not {value!r}")
    by = [c for c in frame.columns if c not in _VALUE_COLUMNS]
    if not by:
        raise ValueError("breakdown frame needs at least one grouping column such as 'rank'")
    order = phase_order(pd.unique(frame["phase"].astype(str)))
    if phases is not None:
        order = [p for p in order if p in set(phases)]
    colours = colours_for(phase_order(pd.unique(frame["phase"].astype(str))))
    # Reshape (not compute): one row per group, one column per phase, so every trace has every x.
    grid = frame.pivot_table(index=by, columns="phase", values=["seconds", "fraction"], aggfunc="first")
    # Outer groups (epoch) first, ranks inside: plotly's two-level axis keeps first-seen order.
    grid = grid.sort_index(level=[*range(1, len(by)), 0]) if len(by) > 1 else grid.sort_index()
    x = _x_values(grid.index, by)
    fig = go.Figure()
    for phase in order:
        seconds = grid["seconds"][phase] if phase in grid["seconds"] else pd.Series(0.0, index=grid.index)
        fraction = grid["fraction"][phase] if phase in grid["fraction"] else pd.Series(0.0, index=grid.index)
        y = (seconds if value == "seconds" else fraction).fillna(0.0).to_numpy(dtype=float)
        fig.add_bar(
            name=phase,
            x=x,
            y=y,
            marker={"color": colours[phase]},
            customdata=pd.concat([seconds, fraction], axis=1).fillna(0.0).to_numpy(dtype=float),
            hovertemplate="%{x}<br>%{customdata[0]:.3f} s (%{customdata[1]:.1%})<extra>" + phase + "</extra>",
        )
    fig.update_layout(
        title=title,
        barmode="stack",
        height=height or 380,
        margin={"l": 60, "r": 20, "t": 60 if title else 30, "b": 60},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "traceorder": "normal"},
        uirevision="breakdown",
    )
    fig.update_yaxes(title="seconds" if value == "seconds" else "fraction of time")
    fig.update_xaxes(title=by[0] if len(by) == 1 else f"{by[0]} (grouped by {', '.join(by[1:])})")
    if len(by) == 1:
        fig.update_xaxes(type="category")
    if value == "fraction":
        fig.update_yaxes(tickformat=".0%", range=[0, 1])
    return fig


def _x_values(index: pd.Index, by: list[str]) -> list:
    """One x per group: the value itself for one column, [outer, inner] lists for several."""
    if len(by) == 1:
        return [v for v in index]
    tuples = list(index)
    inner = [str(t[0]) for t in tuples]
    outer = [" ".join(f"{name} {t[i]}" for i, name in enumerate(by) if i > 0) for t in tuples]
    return [outer, inner]
