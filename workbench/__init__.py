"""workbench: see and fix what slows down distributed TensorFlow + Horovod training.

The front door: every name a notebook needs, importable from ``workbench``. Each one loads on
first use (module ``__getattr__``), so ``import workbench`` stays light: no TensorFlow, pandas
or plotly until a name that needs them is touched.

- start ranks and watch them: ``Cluster``, ``Dashboard``, ``RunTail``
- ranks on nodes of their own: ``minicluster`` (``minicluster.running().cluster_config(n)``), ``MiniCluster``
- record: ``profile_function`` (a function on every rank), ``profile_command`` (a script), ``Recorder``
- case studies: ``Experiment``
- recorded runs: ``Run`` (``.analyse()``, ``.report(path)``, ``.summary()`` and each analysis as a method:
  ``.phase_breakdown()``, ``.findings()``, ``.device_summary()`` ...), ``list_runs``, ``analyse_run``
- the layers as namespaces: ``analysis`` (tables), ``figures`` (plotly), ``widgets``, ``cases``
- tables for reading: ``readable``
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Exported name -> the module that defines it (loaded on first access).
_LAZY: dict[str, str] = {
    "Cluster": "workbench.cluster",
    "ClusterConfig": "workbench.config",
    "Dashboard": "workbench.widgets",
    "Experiment": "workbench.experiment",
    "MadeGpuStep": "workbench.datasets.made_traces.xplane",
    "MiniCluster": "workbench.minicluster",
    "PROFILE_ENVIRONMENT": "workbench.profile",
    "ProfiledCall": "workbench.api",
    "Recorder": "workbench.recorder",
    "Run": "workbench.api",
    "RunAnalysis": "workbench.analysis",
    "RunTail": "workbench.store",
    "analyse_run": "workbench.analysis",
    "create_run": "workbench.store",
    "export_trace": "workbench.formats.trace_export",
    "format_analysis": "workbench.text",
    "import_traces": "workbench.importer",
    "list_runs": "workbench.store",
    "profile_command": "workbench.commands.profile",
    "profile_function": "workbench.api",
    "readable": "workbench.report",
    "write_made_xplane": "workbench.datasets.made_traces.xplane",
    "write_made_timeline": "workbench.datasets.made_traces.horovod_timeline",
}
#: Exported namespaces: the layers, used as ``workbench.analysis.phase_breakdown`` and so on.
_NAMESPACES = ("analysis", "cases", "figures", "minicluster", "widgets")

__all__ = ["__version__", *_NAMESPACES, *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "cases":
        value = _cases()
    elif name in _NAMESPACES:
        value = importlib.import_module(f"workbench.{name}")
    else:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _cases() -> Any:
    """``workbench.cases`` with every case module loaded, so ``cases.predict_leak.live_growth`` resolves."""
    cases = importlib.import_module("workbench.cases")
    for module in cases.CASE_MODULES.values():
        importlib.import_module(module)
    return cases
