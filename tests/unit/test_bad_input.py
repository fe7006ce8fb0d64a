"""Bad input across the command line and the public API: one clear line each, naming what to do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workbench import cli
from workbench.config import ClusterConfig, ConfigError, find_mpiexec, physical_cores
from workbench.experiment import Experiment
from workbench.store import NotARunError, RunData, RunTail


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    """A missing path, an empty folder, a folder with someone else's run.json, one whose run.json is a list."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "run.json").write_text(json.dumps({"name": "not ours", "status": "done"}))
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "run.json").write_text("[1, 2]")
    (tmp_path / "train.py").write_text("print('a script, not a command')\n")
    return {
        **{name: str(tmp_path / name) for name in ("missing", "empty", "foreign", "list")},
        "script": str(tmp_path / "train.py"),
    }


CLI_CASES = [
    (["run", "nope"], r"unknown case 'nope': choose one of eval-frequency"),
    (["run", "eval-frequency", "--ranks", "0"], r"ranks=0: use a whole number >= 1"),
    (["run", "eval-frequency", "--ranks", "-2"], r"ranks=-2: use a whole number >= 1"),
    (["run", "eval-frequency", "--ranks", str(physical_cores() + 1)], r"share cores .* or pass --oversubscribe"),
    (["analyse", "{missing}"], r"does not exist or is not a directory: pass a run directory"),
    (["analyse", "{empty}"], r"is not a workbench run \(no run.json\): pass a directory made by workbench"),
    (["analyse", "{foreign}"], r"not a workbench run's metadata \(no run_id\): pass a directory made by workbench"),
    (["analyse", "{list}"], r"not a workbench run's metadata"),
    (["compare", "{foreign}", "{empty}"], r"not a workbench run's metadata"),
    (["profile", "--ranks", "2", "--", "python", "{missing}/train.py"], r"does not exist: check the path"),
    (["bench", "allreduce", "--ranks", "0"], r"n=0 ranks is not possible: use n >= 1"),
    (["profile", "--ranks", "0", "--", "python", "{missing}/train.py"], r"--ranks 0: profile on at least 1 rank"),
    (["profile", "--", "no_such_program_here"], r"command 'no_such_program_here' not found"),
    (["profile", "--", "{script}"], r"train.py is not a command: did you mean workbench profile -- python .*train.py"),
    (["analyse", "{empty}", "--workers", "-1"], r"--workers -1: give 0 .* or more processes"),
    (["analyse", "{empty}", "--workers", "2", "--group-ranks", "0"], r"--group-ranks 0: give at least 1 rank"),
    (["analyse", "{empty}", "--group-ranks", "4"], r"--group-ranks sizes the rank groups of --workers"),
    (["export", "{empty}", "--trace", "{missing}/x/trace.json"], r"the folder .*missing/x does not exist"),
    (["project", "{empty}", "--network", "nope"], r"unknown network 'nope': use one of 10gbe"),
]


@pytest.mark.parametrize(("argv", "expected"), CLI_CASES, ids=[" ".join(argv) for argv, _ in CLI_CASES])
def test_command_line_bad_input_is_one_line(argv, expected, dirs, capsys):
    code = cli.main([arg.format(**dirs) for arg in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("workbench: ")
    assert re.search(expected, err[0]), err[0]


def test_unknown_preset_names_the_choices(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["run", "eval-frequency", "--preset", "huge"])
    assert raised.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "invalid choice: 'huge' (choose from 'ci', 'reduced', 'full')" in last


API_CASES = [
    (lambda d: Experiment("nope"), ValueError, r"unknown case 'nope': choose one of"),
    (lambda d: Experiment("eval-frequency", preset="huge"), ValueError, r"unknown preset 'huge'.*choose one of"),
    (lambda d: Experiment("eval-frequency", ranks=0), ValueError, r"use a whole number >= 1"),
    (lambda d: ClusterConfig(n=-1), ConfigError, r"use n >= 1"),
    (
        lambda d: ClusterConfig(n=physical_cores() + 1, oversubscribe=False),
        ConfigError,
        r"would share cores .* or pass oversubscribe=True",
    ),
    (lambda d: ClusterConfig(mpi="intel"), ConfigError, r"mpi='intel' is unknown: use one of openmpi, mpich"),
    (lambda d: RunData.load(d["missing"]), NotARunError, r"does not exist"),
    (lambda d: RunData.load(d["empty"]), NotARunError, r"no run.json"),
    (lambda d: RunTail(d["foreign"]), NotARunError, r"no run_id"),
    (lambda d: ClusterConfig(hostfile=d["missing"]), ConfigError, r"hostfile .* does not exist"),
]


@pytest.mark.parametrize(("make", "error", "expected"), API_CASES, ids=[c[2][:40] for c in API_CASES])
def test_public_api_bad_input_is_one_line(make, error, expected, dirs):
    with pytest.raises(error, match=expected) as raised:
        make(dirs)
    assert "\n" not in str(raised.value)


def test_mpi_not_installed_says_how_to_install_it(monkeypatch, tmp_path):
    """MPICH is installed here, so its install folder is pointed at an empty one: what a machine without it sees."""
    monkeypatch.setattr("workbench.config.mpich_prefix", lambda: tmp_path / "no-mpich")
    with pytest.raises(ConfigError, match=r"no mpiexec found for mpich: in the project.s venv run `make mpich`"):
        find_mpiexec("mpich")
    assert ClusterConfig(n=physical_cores() + 1).oversubscribed  # allowed by default, with a warning at start
