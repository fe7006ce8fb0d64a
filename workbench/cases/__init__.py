"""Case studies: each module declares one ``Case`` (``CASE``) that ``workbench.experiment`` runs.

``Experiment(name, preset=..., ranks=...)`` runs a case from Python or a notebook;
``workbench run NAME`` runs it headless; ``workbench run --list`` lists them. A case from outside the
package is one ``register_case`` call (or an entry point in the ``workbench.cases`` group of its package).
"""

from __future__ import annotations

from workbench.experiment import CASE_MODULES, case_names, get_case, register_case, unregister_case

__all__ = ["CASE_MODULES", "case_names", "get_case", "register_case", "unregister_case"]
