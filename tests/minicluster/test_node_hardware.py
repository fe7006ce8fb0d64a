"""Each node keeps its hardware: the same 1-thread TensorFlow step takes the same time on 1, 2 and 4 busy nodes."""

from __future__ import annotations

import sys

import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules


def mean_step_s(seconds: float) -> float:
    """Mean wall time of a small dense training step (1 thread), over ``seconds`` after a warm-up."""
    import time

    import tensorflow as tf

    tf.random.set_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu") for _ in range(3)])
    optimizer = tf.keras.optimizers.SGD(0.01)
    x = tf.random.normal((512, 256))

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for _ in range(20):
        step().numpy()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step().numpy()
        count += 1
    return (time.perf_counter() - started) / count


def test_the_same_step_takes_the_same_time_on_1_2_and_4_nodes(mini):
    with mini.cluster(4) as cluster:
        client = cluster.client
        client[:].apply_sync(mean_step_s, 1.0)  # every rank imports TF and traces once, before any timing
        means = {}
        for busy in (1, 2, 4, 1):
            per_rank = client[list(range(busy))].apply_sync(mean_step_s, 4.0)
            means.setdefault(busy, []).append(sum(per_rank) / len(per_rank))
    flat = {busy: sum(values) / len(values) for busy, values in means.items()}
    spread = max(flat.values()) / min(flat.values()) - 1
    print(f"\nmean step (ms) by busy nodes: { {k: round(v * 1e3, 2) for k, v in flat.items()} }; spread {spread:.1%}")
    assert spread < 0.05
