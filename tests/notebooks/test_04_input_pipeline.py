"""notebooks/04_input_pipeline.ipynb executes end to end (2 ranks, "ci" preset) and is saved stripped."""

from __future__ import annotations

import json

import pytest
from notebook_run import check_saved

NOTEBOOK = "04_input_pipeline.ipynb"


def test_saved_notebook_is_stripped_and_parametrised():
    check_saved(NOTEBOOK, "ranks = 2", 'preset = "reduced"')


@pytest.mark.notebook
@pytest.mark.mpi
def test_notebook_executes_and_measures_the_fix(tmp_path, run_notebook):
    out = tmp_path / "out"
    run_notebook(NOTEBOOK, {"ranks": 2, "preset": "ci", "out": str(out)})
    summary = json.loads((out / "summary.json").read_text())
    # the live run was a point of the sweep: reused, not run again
    assert summary["sweep"] == {"points": 3, "ran": 2, "reused": 1, "missing": []}
    k1, k8 = summary["step_ms"]["threads=1"]["1"], summary["step_ms"]["threads=1"]["8"]
    # one reader's share of the modelled storage delivers a 200 kB batch in ~190 ms, whatever the CPU load;
    # storage that is not throttled would give the in-memory step (~25 ms on 2 quiet ranks)
    assert k1 > 120, summary["step_ms"]
    assert summary["speedup_in_memory"] > 1, summary
    # batch repetition lets the queue refill: k = 8 steps at the compute's pace, which on 2 quiet ranks is
    # under half the storage-bound step (~25 ms vs ~190) but on a busy machine was 169 ms against 231
    assert k8 < 0.85 * k1, summary["step_ms"]
    empty = summary["queue_empty_fraction"]
    # the standard queue runs dry, and more often than with batch repetition: on ci a point has only a few
    # dequeues, and a busy machine slows the compute that lets the queue refill, so the check is relative
    k1_empty, k8_empty = empty["n2/source=contested/threads=1/k=1"], empty["n2/source=contested/threads=1/k=8"]
    assert k1_empty >= 0.25 and k1_empty > k8_empty, empty
    assert (out / "report.html").is_file() and (out / "runs.parquet").is_file()
