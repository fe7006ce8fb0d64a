"""The miniature cluster as users meet it: engines on distinct hosts, one MPI world, links as asked."""

from __future__ import annotations

import sys

import cloudpickle
import numpy as np
import pytest

from workbench import minicluster
from workbench.allreduce import measure
from workbench.bench.link import tcp_stream

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules


def _allreduce_on_every_rank():
    import os
    import socket

    import horovod.tensorflow as hvd
    import tensorflow as tf
    from mpi4py import MPI

    hvd.init()
    comm = MPI.COMM_WORLD
    summed = hvd.allreduce(tf.constant(np.arange(4.0) * (hvd.rank() + 1)), op=hvd.Sum).numpy()
    return {
        "host": socket.gethostname(),
        "mpi_rank": comm.Get_rank(),
        "mpi_size": comm.Get_size(),
        "mpi_sum": comm.allreduce(comm.Get_rank() + 1),
        "horovod_rank": hvd.rank(),
        "local_rank": hvd.local_rank(),
        "horovod_sum": summed.tolist(),
        "preloaded": os.environ.get("LD_PRELOAD", ""),
    }


def test_engines_on_every_node_are_one_mpi_world_with_right_sums(mini, monkeypatch):
    monkeypatch.delenv(minicluster.IDLE_WAIT_VARIABLE, raising=False)  # MPI's yields as sleeps: the default
    with mini.cluster(4) as cluster:
        assert cluster.rank_hosts == {0: "node1", 1: "node2", 2: "node3", 3: "node4"}
        answers = cluster.view.apply_sync(_allreduce_on_every_rank)
    assert [answer["host"] for answer in answers] == ["node1", "node2", "node3", "node4"]
    assert [answer["mpi_rank"] for answer in answers] == [0, 1, 2, 3]
    assert {answer["mpi_size"] for answer in answers} == {4}
    assert {answer["mpi_sum"] for answer in answers} == {1 + 2 + 3 + 4}
    assert [answer["horovod_rank"] for answer in answers] == [0, 1, 2, 3]
    assert {answer["local_rank"] for answer in answers} == {0}  # one rank per node
    for answer in answers:
        assert answer["horovod_sum"] == pytest.approx((np.arange(4.0) * 10).tolist())
    # the library that makes MPI's yields sleeps reached every rank through Slurm
    assert mini.idle_wait == "sleep"
    assert all(answer["preloaded"].startswith(str(mini.directory)) for answer in answers)
    assert "MPI's yields are 50 µs sleeps" in mini.status_text()


def test_allreduce_across_two_nodes_gets_what_a_tcp_stream_gets_over_the_link(restored):
    """nccl-tests' busbw (algbw x 2(n-1)/n) of MPI's allreduce against one TCP stream over the same link.

    The two nodes get 0.9 of a core each, so the link decides and not the CPU share: MPI polls
    while it waits, and at 0.4 of a core that polling is throttled by the quota (Horovod's own
    background thread polls too, so it is measured in the benchmark, not held to the link here).
    """
    mini = restored
    for node in ("node1", "node2"):
        mini.set_cpus(node, 0.9)
    # the best of three, as bandwidth is measured (one stream of 102 MB/s was seen once in a full make test)
    stream = max(tcp_stream(mini, "node1", "node2", megabytes=64) for _ in range(3))
    # the link asked for: 1 Gbit/s = 125 MB/s of IP packets; a stream gets that less its headers
    assert 0.85 * 125e6 < stream < 1.02 * 125e6
    with mini.cluster(2) as cluster:
        assert set(cluster.rank_hosts.values()) == {"node1", "node2"}
        # the best of three, as bandwidth is measured: a busy machine only ever takes some away
        # (97 MB/s beside the stream's 120 was seen once while another job wrote a thousand files)
        busbw = max(
            cluster.view.apply_sync(measure, (64 * 2**20,), 1.0, False)[0][0]["mpi_busbw_gbps"] for _ in range(3)
        )
    print(f"\nTCP stream {stream / 1e6:.0f} MB/s; MPI allreduce busbw {busbw * 1e3:.0f} MB/s")
    assert busbw * 1e9 == pytest.approx(stream, rel=0.15)
