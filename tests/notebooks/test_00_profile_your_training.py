"""notebooks/00_profile_your_training.ipynb executes end to end (2 ranks, a short run) and is saved stripped."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "00_profile_your_training.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1 and "ranks = 2" in tagged[0].source and 'out = "runs"' in tagged[0].source


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes_and_names_the_slow_rank(tmp_path):
    papermill = pytest.importorskip("papermill")
    executed = tmp_path / "00.out.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOK),
        str(executed),
        parameters={"ranks": 2, "out": str(tmp_path / "runs"), "steps": 60, "slow_rank": 1},
        cwd=str(NOTEBOOK.parents[1]),
        kernel_name="python3",
        execution_timeout=600,
        progress_bar=False,
    )
    notebook = nbformat.read(executed, as_version=4)
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    text = "\n".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    refreshes = re.search(r"the dashboard refreshed (\d+) times", text)
    assert refreshes and int(refreshes.group(1)) >= 2, text[:2000]  # live while the ranks trained
    assert "Horovod timeline:" in text and "straggler" in text, text[-3000:]
    assert re.search(r"rank 1 arrives last to the allreduce", text), text[-3000:]
    (report,) = (tmp_path / "runs").glob("*/report.html")
    assert report.stat().st_size > 10_000
