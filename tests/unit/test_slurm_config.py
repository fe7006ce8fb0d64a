"""Slurm settings of ClusterConfig: one clear error per bad value, and the batch script they become."""

from __future__ import annotations

import pytest
from IPython.utils.text import EvalFormatter

from workbench.cluster import ClusterStartError, check_one_world
from workbench.config import ClusterConfig, ConfigError
from workbench.slurm import JobState, batch_script


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"partition": "gpu"}, r"partition='gpu' is a Slurm setting: pass launcher='slurm' too"),
        ({"gpus_per_node": 4}, r"gpus_per_node=4 is a Slurm setting"),
        ({"launcher": "pbs"}, r"launcher='pbs' is unknown: use one of mpi, slurm"),
        ({"launcher": "slurm", "slurm_mpi": "pmi2"}, r"slurm_mpi='pmi2' is unknown: use one of mpiexec, pmix"),
        ({"launcher": "slurm", "time_limit": "1h"}, r"time_limit='1h' is not a Slurm time: use minutes"),
        ({"launcher": "slurm", "gpus_per_node": 0}, r"gpus_per_node=0 is not possible: use a whole number >= 1"),
        ({"launcher": "slurm", "n": 4, "nodes": 2}, r"controller_ip='127.0.0.1': engines on other nodes cannot"),
        ({"launcher": "slurm", "slurm_args": "--qos=x"}, r"slurm_args must be a tuple of sbatch options"),
        ({"launcher": "slurm", "mpi": "mpich", "slurm_mpi": "pmix"}, r"use slurm_mpi='mpiexec' with mpi='mpich'"),
    ],
)
def test_bad_slurm_settings_are_one_clear_error(settings, message):
    with pytest.raises(ConfigError, match=message) as raised:
        ClusterConfig(**settings)
    assert "\n" not in str(raised.value)


def test_hostfile_is_refused_under_slurm(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("node1 slots=2\n")
    with pytest.raises(ConfigError, match="hostfile is for launcher='mpi'"):
        ClusterConfig(launcher="slurm", hostfile=str(hosts))


@pytest.mark.parametrize("limit", ["30", "30:00", "1:00:00", "2-00", "2-12:30", "1-00:00:00", "UNLIMITED"])
def test_slurm_time_formats_are_accepted(limit):
    assert ClusterConfig(launcher="slurm", time_limit=limit).time_limit == limit


def test_batch_script_carries_every_setting_and_starts_ranks_with_mpiexec():
    config = ClusterConfig(
        n=8,
        launcher="slurm",
        partition="gpu",
        account="proj{1}",
        time_limit="1:00:00",
        gpus_per_node=4,
        nodes=2,
        threads_per_rank=6,
        controller_ip="0.0.0.0",
        slurm_args=("--qos=debug",),
    )
    script = batch_script(config, config.engine_environment())
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    for option in (
        "--ntasks={n}",
        "--cpus-per-task=6",
        "--nodes=2",
        "--partition=gpu",
        "--account=proj{{1}}",  # braces doubled: ipyparallel formats the script as a template
        "--time=1:00:00",
        "--gpus-per-node=4",
        "--qos=debug",
        "--output={output_file}",
    ):
        assert f"#SBATCH {option}" in lines
    command = lines[-1]
    assert command.startswith("exec ") and " -n {n} " in command and command.endswith("{program_and_args}")
    assert "--bind-to none" in command and "--oversubscribe" not in command
    assert "-x IPP_CONNECTION_INFO" in command and "-x OMP_NUM_THREADS" in command
    # what sbatch gets once ipyparallel fills in its fields
    fields = {"n": 8, "cluster_id": "c1", "output_file": "/log/e.log", "program_and_args": "ipengine --mpi"}
    submitted = EvalFormatter().format(script, **fields)
    assert "#SBATCH --account=proj{1}" in submitted and "#SBATCH --ntasks=8" in submitted
    last = submitted.splitlines()[-1]
    assert " -n 8 --bind-to none " in last and last.endswith(" ipengine --mpi")


def test_batch_script_with_pmix_uses_srun_and_repeats_cpus_per_task():
    config = ClusterConfig(n=2, launcher="slurm", slurm_mpi="pmix", threads_per_rank=3)
    command = batch_script(config, config.engine_environment()).splitlines()[-1]
    assert command == "exec srun --mpi=pmix --cpus-per-task=3 --kill-on-bad-exit=1 {program_and_args}"


def test_nodes_shrink_with_the_ranks_of_a_sweep_point():
    # Experiment makes one config per rank count with dataclasses.replace(config, n=...)
    config = ClusterConfig(n=1, launcher="slurm", nodes=4)
    assert "#SBATCH --nodes=1" in batch_script(config, config.engine_environment()).splitlines()


def test_threads_default_to_one_per_rank_under_slurm():
    # the login node's cores say nothing about the compute nodes
    config = ClusterConfig(n=1, launcher="slurm")
    assert config.threads == 1 and not config.oversubscribed
    assert config.engine_environment()["OMP_NUM_THREADS"] == "1"


def test_one_world_check():
    one = [{"mpi_rank": 0, "mpi_size": 2}, {"mpi_rank": 1, "mpi_size": 2}]
    check_one_world([0, 1], one, 2)
    separate = [{"mpi_rank": 0, "mpi_size": 1}, {"mpi_rank": 0, "mpi_size": 1}]
    with pytest.raises(ClusterStartError, match=r"did not form one MPI world \(world sizes \[1\]"):
        check_one_world([0, 1], separate, 2)
    with pytest.raises(ClusterStartError, match="engine id -> rank"):
        check_one_world([0, 1], list(reversed(one)), 2)


def test_job_states_that_can_never_start():
    assert JobState("7", "PENDING", "PartitionTimeLimit").never_starts
    assert not JobState("7", "PENDING", "Resources").never_starts
    assert not JobState("7", "RUNNING", "None").never_starts
    assert JobState("7", "PENDING", "PartitionTimeLimit").describe() == (
        "Slurm job 7 is PENDING (PartitionTimeLimit): time_limit is above the partition's MaxTime"
    )
    assert JobState("7", "FAILED", "NonZeroExitCode").describe() == "Slurm job 7 is FAILED (NonZeroExitCode)"
    assert JobState("7", "COMPLETING", "NonZeroExitCode").describe() == (
        "Slurm job 7 is FAILED (NonZeroExitCode), still COMPLETING"
    )
    assert not JobState("7", "CANCELLED").active and JobState("7", "COMPLETING").active


def test_no_slurm_on_path_is_one_clear_error(monkeypatch):
    import sys
    from pathlib import Path

    from workbench.cluster import Cluster

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # the venv only: no sbatch here
    with pytest.raises(ConfigError, match=r"launcher='slurm' needs Slurm's `sbatch` on PATH: run on a Slurm login"):
        Cluster(n=1, launcher="slurm").start_sync()
