"""Shared fixtures: a 2-rank MPI cluster reused by a test module, and quiet TensorFlow."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Kernels (papermill, JupyterLab) and mpiexec'd ranks run `python`: make it this venv's, as `make test` does.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")


@pytest.fixture(scope="module")
def cluster2():
    """Two engines that are MPI ranks 0 and 1, stopped (and checked stopped) after the module."""
    from workbench.cluster import Cluster

    cluster = Cluster(n=2, start_timeout_s=180)
    cluster.start_sync()
    try:
        yield cluster
    finally:
        cluster.stop_sync()
