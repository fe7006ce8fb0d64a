"""The hostfile reaches mpiexec: a real launch on this machine reads it (slots) for both MPI implementations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import ClusterConfig

pytestmark = pytest.mark.mpi

#: Each rank leaves a file named by its rank as its MPI launcher numbers it (stdout of two ranks can
#: interleave mid-line under MPICH's Hydra).
SAY_RANK = (
    "import os, sys; rank = os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK'));"
    "open(os.path.join(sys.argv[1], f'rank-{rank}'), 'w').close()"
)


def _launch(config: ClusterConfig, out: Path) -> subprocess.CompletedProcess:
    out.mkdir(exist_ok=True)
    return config.launch([sys.executable, "-c", SAY_RANK, str(out)], timeout_s=120)


def _ranks(out: Path) -> list[str]:
    return sorted(entry.name for entry in out.iterdir())


def test_open_mpi_places_ranks_by_the_hostfiles_slots(tmp_path):
    two_slots = tmp_path / "two"
    two_slots.write_text("localhost slots=2\n")
    started = _launch(ClusterConfig(n=2, hostfile=str(two_slots)), tmp_path / "ran")
    assert started.returncode == 0, started.stderr[-2000:]
    assert _ranks(tmp_path / "ran") == ["rank-0", "rank-1"]
    # one slot for two ranks: Open MPI refuses, which it can only do if it read this file
    one_slot = tmp_path / "one"
    one_slot.write_text("localhost slots=1\n")
    refused = _launch(ClusterConfig(n=2, hostfile=str(one_slot)), tmp_path / "refused")
    assert refused.returncode != 0
    assert "slots" in (refused.stdout + refused.stderr).lower()


def test_mpich_reads_the_hostfile(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost:2\n")
    config = ClusterConfig(n=2, mpi="mpich", hostfile=str(hostfile))
    assert config.mpiexec_args({})[:2] == ["-f", str(hostfile)]
    started = _launch(config, tmp_path / "ran")
    assert started.returncode == 0, started.stderr[-2000:]
    assert _ranks(tmp_path / "ran") == ["rank-0", "rank-1"]
    # a host that does not resolve: Hydra fails naming it, which it can only do if it read this file
    hostfile.write_text("no-such-host.invalid:2\n")
    failed = _launch(config, tmp_path / "failed")
    assert failed.returncode != 0
    assert "no-such-host.invalid" in failed.stdout + failed.stderr
