"""The experiment runner's pure parts: point keys, settings, the plan, and `workbench run` options."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workbench.cases.eval_frequency import EvalFrequencySettings, parse_intervals
from workbench.experiment import CASE_MODULES, Experiment, Point, PointRun, case_names, format_value, get_case
from workbench.store import create_run, read_run_meta


def test_point_keys_are_stable_and_readable():
    point = Point.of(2, {"backend": "horovod", "eval_interval": 30}, {"eval_interval": "k"})
    assert point.key == "n2/backend=horovod/k=30"
    assert point["eval_interval"] == 30 and point.as_dict() == {"backend": "horovod", "eval_interval": 30}
    assert Point.of(1).key == "n1"
    # short names only shape the key: the identity is the rank count and the parameters
    assert point == Point.of(2, {"backend": "horovod", "eval_interval": 30})
    with pytest.raises(KeyError, match="point n2/backend=horovod/k=30 has no parameter 'batch'"):
        point["batch"]


@pytest.mark.parametrize(
    ("value", "text"), [(30, "30"), (2.0, "2"), (0.5, "0.5"), (True, "yes"), ((1, 4), "1,4"), ("tf.data", "tf.data")]
)
def test_values_in_keys(value, text):
    assert format_value(value) == text


def test_eval_frequency_plan_is_ranks_by_backend_by_interval():
    experiment = Experiment("eval-frequency", preset="ci", ranks=2, out="unused")
    assert [p.key for p in experiment.plan()] == [
        "n1/backend=mpi4py/k=1",
        "n1/backend=mpi4py/k=20",
        "n1/backend=horovod/k=1",
        "n1/backend=horovod/k=20",
        "n2/backend=mpi4py/k=1",
        "n2/backend=mpi4py/k=20",
        "n2/backend=horovod/k=1",
        "n2/backend=horovod/k=20",
    ]
    assert experiment.point(ranks=2, backend="horovod", eval_interval=20).key == "n2/backend=horovod/k=20"
    kwargs = get_case("eval-frequency").workload_kwargs(experiment.settings, experiment.plan()[-1])
    assert kwargs["settings_dict"]["backend"] == "horovod" and kwargs["settings_dict"]["eval_interval"] == 20
    assert kwargs["settings_dict"]["epochs"] == 20
    assert experiment.status()["status"].unique().tolist() == ["pending"]


def test_settings_overrides_are_checked():
    experiment = Experiment("eval-frequency", preset="ci", ranks=1, backends=("horovod",), intervals=(1, 3))
    expected = EvalFrequencySettings(epochs=20, dataset_repeat=1, intervals=(1, 3), backends=("horovod",))
    assert experiment.settings == expected
    with pytest.raises(ValueError, match="case eval-frequency has no setting 'epoch'"):
        Experiment("eval-frequency", preset="ci", epoch=3)
    with pytest.raises(ValueError, match="ranks=0: use a whole number >= 1"):
        Experiment("eval-frequency", ranks=0)
    with pytest.raises(ValueError, match="unknown case 'nope': choose one of eval-frequency, predict-leak"):
        Experiment("nope")
    assert parse_intervals("1,30") == (1, 30)


def test_every_case_declares_the_contract():
    for name in case_names():
        case = get_case(name)
        assert case.name == name and case.about and case.title
        assert {"ci", "reduced", "full"} <= set(case.presets)
        for preset in case.presets:
            points = Experiment(name, preset=preset, ranks=2).plan()
            assert points and max(p.ranks for p in points) == 2  # --ranks is the most ranks any point uses


def test_list_names_every_case_with_one_line():
    completed = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "--list"], capture_output=True, text=True, check=True
    )
    lines = completed.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(CASE_MODULES)
    assert list(CASE_MODULES)[:5] == [
        "eval-frequency",
        "predict-leak",
        "input-pipeline",
        "pop-scaling",
        "ps-vs-allreduce",
    ]
    assert all("presets: ci, reduced, full" in line for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "gloo"], "argument --backend: backend 'gloo' is unknown"),
        (["--intervals", "5"], "give at least 2 whole number(s) >= 1"),
        (["--preset", "huge"], "argument --preset: invalid choice: 'huge'"),
        (["--methods", "predict"], "unrecognized arguments: --methods predict"),  # predict-leak's option only
    ],
)
def test_case_options_come_from_the_case(args, message):
    completed = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "eval-frequency", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2 and message in completed.stderr, completed.stderr


def test_a_manifest_that_cannot_be_written_keeps_the_ranks_error(tmp_path):
    """A full disk can refuse the manifest too: the point's own error stays the one raised, with a note."""
    experiment = Experiment("eval-frequency", preset="ci", ranks=2, out=tmp_path)
    point = experiment.plan()[0]
    manifest = experiment._open_manifest(resume=False)
    before = experiment.manifest_path.read_text()
    run_path = create_run(tmp_path, "point")
    point_run = PointRun(experiment, point, run_path, pending=None)
    # the manifest's temporary name is taken by a directory: its write fails as on a full disk
    (tmp_path / f".{experiment.manifest_path.name}.{os.getpid()}.tmp").mkdir()
    error = OSError(28, "No space left on device")
    experiment.mark_failed(point_run, error)
    assert any("sweep manifest could not record this failure" in note for note in error.__notes__)
    assert experiment.manifest_path.read_text() == before and manifest["points"] == {}
    assert read_run_meta(run_path)["status"] == "failed"
    assert "No space left on device" in read_run_meta(run_path)["error"]


def test_threads_per_rank_is_part_of_what_a_resumed_sweep_must_match(tmp_path):
    from workbench.config import ClusterConfig
    from workbench.experiment import ExperimentError

    shared = Experiment("eval-frequency", preset="ci", ranks=2, out=tmp_path)
    shared._open_manifest(resume=False)
    one_core = Experiment(
        "eval-frequency", preset="ci", ranks=2, out=tmp_path, cluster_config=ClusterConfig(threads_per_rank=1)
    )
    assert one_core.identity()["threads_per_rank"] == 1
    with pytest.raises(ExperimentError, match="with other threads_per_rank"):
        one_core._open_manifest(resume=True)
    shared._open_manifest(resume=True)  # the same settings resume


def test_threads_per_rank_option_is_checked():
    completed = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "eval-frequency", "--threads-per-rank", "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode != 0 and "--threads-per-rank 0: use a whole number >= 1" in completed.stderr


def test_a_package_declares_its_case_as_an_entry_point(monkeypatch):
    import types

    from workbench import experiment

    base = get_case("eval-frequency")

    class Point:  # what importlib.metadata gives: a name and load()
        name = "outside"

        @staticmethod
        def load():
            return types.SimpleNamespace(CASE=base)

    monkeypatch.setattr(experiment, "_entry_points", lambda: {"outside": Point})
    assert case_names()[-1] == "outside" and get_case("outside") is base
    with pytest.raises(ValueError, match=r"choose one of .*outside"):
        get_case("elsewhere")


def test_a_case_registered_by_its_module_path_is_found_and_forgotten():
    from workbench.experiment import CASE_MODULES, register_case, unregister_case

    package_cases = dict(CASE_MODULES)
    assert register_case("workbench.cases.predict_leak", name="leak-again") == "leak-again"
    try:
        assert "leak-again" in case_names() and get_case("leak-again") is get_case("predict-leak")
        assert package_cases == CASE_MODULES  # the package's own list is not where outside cases go
    finally:
        unregister_case("leak-again")
    assert "leak-again" not in case_names()
