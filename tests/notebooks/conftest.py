"""Notebooks run in one JupyterLab + headless Chromium per session where Chromium is installed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyterlab_browser import LabNotebooks, chromium_available
from notebook_run import execute


@pytest.fixture(scope="session")
def lab_notebooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabNotebooks | None]:
    """The browser the notebook tests run in; None (papermill instead) without Chromium, unless required."""
    if not chromium_available():
        yield None
        return
    lab = LabNotebooks(tmp_path_factory.mktemp("lab-notebooks"))
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def run_notebook(tmp_path: Path, lab_notebooks: LabNotebooks | None) -> Callable[..., list[Any]]:
    """``run_notebook(name, parameters, timeout_s=600)``: the notebook's outputs after it ran to its end."""

    def run(name: str, parameters: dict[str, Any], *, timeout_s: int = 600) -> list[Any]:
        return execute(name, tmp_path, parameters, timeout_s=timeout_s, lab=lab_notebooks)

    return run
