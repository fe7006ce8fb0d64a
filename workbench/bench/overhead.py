"""Recording overhead on a real training loop: throughput with and without the recorder.

The same MNIST-shaped Keras model (784 → 128 → 10, batch 64) and the same compiled train step
run in one process, plain and recorded in short alternating blocks, so that machine noise hits
both sides alike; the hot path (one span and one input wait per step) is also timed alone.
Recorded means what a user gets: a span per step, the wait for every
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


def hot_path_ns(recorder: Any, calls: int = 20_000) -> float:
    """ns the recorder adds to one training step: one span plus one input wait, timed in a tight loop."""
    items = iter(range(calls + 1))
    batches = recorder.wrap_iterator(items)
    start = time.perf_counter_ns()
    for step in range(calls):
        recorder.step = step
        next(batches)
        with recorder.phase("compute", "train_step"):
            pass
    return (time.perf_counter_ns() - start) / calls


def background_cost_share(recorder: Any, steps_per_s: float, trials: int = 15) -> float:
    """Share of a second the background thread needs: one flush per interval, memory samples.

    A flush writes the rows of one interval (a span and an input wait per step); measured as the
    median of ``trials`` flushes of that many rows.
    """
    rows = max(1, int(steps_per_s * recorder.flush_interval_s))
    flushes = []
    for _ in range(trials):
        for step in range(rows):
            recorder.record("compute", step, step + 1, "train_step")
            recorder.record("input", step, step + 1, "next_batch")
        start = time.perf_counter()
        recorder.flush()
        flushes.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(100):
        recorder.sample_memory()
    sample_s = (time.perf_counter() - start) / 100
    memory_interval = recorder._memory_interval_s or 0.0
    return statistics.median(flushes) / recorder.flush_interval_s + (
        sample_s / memory_interval if memory_interval else 0.0
    )


def run(repetitions: int = 20, steps: int = 100, batch: int = 64, warmup: int = 20) -> dict[str, Any]:
    """Interleaved blocks (plain, recorded, recorded, plain, ...): the median of paired ratios.

    Short blocks alternated in ABBA order put plain and recorded steps side by side in time, so
    the machine's drift cancels; the median ignores blocks hit by a neighbour's burst.
    """
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
                if repetition % 2 == 0:
                    plain_rates.append(plain())
                    recorded_rates.append(recorded(recorder))
                else:
                    recorded_rates.append(recorded(recorder))
                    plain_rates.append(plain())
            per_step_ns = hot_path_ns(recorder)
            background_share = background_cost_share(recorder, statistics.median(plain_rates))
        finally:
            recorder.close()
    ratios = sorted(r / p for r, p in zip(recorded_rates, plain_rates))
    plain_median = statistics.median(plain_rates)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    return {
        "steps_per_s_plain": plain_median,
        "steps_per_s_recorded": statistics.median(recorded_rates),
        "overhead_ratio": statistics.median(ratios),
        "overhead_ratio_quartiles": [quartiles[0], quartiles[2]],
        "hot_path_ns_per_step": per_step_ns,
        "hot_path_bound_ratio": 1.0 / (1.0 + per_step_ns * 1e-9 * plain_median),
        "background_cpu_share": background_share,
        "analytic_ratio": 1.0 / (1.0 + per_step_ns * 1e-9 * plain_median + background_share),
        "repetitions": repetitions,
        "steps": steps,
        "batch": batch,
    }


def format_result(result: dict[str, Any]) -> str:
    return (
        f"plain    {result['steps_per_s_plain']:8.1f} steps/s\n"
        f"recorded {result['steps_per_s_recorded']:8.1f} steps/s\n"
        f"overhead ratio (recorded/plain, median of {result['repetitions']} paired blocks) "
        f"{result['overhead_ratio']:.4f}, quartiles {result['overhead_ratio_quartiles'][0]:.3f}-"
        f"{result['overhead_ratio_quartiles'][1]:.3f}\n"
        f"hot path {result['hot_path_ns_per_step']:.0f} ns per step, background thread "
        f"{100 * result['background_cpu_share']:.2f}% of a second: analytic ratio {result['analytic_ratio']:.4f}"
    )
