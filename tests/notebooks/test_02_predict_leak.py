"""notebooks/02_predict_leak.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped."""

from __future__ import annotations

import re

import pytest
from notebook_run import check_saved, stream_text

NOTEBOOK = "02_predict_leak.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'preset = "reduced"')


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes(tmp_path, run_notebook):
    out = tmp_path / "out"
    text = stream_text(run_notebook(NOTEBOOK, {"ranks": 2, "preset": "ci", "out": str(out)}))
    # live: refreshes that brought new spans from the ranks before they ended (a failed poll brings none)
    draws = re.search(r"the dashboard drew new spans (\d+) times while the ranks ran \(last error: none\)", text)
    assert draws and int(draws.group(1)) >= 2, text[:2000]
    assert (out / "report.html").is_file()
    assert (out / "growth.parquet").is_file()
