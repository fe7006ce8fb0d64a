"""notebooks/06_cpu_tuning.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped.

This is also the case's test on real ranks: threads, a binding set, the evaluation schedules and
Horovod compiled against MPICH as well as Open MPI.
"""

from __future__ import annotations

import json

import pytest
from notebook_run import check_saved

NOTEBOOK = "06_cpu_tuning.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'preset = "reduced"')


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes_every_sweep(tmp_path, run_notebook):
    out = tmp_path / "out"
    run_notebook(NOTEBOOK, {"ranks": 2, "preset": "ci", "out": str(out)}, timeout_s=900)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sweep"]["missing"] == [] and summary["sweep"]["reused"] == 1  # the live per-epoch point
    assert summary["best"]["images_per_s"] > 0 and summary["speedup_tuned_vs_default"] >= 1.0
    builds = {(row["mpi"], row["controller"]): row for row in summary["mpi_ab"]}
    assert set(builds) == {("openmpi", "mpi"), ("mpich", "mpi")}, builds
    for row in builds.values():  # Horovod over MPICH ran as one job of 2 ranks, like Open MPI's
        assert row["valid"] and row["horovod_size"] == 2 and row["ci_low"] <= row["images_per_s"] <= row["ci_high"]
    evaluation = {row["ranks"]: row for row in summary["evaluation"]}
    assert evaluation[2]["interval_per_epoch"] == 7 and evaluation[2]["interval_fixed"] == 15
    assert evaluation[1]["interval_per_epoch"] == 15
    assert summary["speedup_eval_fix"] > 0 and [r["set"] for r in summary["runtime_sets"]] == ["bind-none"]
    # every point's ranks read their threads' wait for a core: the most and the least waiting are named
    waited = summary["cpu_wait"]
    assert 0 <= waited["least"]["cpu_wait_share"] <= waited["most"]["cpu_wait_share"] <= 1, waited
    assert (out / "report.html").is_file()
