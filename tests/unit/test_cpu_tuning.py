"""The CPU-tuning case's pure parts on hand-computed examples: the plan, the sweeps' verdicts."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.cases.cpu_tuning import CASE, evaluation_fix, mpi_ab, runtime_effects
from workbench.experiment import Experiment
from workbench.formatting import format_amount as rate
from workbench.workloads.sgan import SganSettings


def row(**values) -> dict:
    base = {
        "ranks": 2,
        "intra": 1,
        "inter": 1,
        "set": "default",
        "eval": "fixed",
        "mpi": "openmpi",
        "images_per_s": 100.0,
        "ci_low": 95.0,
        "ci_high": 105.0,
        "horovod_size": 2,
        "valid": True,
        "eval_interval": 15,
        "eval_share": 0.1,
        "wall_s": 10.0,
        "train_images_per_s": 110.0,
    }
    return {**base, **values}


def test_per_epoch_evaluation_grows_with_the_ranks_and_the_fix_does_not():
    before, after = SganSettings(eval_schedule="per_epoch", eval_every=15), SganSettings(eval_every=15)
    assert [before.eval_interval(n) for n in (1, 2, 8, 32)] == [15, 7, 1, 1]
    assert [after.eval_interval(n) for n in (1, 2, 8)] == [15, 15, 15]
    with pytest.raises(ValueError, match="eval_schedule 'always' is unknown"):
        SganSettings(eval_schedule="always")


def test_the_plan_has_each_configuration_once_and_its_own_cluster_settings():
    settings = CASE.settings("reduced")
    points = CASE.points(settings, 2)
    keys = [p.key for p in points]
    assert len(keys) == len(set(keys))
    assert "n1/intra=4/inter=2/set=default/eval=fixed/mpi=openmpi" in keys  # the heatmap's corner
    assert "n2/intra=1/inter=1/set=bind-none/eval=fixed/mpi=openmpi" in keys
    assert "n2/intra=1/inter=1/set=default/eval=per_epoch/mpi=openmpi" in keys
    by_key = {p.key: p for p in points}
    none = CASE.cluster_overrides(settings, by_key["n2/intra=1/inter=1/set=bind-none/eval=fixed/mpi=openmpi"])
    assert none == {"threads_per_rank": 1, "inter_op_threads": 1, "bind_to": "none"}
    cycle = CASE.cluster_overrides(settings, by_key["n2/intra=1/inter=1/set=horovod-cycle-5ms/eval=fixed/mpi=openmpi"])
    assert cycle == {"threads_per_rank": 1, "inter_op_threads": 1, "horovod_cycle_time_ms": 5.0}
    from workbench.config import ClusterConfig

    assert ClusterConfig(n=2, **cycle).engine_environment()["HOROVOD_CYCLE_TIME"] == "5.0"
    gloo = CASE.cluster_overrides(settings, by_key["n2/intra=1/inter=1/set=default/eval=fixed/mpi=gloo"])
    assert gloo["env"] == {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}
    # points whose settings differ get clusters of their own; an env dict is part of the group's identity
    groups = Experiment(CASE, preset="reduced", ranks=2).cluster_groups(points)
    assert sum(len(group) for _, group in groups) == len(points)
    assert any(
        dict(overrides).get("env") == (("HOROVOD_CONTROLLER", "gloo"), ("HOROVOD_CPU_OPERATIONS", "gloo"))
        for (_ranks, overrides), _group in groups
    )


def test_a_setting_within_the_interval_has_no_effect_and_one_outside_has():
    table = pd.DataFrame(
        [
            row(),
            row(set="kmp-blocktime-200", images_per_s=101.0, ci_low=96.0, ci_high=106.0),
            row(set="bind-none", images_per_s=80.0, ci_low=78.0, ci_high=82.0),
        ]
    )
    effects = runtime_effects(table).set_index("set")
    assert bool(effects.loc["kmp-blocktime-200", "no_effect"]) is True
    assert bool(effects.loc["bind-none", "no_effect"]) is False
    assert effects.loc["bind-none", "change"] == pytest.approx(-0.2)


def test_mpi_ab_marks_a_controller_that_left_each_rank_alone():
    table = pd.DataFrame(
        [
            row(),
            row(mpi="mpich", images_per_s=140.0, ci_low=130.0, ci_high=150.0),
            row(mpi="gloo", images_per_s=190.0, horovod_size=1, valid=False),
        ]
    )
    ab = mpi_ab(table).set_index(["mpi", "controller"])
    assert ab.loc[("mpich", "mpi"), "images_per_s"] == 140.0
    assert bool(ab.loc[("openmpi", "gloo"), "valid"]) is False and ab.loc[("openmpi", "gloo"), "horovod_size"] == 1


def test_evaluation_fix_compares_wall_time_and_training_rate():
    table = pd.DataFrame(
        [
            row(eval="per_epoch", eval_interval=7, eval_share=0.3, wall_s=13.0, train_images_per_s=100.0),
            row(eval="fixed", eval_interval=15, eval_share=0.1, wall_s=10.0, train_images_per_s=105.0),
        ]
    )
    fix = evaluation_fix(table).iloc[0]
    assert (fix["interval_per_epoch"], fix["interval_fixed"]) == (7, 15)
    assert fix["speedup_eval_fix"] == pytest.approx(1.3)
    assert fix["train_change"] == pytest.approx(0.05)


def test_rates_read_without_exponents():
    assert [rate(v) for v in (19.666, 246.2, 2460.9)] == ["19.7", "246", "2 461"]


def test_cumulative_steps_and_the_two_speedups():
    from workbench.cases.cpu_tuning import schedule_scaling, speedup_steps
    from workbench.config import physical_cores
    from workbench.figures import rate_vs_time_figure, speedup_bars_figure

    cores = physical_cores()
    table = pd.DataFrame(
        [
            row(ranks=1, intra=4, inter=2, images_per_s=80.0),
            row(ranks=1, intra=cores, inter=1, images_per_s=100.0, train_images_per_s=110.0),
            row(ranks=1, intra=cores, inter=1, eval="per_epoch", images_per_s=100.0, train_images_per_s=110.0),
            row(ranks=2, intra=max(1, cores // 2), mpi="mpich", images_per_s=160.0),
            row(ranks=2, intra=max(1, cores // 2), images_per_s=150.0, train_images_per_s=200.0),
            row(ranks=2, intra=max(1, cores // 2), eval="per_epoch", images_per_s=120.0, train_images_per_s=198.0),
            row(ranks=2, intra=1, mpi="gloo", images_per_s=500.0, horovod_size=1, valid=False),
        ]
    )
    steps = speedup_steps(table)
    assert list(steps["images_per_s"]) == [80.0, 100.0, 160.0]  # the invalid Gloo row is never "best"
    assert steps["label"].iloc[2].endswith("mpich")
    scaling = schedule_scaling(table).set_index(["eval", "ranks"])
    assert scaling.loc[("per_epoch", 2), "train_speedup"] == pytest.approx(1.8)
    assert scaling.loc[("per_epoch", 2), "time_speedup"] == pytest.approx(1.2)  # images/s scale, time does not
    assert [bar.text for bar in speedup_bars_figure(steps).data] == [("1.00x", "1.25x", "2.00x")]
    assert len(rate_vs_time_figure(schedule_scaling(table)).data) == 4


@pytest.mark.parametrize(("size", "stages"), [(28, 2), (32, 2), (40, 3), (64, 3), (256, 5)])
def test_image_size_sets_the_models_shapes(size, stages):
    pytest.importorskip("tensorflow")
    import numpy as np

    from workbench.workloads.sgan import build_models, resized

    settings = SganSettings(image_size=size, width=4, latent=8)
    assert settings.upsamplings == stages
    generator, discriminator = build_models(settings)
    assert generator.output_shape == (None, size, size, 1)
    assert discriminator.input_shape == (None, size, size, 1) and discriminator.output_shape == (None, 10)
    digits = np.random.default_rng(0).random((3, 28, 28))
    images = resized(digits, size)
    assert images.shape == (3, size, size, 1) and images.dtype == np.float32
    if size == 28:
        np.testing.assert_array_equal(images[..., 0], digits.astype(np.float32))  # the digits as they are


def test_image_size_is_a_preset_and_a_bad_one_is_one_clear_error():
    assert CASE.presets["full"].image_size == 256  # the published study's tuning runs: 256 x 256 images
    assert CASE.presets["reduced"].image_size == CASE.presets["ci"].image_size == 28
    with pytest.raises(ValueError, match="image_size=30 is not possible: use a multiple of 4"):
        Experiment(CASE, preset="ci", image_size=30)


def test_on_nodes_the_plan_is_ranks_x_threads_per_node_at_each_count():
    from workbench.cases.cpu_tuning import parse_per_node

    assert parse_per_node("1x2, 2X1") == ((1, 2), (2, 1))
    with pytest.raises(ValueError, match="write ranks x threads per node"):
        parse_per_node("2 by 1")
    settings = CASE.settings("ci", {"nodes": (1, 2), "per_node": ((1, 2), (2, 1))})
    points = CASE.points(settings, 2)
    assert sorted((p["nodes"], p.ranks, p["intra"], p["eval"]) for p in points) == [
        (1, 1, 2, "fixed"),
        (1, 1, 2, "per_epoch"),
        (1, 2, 1, "fixed"),
        (1, 2, 1, "per_epoch"),
        (2, 2, 2, "fixed"),
        (2, 2, 2, "per_epoch"),
        (2, 4, 1, "fixed"),
        (2, 4, 1, "per_epoch"),
    ]
    two_on_one = next(p for p in points if p["nodes"] == 1 and p.ranks == 2 and p["eval"] == "fixed")
    # Slurm is asked for the point's own nodes: 2 ranks on 1 node, not spread over 2
    assert CASE.cluster_overrides(settings, two_on_one) == {"threads_per_rank": 1, "inter_op_threads": 1, "nodes": 1}
    assert CASE.places_ranks_per_node
    with pytest.raises(ValueError, match="per_node"):
        CASE.settings("ci", {"per_node": ((0, 2),)})


def node_row(nodes: int, per_node: int, threads: int, evaluation: str, images: float, train: float, wall: float):
    return row(
        on_nodes=True,
        nodes=nodes,
        ranks=nodes * per_node,
        ranks_per_node=per_node,
        intra=threads,
        eval=evaluation,
        images_per_s=images,
        ci_low=images - 1,
        ci_high=images + 1,
        train_images_per_s=train,
        wall_s=wall,
    )


def test_on_nodes_the_node_is_tuned_first_then_scaled():
    from workbench.cases.cpu_tuning import per_node_table, per_node_text, schedule_scaling

    table = pd.DataFrame(
        [
            node_row(1, 1, 2, "fixed", 40.0, 44.0, 10.0),
            node_row(1, 2, 1, "fixed", 50.0, 55.0, 8.0),  # the node's best split: 2 ranks x 1 thread
            node_row(1, 2, 1, "per_epoch", 45.0, 55.0, 9.0),
            node_row(2, 2, 1, "fixed", 95.0, 108.0, 8.4),
            node_row(2, 2, 1, "per_epoch", 63.0, 107.0, 12.9),
            node_row(2, 1, 2, "fixed", 70.0, 80.0, 11.0),
        ]
    )
    scaling = schedule_scaling(table).set_index(["eval", "nodes"])
    assert list(scaling.index) == [("fixed", 1), ("fixed", 2), ("per_epoch", 1), ("per_epoch", 2)]
    assert scaling.loc[("fixed", 2), "time_speedup"] == pytest.approx(1.9)  # 95 / 50
    assert scaling.loc[("per_epoch", 2), "train_speedup"] == pytest.approx(107 / 55)
    assert scaling.loc[("per_epoch", 2), "time_speedup"] == pytest.approx(1.4)  # 63 / 45: time does not scale
    assert scaling.loc[("fixed", 2), "ranks"] == 4
    per_node = per_node_table(table)
    assert len(per_node) == 6 and list(per_node["nodes"]) == [1, 1, 1, 2, 2, 2]
    lines = per_node_text(per_node.to_dict("records"), schedule_scaling(table).to_dict("records"))
    assert lines[0].startswith("- 1 node(s), the node's share fixed: 2 rank(s) x 1 thread(s) per node give 50")
    assert lines[0].endswith("1.25x 1 x 2.")
    assert "- 2 nodes over 1, evaluation per epoch: **1.95x** the images/s while training, 1.40x in wall time." in lines
    fix = evaluation_fix(table).set_index(["ranks", "nodes"])
    assert set(fix.index) == {(2, 1), (4, 2)}  # 2 ranks on 1 node and 4 on 2: each its own before/after
    assert fix.loc[(4, 2), "speedup_eval_fix"] == pytest.approx(12.9 / 8.4)
    assert per_node_table(pd.DataFrame([row()])).empty  # one machine: no node table


def test_a_sweep_without_a_one_rank_point_is_summarised_in_words():
    """On 2 nodes only (or any sweep from 2 ranks up) there is no one-rank baseline: said, not raised."""
    rows = pd.DataFrame(
        [
            node_row(2, 1, 1, "fixed", 95.0, 108.0, 8.4) | {"evaluations": 2, "tf_threads": 1, "accuracy": 0.5},
            node_row(2, 1, 1, "per_epoch", 63.0, 107.0, 12.9) | {"evaluations": 5, "tf_threads": 1, "accuracy": 0.5},
        ]
    ).assign(run_id="r", path="p", threads_total=4, eval_interval=[15, 7])
    settings = CASE.settings("ci", {"nodes": (2,), "per_node": ((1, 1),)})
    tables = CASE.tables(rows, {}, settings)
    summary = CASE.summary(rows, tables, settings)
    assert summary["speedup_total"] is None
    text = CASE.text({**summary, "method_text": "Method."})
    assert "no one-rank point to compare" in text and "2 rank(s) on 2 nodes: evaluating once per epoch" in text


def test_the_points_whose_threads_waited_most_and_least_for_a_core_are_named():
    from workbench.cases.cpu_tuning import cpu_wait_extremes, cpu_wait_text

    points = pd.DataFrame(
        [
            row(ranks=1, nodes=1, intra=1, images_per_s=30.0, cpu_wait_share=0.03, throttled_share=float("nan")),
            row(ranks=2, nodes=1, intra=4, images_per_s=20.0, cpu_wait_share=0.62, throttled_share=float("nan")),
            row(ranks=2, nodes=1, intra=2, images_per_s=25.0, cpu_wait_share=0.30, throttled_share=float("nan")),
            row(ranks=4, nodes=2, intra=1, images_per_s=50.0, cpu_wait_share=float("nan"), throttled_share=0.5),
        ]
    )
    extremes = cpu_wait_extremes(points)
    assert (extremes["most"]["intra"], extremes["least"]["intra"]) == (4, 1)
    (line,) = cpu_wait_text(extremes)
    assert "at 2 rank(s) x 4 intra-op x 1 inter-op thread(s) they waited 62% (20 images/s) of the time" in line
    assert line.endswith("at 1 rank(s) x 1 intra-op x 1 inter-op thread(s) 3% (30 images/s).")
    on_nodes = points.assign(nodes=2, throttled_share=[0.1, 0.9, 0.5, 0.5])
    assert (
        "on 2 nodes they waited 62% (20 images/s; the node's quota ran out in 90% of its periods)"
        in (cpu_wait_text(cpu_wait_extremes(on_nodes))[0])
    )
    # a sweep whose recorder read no waits (another OS, an older run): no line, and no column is required
    assert cpu_wait_extremes(points.assign(cpu_wait_share=float("nan"))) is None
    assert cpu_wait_extremes(points.drop(columns="cpu_wait_share")) is None and cpu_wait_text(None) == []
