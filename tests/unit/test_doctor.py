from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from workbench.commands.doctor import collect_facts, diagnose, render


@pytest.fixture(scope="module")
def real_facts():
    return collect_facts()


def test_doctor_on_the_real_stack(real_facts):
    assert real_facts["tensorflow"]["version"] == "2.15.1"
    assert real_facts["horovod"]["version"] == "0.28.1"
    assert real_facts["horovod"]["controllers"] == {"mpi": True, "gloo": True}
    assert real_facts["horovod"]["tensor_operations"]["mpi"]
    assert real_facts["mpi"]["implementation"] == "openmpi"
    assert real_facts["mpi"]["thread_multiple"]
    assert diagnose(real_facts) == []
    screen = render(real_facts, [])
    for word in ("TensorFlow   2.15.1", "Horovod      0.28.1", "MPI_THREAD_MULTIPLE [X]", "cores", "GPUs"):
        assert word in screen


def test_json_output_is_one_object():
    completed = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "doctor", "--json"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
    payload = json.loads(completed.stdout)
    assert payload["ok"] is True and payload["problems"] == []


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
        (("horovod", "installed"), False, "Horovod is not importable"),
        (("mpi", "mpiexec"), {"openmpi": None, "mpich": None}, "no mpiexec found: run `make venv`"),
        (("mpi", "thread_multiple"), False, "MPI_THREAD_MULTIPLE"),
        (("tensorflow", "version"), "2.21.0", "TensorFlow 2.21.0 is not the pinned 2.15.1"),
    ],
)
def test_each_problem_is_one_line_with_its_fix(real_facts, path, value, expected):
    problems = diagnose(_broken(real_facts, path, value))
    assert len(problems) == 1
    line = str(problems[0])
    assert expected in line
    assert "\n" not in line and ": " in line
