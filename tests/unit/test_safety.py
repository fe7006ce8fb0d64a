"""Safety by inspection (issue 17, item 4): no pickle read from files, JupyterLab keeps its token,
a run directory from elsewhere is data only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workbench.experiment import get_case
from workbench.store import RunData

ROOT = Path(__file__).resolve().parents[2]
#: Calls that would run code or unpickle objects stored in a file.
UNSAFE = re.compile(
    r"pickle\.loads?\(|read_pickle\(|allow_pickle\s*=\s*True|yaml\.load\(|\beval\(|\bexec\(|joblib\.load\("
)


def test_nothing_reads_a_pickle_or_runs_code_from_a_file():
    found = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if UNSAFE.search(line.split("#")[0]):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
            if "np.load(" in line and "allow_pickle=False" not in line:
                found.append(f"{path.relative_to(ROOT)}:{number}: np.load without allow_pickle=False")
    assert found == []


def test_jupyterlab_as_documented_keeps_its_token():
    for name in ("README.md", "Makefile", "binder/postBuild", "binder/start"):
        path = ROOT / name
        if path.exists():
            text = path.read_text()
            assert not re.search(r"token\s*=\s*['\"]?\s*(['\"]|\s|$)", text, re.M), name
            assert "--ServerApp.password=" not in text and "disable_check_xsrf" not in text, name


def test_a_foreign_run_directory_is_read_as_data(tmp_path):
    """A run.json naming a module or a shell command as its case imports and runs nothing."""
    run = tmp_path / "foreign"
    (run / "events").mkdir(parents=True)
    meta = {
        "run_id": "foreign",
        "status": "finished",
        "ranks": 1,
        "experiment": {"case": "os.system", "preset": "$(touch pwned)", "point": "n1", "params": {}},
    }
    (run / "run.json").write_text(json.dumps(meta))
    loaded = RunData.load(run)
    assert loaded.meta["experiment"]["case"] == "os.system" and loaded.events.empty
    with pytest.raises(ValueError, match=r"unknown case 'os\.system'"):
        get_case(loaded.meta["experiment"]["case"])


def test_ranks_on_one_machine_do_not_open_the_tcp_transport(monkeypatch, tmp_path):
    from workbench.config import ClusterConfig

    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    assert ClusterConfig(n=2).engine_environment()["OMPI_MCA_btl"] == "self,sm"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode2 slots=2\n")
    assert "OMPI_MCA_btl" not in ClusterConfig(n=4, hostfile=str(hostfile)).engine_environment()
    assert ClusterConfig(n=2, env={"OMPI_MCA_btl": "self,tcp"}).engine_environment()["OMPI_MCA_btl"] == "self,tcp"
    monkeypatch.setenv("OMPI_MCA_btl", "self,vader")  # the user's own choice in the environment is kept
    assert "OMPI_MCA_btl" not in ClusterConfig(n=2).engine_environment()
