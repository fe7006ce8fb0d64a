"""``workbench profile`` on the published study's own pattern: a Horovod GAN loop calling Keras ``predict``
every iteration.

The script (``user_scripts/gan.py``) is written as a user writes it and times its own Keras calls:
that is the truth each number here is checked against. Profiled once with ``predict`` and once with
``predict_on_batch`` (keeping every generated batch, a known 100 KB per call that memory must grow by).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from workbench import analysis
from workbench.analysis.keras_calls import keras_call_table
from workbench.commands.profile import profile_command
from workbench.config import ClusterConfig
from workbench.store import RunData, list_runs

pytestmark = pytest.mark.mpi

SCRIPT = Path(__file__).parent / "user_scripts" / "gan.py"
ITERATIONS = 80


def profiled(tmp_path: Path, *args: str) -> tuple[RunData, analysis.RunAnalysis, list[dict]]:
    """Profile the GAN on 2 ranks: the run, its analysis and each rank's own timings."""
    truth = tmp_path / "truth"
    command = [sys.executable, str(SCRIPT), "--iterations", str(ITERATIONS), "--truth", str(truth), *args]
    assert profile_command(command, ranks=2, out=tmp_path / "runs", report=False, config=ClusterConfig(n=2)) == 0
    run = RunData.load(list_runs(tmp_path / "runs")["path"].iloc[0])
    result = analysis.analyse_run(run.events, run.memory, run.meta)
    print(result.findings[["kind", "seconds_lost", "text"]].to_dict("records"))
    return run, result, [json.loads(Path(f"{truth}.{rank}").read_text()) for rank in (0, 1)]


def unexplained_idle_share(run: RunData, result: analysis.RunAnalysis) -> float:
    """The largest share of wall time any rank spent in no recorded span (idle that is not off the CPU)."""
    idle = result.breakdown[result.breakdown["phase"] == "idle"].set_index("rank")["seconds"]
    off_cpu = run.events[run.events["name"] == "off_cpu"]
    waited = ((off_cpu["end_ns"] - off_cpu["start_ns"]) / 1e9).groupby(off_cpu["rank"]).sum()
    return float((idle - waited.reindex(idle.index, fill_value=0.0)).max() / result.pop["runtime_s"])


def test_predict_in_the_loop_is_named_with_its_cost_per_call(tmp_path):
    run, result, truth = profiled(tmp_path, "--predict", "predict")
    assert (result.steps["steps"] == ITERATIONS).all()  # train_on_batch only: predict is no step
    assert unexplained_idle_share(run, result) < 0.05
    calls = keras_call_table(run.events).set_index(["rank", "method"])
    for rank in (0, 1):
        assert calls.loc[(rank, "predict"), "calls"] == ITERATIONS
        assert calls.loc[(rank, "predict"), "seconds"] == pytest.approx(truth[rank]["predict_s"], rel=0.1)
        assert calls.loc[(rank, "train_on_batch"), "seconds"] == pytest.approx(truth[rank]["train_s"], rel=0.1)
    found = result.findings.set_index("kind")
    assert "keras_call" in found.index
    text = found.loc["keras_call", "text"]
    predict_s = sum(rank["predict_s"] for rank in truth) / 2
    stated_s = float(text.split("calls take ")[1].split(" s per rank")[0])
    assert stated_s == pytest.approx(predict_s, rel=0.1)
    per_call_ms = float(text.split("of wall), ")[1].split(" ms per call")[0])
    assert per_call_ms == pytest.approx(1e3 * predict_s / ITERATIONS, rel=0.1)
    assert text.startswith(f"Keras predict of generator: {ITERATIONS} calls") and "predict_on_batch(x)" in text
    # predict's own work is host work in the breakdown, not idle: it is at least the finding's loss
    host = result.breakdown[result.breakdown["phase"] == "host"].set_index("rank")["seconds"]
    assert (host >= 0.9 * found.loc["keras_call", "seconds_lost"]).all()
    memory = found.loc["memory_growth", "text"]
    assert memory.startswith(("memory grows", "memory does not grow", "memory per call", "memory still settling"))
    assert "predict call" in memory or "predict, too few" in memory


def test_predict_on_batch_is_no_step_and_kept_outputs_are_the_memory_growth(tmp_path):
    run, result, truth = profiled(tmp_path, "--predict", "predict_on_batch", "--keep")
    assert (result.steps["steps"] == ITERATIONS).all()  # not 2 x: predict_on_batch computes no gradients
    assert unexplained_idle_share(run, result) < 0.05
    calls = keras_call_table(run.events).set_index(["rank", "method"])
    for rank in (0, 1):
        assert calls.loc[(rank, "predict_on_batch"), "calls"] == ITERATIONS
        assert calls.loc[(rank, "predict_on_batch"), "seconds"] == pytest.approx(truth[rank]["predict_s"], rel=0.15)
    found = result.findings.set_index("kind")
    assert not any(text.startswith("Keras predict of") for text in result.findings["text"])
    memory = found.loc["memory_growth", "text"]
    kept_mb = truth[0]["kept_bytes_per_call"] / 1e6  # 32 x 28 x 28 x 4 bytes: 0.1 MB per call
    assert memory.startswith("memory grows with the calls:"), memory
    slope = float(memory.split("calls: ")[1].split(" MB per")[0])
    # the kept batch, plus what TF and the allocators keep per call: ~0.01 MB in most runs, 0.12 MB once here
    assert kept_mb <= slope < 3 * kept_mb
