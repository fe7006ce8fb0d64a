"""notebooks/03_pop_scaling.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped."""

from __future__ import annotations

import json

import pytest
from notebook_run import check_saved

NOTEBOOK = "03_pop_scaling.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'preset = "reduced"')


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes_and_reports_pop(tmp_path, run_notebook):
    out = tmp_path / "out"
    run_notebook(NOTEBOOK, {"ranks": 2, "preset": "ci", "out": str(out)})
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
