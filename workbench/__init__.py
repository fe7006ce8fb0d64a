"""workbench: see and fix what slows down distributed TensorFlow + Horovod training.

The names users import; everything heavy (TensorFlow, ipyparallel) loads on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Cluster", "ClusterConfig", "Dashboard", "Recorder", "Run", "__version__", "create_run", "list_runs"]

_LAZY = {
    "Cluster": "workbench.cluster",
    "ClusterConfig": "workbench.config",
    "Recorder": "workbench.recorder",
    "Run": "workbench.store",
    "create_run": "workbench.store",
    "list_runs": "workbench.store",
    "Dashboard": "workbench.widgets",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
