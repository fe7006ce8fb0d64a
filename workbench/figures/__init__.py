"""Figures: pure functions from the analysis layer's frames to plotly figures.

Nothing here computes a metric; the functions only lay out what the analysis produced, with one
colour per phase everywhere (``events.PHASE_COLOURS``), so that a phase looks the same in the live
dashboard, a notebook cell and an HTML report.
"""

from __future__ import annotations

from workbench.figures.breakdown import breakdown_figure
from workbench.figures.compare import comparison_figure
from workbench.figures.counters import counter_figure
from workbench.figures.heatmap import heatmap_figure, rank_rows, rank_time_figure
from workbench.figures.input import interval_figure
from workbench.figures.memory import memory_figure
from workbench.figures.pop_table import POP_COLOURS, pop_colour, pop_table_figure
from workbench.figures.projection import limits_figure, projection_figure
from workbench.figures.ps import efficiency_figure, ps_load_figure
from workbench.figures.scaling import scaling_figure
from workbench.figures.style import PHASE_ORDER, colours_for, phase_order
from workbench.figures.timeline import decimate_spans, spans_frame, timeline_figure
from workbench.figures.tuning import rate_vs_time_figure, speedup_bars_figure

__all__ = [
    "PHASE_ORDER",
    "POP_COLOURS",
    "breakdown_figure",
    "colours_for",
    "comparison_figure",
    "counter_figure",
    "decimate_spans",
    "efficiency_figure",
    "heatmap_figure",
    "interval_figure",
    "limits_figure",
    "memory_figure",
    "phase_order",
    "pop_colour",
    "pop_table_figure",
    "projection_figure",
    "ps_load_figure",
    "rank_rows",
    "rank_time_figure",
    "rate_vs_time_figure",
    "scaling_figure",
    "spans_frame",
    "speedup_bars_figure",
    "timeline_figure",
]
