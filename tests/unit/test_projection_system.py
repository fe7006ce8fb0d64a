"""Projection from a system description (no run): hand-computed cases, the command line, the published studies'
check."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from docsbench import seed_systems
from workbench.analysis import projection as pj

#: 1 GB/s between nodes, no latency, no Horovod cost: every collective below is computed by hand.
PLAIN = pj.Network("plain", latency_s=0.0, bandwidth_bytes_per_s=1e9, per_call_s=0.0, intra_latency_s=0.0)


def test_a_description_from_parameters_and_throughput_gives_gradient_bytes_and_step_time():
    spec = pj.system_spec(parameters=25e6, samples_per_s=128.0, batch=64, network=PLAIN)
    assert spec.gradient_bytes == 100e6
    assert spec.step_s == pytest.approx(0.5)
    half = pj.system_spec(parameters=25e6, bytes_per_parameter=2, step_s=0.5, batch=64, network=PLAIN)
    assert half.gradient_bytes == 50e6


def test_ring_allreduce_on_four_nodes_adds_its_hand_computed_seconds_to_each_step():
    # 100 MB over a 1 GB/s ring of 4: 2 * 3/4 * 0.1 s = 0.15 s after a 1 s step
    spec = pj.system_spec(gradient_bytes=100e6, step_s=1.0, batch=32, network=PLAIN)
    table = pj.project_system(spec, [1, 4]).table.set_index("ranks")
    assert table.loc[1, "step_s"] == pytest.approx(1.0)
    assert table.loc[4, "step_s"] == pytest.approx(1.15)
    assert table.loc[4, "efficiency"] == pytest.approx(1 / 1.15)
    assert table.loc[4, "throughput"] == pytest.approx(4 * 32 / 1.15)
    assert table.loc[4, "throughput"] / table.loc[1, "throughput"] == pytest.approx(4 / 1.15)


def test_devices_per_node_make_the_allreduce_hierarchical():
    # 2 nodes of 4 devices: a ring of 4 inside (10 GB/s: 2 * 3/4 * 0.01 s) then a ring of 2 nodes (2 * 1/2 * 0.1 s)
    spec = pj.system_spec(gradient_bytes=100e6, step_s=1.0, batch=32, devices_per_node=4, network=PLAIN)
    row = pj.project_system(spec, [2]).table.iloc[0]
    assert (row["ranks"], row["nodes"]) == (8, 2)
    assert row["step_s"] == pytest.approx(1.0 + 0.015 + 0.1)


def test_what_collectives_take_from_compute_applies_from_two_ranks_on():
    # compute x1.5 beside collectives: 1 s -> 1.5 s on 2 nodes, plus the ring's 2 * 1/2 * 0.1 s; 1 node untouched
    beside = replace(PLAIN, compute_factor_beside_collectives=1.5)
    spec = pj.system_spec(gradient_bytes=100e6, step_s=1.0, batch=32, network=beside)
    table = pj.project_system(spec, [1, 2]).table.set_index("ranks")
    assert table.loc[1, "step_s"] == pytest.approx(1.0)
    assert table.loc[2, "step_s"] == pytest.approx(1.5 + 0.1)
    assert any("x1.5 as long" in line for line in pj.project_system(spec, [2]).assumptions)
    with pytest.raises(ValueError, match="compute_factor_beside_collectives"):
        replace(PLAIN, compute_factor_beside_collectives=0.0)


def test_parameter_servers_with_and_without_overlap():
    # one PS per node: every node pushes and pulls 100 MB at 1 GB/s, 0.2 s; hidden entirely behind a 1 s step
    spec = pj.system_spec(gradient_bytes=100e6, step_s=1.0, batch=32, network=PLAIN)
    after = pj.project_system(spec, [4], changes=pj.Changes(scheme="ps")).table.iloc[0]
    assert after["step_s"] == pytest.approx(1.2)
    hidden = pj.project_system(spec, [4], changes=pj.Changes(scheme="ps", overlap=1.0)).table.iloc[0]
    assert hidden["step_s"] == pytest.approx(1.0)
    # one server for 4 nodes: its card carries 4 x 100 MB each way, 0.8 s
    one = pj.project_system(spec, [4], changes=pj.Changes(scheme="ps", servers=1)).table.iloc[0]
    assert one["step_s"] == pytest.approx(1.8)


def test_an_input_pipeline_slower_than_the_device_sets_the_period_and_counts_as_idle():
    spec = pj.system_spec(gradient_bytes=1e6, step_s=0.375, batch=256, input_period_s=0.75, network=PLAIN)
    row = pj.project_system(spec, [8]).table.iloc[0]
    assert row["step_s"] == pytest.approx(0.75)
    assert row["parallel_efficiency"] == pytest.approx(0.5)
    assert row["limiter"] == "input"


def test_a_serial_evaluation_per_epoch_weighs_more_as_nodes_shorten_the_epoch():
    # 1000 samples of 10 per step: 100 steps of 1 s on one device, 25 on 4; 10 s of evaluation each epoch
    spec = pj.system_spec(
        gradient_bytes=1.0, step_s=1.0, batch=10, samples_per_epoch=1000, evaluation_s=10.0, network=PLAIN
    )
    table = pj.project_system(spec, [1, 4]).table.set_index("ranks")
    assert table.loc[1, "epoch_s"] == pytest.approx(110.0, rel=1e-6)
    assert table.loc[4, "epoch_s"] == pytest.approx(35.0, rel=1e-3)
    sharded = pj.project_system(spec, [4], changes=pj.Changes(shard_evaluation=True)).table.iloc[0]
    assert sharded["epoch_s"] == pytest.approx(27.5, rel=1e-3)


def test_step_spread_makes_ranks_wait_for_the_slowest_at_scale():
    spec = pj.system_spec(gradient_bytes=1.0, step_s=1.0, batch=1, step_spread=0.2, network=PLAIN)
    table = pj.project_system(spec, [1, 2, 64]).table.set_index("ranks")
    assert table.loc[1, "waiting_s"] == pytest.approx(0.0)
    assert table.loc[2, "waiting_s"] > 0
    assert table.loc[1, "step_s"] == pytest.approx(1.0) and 1.0 < table.loc[2, "step_s"] < table.loc[64, "step_s"]
    # E[max of 64 uniform draws on [0.8, 1.2]] is close to 1.2 (64/65 of the way)
    assert table.loc[64, "step_s"] == pytest.approx(0.8 + 0.4 * 64 / 65, abs=0.01)


def test_a_description_says_what_it_lacks_and_names_its_sources():
    spec = pj.system_spec(
        parameters=1e6, step_s=0.1, batch=8, network=PLAIN, sources={"step_s": "vendor sheet"}, name="mine"
    )
    result = pj.project_system(spec, [2])
    assert any("vendor sheet" in line for line in result.assumptions)
    assert sum("plain" in line for line in result.assumptions) == 1  # the network's line once
    assert any("no training-set size" in note for note in result.notes)
    assert any("no step-to-step spread" in note for note in result.notes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch": 8, "step_s": 1.0}, "parameters or its gradient bytes"),
        ({"batch": 8, "parameters": 1e6, "gradient_bytes": 4e6, "step_s": 1.0}, "parameters or its gradient bytes"),
        ({"batch": 8, "parameters": 1e6}, "step time or its throughput"),
        ({"batch": 8, "parameters": 1e6, "samples_per_s": 0.0}, "throughput must be > 0"),
        ({"batch": 0, "parameters": 1e6, "step_s": 1.0}, "batch must be >= 1"),
        ({"batch": 8, "parameters": 1e6, "step_s": 1.0, "step_spread": 1.5}, "step_spread"),
        ({"batch": 8, "parameters": 1e6, "step_s": 1.0, "gpus": 8}, "unknown field"),
    ],
)
def test_bad_descriptions_get_one_line_naming_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pj.system_spec(**kwargs)


def test_a_mapping_from_a_file_takes_a_named_network_with_changed_fields():
    spec = pj.system_from_mapping(
        {
            "parameters": 1e6,
            "step_s": 0.2,
            "batch": 16,
            "devices_per_node": 4,
            "network": {"base": "10gbe", "bandwidth_bytes_per_s": 2e9},
        }
    )
    net = spec.resolved_network()
    assert (net.name, net.bandwidth_bytes_per_s, net.ranks_per_node) == ("10gbe", 2e9, 4)
    with pytest.raises(ValueError, match="unknown field"):
        pj.system_from_mapping({"parameters": 1, "step_s": 1, "batch": 1, "network": {"base": "10gbe", "speed": 1}})


def test_workbench_project_describes_a_system_from_flags_and_a_file(tmp_path, capsys):
    from workbench.cli import main

    code = main(["project", "--parameters", "25M", "--step-time", "1", "--batch", "32", "--nodes", "1,4", "--json"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {row["ranks"]: row for row in payload["projection"]}
    # 10 GbE: 1.1 GB/s, 25 µs, 0.5 ms per Horovod call; 100 MB is 2 calls of the 64 MiB fusion buffer, each a ring
    expected = 1.0 + 1.5 * 0.1 / 1.1 + 2 * (6 * 25e-6 + 0.5e-3)
    assert rows[4]["step_s"] == pytest.approx(expected, rel=1e-6)

    described = tmp_path / "cluster.yaml"
    described.write_text("parameters: 25M\nthroughput_note: ignored\n")
    assert main(["project", "--system", str(described), "--batch", "32", "--step-time", "1"]) == 2
    assert "unknown field(s) throughput_note" in capsys.readouterr().err

    described.write_text("parameters: 25M\nstep_s: 2.0\nbatch: 32\ndevices_per_node: 2\nnetwork: 100g-infiniband\n")
    assert main(["project", "--system", str(described), "--step-time", "1", "--nodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "1 s per step" not in text and "1e+03 ms per step of 32 samples" in text  # the flag won over the file
    assert "100g-infiniband" in text and "2 device(s) per node" in text


def test_workbench_project_describes_asynchronous_servers_beside_the_workers(capsys):
    from workbench.cli import main

    # 100 MB of gradients (25M parameters), 1 s of compute, a 0.05 GB/s link, no latency, RPCs 0.4 s of node time a
    # step; one server beside worker 0 on 4 nodes, workers stepping on their own
    flags = ["--parameters", "25M", "--step-time", "1", "--batch", "8", "--nodes", "1,4", "--latency-us", "0"]
    ps = ["--scheme", "ps", "--servers", "1", "--servers-on-workers", "--asynchronous", "--server-exchange", "0.4"]
    assert main(["project", *flags, "--bandwidth-gbs", "0.05", *ps, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {row["ranks"]: row for row in payload["projection"]}
    assert rows[1]["step_s"] == pytest.approx(1.4)  # one node: compute and both sides of the RPCs
    # 4 nodes: worker 0 steps every 1.2 s, the others every 1.2 + 2 x 2 s. Those three would pull 0.058 GB/s
    # through the server's 0.05 GB/s link: they slow to 1/6 a second each. The server's node would then work
    # 1.4/1.2 + 0.2 x 3/6 = 1.27 s a second (worker 0's steps, serving all): everyone slows by 1.27
    rates = (1 / 1.2 + 3 / 6) / (1.4 / 1.2 + 0.2 * 3 / 6)
    assert rows[4]["step_s"] == pytest.approx(4 / rates)
    assert "serves its servers' share at 0.4 s" in json.dumps(payload)
    assert main(["project", *flags, "--scheme", "ps", "--server-shares", "1,x"]) == 2
    assert "--server-shares '1,x'" in capsys.readouterr().err
    assert main(["project", *flags, "--servers-on-workers", "--asynchronous"]) == 2  # no --scheme ps
    assert "--servers-on-workers, --asynchronous describe parameter servers: add --scheme ps" in capsys.readouterr().err


def test_workbench_project_refuses_runs_and_a_system_together_and_neither(capsys):
    from workbench.cli import main

    assert main(["project"]) == 2
    assert "needs run directories, or a system" in capsys.readouterr().err
    assert main(["project", "runs/x", "--parameters", "1M", "--step-time", "1", "--batch", "1"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["project", "--system", "/nonexistent.yaml"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_band_error_is_zero_inside_and_relative_to_the_nearer_edge_outside():
    assert seed_systems._band_error(0.5, 0.4, 0.6) == 0.0
    assert seed_systems._band_error(0.5, 0.6, 0.7) == pytest.approx(0.2)
    assert seed_systems._band_error(0.8, 0.4, 0.6) == pytest.approx(-0.25)


def test_the_seeds_check_names_a_source_for_every_input_it_uses():
    systems = {**{k: s.spec for k, s in seed_systems.seed_004_systems().items()}, "001": seed_systems.seed_001_system()}
    for name, spec in systems.items():
        assert {"gradient_bytes", "step_s", "network"} <= set(spec.sources), name
    assert set(seed_systems.seed_001_system().sources) >= {"input_period_s", "samples_per_epoch"}


def test_the_seeds_check_fits_nothing_to_the_published_values(monkeypatch):
    before = seed_systems.seed_004_check()
    halved = {k: {g: v / 2 for g, v in points.items()} for k, points in seed_systems.PUBLISHED_004_EFFICIENCY.items()}
    monkeypatch.setattr(seed_systems, "PUBLISHED_004_EFFICIENCY", halved)
    after = seed_systems.seed_004_check()
    # the model's columns do not move when the published numbers do: nothing was fitted to them
    for column in ("model_no_overlap", "model_full_overlap", "servers"):
        assert after[column].tolist() == before[column].tolist()
    assert (after["published"] * 2).tolist() == pytest.approx(before["published"].tolist())


def test_the_seeds_check_reports_every_row_and_gives_a_reason_for_each_miss():
    result = seed_systems.run()
    assert result["rows"] == len(result["seed_004"]) + len(result["seed_001"]) == 10 + 6
    for row in [*result["seed_004"], *result["seed_001"]]:
        assert row["explained"] == (abs(row["error"]) <= seed_systems.EXPLAINED_WITHIN)
        assert bool(row["reason"]) == (not row["explained"])
    # the ring of nodes never concentrates PS traffic: the model's efficiency on Piz Daint does not fall with nodes
    daint = [r for r in result["seed_004"] if r["system"] == "Piz Daint"]
    assert max(r["model_no_overlap"] for r in daint) - min(r["model_no_overlap"] for r in daint) < 0.05
    text = seed_systems.format_result(result)
    assert "not explained:" in text and "inputs:" in text
    json.dumps(result)  # JSON-ready as saved by measure_readme.sh


def test_the_link_can_be_fitted_at_the_message_size_a_step_sends():
    # 2 ranks, no latency: the large messages move at 1 GB/s, but 256 KiB took 0.131 ms (inside a shaper's
    # burst, say): 2 GB/s at that size
    rows = [
        {"bytes": 65536, "ranks": 2, "mpi_seconds": 65536 / 1e9},
        {"bytes": 262144, "ranks": 2, "mpi_seconds": 262144 / 2e9},
        {"bytes": 1 << 20, "ranks": 2, "mpi_seconds": (1 << 20) / 1e9},
        {"bytes": 4 << 20, "ranks": 2, "mpi_seconds": (4 << 20) / 1e9},
    ]
    line = pj.fit_network(rows)
    assert line.bandwidth_bytes_per_s == pytest.approx(1e9, rel=1e-6)
    at = pj.fit_network(rows, at_bytes=262144)
    assert at.bandwidth_bytes_per_s == pytest.approx(2e9, rel=1e-6)
    # between two measured sizes the time is interpolated on log-log axes: 512 KiB lies halfway (in log) between
    # 256 KiB at 0.131 ms and 1 MiB at 1.05 ms, so it takes sqrt(0.131 * 1.05) ms
    half = pj.fit_network(rows, at_bytes=512 * 1024)
    seconds = (262144 / 2e9 * (1 << 20) / 1e9) ** 0.5
    assert half.bandwidth_bytes_per_s == pytest.approx(512 * 1024 / seconds, rel=1e-6)


def test_past_the_largest_measured_message_the_link_keeps_that_messages_rate():
    # 2 ranks, no latency: 1 MiB at 1 GB/s, 4 MiB at 0.5 GB/s (a shaper's burst spent). 87 MB of gradients move
    # at 4 MiB's rate, not in 4 MiB's time (which would read as a link 20x too fast)
    rows = [
        {"bytes": 1024, "ranks": 2, "mpi_seconds": 1024 / 1e9},
        {"bytes": 1 << 20, "ranks": 2, "mpi_seconds": (1 << 20) / 1e9},
        {"bytes": 4 << 20, "ranks": 2, "mpi_seconds": (4 << 20) / 0.5e9},
    ]
    assert pj.fit_network(rows, at_bytes=87e6).bandwidth_bytes_per_s == pytest.approx(0.5e9, rel=1e-6)
    # below the smallest, the smallest's rate
    assert pj.fit_network(rows, at_bytes=100).bandwidth_bytes_per_s == pytest.approx(1e9, rel=1e-6)


def test_project_a_described_model_plays_horovods_overlap_and_says_how_much_hid(capsys):
    from workbench.cli import main

    described = ["project", "--throughput", "154", "--batch", "64", "--devices-per-node", "4", "--nodes", "1,32"]
    assert main([*described, "--model", "vgg16", "--bandwidth-gbs", "2.81", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["projection"]
    # VGG-16's dense gradients come first: much of the 553 MB allreduce runs while its convolutions compute
    assert 0.3 < rows[-1]["hidden_share"] < 1.0 and rows[-1]["hidden_s"] > 0
    assert main([*described, "--model", "vgg16", "--bandwidth-gbs", "2.81"]) == 0
    text = capsys.readouterr().out
    assert "hidden behind backprop at 128 ranks" in text and "tf.keras.applications.VGG16" in text
    # without a layout the allreduce waits for the backward pass, and the projection says what to give
    assert main([*described, "--parameters", "138.4M", "--bandwidth-gbs", "2.81"]) == 0
    assert "no gradient layout" in capsys.readouterr().out
    assert main([*described, "--model", "resnet-9000"]) == 2
    assert "no such model or file" in capsys.readouterr().err
    assert main([*described, "--model", "vgg16", "--cycle-ms", "0"]) == 2
    assert "--cycle-ms" in capsys.readouterr().err


def test_the_published_check_fits_nothing_and_gives_a_reason_for_each_row_off_by_more_than_5_points(monkeypatch):
    from docsbench import published_systems

    result = published_systems.run()
    assert len(result["rows"]) == 9 and all(row["gpus"] >= 64 for row in result["rows"])
    for row in result["rows"]:
        assert bool(row["reason"]) == (abs(row["error_points"]) > published_systems.MEDIAN_GOAL_POINTS)
        assert row["explained"] == (abs(row["error_points"]) <= published_systems.MAX_GOAL_POINTS)
    for key, described in result["inputs"].items():
        assert len(described) >= 4 and all(line for line in described), key
    published = published_systems.HOROVOD_EFFICIENCY
    halved = {model: {g: v / 2 for g, v in points.items()} for model, points in published.items()}
    monkeypatch.setattr(published_systems, "HOROVOD_EFFICIENCY", halved)
    again = published_systems.run()
    # the model's columns do not move when the published numbers do: nothing was fitted to them
    for before, after in zip(result["rows"], again["rows"]):
        if before["scheme"] == "allreduce":
            assert after["model"] == before["model"] and after["hidden_share"] == before["hidden_share"]
    assert "median |error|" in published_systems.format_result(result)
    json.dumps(result)


def test_a_node_row_counts_as_nodes_of_their_share_only_where_the_quota_bound_as_on_one_node():
    from docsbench.projection_check import QUOTA_BINDING_SHARE, nodes_of_their_share, nodes_summary

    def row(bound: float, base: float = 1.0, error: float = 0.02, ranks: int = 2):
        return {"cpu_target": {"throttled_share": bound}, "cpu_base": {"throttled_share": base}, "error": error,
                "ranks": ranks}  # fmt: skip

    assert nodes_of_their_share(row(0.97)) is True
    assert nodes_of_their_share(row(QUOTA_BINDING_SHARE * 0.8, base=0.8)) is True  # the rule is relative to 1 node
    assert nodes_of_their_share(row(0.61)) is False
    assert nodes_of_their_share({"error": 0.1, "ranks": 4}) is None  # a sweep before the recorder read its CPU
    assert nodes_of_their_share(row(0.5, base=0.0)) is None  # no quota on 1 node: nothing to compare
    judged = nodes_summary([row(0.97, error=-0.04), row(0.61, error=0.2, ranks=8), row(0.2, error=0.1, ranks=4)])
    assert judged["nodes"] == {"rows": 1, "median_error": 0.04, "max_error": 0.04, "sizes": [2]}
    assert judged["not_nodes"]["rows"] == 2 and judged["not_nodes"]["sizes"] == [4, 8]
    assert judged["not_nodes"]["median_error"] == pytest.approx(0.15)
