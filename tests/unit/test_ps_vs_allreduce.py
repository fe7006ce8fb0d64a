"""The PS-vs-allreduce case's pure parts on hand-computed examples; the PS job's failure on real processes."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from workbench.analysis import ps_load
from workbench.cases.ps_vs_allreduce import (
    CASE,
    best_configurations,
    confirmed_on_real,
    efficiency_over_repetitions,
    io_overhead_table,
    phase_per_step,
)
from workbench.workloads.ps_vs_allreduce import InceptionSettings


def test_round_robin_ignores_size_and_greedy_balances():
    sizes = [100, 1, 100, 1]  # weights, bias, weights, bias: the published study's backup slide
    assert ps_load.round_robin(sizes, 2) == [0, 1, 0, 1]
    assert ps_load.greedy(sizes, 2) == [0, 1, 1, 0]
    table = ps_load.placements(sizes, 2)
    rr = table[table["placement"] == "round-robin"].set_index("ps")
    assert rr.loc[0, "bytes"] == 200 and rr.loc[1, "bytes"] == 2
    assert rr.loc[0, "bytes_per_step"] == 400  # pulled and pushed once per worker step
    imbalance = ps_load.imbalance(table).set_index("placement")["imbalance"]
    assert imbalance["round-robin"] == pytest.approx(200 / 101)
    assert imbalance["greedy"] == pytest.approx(1.0)


def test_sharded_cuts_large_variables_over_the_tasks():
    shards = ps_load.sharded([1 << 20, 10], 2, min_shard_bytes=256 << 10)
    assert shards[0] == [(0, 1 << 19), (1, 1 << 19)]
    assert shards[1] == [(0, 10)]
    with pytest.raises(ValueError, match="at least one parameter server"):
        ps_load.round_robin([1], 0)


def test_phase_per_step_leaves_out_warmup():
    rows = []
    for rank in (0, 1):
        for step in range(3):
            base = step * 100_000_000
            rows += [
                {
                    "rank": rank,
                    "step": step,
                    "phase": "input",
                    "name": "next_batch",
                    "start_ns": base,
                    "end_ns": base + 1_000_000,
                },
                {
                    "rank": rank,
                    "step": step,
                    "phase": "compute",
                    "name": "train_step",
                    "start_ns": base,
                    "end_ns": base + 50_000_000,
                },
                {
                    "rank": rank,
                    "step": step,
                    "phase": "compute",
                    "name": "apply_gradients",
                    "start_ns": base,
                    "end_ns": base + 10_000_000,
                },
                {
                    "rank": rank,
                    "step": step,
                    "phase": "communication",
                    "name": "allreduce",
                    "start_ns": base,
                    "end_ns": base + 20_000_000,
                },
            ]
    rows[1]["end_ns"] = 10_000_000_000  # a 10 s first step (tracing) must not count
    steps = phase_per_step(pd.DataFrame(rows), warmup_steps=1)
    assert steps["compute_ms"] == pytest.approx(60.0)
    assert steps["train_step_ms"] == pytest.approx(50.0)
    assert steps["comm_ms"] == pytest.approx(20.0)
    assert steps["input_ms"] == pytest.approx(1.0)
    assert steps["comm_share"] == pytest.approx(20 / 81)


def efficiency_rows() -> pd.DataFrame:
    rows = [
        ("allreduce", "synthetic", 1, 0, "", 30.0),
        ("allreduce", "synthetic", 2, 0, "", 50.0),
        ("allreduce", "real", 2, 0, "", 40.0),
        ("ps", "synthetic", 2, 1, "round-robin", 20.0),
        ("ps", "synthetic", 2, 2, "round-robin", 25.0),
        ("ps", "real", 2, 2, "round-robin", 24.0),
        ("ps", "real", 2, 1, "round-robin", 19.0),
    ]
    frame = pd.DataFrame(rows, columns=["scheme", "data", "workers", "ps", "placement", "images_per_s"])
    return frame.assign(ci_low=frame["images_per_s"] - 1, ci_high=frame["images_per_s"] + 1)


def test_search_on_synthetic_then_confirm_on_real():
    best = best_configurations(efficiency_rows())
    ps_best = best[best["scheme"] == "ps"].iloc[0]
    assert (ps_best["workers"], ps_best["ps"]) == (2, 2)  # 25 > 20 images/s
    real = confirmed_on_real(efficiency_rows(), best)
    assert set(zip(real["scheme"], real["ps"], real["images_per_s"])) == {("allreduce", 0, 40.0), ("ps", 2, 24.0)}


def test_io_overhead_is_one_minus_real_over_synthetic():
    table = io_overhead_table(efficiency_rows()).set_index(["scheme", "ps"])
    assert table.loc[("allreduce", 0), "overhead"] == pytest.approx(1 - 40 / 50)
    assert table.loc[("ps", 2), "overhead"] == pytest.approx(1 - 24 / 25)
    assert table.loc[("ps", 1), "overhead"] == pytest.approx(1 - 19 / 20)
    assert len(io_overhead_table(efficiency_rows()[efficiency_rows()["data"] == "synthetic"])) == 0


def test_plan_searches_ps_counts_and_real_data():
    settings = CASE.settings("reduced")
    keys = [p.key for p in CASE.points(settings, 2)]
    assert "n1/scheme=allreduce/data=synthetic" in keys
    assert "n2/scheme=ps/data=real/ps=2/placement=round-robin" in keys
    assert "n2/scheme=ps/data=synthetic/ps=2/placement=sharded" in keys
    ci = [p.key for p in CASE.points(CASE.settings("ci"), 2)]
    assert not any("n1" in key and "real" in key for key in ci)
    assert CASE.stall_after_s(CASE.points(settings, 2)[1]) is None  # a PS point's engines wait by design


def test_bad_settings_are_one_clear_error():
    with pytest.raises(ValueError, match="at least 75 pixels"):
        InceptionSettings(image_size=32)
    with pytest.raises(ValueError, match="scheme 'mirrored' is unknown"):
        InceptionSettings(scheme="mirrored")


def test_a_failing_chief_is_named_with_its_log(tmp_path):
    """Real servers and a real chief: the chief cannot find images and the error quotes its log."""
    from workbench.store import create_run, read_run_meta
    from workbench.workloads.ps_job import run_job

    empty = tmp_path / "images"
    empty.mkdir()
    run_path = create_run(tmp_path / "runs", "ps", ranks=1)
    settings = InceptionSettings(
        scheme="ps", data="real", images=str(empty), warmup_steps=0, measured_steps=1, repetitions=1
    )
    with pytest.raises(RuntimeError, match=r"the chief failed .*\n(.|\n)*no JPEG or PNG files"):
        run_job(str(run_path), settings)
    assert read_run_meta(run_path)["run_id"]
    assert {p.name for p in (run_path / "ps_job").glob("*.log")} == {"ps0.log", "worker0.log", "chief.log"}
    left = subprocess.run(["pgrep", "-f", str(run_path)], capture_output=True, text=True).stdout.split()
    assert left == [], "the servers must be stopped when the chief fails"


def test_the_pull_is_the_extra_forward_backward_under_ps():
    from workbench.cases.ps_vs_allreduce import step_decomposition, step_parts_text

    runs = pd.DataFrame(
        [
            {
                "scheme": "allreduce",
                "data": "synthetic",
                "workers": 2,
                "ps": 0,
                "placement": "",
                "train_step_ms": 200.0,
                "comm_ms": 50.0,
            },
            {
                "scheme": "ps",
                "data": "synthetic",
                "workers": 2,
                "ps": 1,
                "placement": "round-robin",
                "train_step_ms": 320.0,
                "comm_ms": 90.0,
            },
            {
                "scheme": "ps",
                "data": "synthetic",
                "workers": 2,
                "ps": 2,
                "placement": "round-robin",
                "train_step_ms": 260.0,
                "comm_ms": 70.0,
            },
        ]
    )
    best = pd.DataFrame([{"scheme": "ps", "workers": 2, "ps": 2, "placement": "round-robin"}])
    row = step_decomposition(runs, best).iloc[0]
    assert (row["ps"], row["pull_ms"], row["push_ms"]) == (2, 60.0, 70.0)
    assert "~60 ms reading the variables" in step_parts_text(row)
    faster = step_parts_text({**row.to_dict(), "ps_compute_ms": 190.0, "pull_ms": 0.0})
    assert "does not show in this measurement" in faster


def test_bytes_on_each_link_per_step_by_scheme_hand_computed():
    from workbench.analysis.ps_load import link_bytes_per_step

    # one PS on node 0 of 4: it serves 3 remote workers; the others pull and push everything
    assert link_bytes_per_step("ps", 4, 100.0, [1.0]) == pytest.approx([300, 100, 100, 100])
    # two PS tasks, 60/40: node 0 serves 3 x 60 and its worker fetches the 40 on node 1; node 1 the reverse
    assert link_bytes_per_step("ps", 4, 100.0, [0.6, 0.4]) == pytest.approx([220, 180, 100, 100])
    # two workers: whatever the split, each link carries one copy each way
    assert link_bytes_per_step("ps", 2, 100.0, [0.5, 0.25, 0.25]) == pytest.approx([100, 100])
    assert link_bytes_per_step("ps", 1, 100.0, [1.0]) == pytest.approx([0])
    assert link_bytes_per_step("allreduce", 4, 100.0) == pytest.approx([150] * 4)  # 2G(W-1)/W
    # the worker beside the PS ran 9 of 24 steps: the PS's link carries the other 15, 2.5 mean steps' worth
    assert link_bytes_per_step("ps", 4, 100.0, [1.0], [9, 6, 4, 5]) == pytest.approx([250, 100, 400 / 6, 500 / 6])
    with pytest.raises(ValueError, match="one count per worker"):
        link_bytes_per_step("ps", 4, 100.0, [1.0], [9, 6])
    with pytest.raises(ValueError, match="needs each PS task's share"):
        link_bytes_per_step("ps", 2, 100.0)


def test_each_ps_tasks_share_of_the_trainable_bytes():
    from workbench.cases.ps_vs_allreduce import placed_shares

    placement = [
        {"ps": 0, "bytes": 300, "trainable": True},
        {"ps": 1, "bytes": 100, "trainable": True},
        {"ps": 1, "bytes": 999, "trainable": False},  # moving statistics: no gradient is pushed for them
    ]
    assert placed_shares(placement, 2) == [0.75, 0.25]
    assert placed_shares([], 0) == []


def test_round_robin_is_what_tensorflow_dealt_where_a_run_recorded_it():
    from workbench.analysis.ps_load import imbalance, placements

    sizes = [10, 1, 10, 1]
    computed = placements(sizes, 2).set_index(["placement", "ps"])
    assert computed.loc[("round-robin", 0), "bytes"] == 20  # i mod 2 over these four
    # TensorFlow dealt the moving statistics between them too: each kernel landed on task 0
    dealt = placements(sizes, 2, dealt=[0, 1, 0, 1]).set_index(["placement", "ps"])
    assert dealt.loc[("round-robin", 0), "bytes"] == 20 and dealt.loc[("round-robin", 1), "bytes"] == 2
    spread = placements(sizes, 2, dealt=[0, 0, 1, 1])
    assert imbalance(spread).set_index("placement").loc["round-robin", "imbalance"] == pytest.approx(1.0)


def test_each_rank_starts_its_worker_and_its_share_of_the_ps_tasks():
    from workbench.workloads.ps_job import cluster_spec, roles_of_rank

    assert [roles_of_rank(rank, 2, 3) for rank in (0, 1)] == [
        [("worker", 0), ("ps", 0), ("ps", 2)],
        [("worker", 1), ("ps", 1)],
    ]
    assert roles_of_rank(3, 4, 1) == [("worker", 3)]  # one PS task: on rank 0's host only
    placed = [
        {"address": "10.0.0.11", "roles": roles_of_rank(0, 2, 3), "ports": [7000, 7001, 7002, 7003]},
        {"address": "10.0.0.12", "roles": roles_of_rank(1, 2, 3), "ports": [8000, 8001]},
    ]
    assert cluster_spec(placed) == {
        "chief": ["10.0.0.11:7003"],  # rank 0's last port
        "worker": ["10.0.0.11:7000", "10.0.0.12:8000"],
        "ps": ["10.0.0.11:7001", "10.0.0.12:8001", "10.0.0.11:7002"],
    }


def test_the_busiest_host_counts_the_threads_of_every_process_started_there():
    from workbench.cases.ps_vs_allreduce import busiest_host

    # two nodes: rank 0 runs its worker (1 thread), a PS task and the chief; rank 1 its worker alone
    on_nodes = [
        {"rank": 0, "host": "node1", "cores": 1, "threads_here": 3},
        {"rank": 1, "host": "node2", "cores": 1, "threads_here": 1},
    ]
    assert busiest_host(on_nodes) == {"threads_busiest_host": 3, "cores_per_host": 1, "hosts": 2}
    one_machine = [{**r, "host": "vm", "cores": 2} for r in on_nodes]
    assert busiest_host(one_machine) == {"threads_busiest_host": 4, "cores_per_host": 2, "hosts": 1}


def test_efficiency_over_repeated_sweeps_hand_computed():
    def summary(allreduce_2: float, ps_2: float) -> dict:
        rows = [
            {"scheme": "allreduce", "data": "synthetic", "ps": 0, "placement": "", "workers": 1, "images_per_s": 8.0,
             "efficiency": 1.0},
            {"scheme": "allreduce", "data": "synthetic", "ps": 0, "placement": "", "workers": 2,
             "images_per_s": allreduce_2, "efficiency": allreduce_2 / 16},
            {"scheme": "ps", "data": "synthetic", "ps": 1, "placement": "round-robin", "workers": 2,
             "images_per_s": ps_2, "efficiency": None},
            {"scheme": "ps", "data": "real", "ps": 1, "placement": "round-robin", "workers": 2, "images_per_s": 1.0,
             "efficiency": 1.0},
        ]  # fmt: skip
        return {"model": {"batch_per_worker": 4}, "efficiency": rows}

    slow_sweeps = [("slow", summary(8.0, 4.0)), ("slow", summary(4.0, 2.0)), ("slow", summary(16.0, 2.0))]
    table = efficiency_over_repetitions([*slow_sweeps, ("fast", summary(12.0, 6.0))])
    # sorted by cluster, then workers, allreduce first; real data left out
    assert list(zip(table["cluster"], table["workers"], table["scheme"])) == [
        ("fast", 1, "allreduce"), ("fast", 2, "allreduce"), ("fast", 2, "ps"),
        ("slow", 1, "allreduce"), ("slow", 2, "allreduce"), ("slow", 2, "ps"),
    ]  # fmt: skip
    slow = table[table["cluster"] == "slow"].set_index(["scheme", "workers"])
    allreduce = slow.loc[("allreduce", 2)]
    assert allreduce["repetitions"] == 3
    assert allreduce["efficiency_each"] == [0.5, 0.25, 1.0] and allreduce["efficiency"] == 0.5
    # a round: 2 workers x 4 images / images per second
    assert allreduce["round_s_each"] == [1.0, 2.0, 0.5] and allreduce["round_s"] == 1.0
    ps = slow.loc[("ps", 2)]
    assert pd.isna(ps["efficiency"]) and ps["efficiency_each"] == []  # no 1-worker PS run to be efficient against
    assert ps["round_s_each"] == [2.0, 4.0, 4.0] and (ps["round_s_min"], ps["round_s_max"]) == (2.0, 4.0)
    # against the same sweep's allreduce: 8/4, 4/2, 16/2
    assert ps["over_allreduce_each"] == [2.0, 2.0, 8.0] and ps["over_allreduce"] == 2.0
    assert efficiency_over_repetitions([]).empty


def test_the_ps_jobs_ports_differ_and_lie_below_the_ephemeral_range():
    """Outgoing connections take ports from the kernel's ephemeral range: a server's port there could be gone."""
    import socket

    from workbench.workloads.ps_job import LOWEST_PORT, _ephemeral_ports_start, free_ports

    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(LOWEST_PORT <= port < _ephemeral_ports_start() for port in ports), ports
    for port in ports:  # each still free to listen on
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
