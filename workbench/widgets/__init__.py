"""Notebook widgets: the live dashboard and progress bars.

Widgets hold figures, controls and an ``update()``; data and numbers come in through injected
callables (a source with ``poll()``, an ``analyse`` function), never computed here. The dashboard is
made of panels (``workbench.widgets.panels``), each a widget redrawn by one ``update(frame)``.

Progress is tqdm's (``tqdm.auto``: a widget bar in a notebook, a text line elsewhere). It and the dashboard
need the ``notebook`` extra (tqdm; ipywidgets, anywidget) and load it on first use, so importing this
package works on the core install and a missing package is one line naming it.
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.extras import require
from workbench.widgets.progress import ProgressBar, ProgressState, in_notebook, progress

#: The dashboard's names, loaded from ``workbench.widgets.dashboard`` when first used.
_DASHBOARD = ("TAB_BREAKDOWN", "TAB_COUNTERS", "TAB_MEMORY", "TAB_TIMELINE", "WAITING", "Dashboard")
_DASHBOARD_HELPERS = ("default_analyse", "sync_figure")

__all__ = [*_DASHBOARD, *_DASHBOARD_HELPERS, "ProgressBar", "ProgressState", "in_notebook", "progress"]


def __getattr__(name: str) -> Any:
    if name not in (*_DASHBOARD, *_DASHBOARD_HELPERS):
        raise AttributeError(f"module 'workbench.widgets' has no attribute {name!r}")
    require("notebook", for_what="the live dashboard (workbench.Dashboard)")
    value = getattr(importlib.import_module("workbench.widgets.dashboard"), name)
    globals()[name] = value
    return value
