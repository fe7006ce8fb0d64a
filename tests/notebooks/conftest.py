"""Notebooks run in one JupyterLab + headless Chromium where Chromium is installed.

The browser starts with the first notebook test and closes right after the last one of the session:
playwright's sync API holds an asyncio loop on the main thread while it is open, which later tests
that run their own loop (the widgets' unit tests) must not find.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyterlab_browser import LabNotebooks, chromium_available
from notebook_run import execute

_LAB: dict[str, Any] = {"lab": None, "left": 0}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _LAB["left"] = sum(1 for item in items if "run_notebook" in getattr(item, "fixturenames", ()))


@pytest.fixture
def run_notebook(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., list[Any]]]:
    """``run_notebook(name, parameters, timeout_s=600)``: the notebook's outputs after it ran to its end."""
    if _LAB["lab"] is None and chromium_available():
        _LAB["lab"] = LabNotebooks(tmp_path_factory.mktemp("lab-notebooks"))

    def run(name: str, parameters: dict[str, Any], *, timeout_s: int = 600) -> list[Any]:
        return execute(name, tmp_path, parameters, timeout_s=timeout_s, lab=_LAB["lab"])

    try:
        yield run
    finally:
        _LAB["left"] -= 1
        if _LAB["left"] <= 0 and _LAB["lab"] is not None:
            _LAB["lab"].close()
            _LAB["lab"] = None


def pytest_sessionfinish() -> None:
    """A run cut short (-x, a deselected last test) still closes the browser."""
    if _LAB["lab"] is not None:
        _LAB["lab"].close()
        _LAB["lab"] = None
