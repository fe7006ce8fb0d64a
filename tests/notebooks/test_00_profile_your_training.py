"""notebooks/00_profile_your_training.ipynb executes end to end (2 ranks, a short run) and is saved stripped."""

from __future__ import annotations

import re

import pytest
from notebook_run import check_saved, stream_text

NOTEBOOK = "00_profile_your_training.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'out = "runs"')


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes_and_names_the_slow_rank(tmp_path, run_notebook):
    parameters = {"ranks": 2, "out": str(tmp_path / "runs"), "steps": 60, "slow_rank": 1}
    text = stream_text(run_notebook(NOTEBOOK, parameters))
    refreshes = re.search(r"the dashboard refreshed (\d+) times", text)
    assert refreshes and int(refreshes.group(1)) >= 2, text[:2000]  # live while the ranks trained
    assert "Horovod timeline:" in text and "straggler" in text, text[-3000:]
    assert re.search(r"rank 1 arrives last to the allreduce", text), text[-3000:]
    (report,) = (tmp_path / "runs").glob("*/report.html")
    assert report.stat().st_size > 10_000
