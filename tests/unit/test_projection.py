"""Scaling projection on hand-computed examples: collective costs, the fitted network, the model."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from workbench.analysis import projection as pj
from workbench.events import events_frame

MS = 1_000_000  # ns per ms
GB = 1_000_000_000


# -- collective costs -------------------------------------------------------------------------------


def test_ring_allreduce_is_2_n_minus_1_over_n_bytes_over_beta_plus_2_n_minus_1_alpha():
    # 100 MB on 4 ranks, α = 10 µs, β = 1 GB/s: 2·3/4·0.1 s + 6·10 µs
    assert pj.ring_allreduce_seconds(100e6, 4, 10e-6, 1 * GB) == pytest.approx(0.15 + 60e-6)
    assert pj.ring_allreduce_seconds(100e6, 1, 10e-6, 1 * GB) == 0.0
    assert pj.ring_allreduce_seconds(0, 8, 10e-6, 1 * GB) == 0.0


def test_tree_allreduce_has_logarithmic_latency():
    # 8 ranks: 2·ceil(log2 8)=6 latency steps, bandwidth term 2·B/β
    assert pj.tree_allreduce_seconds(1e6, 8, 1e-6, 1 * GB) == pytest.approx(6e-6 + 2e-3)
    assert pj.tree_allreduce_seconds(1e6, 5, 1e-6, 1 * GB) == pytest.approx(6e-6 + 2e-3)


def test_fusion_splits_bytes_into_threshold_sized_calls_each_paying_horovods_fixed_cost():
    assert pj.fused_calls(100 * 2**20) == 2  # 100 MiB over the 64 MiB default
    assert pj.fused_calls(1) == 1 and pj.fused_calls(0) == 0
    net = pj.Network("test", latency_s=0.0, bandwidth_bytes_per_s=1 * GB, per_call_s=1e-3)
    transfer, per_call = pj.allreduce_seconds(40e6, 2, net, fusion_threshold_bytes=10_000_000)
    assert per_call == pytest.approx(4e-3)  # 4 calls of 10 MB
    assert transfer == pytest.approx(4 * 10e6 / GB)  # n = 2: 2(n-1)/n = 1
    _transfer, calls = pj.allreduce_seconds(30, 2, net, fusion_threshold_bytes=20, tensor_bytes=[10, 10, 10])
    assert calls == pytest.approx(2e-3)  # [10, 10] then [10]


def test_hierarchical_allreduce_rings_inside_the_node_then_between_nodes():
    net = pj.Network(
        "two-level",
        latency_s=0.0,
        bandwidth_bytes_per_s=1 * GB,
        ranks_per_node=4,
        intra_latency_s=0.0,
        intra_bandwidth_bytes_per_s=10 * GB,
    )
    transfer, _ = pj.allreduce_seconds(1e9, 8, net)
    # inside: 2·3/4·1 GB / 10 GB/s = 0.15 s; between 2 nodes: 2·1/2·1 GB / 1 GB/s = 1 s
    assert transfer == pytest.approx(1.15)
    flat = pj.network(net, hierarchical=False)
    assert pj.allreduce_seconds(1e9, 8, flat)[0] == pytest.approx(2 * 7 / 8)
    # all 4 ranks on one node: the node's link only
    assert pj.allreduce_seconds(1e9, 4, net)[0] == pytest.approx(0.15)


def test_parameter_servers_busiest_card_carries_nodes_times_bytes_over_servers():
    net = pj.Network("ps", latency_s=1e-3, bandwidth_bytes_per_s=1 * GB)
    # 4 nodes, 1 server: the server's card carries 4·B each way: 2·(α + 4·0.1 s)
    assert pj.parameter_server_seconds(100e6, 4, net, servers=1) == pytest.approx(2 * (1e-3 + 0.4))
    # one server per node: every card carries B
    assert pj.parameter_server_seconds(100e6, 4, net) == pytest.approx(2 * (1e-3 + 0.1))
    assert pj.parameter_server_seconds(100e6, 1, net) == 0.0


def test_servers_beside_the_workers_spare_each_node_its_own_share_of_the_link():
    b = 100e6
    # one server on its own host, 4 workers: its card carries 4B; beside worker 0 it carries the other 3 workers' B
    assert pj.parameter_server_link_bytes(b, 4, servers=1) == pytest.approx(4 * b)
    assert pj.parameter_server_link_bytes(b, 4, servers=1, colocated=True) == pytest.approx(3 * b)
    # one server per node, beside the workers: (W-1)/W of everyone's traffic and 1 - 1/W of its own, 2(W-1)/W·B
    assert pj.parameter_server_link_bytes(b, 4, colocated=True) == pytest.approx(2 * 3 / 4 * b)
    # TensorFlow's round-robin put 99.9 % on server 0: the shares, not the count, set the busiest card
    dealt = pj.parameter_server_link_bytes(b, 4, shares=[0.999, 0.001])
    assert dealt == pytest.approx(4 * 0.999 * b)
    assert pj.parameter_server_link_bytes(b, 1, servers=1, colocated=True) == 0.0
    net = pj.Network("ps", latency_s=1e-3, bandwidth_bytes_per_s=1 * GB)
    assert pj.parameter_server_seconds(b, 4, net, servers=1, colocated=True) == pytest.approx(2 * (1e-3 + 0.3))
    with pytest.raises(ValueError, match="share"):
        pj.parameter_server_link_bytes(b, 4, shares=[0.0, 0.0])
    with pytest.raises(ValueError, match="server_shares"):
        pj.Changes(scheme="ps", server_shares=(-1.0, 2.0))


def test_asynchronous_workers_run_at_their_own_rates_until_a_link_or_a_servers_node_is_full():
    b, compute = 100e6, 0.5
    net = pj.Network("ps", latency_s=0.0, bandwidth_bytes_per_s=1 * GB)
    # one node: the step is the compute plus the RPCs through the local server
    assert pj.asynchronous_parameter_server_seconds(b, 1, net, compute, exchange_s=0.2) == pytest.approx(0.2)
    # 2 nodes, one server beside worker 0, free RPCs: worker 0 steps every 0.5 s, worker 1 every 0.5 + 2·0.1 s;
    # nothing is full, so a round of 2 steps takes 2 / (2 + 1/0.7) s
    two = pj.asynchronous_parameter_server_seconds(b, 2, net, compute, servers=1, colocated=True)
    assert two == pytest.approx(2 / (2 + 1 / 0.7) - compute)
    # 10 nodes: 9 workers at 1/0.7 steps/s would pull 1.29 GB/s through the server's 1 GB/s link; they slow to
    # 1/0.9 each (worker 0 needs no link): a round of 10 steps in 10 / (2 + 9/0.9) s
    ten = pj.asynchronous_parameter_server_seconds(b, 10, net, compute, servers=1, colocated=True)
    assert ten == pytest.approx(10 / 12 - compute)
    # 4 nodes, RPCs costing 0.2 s of node time a step: the server's node would spend 0.6 s on each of worker 0's
    # steps (1/0.6 a second) and 0.1 s serving every step (1/0.6 + 3/0.8 a second), 1.54 s of work a second, so
    # every worker slows by that
    uncapped = 1 / 0.6 + 3 / 0.8
    load = 0.6 / 0.6 + 0.1 * uncapped
    slow = pj.asynchronous_parameter_server_seconds(b, 4, net, compute, servers=1, colocated=True, exchange_s=0.2)
    assert slow == pytest.approx(4 / (uncapped / load) - compute)
    # a server on a host of its own: every worker pulls over its link; 10 workers at 1/0.7 steps/s would need
    # 1.43 GB/s of the server's 1 GB/s, so each slows to 1 step/s: a round of 10 steps in 1 s
    alone = pj.asynchronous_parameter_server_seconds(b, 10, net, compute, servers=1)
    assert alone == pytest.approx(1.0 - compute)
    assert pj.asynchronous_parameter_server_seconds(b, 4, net, compute, servers=1) == pytest.approx(0.2)


def test_expected_max_of_n_draws_from_the_empirical_distribution():
    # two values 1 and 2: max of 2 draws is 1 only when both are 1 (1/4)
    assert pj.expected_max(np.array([2.0, 1.0]), 2) == pytest.approx(1 * 0.25 + 2 * 0.75)
    assert pj.expected_max(np.array([2.0, 1.0]), 1) == pytest.approx(1.5)
    assert pj.expected_max(np.array([3.0, 3.0, 3.0]), 64) == pytest.approx(3.0)
    assert math.isnan(pj.expected_max(np.array([]), 4))


# -- networks -----------------------------------------------------------------------------------------


def test_fit_network_recovers_alpha_beta_and_horovods_per_call_cost():
    alpha, beta, per_call = 5e-6, 2 * GB, 1e-3
    rows = []
    for size in (1024, 16384, 65536, 2**20, 2**22, 2**24):
        mpi = pj.ring_allreduce_seconds(size, 2, alpha, beta)
        rows.append({"bytes": size, "ranks": 2, "mpi_seconds": mpi, "horovod_seconds": mpi + per_call})
    net = pj.fit_network(rows, cores_per_node=2)
    assert net.bandwidth_bytes_per_s == pytest.approx(beta, rel=1e-6)
    assert net.latency_s == pytest.approx(alpha, rel=1e-6)
    assert net.per_call_s == pytest.approx(per_call, rel=1e-6)
    assert net.ranks_per_node == 2 and net.cores_per_node == 2
    with pytest.raises(ValueError, match="1 rank"):
        pj.fit_network([{**row, "ranks": 1} for row in rows])


def test_named_networks_state_their_assumptions_and_unknown_names_list_them():
    for name, net in pj.NETWORKS.items():
        assert net.assumptions and name in net.describe()
    assert pj.network("NVLink").ranks_per_node == 8
    assert pj.network("10gbe", ranks_per_node=4).ranks_per_node == 4
    with pytest.raises(ValueError, match="10gbe"):
        pj.network("carrier-pigeon")


# -- the model on a hand-built run -------------------------------------------------------------------------

NET = pj.Network("ideal", latency_s=0.0, bandwidth_bytes_per_s=1 * GB)
#: Two ranks per node on a 2-core host, an ideal network between and inside nodes.
HOST = pj.Network(
    "host",
    latency_s=0.0,
    bandwidth_bytes_per_s=1 * GB,
    ranks_per_node=2,
    cores_per_node=2,
    intra_latency_s=0.0,
    intra_bandwidth_bytes_per_s=1 * GB,
)
#: A 1-rank run's metadata saying it ran TensorFlow on 2 threads.
TWO_THREADS = {"ranks": 1, "config": {"cluster": {"threads": 2}}}


def one_rank_run(*, compute_ms=10, input_ms=0, evaluation_ms=500, nbytes=1_000_000, epochs=2, steps=8):
    """1 rank, ``epochs`` x ``steps`` steps of input + compute + allreduce, then rank 0 evaluates."""
    rows, t = [], 0
    for epoch in range(epochs):
        for i in range(steps):
            step = epoch * steps + i
            if input_ms:
                rows.append(
                    {
                        "rank": 0,
                        "phase": "input",
                        "name": "dequeue",
                        "start_ns": t,
                        "end_ns": t + input_ms * MS,
                        "step": step,
                        "epoch": epoch,
                    }
                )
                t += input_ms * MS
            rows.append(
                {
                    "rank": 0,
                    "phase": "compute",
                    "name": "train_step",
                    "start_ns": t,
                    "end_ns": t + compute_ms * MS,
                    "step": step,
                    "epoch": epoch,
                }
            )
            t += compute_ms * MS
            rows.append(
                {
                    "rank": 0,
                    "phase": "communication",
                    "name": "allreduce",
                    "start_ns": t,
                    "end_ns": t,
                    "step": step,
                    "epoch": epoch,
                    "bytes": nbytes,
                }
            )
        if evaluation_ms:
            rows.append(
                {
                    "rank": 0,
                    "phase": "evaluation",
                    "name": "evaluate",
                    "start_ns": t,
                    "end_ns": t + evaluation_ms * MS,
                    "epoch": epoch,
                }
            )
            t += evaluation_ms * MS
    return events_frame(rows)


def test_step_costs_reads_per_step_costs_bytes_and_evaluation():
    costs = pj.step_costs(one_rank_run(), {"ranks": 1}, warmup_steps=0, batch_per_rank=32)
    assert costs.steps == 16 and costs.epochs == 2 and costs.steps_per_epoch == 8
    assert costs.compute_s == pytest.approx(np.full(16, 0.010))
    assert costs.gradient_bytes == 1_000_000
    assert costs.evaluation_s == pytest.approx([0.5, 0.5]) and costs.evaluating_ranks == (0,)
    assert costs.evaluations_per_epoch == 1.0
    assert costs.wall_s == pytest.approx(16 * 0.010 + 2 * 0.5) and costs.other_s == pytest.approx(0.0, abs=1e-9)


def test_weak_scaling_shortens_epochs_and_a_serial_evaluation_weighs_more():
    costs = pj.step_costs(one_rank_run(), {"ranks": 1}, warmup_steps=0, batch_per_rank=32)
    table = pj.project(costs, [1, 4], NET, bootstrap=0).table.set_index("ranks")
    # 4 ranks: step = 10 ms + ring(1 MB, 4) = 10 + 2·3/4·1 ms = 11.5 ms; 8/4 = 2 steps per epoch + 0.5 s
    assert table.loc[4, "step_s"] == pytest.approx(0.0115)
    assert table.loc[4, "epoch_s"] == pytest.approx(2 * 0.0115 + 0.5)
    assert table.loc[1, "epoch_s"] == pytest.approx(8 * 0.010 + 0.5)
    assert table.loc[4, "speedup"] == pytest.approx(0.58 / 0.523)
    assert table.loc[4, "efficiency"] == pytest.approx(0.58 / 0.523 / 4)
    assert table.loc[4, "parallel_efficiency"] == pytest.approx(0.020 / 0.523)
    assert table.loc[4, "limiter"] == "evaluation"
    assert table.loc[4, "wall_s"] == pytest.approx(2 * 0.523)


def test_counts_below_the_measured_one_make_the_fewest_ranks_the_reference():
    """Projected down from a 2-rank run to 1 rank, the table reads from 1 rank: 1x and 100 % there (it said 106 %)."""
    costs = pj.step_costs(one_rank_run(), {"ranks": 2}, warmup_steps=0, batch_per_rank=32)
    table = pj.project(costs, [1, 2, 4], NET, bootstrap=0).table.set_index("ranks")
    assert table.loc[1, "speedup"] == pytest.approx(1.0) and table.loc[1, "efficiency"] == pytest.approx(1.0)
    for n in (2, 4):
        speedup = table.loc[n, "throughput"] / table.loc[1, "throughput"]
        assert table.loc[n, "speedup"] == pytest.approx(speedup)
        assert table.loc[n, "efficiency"] == pytest.approx(speedup / n)
    above = pj.project(costs, [2, 4], NET, bootstrap=0).table.set_index("ranks")
    assert above.loc[2, "speedup"] == pytest.approx(1.0)  # without a smaller count: the measured one, as before
    assert above.loc[4, "efficiency"] == pytest.approx(above.loc[4, "throughput"] / above.loc[2, "throughput"] / 2)


def test_whole_batches_of_each_ranks_shard_fix_the_steps_per_epoch():
    costs = pj.step_costs(one_rank_run(), {"ranks": 1}, warmup_steps=0, batch_per_rank=32)
    # 8 steps of 32 = 256 samples (say 270, the last partial batch dropped): at 3 ranks ceil(270/3) = 90
    # samples each, 2 whole batches, where sharing out the measured steps says 8/3 = 2.67
    shared = pj.project(costs, [3], NET, bootstrap=0).table.iloc[0]
    whole = pj.project(costs, [3], NET, changes=pj.Changes(epoch_samples=270), bootstrap=0).table.iloc[0]
    assert shared["epoch_s"] == pytest.approx(8 / 3 * shared["step_s"] + 0.5)
    assert whole["epoch_s"] == pytest.approx(2 * whole["step_s"] + 0.5)
    assert "whole batches of 270 samples an epoch" in pj.Changes(epoch_samples=270).describe()
    # one rank keeps its 8 steps; a shard smaller than a batch still takes one step
    assert pj.project(costs, [1], NET, changes=pj.Changes(epoch_samples=270), bootstrap=0).table.iloc[0][
        "epoch_s"
    ] == pytest.approx(8 * 0.010 + 0.5)
    tiny = pj.project(costs, [16], NET, changes=pj.Changes(epoch_samples=270), bootstrap=0).table.iloc[0]
    assert tiny["epoch_s"] == pytest.approx(tiny["step_s"] + 0.5)


def test_on_slower_cores_scales_the_cpu_work_and_not_the_network():
    costs = pj.step_costs(one_rank_run(), {"ranks": 1}, warmup_steps=0, batch_per_rank=32)
    slower = costs.on_slower_cores(1.5)
    assert slower.compute_s == pytest.approx(np.full(16, 0.015))
    assert slower.evaluation_s == pytest.approx([0.75, 0.75])
    table = pj.project(slower, [4], NET, bootstrap=0).table.set_index("ranks")
    # 4 ranks: 15 ms of compute + the same ring(1 MB, 4) = 1.5 ms; 2 steps an epoch + 0.75 s of evaluation
    assert table.loc[4, "step_s"] == pytest.approx(0.0165)
    assert table.loc[4, "wall_s"] == pytest.approx(2 * (2 * 0.0165 + 0.75))


def test_what_ifs_evaluation_interval_sharding_batch_and_fusion():
    costs = pj.step_costs(one_rank_run(), {"ranks": 1}, warmup_steps=0)
    rare = pj.project(costs, [4], NET, changes=pj.Changes(eval_interval=2), bootstrap=0).table.iloc[0]
    assert rare["evaluation_s"] == pytest.approx(0.25)
    sharded = pj.project(costs, [4], NET, changes=pj.Changes(shard_evaluation=True), bootstrap=0).table.iloc[0]
    assert sharded["evaluation_s"] == pytest.approx(0.125)
    double = pj.project(costs, [4], NET, changes=pj.Changes(batch_scale=2.0), bootstrap=0).table.iloc[0]
    assert double["step_s"] == pytest.approx(0.020 + 0.0015)  # compute doubles, bytes do not
    calls = pj.network(NET, per_call_s=1e-3)
    split = pj.project(costs, [4], calls, changes=pj.Changes(fusion_threshold_bytes=250_000), bootstrap=0)
    assert split.table.iloc[0]["step_s"] == pytest.approx(0.010 + 0.0015 + 4e-3)  # 4 calls of 250 kB


def test_strong_scaling_shrinks_each_ranks_batch():
    costs = pj.step_costs(one_rank_run(evaluation_ms=0), {"ranks": 1}, warmup_steps=0)
    row = pj.project(costs, [4], NET, kind="strong", bootstrap=0).table.iloc[0]
    assert row["step_s"] == pytest.approx(0.0025 + 0.0015)
    assert row["epoch_s"] == pytest.approx(8 * 0.004)
    assert row["speedup"] == pytest.approx(0.080 / 0.032)


def test_ranks_sharing_a_nodes_cores_slow_compute_down():
    costs = pj.step_costs(one_rank_run(evaluation_ms=0), TWO_THREADS, warmup_steps=0)
    host = HOST
    linear = pj.project(costs, [2], host, bootstrap=0).table.iloc[0]
    assert linear["step_s"] == pytest.approx(0.020 + 0.001)  # 1 thread instead of 2; ring(1 MB, 2) = 1 ms
    flat = pj.project(costs, [2], host, thread_scaling=0.0, bootstrap=0).table.iloc[0]
    assert flat["step_s"] == pytest.approx(0.010 + 0.001)


def test_horovods_background_thread_takes_its_share_of_a_busy_ranks_core_from_2_ranks_on():
    one_thread = {"ranks": 1, "config": {"cluster": {"threads": 1}}}
    events = one_rank_run(evaluation_ms=100)
    host = pj.network(HOST, horovod_thread_cores=0.35)

    def at_2(scheme="allreduce", cpu_percent=None):
        samples = None
        if cpu_percent is not None:
            times = np.linspace(0, int(events["end_ns"].max()), 20).astype(np.int64)
            samples = pd.DataFrame({"rank": 0, "time_ns": times, "cpu_percent": float(cpu_percent)})
        costs = pj.step_costs(events, one_thread, samples, warmup_steps=0)
        return pj.project(costs, [1, 2], host, changes=pj.Changes(scheme=scheme), bootstrap=0)

    table = at_2().table.set_index("ranks")
    # 1 core each at both counts: no sharing; 0.35 of the core goes to Horovod, 10 ms of compute take 10 / 0.65
    assert table.loc[1, "compute_s"] == pytest.approx(8 * 0.010)
    assert table.loc[2, "step_s"] == pytest.approx(0.010 / 0.65 + 0.001)  # ring(1 MB, 2 ranks) = 1 ms
    # evaluation keeps its speed (a rank evaluating while the others wait in the collective did, measured)
    assert table.loc[2, "evaluation_s"] == pytest.approx(0.100)
    assert any("0.35 of a core" in text for text in at_2().assumptions)
    # parameter servers: no Horovod thread
    assert at_2("ps").table.set_index("ranks").loc[2, "compute_s"] == pytest.approx(4 * 0.010)
    # a rank that kept only half its core busy has room for the thread: 0.5 <= 1 - 0.35
    assert at_2(cpu_percent=50.0).table.set_index("ranks").loc[2, "compute_s"] == pytest.approx(4 * 0.010)
    # 0.8 of the core busy: 0.8 / 0.65 of the time
    busy = at_2(cpu_percent=80.0).table.set_index("ranks").loc[2, "compute_s"]
    assert busy == pytest.approx(4 * 0.010 * 0.8 / 0.65)
    with pytest.raises(ValueError, match="horovod_thread_cores"):
        pj.network(HOST, horovod_thread_cores=-0.1)


def test_fit_network_takes_horovods_thread_cores_from_the_bench_rows():
    rows = [
        {"bytes": size, "ranks": 2, "mpi_seconds": size / GB, "horovod_seconds": size / GB + 1e-3}
        for size in (1024, 2**20, 2**22)
    ]
    assert pj.fit_network(rows).horovod_thread_cores == 0.0  # benches before it was measured
    measured = [{**row, "horovod_thread_cores": 0.3} for row in rows]
    net = pj.fit_network(measured)
    assert net.horovod_thread_cores == pytest.approx(0.3)
    assert "0.3 of a core per rank" in net.describe()


def test_an_input_bound_run_keeps_its_pipeline_period_unless_the_node_caps_it():
    costs = pj.step_costs(one_rank_run(input_ms=30, evaluation_ms=0), {"ranks": 1}, warmup_steps=0)
    assert costs.input_bound
    row = pj.project(costs, [2], NET, bootstrap=0).table.iloc[0]
    assert row["step_s"] == pytest.approx(0.040)  # the pipeline's 40 ms, not compute + allreduce
    assert row["limiter"] == "input"
    node_cap = pj.Changes(shared_input_batches_per_s=25.0)
    capped = pj.project(costs, [2], pj.network(NET, ranks_per_node=2), changes=node_cap, bootstrap=0).table.iloc[0]
    assert capped["step_s"] == pytest.approx(2 / 25)


def test_an_input_bound_runs_period_slows_with_core_sharing_only_when_its_cpu_use_says_so():
    events = one_rank_run(input_ms=30, evaluation_ms=0)
    meta = TWO_THREADS
    host = HOST

    def step_with(cpu_percent, thread_scaling=1.0):
        samples = None
        if cpu_percent is not None:
            times = np.linspace(0, int(events["end_ns"].max()), 20).astype(np.int64)
            samples = pd.DataFrame({"rank": 0, "time_ns": times, "cpu_percent": float(cpu_percent)})
        costs = pj.step_costs(events, meta, samples, warmup_steps=0)
        return pj.project(costs, [2], host, thread_scaling=thread_scaling, bootstrap=0).table.iloc[0]["step_s"]

    # readers kept 1.9 cores busy (CPU-bound): on 2 ranks each has 1 core, min(1.9, 2) / min(1.9, 1) = 1.9x
    assert step_with(190.0) == pytest.approx(0.040 * 1.9)
    # contention beyond the lost cores (thread_scaling 2): 1.9^2
    assert step_with(190.0, thread_scaling=2.0) == pytest.approx(0.040 * 1.9**2)
    # readers waiting on I/O (half a core): min(0.5, 2) / min(0.5, 1) = 1, the pipeline's 40 ms stays
    assert step_with(50.0) == pytest.approx(0.040)
    # no samples: nothing says the readers need the cores, so the period is kept (compute 20 + 1 ms is below it)
    assert step_with(None) == pytest.approx(0.040)


def test_shared_storage_is_fair_per_reader_and_capped_by_the_node_link():
    # 16 MB/s shared with 14 other jobs' readers, 1 MB per read: one reader gets 16/15 MB/s,
    # two readers on a node 2 x 16/16 = 2 MB/s together, unless the link carries only 1.5 MB/s
    storage = pj.SharedStorage(bandwidth_bytes_per_s=16e6, other_readers=14, readers_per_rank=1, bytes_per_read=1e6)
    assert storage.node_reads_per_s(1) == pytest.approx(16 / 15)
    assert storage.node_reads_per_s(2) == pytest.approx(2.0)
    capped = pj.SharedStorage(16e6, 14, 1, 1e6, node_link_bytes_per_s=1.5e6)
    assert capped.node_reads_per_s(2) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="positive bandwidth"):
        pj.SharedStorage(0.0, 14, 1, 1e6)


def test_a_shared_storage_sets_each_ranks_period_from_its_share_at_that_rank_count():
    # compute 10 ms, no measured input wait: the storage alone makes the step at 1 and 2 ranks
    costs = pj.step_costs(one_rank_run(evaluation_ms=0), TWO_THREADS, warmup_steps=0)
    host = HOST

    def steps(storage):
        changes = pj.Changes(shared_storage=storage)
        table = pj.project(costs, [1, 2], host, changes=changes, thread_scaling=0.0, bootstrap=0).table
        return table["step_s"].tolist()

    # 4 readers per rank, 16 MB/s with 12 others, 0.1 MB per read, one read per 2 steps:
    # 1 rank: 16 x 4/16 = 4 MB/s = 40 reads/s -> 1/40/2 = 12.5 ms; 2 ranks: 8 readers, 16 x 8/20 = 6.4 MB/s
    # for the node = 64 reads/s, 32 per rank -> 1/32/2 = 15.6 ms
    free = pj.SharedStorage(16e6, 12, 4, 1e5, steps_per_read=2)
    assert steps(free) == pytest.approx([1 / 40 / 2, 1 / 32 / 2])
    # tf.data-style readers run on TensorFlow's threads: 2 at 1 rank, 1 each at 2 ranks (2 cores)
    bound = pj.SharedStorage(16e6, 12, 4, 1e5, steps_per_read=2, readers_bound_by_threads=True)
    # 1 rank: 16 x 2/14 MB/s = 22.9 reads/s; 2 ranks: 2 readers, 16 x 2/14 for the node, half each
    assert steps(bound) == pytest.approx([14 / (16 * 2 * 10) / 2, 2 * 14 / (16 * 2 * 10) / 2])
    # no storage: compute (10 ms) and the allreduce (1 ms at 2 ranks) make the step
    assert steps(None) == pytest.approx([0.010, 0.011])


def test_error_bars_come_from_the_measured_step_variance():
    events = one_rank_run(evaluation_ms=0)
    steady = pj.project(pj.step_costs(events, warmup_steps=0), [8], NET, bootstrap=50).table.iloc[0]
    assert steady["step_s_low"] == pytest.approx(steady["step_s"]) == pytest.approx(steady["step_s_high"])
    noisy = events.copy()
    compute = noisy["phase"] == "compute"
    noisy.loc[compute, "end_ns"] = noisy.loc[compute, "start_ns"] + np.tile([5, 15], 8)[: compute.sum()] * MS
    row = pj.project(pj.step_costs(noisy, warmup_steps=0), [8], NET, bootstrap=200).table.iloc[0]
    assert row["step_s_low"] < row["step_s"] <= row["step_s_high"]
    # slowest of 8 ranks: 15 ms unless all 8 drew 5 ms (1/256); weak: 8 steps/epoch / 8 ranks = 1 step
    assert row["waiting_s"] == pytest.approx((5 / 256 + 15 * 255 / 256) / 1000 - 0.010)


def test_missing_data_become_notes_not_exceptions():
    empty = pj.step_costs(events_frame([{"rank": 0, "phase": "compute", "start_ns": 0, "end_ns": 0}]).iloc[:0])
    assert any("step" in note for note in empty.notes)
    result = pj.project(empty, [8], NET)
    assert result.table["step_s"].isna().all() and any("nothing to project" in n for n in result.notes)
    no_bytes = pj.step_costs(one_rank_run(nbytes=-1), warmup_steps=0)
    assert no_bytes.gradient_bytes == 0 and any("gradient bytes" in note for note in no_bytes.notes)
    assert any("1 rank" in note for note in no_bytes.notes)
    assert pj.project(no_bytes, [8], NET, bootstrap=0).table.iloc[0]["communication_s"] == 0.0


def test_projection_to_dict_is_json_ready_and_limits_sum_to_the_epoch():
    import json

    costs = pj.step_costs(one_rank_run(), warmup_steps=0)
    result = pj.project(costs, [1, 2, 8], NET, bootstrap=0)
    json.dumps(result.to_dict(), allow_nan=False)
    sums = result.limits.groupby("ranks")["seconds"].sum()
    assert sums.to_numpy() == pytest.approx(result.table.set_index("ranks")["epoch_s"].to_numpy())
    top = pj.limits_table(result)
    assert top.groupby("ranks").head(1).set_index("ranks")["limit"].to_dict()[8] == "evaluation"


# -- views, command line and bench -----------------------------------------------------------------------


def test_figures_mark_measured_points_and_stack_the_limits():
    from workbench.figures.projection import limits_figure, projection_figure

    result = pj.project(pj.step_costs(one_rank_run(), warmup_steps=0), [1, 2, 8], NET, bootstrap=10)
    measured = pd.DataFrame({"ranks": [2], "epoch_s": [0.6]})
    figure = projection_figure(result.table, measured)
    assert [trace.name for trace in figure.data].count("measured") == 1
    bars = limits_figure(result.limits)
    assert {trace.name for trace in bars.data} >= {"compute", "evaluation", "communication"}


def test_cli_parses_project_and_bench_projection():
    from workbench.cli import build_parser

    args = build_parser().parse_args(["project", "a", "b", "--ranks", "8,16", "--network", "nvlink", "--json"])
    assert args.run_dirs == ["a", "b"] and args.ranks == "8,16" and args.network == "nvlink" and args.json
    bench = build_parser().parse_args(["bench", "projection", "--json"])
    assert bench.json and bench.handler.__self__.name == "projection"
    from workbench.commands.project import parse_ranks

    assert parse_ranks("8,16,32") == [8, 16, 32]
    with pytest.raises(ValueError, match=">= 1"):
        parse_ranks("0,8")


def test_validation_summary_is_median_and_max_of_absolute_errors():
    from docsbench.projection_check import validation_summary

    table = pd.DataFrame({"error": [0.10, -0.02, 0.04, float("nan")]})
    summary = validation_summary(table)
    assert summary["median_error"] == pytest.approx(0.04) and summary["max_error"] == pytest.approx(0.10)
    assert summary["runs"] == 3 and summary["within_5_percent"] == 2


def _repeated_points(measured_each, predicted_each, repetitions=3, points=8):
    return pd.DataFrame(
        {
            "case": ["eval-frequency"] * points,
            "cluster": ["4 nodes: 0.4 core, 1gbit per node"] * points,
            "repetitions": [repetitions] * points,
            "measured_each": [list(measured_each)] * points,
            "predicted_each": [list(predicted_each)] * points,
        }
    )


def test_noise_floor_is_zero_where_repetitions_agree_and_grows_with_their_scatter():
    from docsbench.projection_check import noise_floor

    agreeing = noise_floor(_repeated_points([2.0, 2.0, 2.0], [2.4, 2.4, 2.4]), draws=500)
    assert agreeing["median_error"] == 0.0 and agreeing["max_error"] == 0.0  # a biased model is not noise
    a = 0.1
    scattered = _repeated_points([2 * math.exp(-a), 2.0, 2 * math.exp(a)], [1.0, 1.0, 1.0])
    floor = noise_floor(scattered, draws=2000)
    # the logs -a, 0, a: variance (a² + 0 + a²) / 2 = a², so a scatter of a; the predictions none
    (scatter,) = floor["scatter"].values()
    assert scatter["measured"] == pytest.approx(a) and scatter["predicted"] == 0.0
    # the median of 3 log-normal draws of scatter a is off by ~0.45a at the median; the max of 8 points more
    assert 0.2 * a < floor["median_error"] < 0.8 * a < floor["max_error"] <= floor["max_error_p95"]
    wider = noise_floor(_repeated_points([2 * math.exp(-2 * a), 2.0, 2 * math.exp(2 * a)], [1.0] * 3), draws=2000)
    assert wider["median_error"] > 1.5 * floor["median_error"]
    more_runs = noise_floor(_repeated_points([2 * math.exp(-a), 2.0, 2 * math.exp(a)], [1.0] * 3, repetitions=9))
    assert more_runs["median_error"] < floor["median_error"]  # more repetitions, medians closer to the truth


def test_overlap_hides_the_collective_behind_compute():
    costs = pj.step_costs(one_rank_run(evaluation_ms=0), warmup_steps=0)
    calls = pj.network(NET, per_call_s=1.5e-3)
    # 1.5 ms transfer + 1.5 ms per call behind at most 20 % of 10 ms = 2 ms: 1 ms stays exposed
    row = pj.project(costs, [4], calls, changes=pj.Changes(overlap=0.2), bootstrap=0).table.iloc[0]
    assert row["step_s"] == pytest.approx(0.011)
    assert row["communication_s"] + row["per_call_s"] == pytest.approx(2 * 0.001)  # 2 steps per epoch
    hidden = pj.project(costs, [4], calls, changes=pj.Changes(overlap=1.0), bootstrap=0).table.iloc[0]
    assert hidden["step_s"] == pytest.approx(0.010)
    with pytest.raises(ValueError, match="overlap"):
        pj.project(costs, [4], calls, changes=pj.Changes(overlap=1.5))


def test_shared_storage_and_a_node_cap_are_one_choice():
    storage = pj.SharedStorage(16e6, 14, 1, 1e6)
    with pytest.raises(ValueError, match="shared_storage or shared_input_batches_per_s, not both"):
        pj.Changes(shared_storage=storage, shared_input_batches_per_s=25.0)
    assert pj.Changes(shared_storage=storage).shared_storage is storage


def test_workbench_project_on_recorded_runs_prints_text_and_json(tmp_path, capsys):
    import json

    from workbench.commands.project import project_command
    from workbench.store import StreamWriter, create_run, update_run_meta

    paths = []
    for ranks in (1, 2):
        path = create_run(tmp_path, f"r{ranks}", ranks=ranks, config={"cluster": {"threads": 1, "cores": 2}})
        events = one_rank_run(steps=6)
        events = pd.concat([events.assign(rank=rank) for rank in range(ranks)], ignore_index=True)
        for rank, part in events.assign(run_id=path.name).groupby("rank"):
            StreamWriter(path, "events", int(rank)).write(part.to_dict(orient="list"))
        update_run_meta(path, status="finished")
        paths.append(str(path))
    assert project_command(paths, ranks="8,64", network_name="100g-infiniband") == 0
    text = capsys.readouterr().out
    assert "64" in text and "model built from this run" in text and "100g-infiniband" in text
    changes = pj.Changes(eval_interval=2)
    assert project_command(paths, ranks="8", network_name="nvlink", as_json=True, changes=changes) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [row["ranks"] for row in payload["projection"]] == [1, 2, 8]
    assert payload["changes"] == "evaluate every 2 epoch(s)" and len(payload["measured"]) == 2


def test_a_measured_imbalance_carries_over_to_more_ranks():
    fast, slow = one_rank_run(evaluation_ms=0), one_rank_run(compute_ms=20, evaluation_ms=0)
    events = pd.concat([fast, slow.assign(rank=1)], ignore_index=True)
    costs = pj.step_costs(events, {"ranks": 2}, warmup_steps=0)
    assert costs.load_balance == pytest.approx(15 / 20)
    row = pj.project(costs, [4], NET, bootstrap=0).table.iloc[0]
    # E[max of 4 draws from {10, 20} ms] = 10/16 + 20·15/16 = 19.4 ms < mean / LB = 20 ms; + ring(1 MB, 4) 1.5 ms
    assert row["step_s"] == pytest.approx(0.020 + 0.0015)
    assert row["load_balance"] == pytest.approx(0.75)


def test_waiting_for_input_can_count_as_lost_in_the_pop_metrics():
    costs = pj.step_costs(one_rank_run(input_ms=30, evaluation_ms=0), warmup_steps=0)
    useful = pj.project(costs, [2], NET, bootstrap=0).table.iloc[0]
    lost = pj.project(costs, [2], NET, input_is_useful=False, bootstrap=0).table.iloc[0]
    # step 40 ms: 10 ms compute + 30 ms waiting for input (the allreduce hides in the wait)
    assert useful["parallel_efficiency"] == pytest.approx(1 - 0.001 / 0.040)
    assert lost["parallel_efficiency"] == pytest.approx(0.010 / 0.040)


def test_validation_compares_medians_of_repetitions_and_keeps_each_ones_error(tmp_path):
    from docsbench.projection_check import validation_table
    from workbench.store import RunData, StreamWriter, create_run, update_run_meta

    def recorded(directory, name, ranks, threads, compute_ms):
        path = create_run(directory, name, ranks=ranks, config={"cluster": {"threads": threads}}, extra={"cores": 2})
        events = one_rank_run(compute_ms=compute_ms, steps=6)
        events = pd.concat([events.assign(rank=rank) for rank in range(ranks)], ignore_index=True)
        for rank, part in events.assign(run_id=path.name).groupby("rank"):
            StreamWriter(path, "events", int(rank)).write(part.to_dict(orient="list"))
        update_run_meta(path, status="finished")
        return str(path)

    # two repetitions of an mpi4py sweep (no Horovod costs), the 1-rank compute 10 and 12 ms, the 2-rank wall 1 and 3 s
    for repetition, (compute_ms, wall_s) in enumerate(((10, 1.0), (12, 3.0))):
        directory = tmp_path / f"sweep-1thread-r{repetition}"
        rows = [
            {"point": "n1/backend=mpi4py/k=1", "ranks": 1, "backend": "mpi4py", "wall_s": 9.9},
            {"point": "n2/backend=mpi4py/k=1", "ranks": 2, "backend": "mpi4py", "wall_s": wall_s},
        ]
        for row in rows:
            row["path"] = recorded(directory / "runs", row["point"].replace("/", "-"), row["ranks"], 1, compute_ms)
        pd.DataFrame(rows).to_parquet(directory / "runs.parquet")
    # one sweep whose 1-rank run had 2 threads
    shared = tmp_path / "sweep-shared"
    rows = [
        {"point": "n1/backend=mpi4py/k=1", "ranks": 1, "backend": "mpi4py", "wall_s": 9.9},
        {"point": "n2/backend=mpi4py/k=1", "ranks": 2, "backend": "mpi4py", "wall_s": 2.0},
    ]
    for row, threads, compute_ms in zip(rows, (2, 1), (10, 20)):  # its 2-rank run computed twice as long a step
        row["path"] = recorded(shared / "runs", row["point"].replace("/", "-"), row["ranks"], threads, compute_ms)
    pd.DataFrame(rows).to_parquet(shared / "runs.parquet")

    net = pj.network(HOST, horovod_thread_cores=0.35)
    table = validation_table(
        [("eval-frequency", str(tmp_path / "sweep-1thread*")), ("eval-frequency", str(shared))], net=net
    )
    same, other = table.iloc[0], table.iloc[1]
    assert (same["cores"], same["repetitions"], other["cores"], other["repetitions"]) == ("same", 2, "2 -> 1", 1)
    # each repetition predicted from its own 1-rank run; no Horovod thread charged to mpi4py
    predicted, model_steps = [], []
    for repetition in (0, 1):
        base = pd.read_parquet(tmp_path / f"sweep-1thread-r{repetition}" / "runs.parquet")["path"].iloc[0]
        run = RunData.load(base)
        costs = pj.step_costs(run.events, run.meta, run.memory)
        no_horovod = pj.network(net, per_call_s=0.0, horovod_thread_cores=0.0)
        model = pj.project(costs, [2], no_horovod, bootstrap=0).table.iloc[0]
        predicted.append(float(model["wall_s"]))
        model_steps.append(float(model["step_s"]))
    assert same["measured_s"] == pytest.approx(2.0) and same["measured_spread"] == pytest.approx(2.0)
    assert same["predicted_s"] == pytest.approx(np.median(predicted))
    assert same["error"] == pytest.approx(np.median(predicted) / 2.0 - 1)
    assert same["errors_each"] == pytest.approx([predicted[0] / 1.0 - 1, predicted[1] / 3.0 - 1])
    # what the model holds constant, read from both runs: a rank's compute per step, 2-rank over 1-rank
    assert same["compute_growth"] == pytest.approx(1.0) and other["compute_growth"] == pytest.approx(2.0)
    # where a step went: both ranks recorded the same steps (compute 10 and 12 ms, then an instant allreduce), so
    # no wait and no collective, and steps that never vary have no correlation; the model's parts add up to its step
    split = dict(same["measured_step_split"])
    assert math.isnan(split.pop("correlation"))
    assert split == pytest.approx({"between_s": 0.011, "wait_s": 0.0, "collective_s": 0.0})
    assert sum(same["predicted_step_split"].values()) == pytest.approx(np.median(model_steps))
    assert same["predicted_step_split"]["collective_s"] > 0  # the 1 MB allreduce on the host's network


def test_parameter_server_points_are_projected_from_the_allreduce_run_and_the_rpcs_the_ps_run_added(tmp_path):
    """A ps-vs-allreduce sweep: the PS point on 2 workers is modelled from the 1-worker allreduce run's steps, plus
    what the 1-worker PS run's step took beyond it (the pulls and pushes through the local server)."""
    from docsbench.projection_check import validation_table
    from workbench.store import StreamWriter, create_run, update_run_meta

    def recorded(name, workers):
        path = create_run(tmp_path / "runs", name, ranks=workers, config={"settings": {"batch": 4}})
        events = one_rank_run(compute_ms=500, evaluation_ms=0, nbytes=0, steps=6)
        StreamWriter(path, "events", 0).write(events.assign(run_id=path.name).to_dict(orient="list"))
        update_run_meta(path, status="finished")
        return str(path)

    common = {"data": "synthetic", "gradient_mb": 100.0}
    ps = {"scheme": "ps", "ps": 1, "placement": "round-robin", "placed_shares": [1.0]}
    rows = [
        # 4 images a step: 0.5 s with allreduce on 1 worker, 0.9 s through the PS (0.4 s of RPCs)
        {"point": "n1/scheme=allreduce/data=synthetic", "scheme": "allreduce", "workers": 1, "images_per_s": 8.0},
        {"point": "n1/scheme=ps/data=synthetic/ps=1", **ps, "workers": 1, "images_per_s": 4 / 0.9},
        # 2 workers, 8 images a round in 1.6 s
        {"point": "n2/scheme=ps/data=synthetic/ps=1", **ps, "workers": 2, "images_per_s": 8 / 1.6},
    ]
    for row in rows:
        row.update(common, path=recorded(row["point"].replace("/", "-"), row["workers"]), ps=row.get("ps", 0))
        row.setdefault("placed_shares", [])
    pd.DataFrame(rows).to_parquet(tmp_path / "runs.parquet")
    net = pj.Network("slow", latency_s=0.0, bandwidth_bytes_per_s=0.1 * GB)
    table = validation_table([("ps-vs-allreduce", str(tmp_path))], net=net)
    row = table.iloc[0]
    assert row["point"] == "n2/scheme=ps/data=synthetic/ps=1" and row["quantity"] == "step_s"
    assert row["measured_s"] == pytest.approx(1.6)
    # worker 0 steps every 0.5 s + its half of the RPCs (0.2 s), worker 1 every 0.7 s + pulling and pushing 100 MB
    # at 0.1 GB/s (2 s). Node 1 would spend 0.9 s on each of worker 0's steps and 0.2 s serving each of worker 1's:
    # 1.36 s of work a second, so both slow by that
    predicted = 2 / ((1 / 0.7 + 1 / 2.7) / (0.9 / 0.7 + 0.2 / 2.7))
    assert row["predicted_s"] == pytest.approx(predicted, rel=1e-3)
    assert row["error"] == pytest.approx(predicted / 1.6 - 1, rel=1e-3)


def test_pop_scaling_runs_are_projected_with_their_scaling_and_each_ranks_share_of_the_batch():
    """Strong scaling: a rank trains its share of the global batch (not the settings' weak-scaling "batch")."""
    from types import SimpleNamespace

    from workbench.experiment import get_case

    case = get_case("pop-scaling")
    settings = {"batch": 16, "global_batch": 32, "epoch_samples": 384}
    base = SimpleNamespace(meta={"config": {"settings": settings, "cluster": {"ranks": 1}}})
    strong = SimpleNamespace(scaling="strong", test="rank0", wall_s=11.0)
    kwargs, measured, quantity = case.projection_inputs(base, strong)
    assert (measured, quantity) == (11.0, "wall_s")
    assert kwargs == {
        "step_costs": {"batch_per_rank": 32},
        "kind": "strong",
        "shard_evaluation": False,
        "epoch_samples": 384,
    }
    two = SimpleNamespace(meta={"config": {"settings": settings, "cluster": {"ranks": 2}}})
    sharded = SimpleNamespace(scaling="strong", test="sharded", wall_s=9.0)
    assert case.projection_inputs(two, sharded)[0]["step_costs"] == {"batch_per_rank": 16}
    assert case.projection_inputs(two, sharded)[0]["shard_evaluation"] is True
    weak = SimpleNamespace(scaling="weak", test="rank0", wall_s=9.0)
    assert case.projection_inputs(two, weak)[0]["step_costs"] == {"batch_per_rank": 16}
    assert case.projection_inputs(two, weak)[0]["kind"] == "weak"


def test_a_profiled_runs_gradient_bytes_come_from_horovods_timeline_when_its_spans_carry_none():
    meta = {"timeline_gradient_bytes": 216_680, "timeline_tensor_bytes": [288, 32, 216_320, 40]}
    costs = pj.step_costs(one_rank_run(nbytes=-1), meta, warmup_steps=0)
    assert costs.gradient_bytes == 216_680 and costs.tensor_bytes == (288, 32, 216_320, 40)
    assert not any("no gradient bytes" in note for note in costs.notes)
    # bytes the spans recorded win over the timeline's; none anywhere is a note that says how to give them
    assert pj.step_costs(one_rank_run(nbytes=1000), meta, warmup_steps=0).gradient_bytes == 1000
    bare = pj.step_costs(one_rank_run(nbytes=-1), {}, warmup_steps=0)
    assert bare.gradient_bytes == 0 and any("workbench project --gradient-mb" in note for note in bare.notes)


def test_workbench_project_takes_gradient_mb_and_batch_for_a_run_that_lacks_them(tmp_path, capsys):
    import json

    from workbench.cli import main
    from workbench.store import StreamWriter, create_run, update_run_meta

    path = create_run(tmp_path, "profiled", ranks=1, config={"command": ["python", "train.py"]})
    StreamWriter(path, "events", 0).write(one_rank_run(nbytes=-1, steps=6).assign(run_id=path.name).to_dict("list"))
    update_run_meta(path, status="finished")
    assert main(["project", str(path), "--ranks", "4", "--epoch-samples", "1000"]) == 2
    assert "--epoch-samples needs the batch per rank" in capsys.readouterr().err
    argv = ["project", str(path), "--ranks", "4", "--epoch-samples", "1000", "--batch", "25", "--gradient-mb", "2"]
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["costs"]["gradient_bytes"] == 2_000_000 and payload["costs"]["batch_per_rank"] == 25
    at_four = next(row for row in payload["projection"] if row["ranks"] == 4)
    argv[argv.index("1000")] = "2000"
    assert main([*argv, "--json"]) == 0
    doubled = next(row for row in json.loads(capsys.readouterr().out)["projection"] if row["ranks"] == 4)
    # 1000 samples / 4 ranks // 25 a batch = 10 steps an epoch, 2000 samples 20: ten more steps
    assert doubled["epoch_s"] - at_four["epoch_s"] == pytest.approx(10 * at_four["step_s"])


def test_here_is_what_the_bench_measured_on_this_machine_and_reference_vm_the_documented_one(tmp_path, monkeypatch):
    """No development machine's figures as a default: ``here`` needs this machine's bench (one line without it),
    ``reference-vm`` is the documented system whose rows ship with the package."""
    import json

    from workbench.bench import allreduce
    from workbench.commands.project import resolve_network

    kept = tmp_path / "allreduce-host.json"
    monkeypatch.setattr(allreduce, "MEASURED_HERE", kept)
    with pytest.raises(ValueError, match="run `workbench bench allreduce --ranks 2`"):
        resolve_network("here")
    reference = resolve_network("reference-vm")
    assert reference.name.startswith("reference-vm") and reference.bandwidth_bytes_per_s > 0
    slower = [dict(row, mpi_seconds=row["mpi_seconds"] * 2) for row in pj.reference_vm_allreduce_rows()]
    allreduce._keep(slower)
    assert json.loads(kept.read_text())["result"] == slower
    here = resolve_network("here")
    assert here.name.startswith("here (measured on this machine)")
    assert here.bandwidth_bytes_per_s == pytest.approx(reference.bandwidth_bytes_per_s / 2, rel=0.05)
