"""``workbench profile`` on scripts whose truth is known: no invented straggler, the real one named.

The scripts are plain Horovod TF2 scripts (no workbench import), in the two common shapes: a
``tf.function`` step with ``hvd.DistributedGradientTape`` (as in Horovod's synthetic benchmark)
and Keras ``fit`` with ``hvd.DistributedOptimizer``. ``EXTRA_RANK`` sleeps ``EXTRA_S`` on the
host after every step but the last and writes the total it slept: the time the other rank must
lose waiting for it in the next allreduce, and time the profile must call waiting off the CPU.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from workbench import analysis
from workbench.analysis import projection as pj
from workbench.commands.profile import profile_command
from workbench.config import ClusterConfig
from workbench.store import RunData, list_runs

pytestmark = pytest.mark.mpi

COMMON = """
import json, os, time
import numpy as np
import tensorflow as tf
import horovod.tensorflow{keras} as hvd

hvd.init()
steps = int(os.environ["STEPS"])
extra_rank, extra_s = int(os.environ.get("EXTRA_RANK", "-1")), float(os.environ.get("EXTRA_S", "0"))
slept = 0.0

def host_work(step):
    global slept
    if hvd.rank() == extra_rank and step < steps - 1:
        start = time.perf_counter()
        time.sleep(extra_s)
        slept += time.perf_counter() - start

rng = np.random.default_rng(hvd.rank())
x = rng.random((64, 256), dtype=np.float32)
y = rng.integers(0, 10, 64)
model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(10)])
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
"""

CUSTOM_LOOP = COMMON.format(keras="") + textwrap.dedent(
    """
    opt = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def benchmark_step(first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)
        return loss

    for step in range(steps):
        benchmark_step(step == 0)
        host_work(step)
    with open(os.environ["TRUTH"] + f".{hvd.rank()}", "w") as out:
        json.dump({"slept_s": slept}, out)
    """
)

KERAS_FIT = COMMON.format(keras=".keras") + textwrap.dedent(
    """
    class HostWork(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            host_work(batch)

    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)), loss=loss_fn)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), HostWork()])
    with open(os.environ["TRUTH"] + f".{hvd.rank()}", "w") as out:
        json.dump({"slept_s": slept}, out)
    """
)

STEPS = 30
#: Well above a step (2-5 ms here): a rank that slept also computes its next step more slowly (cold
#: caches), which the others wait for too but the sleep does not count; a long sleep keeps that small.
EXTRA_S = 0.05
#: In a symmetric job, what a rank may be found to lose to the machine, as a share of the planted extra work.
NOISE_FRACTION = 0.2


def profiled(tmp_path, script: str, *, extra_rank: int = -1) -> tuple[RunData, float]:
    """Profile ``script`` on 2 ranks: the run and the seconds the extra rank slept."""
    path = tmp_path / "train.py"
    path.write_text(script)
    env = {"STEPS": str(STEPS), "EXTRA_RANK": str(extra_rank), "EXTRA_S": str(EXTRA_S), "TRUTH": str(tmp_path / "t")}
    code = profile_command(
        ["python", str(path)], ranks=2, out=tmp_path / "runs", report=False, config=ClusterConfig(n=2, env=env)
    )
    assert code == 0
    slept = sum(json.loads((tmp_path / f"t.{rank}").read_text())["slept_s"] for rank in (0, 1))
    return RunData.load(list_runs(tmp_path / "runs")["path"].iloc[0]), slept


@pytest.mark.parametrize("script", [CUSTOM_LOOP, KERAS_FIT], ids=["tf_function_loop", "keras_fit"])
def test_symmetric_job_shows_no_straggler(tmp_path, script):
    run, _slept = profiled(tmp_path, script)
    events = run.events
    for rank in (0, 1):  # steps on every rank, numbered, with the time between them classified
        steps = events[(events["rank"] == rank) & (events["name"] == "train_step")]
        assert sorted(steps["step"]) == list(range(STEPS))
        between = events[(events["rank"] == rank) & events["name"].isin(["between_calls", "off_cpu"])]
        assert len(between) >= STEPS - 2
        assert (between["phase"] == "host").sum() >= STEPS / 2  # Python between the calls is on the CPU
    assert (events["phase"] == "in_flight").sum() > 0  # Horovod's timeline, as collectives in flight
    result = analysis.analyse_run(events, run.memory, run.meta)
    print("load balance", result.pop["load_balance"], result.findings[["kind", "seconds_lost"]].to_dict("records"))
    assert result.pop["load_balance"] >= 0.95
    # nobody is named for time of the size the extra-work test plants (STEPS x EXTRA_S = 1.5 s). On a shared
    # machine one rank of a symmetric job can still lose a moment to a neighbour, and that is measured as it
    # is (a straggler of 0.15 s, load balance 0.99, was seen once): it must stay a small part of the planted time
    rest = result.findings[result.findings["kind"].isin(["load_imbalance", "straggler"])]
    assert (rest["seconds_lost"].fillna(0) < NOISE_FRACTION * STEPS * EXTRA_S).all(), rest.to_dict("records")
    assert set(result.steps["rank"]) == {0, 1} and (result.steps["steps"] == STEPS).all()
    # a job that ran to its end: no stall (the writer cut off at exit leaves the last negotiations open, which
    # is not one), nothing after the last span worth a finding
    assert not {"stalled_collective", "unrecorded_tail", "run_interrupted"} & set(result.findings["kind"])
    # the gradients' bytes from the shapes on the timeline: Dense(256) on 256 inputs and Dense(10), float32
    assert run.meta["timeline_gradient_bytes"] == 4 * (256 * 256 + 256 + 256 * 10 + 10)
    # and when each rank was ready to allreduce each of them: the projection plays Horovod's loop over that
    layout = pj.step_costs(run.events, run.meta, run.memory).gradient_layout
    assert layout is not None and len(layout.names) == 4, run.meta.get("timeline_tensors")
    assert layout.total_bytes == run.meta["timeline_gradient_bytes"] and 0 < layout.backward_share <= 1


@pytest.mark.parametrize("script", [CUSTOM_LOOP, KERAS_FIT], ids=["tf_function_loop", "keras_fit"])
def test_extra_host_work_on_one_rank_is_named_with_the_time_lost(tmp_path, script):
    run, slept = profiled(tmp_path, script, extra_rank=1)
    result = analysis.analyse_run(run.events, run.memory, run.meta)
    found = result.findings.set_index("kind")
    print("load balance", result.pop["load_balance"], "slept", slept, found[["seconds_lost", "text"]].values.tolist())
    assert "straggler" in found.index, found["text"].tolist()
    assert found.loc["straggler", "ranks"] == "1"
    assert found.loc["straggler", "seconds_lost"] == pytest.approx(slept, rel=0.2)
    assert "evidence" in found.loc["straggler", "text"]
    assert "load_imbalance" not in found.index  # time between steps, not compute: rank 1 computes no more
    # the sleep is off the CPU: waiting between calls (idle), not host work. A gap is classified whole, so
    # rank 1's Keras work between batches in the gaps that hold its sleeps is off the CPU too: on a busy
    # machine that work grows (1.86 s off the CPU for 1.47 s slept was seen), so the bound above is looser.
    # Rank 0 is off the CPU too when the machine is busy (0.41 s was seen), so rank 1's own off-CPU time, which
    # holds the sleeps, is bounded from below, and its excess over rank 0's from above
    off_cpu = run.events[run.events["name"] == "off_cpu"]
    waited = ((off_cpu["end_ns"] - off_cpu["start_ns"]) / 1e9).groupby(off_cpu["rank"]).sum()
    sleeper, other = waited.get(1, 0.0), waited.get(0, 0.0)
    assert 0.8 * slept <= sleeper and sleeper - other <= 1.6 * slept, (waited.to_dict(), slept)
    assert sleeper > other, waited.to_dict()
    assert "off the CPU between recorded calls" in found.loc["idle", "text"]
