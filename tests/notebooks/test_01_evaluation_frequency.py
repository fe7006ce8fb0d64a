"""Execute notebooks/01_evaluation_frequency.ipynb top to bottom on the ci preset (reduced: the benchmarks)."""

from __future__ import annotations

import json

import pytest
from notebook_run import all_text, check_saved

NOTEBOOK = "01_evaluation_frequency.ipynb"
pytestmark = [pytest.mark.notebook, pytest.mark.mpi]


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'preset = "reduced"', 'cluster = "local"')


def test_notebook_runs_and_reports_the_fix(tmp_path, run_notebook):
    out_dir = tmp_path / "eval-frequency"
    outputs = run_notebook(NOTEBOOK, {"ranks": 2, "preset": "ci", "out": str(out_dir)}, timeout_s=900)
    assert "Traceback" not in all_text(outputs)
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["ranks"] == 2
    # The slow run here is the live point, recorded while the kernel and the browser redraw the dashboard on the
    # same 2 cores; the fixed run is headless. What the runs bound, as in the headless ci sweep's test: the fix is
    # faster, and keeps at least 65 % of the speedup the what-if estimate (made from the slow run) predicts
    assert summary["speedup_eval_fix"] > 1.0, summary
    assert summary["whatif_estimate_over_measured"]["mpi4py"] > 0.65, summary
    assert (out_dir / "report.html").stat().st_size > 100_000
