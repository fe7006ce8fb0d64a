"""Execute notebooks/01_evaluation_frequency.ipynb top to bottom on the reduced preset."""

from __future__ import annotations

import json
from pathlib import Path

import papermill
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.notebook, pytest.mark.mpi]


def test_notebook_runs_and_reports_the_fix(tmp_path):
    out_dir = tmp_path / "eval-frequency"
    executed = tmp_path / "01_executed.ipynb"
    papermill.execute_notebook(
        str(ROOT / "notebooks/01_evaluation_frequency.ipynb"),
        str(executed),
        parameters={"ranks": 2, "preset": "reduced", "out": str(out_dir)},
        cwd=str(tmp_path),
        kernel_name="python3",
        execution_timeout=900,
        progress_bar=False,
    )
    notebook = json.loads(executed.read_text())
    errors = [o for c in notebook["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == []
    text = "".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in notebook["cells"]
        for o in c.get("outputs", [])
    )
    assert "Traceback" not in text
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["ranks"] == 2
    # 2-2.5x measured on reduced. The slow run here is the live point, recorded while the kernel redraws the
    # dashboard on the same 2 cores, so the what-if estimate made from it runs high: only its lower side bounds
    # the fix (at least 65 % of the speedup it predicts)
    assert summary["speedup_eval_fix"] > 1.5, summary
    assert summary["whatif_estimate_over_measured"]["mpi4py"] > 0.65, summary
    assert (out_dir / "report.html").stat().st_size > 100_000
