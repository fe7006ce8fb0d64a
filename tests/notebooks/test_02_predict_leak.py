"""notebooks/02_predict_leak.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_predict_leak.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1 and "ranks = 2" in tagged[0].source and 'preset = "reduced"' in tagged[0].source


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes(tmp_path):
    papermill = pytest.importorskip("papermill")
    executed = tmp_path / "02_predict_leak.out.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOK),
        str(executed),
        parameters={"ranks": 2, "preset": "ci", "out": str(tmp_path / "out")},
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
    assert refreshes and int(refreshes.group(1)) >= 2, text[:2000]  # live while the ranks ran
    assert (tmp_path / "out" / "report.html").is_file()
    assert (tmp_path / "out" / "growth.parquet").is_file()
