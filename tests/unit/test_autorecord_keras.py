"""What ``workbench profile`` records of a script's Keras calls and ``tf.function``s, on real TF in this process.

A step is a call that trains (its graph computes gradients), whatever its shape; a Keras call is a
span around its model runs; the time between calls is host work when the main thread ran, waiting
when it did not. Every count below is what the loop in the test did.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from workbench import autorecord
from workbench.analysis.input import input_share, python_input_busy
from workbench.analysis.keras_calls import keras_call_table
from workbench.recorder import Recorder
from workbench.store import RunData, create_run

tf = pytest.importorskip("tensorflow")

LATENT = 8


def _generator() -> tf.keras.Model:
    """Dense then a transposed convolution: its forward pass is a ``Conv2DBackpropInput`` op, not a gradient."""
    return tf.keras.Sequential(
        [
            tf.keras.Input((LATENT,)),
            tf.keras.layers.Dense(4 * 4 * 2, activation="relu"),
            tf.keras.layers.Reshape((4, 4, 2)),
            tf.keras.layers.Conv2DTranspose(1, 3, strides=2, padding="same"),
        ],
        name="generator",
    )


def _discriminator() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [tf.keras.Input((8, 8, 1)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(1, activation="sigmoid")],
        name="discriminator",
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture
def recorded(tmp_path):
    """Record whatever the test runs into a one-rank run; yields a loader of its events and memory."""
    run_path = create_run(tmp_path, "autorecord", ranks=1)
    recorder = Recorder(run_path, rank=0, flush_interval_s=3600, heartbeat_interval_s=None)
    autorecord.instrument(recorder)

    def load() -> RunData:
        autorecord.close()
        return RunData.load(run_path)

    yield load
    autorecord.close()


def test_a_gan_loop_counts_only_training_calls_as_steps(recorded):
    generator, discriminator = _generator(), _discriminator()
    rng = np.random.default_rng(0)
    labels = np.ones((4, 1), np.float32)
    iterations = 6
    for _ in range(iterations):
        noise = rng.normal(size=(4, LATENT)).astype(np.float32)
        fake = generator.predict(noise, verbose=0)
        generator.predict_on_batch(noise)
        discriminator.train_on_batch(fake, labels)
        discriminator.test_on_batch(fake, labels)
        generator(noise, training=False)
    run = recorded()
    events = run.events
    steps = events[events["name"] == "train_step"]
    assert list(steps["step"]) == list(range(iterations))  # one per train_on_batch, nothing else
    assert set(steps["detail"]) == {"train_function"}
    calls = keras_call_table(events).set_index("method")
    for method in ("predict", "predict_on_batch", "train_on_batch", "test_on_batch", "call"):
        assert calls.loc[method, "calls"] == iterations, method
    assert set(calls.loc[["predict", "predict_on_batch", "call"], "model"]) == {"generator"}
    # predict's own work per call (a data adapter, callbacks) is host work predict_on_batch does not do; the
    # same model runs in both, so a loaded host slows both alike (own against model time would not hold there)
    assert calls.loc["predict", "own_s"] > calls.loc["predict_on_batch", "own_s"]
    assert (calls.loc[["predict", "predict_on_batch"], "model_s"] > 0).all()
    phases = events.groupby("name")["phase"].first()
    assert phases["keras.predict"] == "host" and phases["keras.test_on_batch"] == "evaluation"
    assert phases["keras.call"] == "compute" and phases["predict_function"] == "compute"
    assert phases["test_function"] == "evaluation"  # the model's run inside test_on_batch is evaluation too
    # one memory sample after every call, numbered per method
    samples = run.memory[run.memory["label"] == "keras.predict"]
    assert sorted(samples["iteration"]) == list(range(iterations))


def test_a_custom_step_trains_and_a_generator_function_does_not(recorded):
    generator, discriminator = _generator(), _discriminator()
    optimizer = tf.keras.optimizers.SGD(0.01)
    images = tf.zeros((4, 8, 8, 1))

    @tf.function
    def generate(noise):
        return generator(noise, training=False)

    @tf.function
    def train_step(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(discriminator(batch, training=True))
        grads = tape.gradient(loss, discriminator.trainable_variables)
        optimizer.apply_gradients(zip(grads, discriminator.trainable_variables))
        return loss

    for _ in range(4):
        generate(tf.zeros((4, LATENT)))
        train_step(images)
    events = recorded().events
    steps = events[events["name"] == "train_step"]
    assert list(steps["detail"]) == ["train_step"] * 4 and list(steps["step"]) == [0, 1, 2, 3]
    generated = events[events["name"] == "generate"]
    assert len(generated) == 4 and (generated["phase"] == "compute").all()
    assert list(generated["step"]) == [0, 1, 2, 3]  # numbered by the step they precede


def test_time_between_calls_is_host_work_on_the_cpu_and_waiting_off_it(recorded):
    discriminator = _discriminator()
    batch, labels = np.zeros((4, 8, 8, 1), np.float32), np.ones((4, 1), np.float32)
    discriminator.train_on_batch(batch, labels)  # traced: the gaps below are not tracing
    for gap in ("spin", "sleep", "spin", "sleep"):
        _spin(0.05) if gap == "spin" else time.sleep(0.05)
        discriminator.train_on_batch(batch, labels)
    events = recorded().events
    between = events[events["name"].isin(["between_calls", "off_cpu"])].sort_values("start_ns")
    assert list(between["name"]) == ["between_calls", "off_cpu", "between_calls", "off_cpu"]
    assert list(between["phase"]) == ["host", "idle", "host", "idle"]
    seconds = (between["end_ns"] - between["start_ns"]) / 1e9
    assert (seconds >= 0.05).all() and (seconds < 0.5).all()


def test_fit_counts_its_batches_and_classifies_the_time_between_them(recorded):
    discriminator = _discriminator()
    rng = np.random.default_rng(1)
    x, y = rng.random((48, 8, 8, 1), dtype=np.float32), rng.integers(0, 2, (48, 1)).astype(np.float32)

    class Sleepy(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(0.02)

    discriminator.fit(x, y, batch_size=8, epochs=2, validation_split=1 / 3, verbose=0, callbacks=[Sleepy()])
    events = recorded().events
    steps = events[events["name"] == "train_step"]
    assert list(steps["step"]) == list(range(8))  # 32 training samples / 8 = 4 batches x 2 epochs
    assert list(steps["epoch"]) == [0] * 4 + [1] * 4
    assert (events["name"] == "evaluate").sum() == 2  # validation after each epoch, as evaluation
    waits = events[events["name"] == "off_cpu"]
    assert len(waits) >= 6  # the callback's sleep between batches (7 gaps inside epochs) is off the CPU
    (fit,) = events.loc[events["name"] == "keras.fit", "phase"]
    assert fit == "host"


def _labelled_batches(count: int, seconds: float, rng: np.random.Generator):
    for _ in range(count):
        time.sleep(seconds)  # reading and decoding, off the CPU: the process's CPU samples cannot see it
        yield rng.random((8, 8, 8, 1), dtype=np.float32), np.ones((8, 1), np.float32)


class _SlowSequence(tf.keras.utils.Sequence):
    def __init__(self, batches: int, seconds: float) -> None:
        super().__init__()
        self.batches, self.seconds = batches, seconds

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int):
        time.sleep(self.seconds)
        return np.zeros((8, 8, 8, 1), np.float32), np.ones((8, 1), np.float32)


@pytest.mark.parametrize("source", ["generator", "sequence"])
def test_fit_on_a_slow_python_source_records_each_steps_wait_for_its_batch_as_input(recorded, source):
    """A generator or Sequence that takes 60 ms a batch against a step of a few ms: the steps wait for it.

    Keras pulls the source from a tf.data thread and prefetches, so each step waits what the source
    takes beyond the step's own compute. 16 steps x 60 ms is ~0.9 s of the source's time after the
    first batch; even steps of 30 ms (a loaded machine) leave 0.45 s of waiting, the bound below.
    """
    discriminator = _discriminator()
    rng = np.random.default_rng(2)
    if source == "generator":
        data = _labelled_batches(17, 0.06, rng)
        discriminator.fit(data, steps_per_epoch=8, epochs=2, verbose=0)
    else:
        discriminator.fit(_SlowSequence(8, 0.06), epochs=2, verbose=0)
    events = recorded().events
    steps = events[events["name"] == "train_step"]
    waits = events[events["name"] == "next_batch"]
    assert list(steps["step"]) == list(range(16))
    assert set(waits["phase"]) == {"input"} and len(waits) >= 8
    assert set(waits["epoch"]) == {0, 1}  # a Sequence's second epoch is a new pass: found too
    # each wait ends where its step's compute begins, inside the step
    joined = waits.merge(steps, on="step", suffixes=("_wait", "_step"))
    assert (joined["end_ns_wait"] == joined["start_ns_step"]).all()
    shares = input_share(events)
    assert shares.loc[0, "input_s"] >= 0.3
    assert shares.loc[0, "level"] == "highly input-bound"


def test_fit_on_a_fast_generator_is_not_input_bound(recorded):
    discriminator = _discriminator()
    rng = np.random.default_rng(3)
    discriminator.fit(_labelled_batches(33, 0.0, rng), steps_per_epoch=16, epochs=2, verbose=0)
    events = recorded().events
    assert (events["name"] == "train_step").sum() == 32
    assert input_share(events).loc[0, "level"] != "highly input-bound"


def test_a_scripts_own_from_generator_pipeline_is_timed_as_its_generators_busy_time(recorded):
    """A user's tf.data pipeline over a Python generator of 50 ms an element, 2 elements a batch, no prefetch.

    The step's wait is inside TF's step function, out of sight; what is seen is the generator's own time:
    at least 50 ms an element, and nearly all of the training after the first step (100 ms an element pair
    against a step of a few ms; the bound of 80 % holds for steps up to 25 ms). Evaluation's elements and
    those made while the first step traced do not count.
    """

    def examples():
        while True:
            time.sleep(0.05)
            yield np.zeros((8, 8, 1), np.float32), np.ones((1,), np.float32)

    signature = (tf.TensorSpec((8, 8, 1), tf.float32), tf.TensorSpec((1,), tf.float32))
    dataset = tf.data.Dataset.from_generator(examples, output_signature=signature).batch(2)
    discriminator = _discriminator()
    discriminator.fit(dataset, steps_per_epoch=6, epochs=1, verbose=0)
    discriminator.evaluate(dataset, steps=3, verbose=0)
    run = recorded()
    busy = python_input_busy(run.events, run.counters).set_index("rank")
    elements = int(busy.loc[0, "elements"])
    assert 10 <= elements <= 14  # 5 steps x 2 after the first (it traces), what tf.data asked ahead; not evaluate's
    assert busy.loc[0, "busy_s"] >= 0.05 * elements
    assert busy.loc[0, "busy_share"] >= 0.8
