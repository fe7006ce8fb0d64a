"""Notebook 01 with ``cluster = "minicluster"``: the newcomer's path, its ranks on the miniature cluster's nodes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "notebooks"))
from notebook_run import all_text, execute


def test_notebook_01_runs_on_the_miniature_cluster(restored, tmp_path):
    for node in ("node1", "node2"):  # the idle nodes' share: the notebook's two ranks start TensorFlow sooner
        restored.set_cpus(node, 0.8)
    out_dir = tmp_path / "eval-frequency"
    parameters = {"ranks": 2, "preset": "ci", "out": str(out_dir), "cluster": "minicluster"}
    outputs = execute("01_evaluation_frequency.ipynb", tmp_path, parameters, timeout_s=900)
    text = all_text(outputs)
    assert "Traceback" not in text
    assert "node1" in text and "node2" in text, text[-3000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    # the fix's gain on the ci preset is a few evaluations on fractions of a core: noise can hide it (0.90x for
    # mpi4py beside 1.53x for Horovod was seen), so here both backends only have to report it; the gain is
    # checked on the local cluster (tests/notebooks/test_01) and in the reduced sweeps (docs/case-studies.md)
    speedups = summary["speedup_eval_fix_by_backend"]
    assert summary["ranks"] == 2 and set(speedups) == {"horovod", "mpi4py"}, summary
    assert all(value > 0 for value in speedups.values()), summary
    hosts = {
        json.loads(path.read_text())["host"] for path in out_dir.rglob("ranks/rank-*.json")
    }
    assert hosts == {"node1", "node2"}
