"""Recording overhead on a real training loop: throughput with and without the recorder.

The same MNIST-shaped Keras model (784 → 128 → 10, batch 64) and the same compiled train step
run in one process, plain and recorded alternately, several repetitions, so that machine noise
hits both sides alike. Recorded means what a user gets: a span per step, the wait for every
batch through ``wrap_iterator``, memory sampled every 0.25 s and a flush every 0.5 s in the
background. overhead_ratio = recorded / plain throughput (1.0 = free).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any


def _model_and_step(batch: int) -> tuple[Any, Any, Any]:
    import numpy as np
    import tensorflow as tf

    tf.random.set_seed(0)
    model = tf.keras.Sequential(
        [tf.keras.Input((784,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
    )
    optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    rng = np.random.default_rng(0)
    x = rng.random((batch * 32, 784), dtype=np.float32)
    y = rng.integers(0, 10, batch * 32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat().prefetch(2)
    return train_step, dataset, model


def run(repetitions: int = 5, steps: int = 200, batch: int = 64, warmup: int = 10) -> dict[str, Any]:
    from workbench.recorder import Recorder
    from workbench.store import create_run

    train_step, dataset, _model = _model_and_step(batch)
    iterator = iter(dataset)
    for _ in range(warmup):
        train_step(*next(iterator))

    def plain() -> float:
        batches = iter(dataset)
        start = time.perf_counter()
        for _ in range(steps):
            x, y = next(batches)
            train_step(x, y)
        return steps / (time.perf_counter() - start)

    def recorded(recorder: Recorder) -> float:
        batches = recorder.wrap_iterator(dataset)
        start = time.perf_counter()
        for step in range(steps):
            recorder.step = step
            x, y = next(batches)
            with recorder.phase("compute", "train_step"):
                train_step(x, y)
        return steps / (time.perf_counter() - start)

    plain_rates, recorded_rates = [], []
    with tempfile.TemporaryDirectory() as root:
        recorder = Recorder(create_run(root, "overhead", ranks=1), rank=0, memory_interval_s=0.25)
        try:
            for repetition in range(repetitions):
                # alternate the order so neither side always runs on a warmer machine
                if repetition % 2 == 0:
                    plain_rates.append(plain())
                    recorded_rates.append(recorded(recorder))
                else:
                    recorded_rates.append(recorded(recorder))
                    plain_rates.append(plain())
        finally:
            recorder.close()
    plain_mean, recorded_mean = statistics.fmean(plain_rates), statistics.fmean(recorded_rates)
    return {
        "steps_per_s_plain": plain_mean,
        "steps_per_s_recorded": recorded_mean,
        "overhead_ratio": recorded_mean / plain_mean,
        "per_repetition_ratio": [r / p for r, p in zip(recorded_rates, plain_rates)],
        "repetitions": repetitions,
        "steps": steps,
        "batch": batch,
    }


def format_result(result: dict[str, Any]) -> str:
    return (
        f"plain    {result['steps_per_s_plain']:8.1f} steps/s\n"
        f"recorded {result['steps_per_s_recorded']:8.1f} steps/s\n"
        f"overhead ratio (recorded/plain) {result['overhead_ratio']:.4f} over {result['repetitions']} repetitions"
    )
