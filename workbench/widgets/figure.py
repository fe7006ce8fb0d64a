"""Plotly FigureWidgets that share one copy of plotly's widget bundle per kernel.

plotly's ``FigureWidget`` is an anywidget whose ``_esm`` trait is the whole widget bundle
(plotly.js included, about 5 MB): every instance sends it to the browser again, which parses and
runs it again. A dashboard holds up to four figures and a notebook several dashboards, so the first
figure waited behind megabytes of repeated JavaScript. ``figure_widget()`` sends the bundle once:
the first widget of the kernel carries it and leaves its module on ``globalThis``; every later
widget carries a few lines that wait for that module and reuse it. The carrier is kept alive here,
so a page reload restores it too; in a kernel it is made when ``workbench.widgets`` is imported
(``preload``), so the browser loads the bundle while the notebook is still starting its ranks.
When the bundle's shape is not the expected one (another plotly version), ``figure_widget()``
falls back to a plain ``go.FigureWidget``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import plotly.basewidget
import plotly.graph_objects as go

#: Where the carrier leaves the bundle's default export for the other widgets.
GLOBAL_NAME = "__workbenchPlotlyWidget"
#: How long a widget waits for the carrier's bundle before it says why it cannot draw.
WAIT_MS = 120_000

_STUB = f"""
const key = "{GLOBAL_NAME}";
const shared = globalThis[key] ?? (await new Promise((resolve, reject) => {{
  const started = Date.now();
  const timer = setInterval(() => {{
    if (globalThis[key]) {{ clearInterval(timer); resolve(globalThis[key]); }}
    else if (Date.now() - started > {WAIT_MS}) {{
      clearInterval(timer);
      reject(new Error("plotly's widget bundle never arrived: re-run the cell that imports workbench.widgets"));
    }}
  }}, 20);
}}));
export default shared;
"""

_carrier: go.FigureWidget | None = None


@functools.lru_cache(maxsize=1)
def carrier_source() -> str | None:
    """plotly's widget bundle plus one line that publishes its default export; None if not recognised."""
    path = Path(plotly.basewidget.__file__).parent / "package_data" / "widgetbundle.js"
    try:
        source = path.read_text(encoding="utf-8")
    except OSError:
        return None
    exports = re.findall(r"export\s*\{([^}]*)\}", source)
    items = [item.split(" as ") for item in exports[-1].split(",")] if exports else []
    names = [item[0].strip() for item in items if len(item) == 2 and item[1].strip() == "default"]
    if len(names) != 1 or not re.fullmatch(r"[A-Za-z_$][\w$]*", names[0]):
        return None
    return f"{source}\nglobalThis[{GLOBAL_NAME!r}] = {names[0]};\n"


@functools.lru_cache(maxsize=1)
def _classes() -> tuple[type, type] | None:
    source = carrier_source()
    if source is None:
        return None
    carrier = type("CarrierFigureWidget", (go.FigureWidget,), {"_esm": source, "__module__": __name__})
    shared = type("SharedFigureWidget", (go.FigureWidget,), {"_esm": _STUB, "__module__": __name__})
    return carrier, shared


def in_kernel() -> bool:
    """True inside a Jupyter kernel (where widgets reach a browser); False in scripts, tests and engines."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None) if shell is not None else None
    return kernel is not None and not type(kernel).__module__.startswith("ipyparallel")


def preload() -> None:
    """Send plotly's widget bundle to the browser now, before any figure is shown (in a kernel only).

    A widget's model reaches the browser when it is made, displayed or not, so making the carrier
    at import lets the browser load the bundle while the notebook starts its ranks; the first
    dashboard's figure then only waits for its own data.
    """
    global _carrier
    classes = _classes()
    if classes is not None and in_kernel() and (_carrier is None or getattr(_carrier, "comm", None) is None):
        _carrier = classes[0]()


def figure_widget(*args: Any, **kwargs: Any) -> go.FigureWidget:
    """A ``go.FigureWidget`` that reuses the bundle the kernel's first one sent (see the module docstring)."""
    global _carrier
    classes = _classes()
    if classes is None:
        return go.FigureWidget(*args, **kwargs)
    carrier, shared = classes
    if _carrier is None or getattr(_carrier, "comm", None) is None:
        _carrier = carrier(*args, **kwargs)
        return _carrier
    return shared(*args, **kwargs)


__all__ = ["GLOBAL_NAME", "carrier_source", "figure_widget", "in_kernel", "preload"]
