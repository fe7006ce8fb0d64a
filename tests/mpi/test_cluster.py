"""2 real MPI ranks under ipyparallel: start, rank map, allreduce sums, stop with nothing left."""

from __future__ import annotations

import os
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


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            continue
    return alive


def _cluster_processes(cluster_id: str) -> list[psutil.Process]:
    """Every process on the machine whose command line or environment names the cluster, wherever it was reparented."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if cluster_id in " ".join(process.info["cmdline"] or ()) or (
                process.environ().get("IPP_CLUSTER_ID") == cluster_id
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_stop_leaves_no_process():
    """Processes are diffed for real (children before, during, after), not taken from the cluster's own list."""
    ours_before = {process.pid for process in psutil.Process().children(recursive=True)}
    cluster = Cluster(n=2)
    with cluster:
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in ours_before]
        cluster_id = cluster.cluster_id
        assert cluster_id and len(_cluster_processes(cluster_id)) >= 2  # the two engines at least
        names = " ".join(" ".join(p.cmdline()) for p in started)
        assert "ipyparallel.controller" in names and "ipyparallel.engine.nanny" in names, names
    deadline = time.monotonic() + 30
    while (_alive(started) or _cluster_processes(cluster_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(started) == [] and _cluster_processes(cluster_id) == []
    new_children = [p for p in psutil.Process().children(recursive=True) if p.pid not in ours_before]
    assert _alive(new_children) == []


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


def _start_then_stop_horovod() -> tuple[bool, bool, bool]:
    import horovod.tensorflow as hvd

    from workbench.workloads.training import stop_idle_horovod

    hvd.init()
    stopped = stop_idle_horovod()
    return stopped, hvd.is_initialized(), stop_idle_horovod()


def test_an_idle_horovod_left_by_an_earlier_point_is_stopped(cluster2):
    """Its background thread would slow the next point's steps (7x for a 0.2 ms MPI step here)."""
    assert cluster2.view.apply(_start_then_stop_horovod) == [(True, False, False)] * 2


def test_a_run_analysed_on_the_engines_in_rank_groups_equals_it_analysed_here(cluster2, tmp_path):
    """Each engine loads and reduces its own rank groups of a stored run; the merge is the same."""
    import pandas as pd

    from workbench.datasets.made_traces.job import write_made_run
    from workbench.rank_groups import analyse_split, engine_workers

    path = write_made_run(tmp_path, 40_000, 8, ranks_per_node=2, slow_nodes=1, straggler_share=0.02)
    here = analyse_split(path, group_ranks=2)
    engines = analyse_split(path, group_ranks=2, workers=engine_workers(cluster2))
    assert engines.workers == 2 and engines.groups == 4
    engine_pids = set(cluster2.client[:].apply_sync(os.getpid))
    assert set(engines.worker_peak_rss) == engine_pids  # the groups were reduced on the engines
    pd.testing.assert_frame_equal(engines.breakdown, here.breakdown)
    pd.testing.assert_frame_equal(engines.findings, here.findings)
    pd.testing.assert_frame_equal(engines.lateness, here.lateness)
