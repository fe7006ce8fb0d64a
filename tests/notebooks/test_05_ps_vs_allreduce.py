"""notebooks/05_ps_vs_allreduce.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped.

This is also the case's test on real processes: Horovod ranks, and a TensorFlow parameter-server
job (PS task, worker servers, chief) started by rank 0's engine.
"""

from __future__ import annotations

import json

import pytest
from notebook_run import check_saved

from workbench.store import RunData

NOTEBOOK = "05_ps_vs_allreduce.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'preset = "reduced"')


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes_and_compares_the_schemes(tmp_path, run_notebook):
    out = tmp_path / "out"
    run_notebook(NOTEBOOK, {"ranks": 2, "preset": "ci", "out": str(out)}, timeout_s=900)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sweep"]["missing"] == [] and summary["sweep"]["reused"] == 1  # the live PS point
    assert summary["method"]["warmup_steps"] == 1 and summary["method"]["repetitions"] == 2
    rows = {(r["scheme"], r["data"], r["workers"]): r for r in summary["efficiency"]}
    assert set(rows) >= {("allreduce", "synthetic", 1), ("ps", "synthetic", 2), ("ps", "real", 2)}
    for row in summary["efficiency"]:
        assert row["images_per_s"] > 0 and row["ci_low"] <= row["images_per_s"] <= row["ci_high"], row
    assert rows[("allreduce", "synthetic", 1)]["efficiency"] == pytest.approx(1.0)
    overhead = {(r["scheme"], r["workers"]): r["overhead"] for r in summary["io_overhead"]}
    assert set(overhead) == {("allreduce", 2), ("ps", 2)}
    # every PS point ran with more threads than 2 cores: the finding must say so
    assert any("ps=1" in p["point"] for p in summary["oversubscribed_points"])
    # the PS job's workers each wrote a lane of spans from their own timestamps
    events = RunData.load(next((out / "runs").glob("*n2-scheme-ps-data-synthetic*"))).events
    assert sorted(events["rank"].unique()) == [0, 1]
    assert set(events["name"]) == {"next_batch", "train_step", "push_gradients"}
    # the real-data PS point ran after the allreduce points on the same engines: it found Horovod's idle
    # thread running there and stopped it on every rank before the PS job started
    after_allreduce = RunData.load(next((out / "runs").glob("*n2-scheme-ps-data-real*"))).meta["rank_results"]
    assert [r["horovod_stopped"] for r in after_allreduce] == [True, True]
    assert (out / "report.html").is_file()
