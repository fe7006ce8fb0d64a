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
    # the fixes can only show where the compute leaves the storage as the limit: the in-memory step is
    # ~25 ms on 2 quiet ranks, but a slow machine's ci run (a few dozen steps, tracing included) once took
    # 217 ms in memory against 210 ms contested, and then neither fix has anything to take away
    in_memory = summary["step_ms_memory"]
    if in_memory < 0.5 * k1:
        assert summary["speedup_in_memory"] > 1, summary
        # batch repetition lets the queue refill: k = 8 steps at the compute's pace (169 ms against 231
        # was seen on a busy machine, ~30 ms against ~190 on a quiet one)
        assert k8 < 0.85 * k1, summary["step_ms"]
    else:
        print(f"compute-bound here ({in_memory:.0f} ms a step in memory, {k1:.0f} ms contested): fixes not judged")
    empty = summary["queue_empty_fraction"]
    # the standard queue runs dry. On ci a point has a few dozen dequeues, and a busy machine slows the
    # compute that lets the queue refill: k=8 ran dry more often than k=1 once (0.33 against 0.23), so
    # which runs dry more often is the reduced sweep's to show (docs/case-studies.md), not this one's
    k1_empty = empty["n2/source=contested/threads=1/k=1"]
    assert k1_empty > 0.1, empty
    assert (out / "report.html").is_file() and (out / "runs.parquet").is_file()
