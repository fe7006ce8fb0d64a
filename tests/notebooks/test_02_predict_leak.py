"""notebooks/02_predict_leak.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped."""

from __future__ import annotations

import re

import pytest
from notebook_run import check_saved, execute, stream_text

NOTEBOOK = "02_predict_leak.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'preset = "reduced"')


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes(tmp_path):
    out = tmp_path / "out"
    text = stream_text(execute(NOTEBOOK, tmp_path, {"ranks": 2, "preset": "ci", "out": str(out)}))
    refreshes = re.search(r"the dashboard refreshed (\d+) times", text)
    assert refreshes and int(refreshes.group(1)) >= 2, text[:2000]  # live while the ranks ran
    assert (out / "report.html").is_file()
    assert (out / "growth.parquet").is_file()
