"""Case studies: each module declares one ``Case`` (``CASE``) that ``workbench.experiment`` runs.

``Experiment(name, preset=..., ranks=...)`` runs a case from Python or a notebook;
``workbench run NAME`` runs it headless; ``workbench run --list`` lists them.
"""

from __future__ import annotations

from workbench.experiment import CASE_MODULES, case_names, get_case

__all__ = ["CASE_MODULES", "case_names", "get_case"]
