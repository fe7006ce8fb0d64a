"""`workbench run eval-frequency` headless on the tiny `ci` preset: JSON summary, Parquet, report."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from workbench.experiment import CASE_MODULES
from workbench.workloads.eval_frequency import TrainSettings

pytestmark = pytest.mark.mpi


def test_headless_run_writes_json_parquet_and_report(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench.cli",
            "run",
            "eval-frequency",
            "--preset",
            "ci",
            "--ranks",
            "2",
            "--out",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = json.loads(completed.stdout)
    assert summary["ranks"] == 2 and summary["backend"] == "mpi4py" and summary["preset"] == "ci"
    assert summary["sweep"] == {"points": 8, "ran": 8, "reused": 0, "missing": []}
    # Evaluating once instead of every epoch (20 evaluations against 1). Its size (1.2-2.7x on 2 ranks, quiet or
    # with one core busy) belongs to the benchmarks; what the runs themselves bound is asserted: with the fix every
    # backend is faster, and the headline backend's fixed run keeps at least 65 % of the speedup that the case's
    # what-if estimate, made from the slow run alone, predicts (0.76-1.7 measured, quiet and loaded). One-sided: a
    # fixed run faster than predicted is no regression of the fix.
    assert all(speedup > 1.0 for speedup in summary["speedup_eval_fix_by_backend"].values()), summary
    assert summary["whatif_estimate_over_measured"]["mpi4py"] > 0.65, summary
    assert set(summary["speedup_eval_fix_by_backend"]) == {"mpi4py", "horovod"}
    table = pd.read_parquet(tmp_path / "runs.parquet")
    assert len(table) == 2 * 2 * 2  # ranks 1..2 x backends x intervals {1, 6}
    assert set(table["ranks"]) == {1, 2} and (table["test_accuracy"] > 0.7).all()  # ~0.9; chance is 0.1
    findings = pd.read_parquet(tmp_path / "findings.parquet")
    slow = findings[(findings["ranks"] == 2) & (findings["eval_interval"] == 1)]
    assert "serial_evaluation" in set(slow["kind"])
    assert (tmp_path / "report.html").stat().st_size > 100_000


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"backend": "gloo"}, "backend 'gloo' is unknown"),
        ({"eval_mode": "all"}, "eval_mode 'all' is unknown"),
        ({"eval_interval": 0}, "must be >= 1"),
    ],
)
def test_bad_settings_are_one_clear_error(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainSettings(**settings)


def test_unknown_case_and_preset():
    completed = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "eval-frequncy"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[0] == (
        "workbench: unknown case 'eval-frequncy': choose one of " + ", ".join(CASE_MODULES)
    )
    assert list(CASE_MODULES)[:5] == [
        "eval-frequency",
        "predict-leak",
        "input-pipeline",
        "pop-scaling",
        "ps-vs-allreduce",
    ]
