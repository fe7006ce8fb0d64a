"""notebooks/03_pop_scaling.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_pop_scaling.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1 and "ranks = 2" in tagged[0].source and 'preset = "reduced"' in tagged[0].source


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes_and_reports_pop(tmp_path):
    papermill = pytest.importorskip("papermill")
    executed = tmp_path / "03.out.ipynb"
    out = tmp_path / "out"
    papermill.execute_notebook(
        str(NOTEBOOK),
        str(executed),
        parameters={"ranks": 2, "preset": "ci", "out": str(out)},
        cwd=str(NOTEBOOK.parents[1]),
        kernel_name="python3",
        execution_timeout=600,
        progress_bar=False,
    )
    notebook = nbformat.read(executed, as_version=4)
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    summary = json.loads((out / "summary.json").read_text())
    # the live run was a point of the sweep: reused, not run again
    assert summary["sweep"] == {"points": 3, "ran": 2, "reused": 1, "missing": []}
    rows = {(row["ranks"], row["scaling"]): row for row in summary["pop"]}
    assert set(rows) == {(1, "strong"), (2, "strong")}
    assert rows[(1, "strong")]["load_balance"] == 1.0  # one rank is balanced by definition
    for row in summary["pop"]:  # PE = LB x CommE, each a fraction
        assert 0 < row["parallel_efficiency"] <= 1
        assert abs(row["parallel_efficiency"] - row["load_balance"] * row["communication_efficiency"]) < 1e-3
    assert set(summary["test_phase_fraction"]) == {"1", "2"} and summary["speedup_sharded_test"] > 0
    assert (out / "report.html").is_file() and (out / "pop.parquet").is_file()
