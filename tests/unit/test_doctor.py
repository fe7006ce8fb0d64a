from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from workbench.commands.doctor import collect_facts, diagnose, parts, render


@pytest.fixture(scope="module")
def real_facts():
    return collect_facts()


def test_doctor_on_the_real_stack(real_facts):
    assert real_facts["tensorflow"]["version"] == "2.15.1"
    assert real_facts["tensorflow"]["distributions"] == ["tensorflow-cpu"]
    assert real_facts["tensorflow"]["keras"]["major"] == 2
    assert real_facts["horovod"]["version"] == "0.28.1"
    assert real_facts["horovod"]["built_for_tensorflow"] == "2.15.1"
    assert real_facts["horovod"]["controllers"] == {"mpi": True, "gloo": True}
    assert real_facts["horovod"]["tensor_operations"]["mpi"]
    assert real_facts["mpi"]["implementation"] == "openmpi"
    assert real_facts["mpi"]["thread_multiple"]
    assert real_facts["packages"]["pandas"] and real_facts["packages"]["ipyparallel"]
    assert diagnose(real_facts) == []
    ready = {part.name: part.ready for part in parts(real_facts)}
    assert ready == {**ready, "core": True, "record": True, "horovod": True, "cluster": True, "notebook": True}
    screen = render(real_facts, [])
    for word in ("TensorFlow   2.15.1 (tensorflow-cpu)", "Horovod      0.28.1  built for TensorFlow 2.15.1"):
        assert word in screen
    for word in ("MPI_THREAD_MULTIPLE [X]", "cores", "GPUs", "[X] cluster", "pandas 2."):
        assert word in screen


def test_json_output_is_one_object():
    completed = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "doctor", "--json", "--require", "record,horovod,cluster"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    payload = json.loads(completed.stdout)
    assert payload["ok"] is True and payload["problems"] == []
    assert {part["name"] for part in payload["parts"]} >= {"core", "record", "cluster", "notebook", "cases", "nvml"}


def _broken(real_facts, path, value):
    facts = copy.deepcopy(real_facts)
    target = facts
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return facts


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("horovod", "controllers", "mpi"), False, "Horovod was built without the MPI controller: rebuild"),
        (("horovod", "tensorflow_ops"), False, "Horovod has no TensorFlow ops"),
        (("horovod", "built_for_tensorflow"), "2.14.0", "Horovod was built for TensorFlow 2.14.0, this is 2.15.1"),
        (("mpi", "thread_multiple"), False, "MPI_THREAD_MULTIPLE"),
        (("tensorflow", "keras", "major"), 3, "pip install 'tf_keras~=2.15.0' and set TF_USE_LEGACY_KERAS=1"),
        (("tensorflow", "distributions"), ["tensorflow", "tensorflow-cpu"], "two TensorFlow distributions"),
        (("packages", "jupyterlab_widgets"), "1.1.0", "ipywidgets 8.1.9 does not match jupyterlab_widgets 1.1.0"),
        (("python", "version"), "3.9.18", "Python 3.9.18 is not one the workbench is checked on"),
    ],
)
def test_each_problem_is_one_line_with_its_fix(real_facts, path, value, expected):
    problems = diagnose(_broken(real_facts, path, value))
    assert len(problems) == 1
    line = str(problems[0])
    assert expected in line
    assert "\n" not in line and ": " in line


@pytest.mark.parametrize(
    ("path", "value", "part", "expected"),
    [
        (
            ("modules", "ipyparallel"),
            False,
            "cluster",
            "needs ipyparallel, which is not installed here: pip install 'workbench[cluster]'",
        ),
        (
            ("modules", "ipywidgets"),
            False,
            "notebook",
            "needs ipywidgets, which is not installed here: pip install 'workbench[notebook]'",
        ),
        (
            ("modules", "sklearn"),
            False,
            "cases",
            "needs scikit-learn, which is not installed here: pip install 'workbench[cases]'",
        ),
        (
            ("tensorflow",),
            {"installed": False, "error": "not installed"},
            "record",
            "needs tensorflow, which is not installed here: install your TensorFlow",
        ),
        (
            ("horovod",),
            {"installed": False, "error": "not installed"},
            "horovod",
            "needs horovod, which is not installed here: install Horovod built against your TensorFlow",
        ),
        (("mpi", "mpiexec"), {"openmpi": None, "mpich": None}, "record", "no mpiexec: load your MPI"),
    ],
)
def test_a_missing_package_is_no_problem_but_its_part_says_what_to_install(real_facts, path, value, part, expected):
    facts = _broken(real_facts, path, value)
    assert diagnose(facts) == []  # nothing installed is broken: the part just cannot work
    status = {status.name: status for status in parts(facts)}[part]
    assert not status.ready and expected in status.lacking and "\n" not in status.lacking
    assert status.ready is False and status.name in render(facts, [])


def test_require_names_the_part_that_cannot_work(monkeypatch, capsys):
    from workbench.commands import doctor

    real = doctor.collect_facts()
    monkeypatch.setattr(doctor, "collect_facts", lambda: _broken(real, ("modules", "anywidget"), False))
    assert doctor.main(quiet=True, require=("notebook",)) == 1
    assert "PROBLEM: the notebook part cannot work here: needs anywidget" in capsys.readouterr().out
    assert doctor.main(quiet=True, require=("core", "cluster")) == 0
    with pytest.raises(ValueError, match="unknown part gpu"):
        doctor.main(require=("gpu",))


def test_a_stack_that_does_not_import_together_is_one_line_naming_the_fix(monkeypatch, capsys):
    from workbench import _entry

    line = _entry.import_failure_line(ImportError("pyarrow requires NumPy 2.0 or newer, found 1.26.4"))
    assert line.startswith("workbench: cannot start: ImportError: pyarrow requires NumPy 2.0")
    assert "pip install 'pyarrow<22'" in line and "\n" not in line
    unknown = _entry.import_failure_line(ImportError("libfoo.so: cannot open shared object file"))
    assert "libfoo.so" in unknown and "pip check" in unknown

    monkeypatch.setitem(sys.modules, "workbench.cli", None)  # importing it raises ImportError
    assert _entry.main() == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(
        "workbench: cannot start: ModuleNotFoundError: import of workbench.cli"
    )
