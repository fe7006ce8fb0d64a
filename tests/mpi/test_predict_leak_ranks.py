"""predict-leak case on 2 real MPI ranks: one run directory, growth rows for every rank and method."""

from __future__ import annotations

import json

import psutil
import pytest

from workbench.cases import predict_leak as case
from workbench.experiment import Experiment, ExperimentResult
from workbench.store import RunData
from workbench.workloads.predict_leak import CONTROL, METHODS

pytestmark = pytest.mark.mpi


def _check(result: ExperimentResult, ranks: int) -> None:
    growth = result.tables["growth"]
    assert len(growth) == ranks * len(METHODS)
    assert {(int(r), m) for r, m in zip(growth["rank"], growth["method"])} == {
        (r, m) for r in range(ranks) for m in METHODS
    }
    assert (growth["n"] == case.CASE.presets["ci"].iterations).all()
    timing = result.tables["timing"]
    assert len(timing) == ranks * len(METHODS)
    assert (timing["ms_per_call"] > 0).all()
    # the control leaks by construction: a detector that misses it is broken
    assert result.summary["verdict"][CONTROL] == "leak"
    assert result.summary["control_caught"] is True
    assert result.summary["ranks"] == ranks
    assert result.summary["sweep"] == {"points": 1, "ran": 1, "reused": 0, "missing": []}
    run = RunData.load(result.runs[f"n{ranks}"])
    assert run.meta["status"] == "finished"
    assert run.meta["experiment"]["point"] == f"n{ranks}"
    assert [r["rank"] for r in run.meta["rank_results"]] == list(range(ranks))
    assert sorted(run.memory["rank"].unique()) == list(range(ranks))
    assert result.report_path is not None and result.report_path.is_file()
    summary = json.loads((result.report_path.parent / "summary.json").read_text())
    assert summary["verdict"] == result.summary["verdict"]


def test_case_on_a_running_cluster(cluster2, tmp_path):
    result = Experiment("predict-leak", preset="ci", ranks=2, out=tmp_path).run(cluster=cluster2, progress=True)
    _check(result, ranks=2)
    # both ranks ran every method, in rotated order, into the one run directory
    assert result.summary["order"]["0"][0] == "predict"
    assert result.summary["order"]["1"][0] == "predict_on_batch"
    assert result.summary["order"]["1"][-1] == CONTROL
    # a cluster passed in stays up for the caller
    assert cluster2.client is not None and len(cluster2.view.apply(lambda: 1)) == 2


def _engines() -> set[int]:
    found = set()
    for process in psutil.process_iter():
        try:
            if process.status() != psutil.STATUS_ZOMBIE and "ipengine" in " ".join(process.cmdline()):
                found.add(process.pid)
        except psutil.Error:
            continue
    return found


def test_case_starts_and_stops_its_own_cluster(tmp_path):
    before = _engines()
    result = Experiment("predict-leak", preset="ci", ranks=2, out=tmp_path).run()
    _check(result, ranks=2)
    assert _engines() - before == set()
