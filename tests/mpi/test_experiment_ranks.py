"""The experiment runner on 2 real ranks: manifest, resume after a failure and after a killed sweep."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import pandas as pd
import psutil
import pytest

from workbench.experiment import Case, Experiment, ExperimentError, Point
from workbench.store import RunData

pytestmark = pytest.mark.mpi
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules


def spin_on_rank(run_path: str, *, spans: int, fail_if: str = "") -> dict[str, Any]:
    """A tiny workload: ``spans`` compute spans per rank, or an exception while ``fail_if`` exists."""
    from mpi4py import MPI

    from workbench.recorder import Recorder

    rank = MPI.COMM_WORLD.Get_rank()
    with Recorder(run_path, flush_interval_s=0.05) as recorder:
        for step in range(spans):
            recorder.step = step
            with recorder.phase("compute", "step"):
                time.sleep(0.002)
    if fail_if and os.path.exists(fail_if):
        raise RuntimeError(f"rank {rank} was told to fail")
    return {"rank": rank, "spans": spans}


@dataclass(frozen=True)
class ToySettings:
    spans: tuple[int, ...] = (3, 5)
    fail_marker: str = ""


class ToyCase(Case):
    name = "toy"
    title = "Toy"
    about = "spans per rank"
    presets: Mapping[str, ToySettings] = {"ci": ToySettings()}
    default_preset = "ci"
    workload = staticmethod(spin_on_rank)

    def points(self, settings: ToySettings, max_ranks: int) -> list[Point]:
        return [Point.of(max_ranks, {"spans": s}) for s in settings.spans]

    def workload_kwargs(self, settings: ToySettings, point: Point) -> dict[str, Any]:
        return {"spans": point["spans"], "fail_if": settings.fail_marker if point["spans"] == 5 else ""}

    def row(self, run: RunData, point: Point, settings: ToySettings) -> dict[str, Any]:
        return {"spans": point["spans"], "recorded": len(run.events), "returned": len(run.meta["rank_results"])}

    def summary(self, rows: pd.DataFrame, tables: Any, settings: ToySettings) -> dict[str, Any]:
        return {"recorded": int(rows["recorded"].sum())}

    def text(self, summary: Mapping[str, Any]) -> str:
        return f"- {summary['recorded']} spans recorded"


def test_failed_point_is_kept_and_resume_runs_only_what_is_missing(cluster2, tmp_path, capsys):
    marker = tmp_path / "fail"
    marker.write_text("")
    experiment = Experiment(ToyCase(), ranks=2, out=tmp_path / "out", fail_marker=str(marker))
    assert [p.key for p in experiment.plan()] == ["n2/spans=3", "n2/spans=5"]
    with pytest.raises(Exception, match="was told to fail"):
        experiment.run(cluster=cluster2)
    status = experiment.status().set_index("point")["status"].to_dict()
    assert status == {"n2/spans=3": "finished", "n2/spans=5": "failed"}
    failed_run = RunData.load(experiment.status().set_index("point").loc["n2/spans=5", "run"])
    assert failed_run.meta["status"] == "failed" and "was told to fail" in failed_run.meta["error"]
    assert len(failed_run.events) == 2 * 5  # what the ranks recorded before failing is kept
    first_run = experiment.finished_points()["n2/spans=3"]
    meta = json.loads((first_run / "run.json").read_text())
    assert meta["experiment"] == {
        "case": "toy",
        "preset": "ci",
        "point": "n2/spans=3",
        "params": {"spans": 3},
        "sweep": str(tmp_path / "out"),
    }

    marker.unlink()
    seen: list[tuple[str, str]] = []
    result = experiment.run(cluster=cluster2, resume=True, on_point=lambda p, s: seen.append((p.key, s)))
    assert seen == [("n2/spans=3", "reused"), ("n2/spans=5", "start"), ("n2/spans=5", "done")]
    assert experiment.finished_points()["n2/spans=3"] == first_run  # not run again
    assert result.summary["sweep"] == {"points": 2, "ran": 1, "reused": 1, "missing": []}
    assert result.rows.set_index("point")["recorded"].to_dict() == {"n2/spans=3": 6, "n2/spans=5": 10}
    assert (result.rows["returned"] == 2).all()
    assert result.summary["recorded"] == 16

    # the result again, from the store alone, in a "new session"
    again = Experiment(ToyCase(), ranks=2, out=tmp_path / "out", fail_marker=str(marker)).result()
    pd.testing.assert_frame_equal(again.rows, result.rows)
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["recorded"] == 16
    # the manifest is an index: without it the store alone still knows the finished points
    (tmp_path / "out" / "sweep.json").unlink()
    assert set(experiment.finished_points()) == {"n2/spans=3", "n2/spans=5"}
    _a_case_from_outside_the_package_is_one_registry_line(tmp_path / "out", capsys)


def _a_case_from_outside_the_package_is_one_registry_line(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """This module's toy, registered from outside the package: listed and run by ``workbench run`` (its finished
    points reused, so no new cluster), projected from its runs, and its table rendered for the docs."""
    from workbench.experiment import register_case, unregister_case

    assert register_case(ToyCase) == "toy"
    try:
        _registered_toy_is_run_projected_and_rendered(out, capsys)
    finally:
        unregister_case("toy")  # the other tests see the package's cases only


def _registered_toy_is_run_projected_and_rendered(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from workbench.cli import main
    from workbench.experiment import case_names

    assert "toy" in case_names()
    capsys.readouterr()
    assert main(["run", "--list"]) == 0
    assert any(line.startswith("toy ") and "spans per rank" in line for line in capsys.readouterr().out.splitlines())
    assert main(["run", "toy", "--ranks", "2", "--out", str(out), "--resume", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["case"] == "toy" and payload["recorded"] == 16 and payload["headline"]
    # its projection: from one of its runs to more ranks
    run_dir = Experiment(ToyCase(), ranks=2, out=out).finished_points()["n2/spans=5"]
    assert main(["project", str(run_dir), "--ranks", "2,8", "--json"]) == 0
    projected = json.loads(capsys.readouterr().out)["projection"]
    assert [row["ranks"] for row in projected] == [2, 8] and projected[-1]["step_s"] > 0
    # its table in the docs: the generic renderer finds the case through the registry
    script = Path(__file__).parents[2] / "benchmarks" / "render_readme.py"
    spec = importlib.util.spec_from_file_location("render_readme", script)
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    saved = {"name": "toy", "result": payload, "command": "workbench run toy", "measured": "now", "machine": "here"}
    text = render.renderer("toy", saved)(saved)
    assert text.startswith("| ") and "- 16 spans recorded" in text  # its headline table, then its own text


class ToyTuning(ToyCase):
    """The same toy, where a failing point is a result (as a crashing thread setting in a tuning sweep)."""

    name = "toy-tuning"
    failures_are_results = True

    def points(self, settings: ToySettings, max_ranks: int) -> list[Point]:
        return [Point.of(max_ranks, {"spans": s}) for s in (5, 3, 4)]


def test_a_failure_that_is_a_result_lets_the_sweep_go_on(cluster2, tmp_path):
    marker = tmp_path / "fail"
    marker.write_text("")
    experiment = Experiment(ToyTuning(), ranks=2, out=tmp_path / "out", fail_marker=str(marker))
    seen: list[tuple[str, str]] = []
    result = experiment.run(cluster=cluster2, on_point=lambda p, s: seen.append((p.key, s)))
    # the first point fails; the next two run all the same
    assert seen == [
        ("n2/spans=5", "start"), ("n2/spans=5", "failed"),
        ("n2/spans=3", "start"), ("n2/spans=3", "done"),
        ("n2/spans=4", "start"), ("n2/spans=4", "done"),
    ]  # fmt: skip
    assert sorted(result.rows["point"]) == ["n2/spans=3", "n2/spans=4"]
    failed = result.tables["failed"]
    assert list(failed["point"]) == ["n2/spans=5"] and list(failed["spans"]) == [5] and list(failed["ranks"]) == [2]
    reason = result.summary["failed_points"]["n2/spans=5"]
    assert "was told to fail" in reason and "\n" not in reason and failed["reason"].iloc[0] == reason
    assert result.summary["sweep"]["missing"] == ["n2/spans=5"]
    assert (tmp_path / "out" / "failed.parquet").is_file()
    # fixed, resumed: only the failed point runs, and it is no longer a failure
    marker.unlink()
    again = experiment.run(cluster=cluster2, resume=True)
    assert sorted(again.rows["point"]) == ["n2/spans=3", "n2/spans=4", "n2/spans=5"]
    assert "failed" not in again.tables and "failed_points" not in again.summary


def test_resume_refuses_a_sweep_made_with_other_settings(cluster2, tmp_path):
    Experiment(ToyCase(), ranks=2, out=tmp_path).run(cluster=cluster2)
    other = Experiment(ToyCase(), ranks=2, out=tmp_path, spans=(4,))
    with pytest.raises(ExperimentError, match="with other settings: resume it with the same options"):
        other.run(cluster=cluster2, resume=True)
    # without --resume a new sweep starts and the old index is kept beside it
    other.run(cluster=cluster2)
    assert len(list(tmp_path.glob("sweep-*.json"))) == 1
    assert len(list((tmp_path / "runs").iterdir())) == 3


def test_live_point_then_the_sweep_reuses_it(cluster2, tmp_path):
    import asyncio

    experiment = Experiment(ToyCase(), ranks=2, out=tmp_path)
    live = experiment.start(cluster2, "n2/spans=3")
    assert (live.run_path / "run.json").is_file()  # the dashboard can follow it at once
    results = asyncio.run(_await(live))
    assert [r["rank"] for r in results] == [0, 1]
    live.abort()  # harmless once it ended
    result = experiment.run(cluster=cluster2, resume=True)
    assert result.summary["sweep"]["reused"] == 1 and result.summary["sweep"]["ran"] == 1


async def _await(live: Any) -> Any:
    return await live


def _sweep_points(out: Path) -> dict[str, str]:
    try:
        manifest = json.loads((out / "sweep.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {key: entry["status"] for key, entry in manifest["points"].items()}


def _cluster_processes() -> set[int]:
    found = set()
    for process in psutil.process_iter():
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if "ipyparallel" in command or "prterun" in command or "ipcontroller" in command:
            found.add(process.pid)
    return found


def _kill_new(before: set[int]) -> None:
    """mpiexec (prterun) starts its own session, so killing the sweep's group leaves it: end it here."""
    for pid in _cluster_processes() - before:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


def test_killed_sweep_finishes_with_resume(tmp_path):
    """`workbench run` killed (SIGKILL, whole process group) after its first point; --resume finishes it."""
    before_processes = _cluster_processes()
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "workbench.cli", "run", "eval-frequency", "--preset", "ci", "--ranks", "1"]
    command += ["--backend", "mpi4py", "--out", str(out), "--json"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 600
    try:
        while "finished" not in _sweep_points(out).values():
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no point finished in 600 s"
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        _kill_new(before_processes)
    before = _sweep_points(out)
    finished_first = [k for k, v in before.items() if v == "finished"]
    assert finished_first == ["n1/backend=mpi4py/k=1"], before
    first_run = json.loads((out / "sweep.json").read_text())["points"][finished_first[0]]["run"]

    completed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = json.loads(completed.stdout)
    assert summary["sweep"] == {"points": 2, "ran": 1, "reused": 1, "missing": []}
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["points"][finished_first[0]]["run"] == first_run  # the finished point was not run again
    assert set(pd.read_parquet(out / "runs.parquet")["point"]) == {"n1/backend=mpi4py/k=1", "n1/backend=mpi4py/k=20"}
