"""``eval_mode="sharded"`` on 2 real ranks: every rank evaluates its shard, the sums give rank 0's answer."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import pytest

from workbench.config import ClusterConfig
from workbench.store import RunData, create_run
from workbench.workloads.eval_frequency import TrainSettings

pytestmark = pytest.mark.mpi

#: Each mode in fresh processes: TF's random state is then the same, so is the trained model.
TRAIN = """
import json, sys
from workbench.workloads.eval_frequency import train_on_rank
result = train_on_rank(sys.argv[1], json.loads(sys.argv[2]))
print("RESULT " + json.dumps(result["history"]), flush=True)
"""


def _train(root, mode: str) -> tuple[list[dict], RunData]:
    settings = TrainSettings(epochs=2, eval_interval=1, eval_mode=mode, eval_passes=1, dataset_repeat=1)
    run_path = create_run(root, f"eval-{mode}", ranks=2)
    program = [sys.executable, "-c", TRAIN, str(run_path), json.dumps(asdict(settings))]
    done = ClusterConfig(n=2).launch(program, timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    histories = [json.loads(line[len("RESULT ") :]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(histories) == 2 and [] in histories  # rank 0 keeps the history, rank 1 none
    return max(histories, key=len), RunData.load(run_path)


def test_sharded_evaluation_matches_rank_0s_and_spreads_the_work(tmp_path):
    whole, whole_run = _train(tmp_path, "rank0")
    sharded, sharded_run = _train(tmp_path, "sharded")
    # the same training (same seed, same shards), evaluated two ways: the same metrics after every epoch
    assert [row["epoch"] for row in sharded] == [0, 1]
    for by_rank_0, by_shards in zip(whole, sharded, strict=True):
        for metric in ("train_accuracy", "test_accuracy", "train_loss", "test_loss"):
            assert by_shards[metric] == pytest.approx(by_rank_0[metric], rel=1e-4), metric
    # rank 0 alone evaluates in one mode; both ranks evaluate their shard in the other, once per epoch
    evaluation = whole_run.events[whole_run.events["phase"] == "evaluation"]
    assert set(evaluation["rank"]) == {0} and set(evaluation["name"]) == {"evaluate"}
    shards = sharded_run.events[sharded_run.events["phase"] == "evaluation"]
    assert shards.groupby("rank")["name"].apply(list).to_dict() == {r: ["evaluate_shard"] * 2 for r in (0, 1)}
