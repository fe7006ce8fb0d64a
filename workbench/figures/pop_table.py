"""POP efficiency table: the POP Centre of Excellence's metric hierarchy, cells coloured by value.

POP reports read metrics top-down (global -> parallel -> load balance / communication), with
traffic-light colours at 0.8 and 0.6; keeping that convention lets the table be read at a glance
by anyone who has seen a POP report.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from workbench.figures.style import FAIR_EFFICIENCY, GOOD_EFFICIENCY

#: Cell fills by band: >= GOOD_EFFICIENCY good, FAIR_EFFICIENCY to GOOD_EFFICIENCY fair, below poor, missing.
POP_COLOURS: dict[str, str] = {"good": "#8fd18f", "fair": "#f9c36b", "poor": "#f28b82", "missing": "#eeeeee"}

#: (column, label, depth) in POP's top-down order; absent columns are skipped.
POP_METRICS: tuple[tuple[str, str, int], ...] = (
    ("global_efficiency", "Global efficiency", 0),
    ("parallel_efficiency", "Parallel efficiency", 1),
    ("load_balance", "Load balance", 2),
    ("communication_efficiency", "Communication efficiency", 2),
    ("serialisation_efficiency", "Serialisation efficiency", 3),
    ("transfer_efficiency", "Transfer efficiency", 3),
    ("computation_scalability", "Computation scalability", 1),
)


def pop_colour(value: float | None) -> str:
    """Fill colour of one metric value by POP's thresholds."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return POP_COLOURS["missing"]
    if value >= GOOD_EFFICIENCY:
        return POP_COLOURS["good"]
    if value >= FAIR_EFFICIENCY:
        return POP_COLOURS["fair"]
    return POP_COLOURS["poor"]


def pop_table_figure(
    frame: pd.DataFrame,
    *,
    id_column: str | None = None,
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """Metrics as rows (indented by depth), one column per run (``run_id`` or ``ranks``)."""
    if id_column is None:
        id_column = next((c for c in ("run_id", "ranks") if c in frame), None)
        if id_column is None:
            raise ValueError("POP table needs a 'run_id' or 'ranks' column (or pass id_column=)")
    metrics = [(col, label, depth) for col, label, depth in POP_METRICS if col in frame]
    if not metrics:
        raise ValueError("POP table frame has none of the POP metric columns")
    labels = ["\u2003" * depth + label for _, label, depth in metrics]
    header = [id_column] + [str(v) for v in frame[id_column]]
    values: list[list[str]] = [labels]
    fills: list[list[str]] = [["#ffffff"] * len(metrics)]
    for _, row in frame.iterrows():
        column = [_number(row[col]) for col, _, _ in metrics]
        values.append([f"{v:.2f}" if v is not None else "–" for v in column])
        fills.append([pop_colour(v) for v in column])
    fig = go.Figure(
        go.Table(
            columnwidth=[2.2] + [1] * len(frame),
            header={
                "values": header,
                "fill": {"color": "#f4f4f4"},
                "align": ["left", "center"],
                "font": {"size": 13},
            },
            cells={
                "values": values,
                "fill": {"color": fills},
                "align": ["left", "center"],
                "height": 26,
                "font": {"size": 13},
            },
        )
    )
    fig.update_layout(
        title=title,
        height=height or 30 * len(metrics) + (110 if title else 70),
        margin={"l": 10, "r": 10, "t": 50 if title else 10, "b": 10},
    )
    return fig


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number
