"""Comparison of two runs: diverging bars of B − A per phase, over all ranks and per rank.

Bars to the right are phases that took longer in B, bars to the left phases that got shorter, in
each phase's usual colour. Per rank the bars stack away from zero in both directions, so one row
shows what a rank gained and what it lost; the dashed line is the change in wall time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.figures.style import colours_for, phase_order

_NEEDED = ("scope", "rank", "phase", "seconds_a", "seconds_b", "delta_s", "ratio", "present")
_HOVER = (
    "%{y} · %{fullData.name}<br>{a}: %{customdata[0]:.3f} s<br>{b}: %{customdata[1]:.3f} s"
    "<br>{b} − {a}: %{x:+.3f} s (×%{customdata[2]:.2f})<extra></extra>"
)


def comparison_figure(
    comparison: pd.DataFrame,
    *,
    names: tuple[str, str] = ("A", "B"),
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """Two panels from ``analysis.compare_runs``: per phase over all ranks, and per rank and phase.

    ``names`` label run A and run B in the axis titles and hovers. A rank recorded in only one run
    is labelled so (``rank 3 (b only)``): all its time shows as gained or lost.
    """
    missing = [c for c in _NEEDED if c not in comparison]
    if missing:
        raise ValueError(f"comparison lacks columns {missing}: pass analysis.compare_runs(events_a, events_b)")
    name_a, name_b = names
    hover = _HOVER.replace("{a}", name_a).replace("{b}", name_b)
    totals = comparison[comparison["scope"] == "total"]
    per_rank = comparison[comparison["scope"] == "rank"]
    wall = comparison[comparison["scope"] == "wall"]
    order = phase_order(pd.unique(comparison.loc[comparison["scope"] != "wall", "phase"]))
    colours = colours_for(order)
    rank_labels = _rank_labels(per_rank)
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.4, 0.6],
        horizontal_spacing=0.12,
        subplot_titles=("per phase, all ranks (rank-seconds)", "per rank"),
    )
    for phase in order:
        total = totals[totals["phase"] == phase]
        rows = per_rank[per_rank["phase"] == phase]
        for column, frame, y, show in (
            (1, total, [phase] * len(total), False),
            (2, rows, [rank_labels[int(r)] for r in rows["rank"]], True),
        ):
            fig.add_bar(
                name=phase,
                legendgroup=phase,
                showlegend=show,
                orientation="h",
                y=y,
                x=frame["delta_s"].to_numpy(dtype=np.float64),
                marker={"color": colours[phase]},
                customdata=frame[["seconds_a", "seconds_b", "ratio"]].to_numpy(dtype=np.float64),
                hovertemplate=hover,
                row=1,
                col=column,
            )
    if len(wall):
        delta = float(wall["delta_s"].iloc[0])
        fig.add_vline(
            x=delta,
            line={"color": "#000000", "dash": "dash", "width": 1},
            annotation_text=f"wall time {delta:+.3g} s",
            annotation_position="top",
            row=1,
            col=2,
        )
    fig.update_layout(
        title=title or f"{name_b} − {name_a}: where the time went differently",
        barmode="relative",
        height=height or max(320, 28 * max(len(order), len(rank_labels)) + 160),
        margin={"l": 90, "r": 20, "t": 80, "b": 50},
        legend={"orientation": "h", "yanchor": "top", "y": -0.15, "x": 0, "traceorder": "normal"},
    )
    fig.update_xaxes(title=f"seconds, {name_b} − {name_a}", zeroline=True, zerolinecolor="#444444")
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=order[::-1], row=1, col=1)
    labels = list(rank_labels.values())
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=labels[::-1], row=1, col=2)
    return fig


def _rank_labels(per_rank: pd.DataFrame) -> dict[int, str]:
    """``rank r``, with ``(a only)`` / ``(b only)`` for ranks recorded in one run, in rank order."""
    presence = per_rank.drop_duplicates("rank").set_index("rank")["present"]
    return {
        int(rank): f"rank {rank}" if present == "both" else f"rank {rank} ({present})"
        for rank, present in sorted(presence.items())
    }
