"""Notebook 01 with ``cluster = "minicluster"``: the newcomer's path, its ranks on the miniature cluster's nodes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "notebooks"))
from notebook_run import all_text, execute


def test_notebook_01_runs_on_the_miniature_cluster(mini, tmp_path):
    out_dir = tmp_path / "eval-frequency"
    parameters = {"ranks": 2, "preset": "ci", "out": str(out_dir), "cluster": "minicluster"}
    outputs = execute("01_evaluation_frequency.ipynb", tmp_path, parameters, timeout_s=900)
    text = all_text(outputs)
    assert "Traceback" not in text
    assert "node1" in text and "node2" in text, text[-3000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["speedup_eval_fix"] > 1.0, summary
    hosts = {
        json.loads(path.read_text())["host"] for path in out_dir.rglob("ranks/rank-*.json")
    }
    assert hosts == {"node1", "node2"}
