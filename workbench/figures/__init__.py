"""Figures: pure functions from the analysis layer's frames to plotly figures.

Nothing here computes a metric; the functions only lay out what the analysis produced, with one
colour per phase everywhere (``events.PHASE_COLOURS``), so that a phase looks the same in the live
dashboard, a notebook cell and an HTML report.
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench.events import COMMUNICATION, COMMUNICATION_WAIT, PHASES, phase_colour

#: Known phases in display order: communication_wait sits next to the communication it splits from.
PHASE_ORDER: tuple[str, ...] = tuple(
    p for phase in PHASES for p in ((phase, COMMUNICATION_WAIT) if phase == COMMUNICATION else (phase,))
)


def phase_order(seen: Iterable[str] = ()) -> list[str]:
    """Known phases in display order, then user phases in order of first appearance.

    Every figure orders its traces with this, so legends and stacks read the same everywhere.
    """
    seen = [str(p) for p in seen]
    extras = list(dict.fromkeys(p for p in seen if p not in PHASE_ORDER))
    present = set(seen)
    return [p for p in PHASE_ORDER if p in present] + extras


def colours_for(phases: list[str]) -> dict[str, str]:
    """Colour of each phase; user phases get stable colours from their place in ``phases``."""
    return {p: phase_colour(p, phases) for p in phases}


from workbench.figures.breakdown import breakdown_figure  # noqa: E402
from workbench.figures.heatmap import heatmap_figure  # noqa: E402
from workbench.figures.memory import memory_figure  # noqa: E402
from workbench.figures.pop_table import POP_COLOURS, pop_colour, pop_table_figure  # noqa: E402
from workbench.figures.scaling import scaling_figure  # noqa: E402
from workbench.figures.timeline import decimate_spans, spans_frame, timeline_figure  # noqa: E402

__all__ = [
    "PHASE_ORDER",
    "POP_COLOURS",
    "breakdown_figure",
    "colours_for",
    "decimate_spans",
    "heatmap_figure",
    "memory_figure",
    "phase_order",
    "pop_colour",
    "pop_table_figure",
    "scaling_figure",
    "spans_frame",
    "timeline_figure",
]
