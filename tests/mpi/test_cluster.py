"""2 real MPI ranks under ipyparallel: start, rank map, allreduce sums, stop with nothing left."""

from __future__ import annotations

import socket
import sys
import time

import cloudpickle
import psutil
import pytest

from workbench.cluster import Cluster, ClusterStartError
from workbench.config import ConfigError

pytestmark = pytest.mark.mpi
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules


def _allreduce_both() -> tuple[float, float]:
    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    mpi_sum = MPI.COMM_WORLD.allreduce(float(rank + 1), op=MPI.SUM)
    horovod_sum = hvd.allreduce(tf.constant(np.float32(rank + 1)), op=hvd.Sum).numpy()
    return mpi_sum, float(horovod_sum)


def test_rank_map_and_allreduce_sums(cluster2):
    rank_map = cluster2.init_horovod_sync()
    assert list(rank_map["engine_id"]) == [0, 1]
    assert list(rank_map["mpi_rank"]) == [0, 1]
    assert list(rank_map["horovod_rank"]) == [0, 1]
    assert set(rank_map["horovod_size"]) == {2}
    assert rank_map["mpi_threads_supported"].all()
    # ranks hold 1 and 2: both libraries must give 3 on both ranks
    assert cluster2.view.apply(_allreduce_both) == [(3.0, 3.0), (3.0, 3.0)]


def test_stop_leaves_no_process():
    cluster = Cluster(n=2)
    with cluster:
        pids = cluster.pids
        assert len(pids) >= 3  # controller, mpiexec, two engines at least
    time.sleep(0.5)
    assert [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"] == []


def test_zero_ranks_is_one_clear_error():
    with pytest.raises(ConfigError, match="use n >= 1"):
        Cluster(n=0)


def test_port_already_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ClusterStartError, match=f"port {port} on 127.0.0.1 is already in use"):
            Cluster(n=2, controller_port=port).start_sync()


def test_failed_start_is_bounded_shows_engine_output_and_leaves_nothing():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cluster = Cluster(n=2, mpi_args=("--no-such-mpiexec-flag",), start_timeout_s=60)
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as raised:
        cluster.start_sync()
    assert time.monotonic() - started < 60
    assert "no-such-mpiexec-flag" in str(raised.value)
    time.sleep(0.5)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.status() != "zombie"]
    assert left == []
