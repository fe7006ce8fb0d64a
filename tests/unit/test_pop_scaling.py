"""POP-scaling case: the plan, strong vs weak batches, and the workload in one process on tiny patches."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from workbench.cases.pop_scaling import CASE
from workbench.experiment import Experiment
from workbench.store import RunData, create_run, update_run_meta
from workbench.workloads.pop_scaling import PopSettings, resnet, train_on_rank


def test_plan_scales_then_tries_each_fix_at_the_largest_count():
    keys = [p.key for p in Experiment("pop-scaling", preset="reduced", ranks=2).plan()]
    assert keys == [
        "n1/scaling=strong",
        "n1/scaling=weak",
        "n2/scaling=strong",
        "n2/scaling=weak",
        "n2/scaling=strong/test=sharded",
        "n2/scaling=strong/workers=4",
        "n2/scaling=strong/data=offline",
        "n2/scaling=strong/fusion_mb=1",
        "n2/scaling=strong/fusion_mb=128",
    ]
    ci = Experiment("pop-scaling", preset="ci", ranks=2)
    assert [p.key for p in ci.plan()] == ["n1/scaling=strong", "n2/scaling=strong", "n2/scaling=strong/test=sharded"]
    workload = ci.settings.workload(ci.plan()[-1])
    assert (workload.test_mode, workload.global_batch, workload.workers) == ("sharded", 16, 1)


def test_fusion_points_get_ranks_of_their_own():
    experiment = Experiment("pop-scaling", preset="reduced", ranks=2)
    groups = [
        (ranks, dict(overrides), [p.key for p in points])
        for (ranks, overrides), points in experiment.cluster_groups(experiment.plan())
    ]
    assert groups == [
        (1, {}, ["n1/scaling=strong", "n1/scaling=weak"]),
        (
            2,
            {},
            [
                "n2/scaling=strong",
                "n2/scaling=weak",
                "n2/scaling=strong/test=sharded",
                "n2/scaling=strong/workers=4",
                "n2/scaling=strong/data=offline",
            ],
        ),
        (2, {"horovod_fusion_threshold_bytes": 1024 * 1024}, ["n2/scaling=strong/fusion_mb=1"]),
        (2, {"horovod_fusion_threshold_bytes": 128 * 1024 * 1024}, ["n2/scaling=strong/fusion_mb=128"]),
    ]


def test_strong_scaling_shares_the_global_batch_weak_keeps_it_per_rank():
    strong = PopSettings(global_batch=256, epoch_samples=4096)
    weak = PopSettings(batch=64, epoch_samples=4096)
    assert [strong.rank_batch(n) for n in (1, 2, 4)] == [256, 128, 64]
    assert [strong.steps_per_epoch(n) for n in (1, 2, 4)] == [16, 16, 16]  # same steps, smaller batches
    assert [weak.rank_batch(n) for n in (1, 2, 4)] == [64, 64, 64]
    assert [weak.steps_per_epoch(n) for n in (1, 2, 4)] == [64, 32, 16]  # the epoch is over sooner
    with pytest.raises(ValueError, match="test_mode 'all' is unknown"):
        PopSettings(test_mode="all")


def test_resnet50_shape_is_the_seeds_family():
    model = resnet((64, 64, 12), 43, stages=(3, 4, 6, 3), width=64)
    assert model.output_shape == (None, 43)
    assert 23_000_000 < model.count_params() < 24_500_000  # the published study's ResNet-50: 23.9 M trainable


def test_workload_in_one_process_records_every_phase(tmp_path):
    path = create_run(tmp_path, "pop", ranks=1)
    settings = PopSettings(image_size=32, batch=8, epoch_samples=32, epochs=2, test_samples=16, patches=8)
    result = train_on_rank(str(path), asdict(settings))
    assert result["steps"] == 8 and len(result["history"]) == 2
    events = RunData.load(path).events
    counts = events.groupby(["phase", "name"]).size().to_dict()
    assert counts[("input", "next_batch")] == 8 and counts[("compute", "train_step")] == 8
    assert counts[("evaluation", "test")] == 2  # one sequential test phase per epoch
    update_run_meta(path, rank_results=[result])  # as the experiment runner stores them
    point = Experiment("pop-scaling", preset="ci", ranks=1).plan()[0]
    row = CASE.row(RunData.load(path), point, CASE.presets["ci"])
    assert 0 < row["test_fraction"] < 1 and row["load_balance"] == 1.0
