"""What every figure shares: phase order and colours, and POP's efficiency bands.

Submodules import from here (not from ``workbench.figures``), so the package's ``__init__`` can
import them without an import cycle.
"""

from __future__ import annotations

from workbench.events import FAIR_EFFICIENCY, GOOD_EFFICIENCY, PHASE_ORDER, phase_colour, phase_order

__all__ = ["FAIR_EFFICIENCY", "GOOD_EFFICIENCY", "PHASE_ORDER", "colours_for", "phase_order"]


def colours_for(phases: list[str]) -> dict[str, str]:
    """Colour of each phase; user phases get stable colours from their place in ``phases``."""
    return {p: phase_colour(p, phases) for p in phases}
