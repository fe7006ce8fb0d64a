"""Notebook widgets: the live dashboard and progress bars.

Widgets hold figures, controls and an ``update()``; data and numbers come in through injected
callables (a source with ``poll()``, an ``analyse`` function), never computed here.
"""

from __future__ import annotations

from workbench.widgets.dashboard import (
    TAB_BREAKDOWN,
    TAB_COUNTERS,
    TAB_MEMORY,
    TAB_TIMELINE,
    WAITING,
    Dashboard,
    default_analyse,
    sync_figure,
)
from workbench.widgets.progress import ProgressBar, ProgressState, in_notebook, progress

__all__ = [
    "TAB_BREAKDOWN",
    "TAB_COUNTERS",
    "TAB_MEMORY",
    "TAB_TIMELINE",
    "WAITING",
    "Dashboard",
    "ProgressBar",
    "ProgressState",
    "default_analyse",
    "in_notebook",
    "progress",
    "sync_figure",
]
