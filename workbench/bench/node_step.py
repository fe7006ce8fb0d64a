"""One node's speed, as a fixed training step sees it: the yardstick for "each node keeps its hardware".

A small dense Keras model on one thread (the engines set TF's threads), timed after warm-up;
run on a miniature cluster's nodes at 1, 2 and 4 busy nodes, the same step must take the same
time (``tests/minicluster/test_node_hardware.py``, ``benchmarks/minicluster.py``; ``benchmarks/idle_wait.py``
times it beside ranks waiting in MPI).
"""

from __future__ import annotations

from typing import Any


def training_step() -> Any:
    """The step, built and ready to call (``step().numpy()`` runs one); the first calls trace it."""
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

    return step


def mean_step_s(seconds: float) -> float:
    """Mean wall time of the step over ``seconds``, after 20 steps of warm-up (tracing, caches)."""
    import time

    step = training_step()
    for _ in range(20):
        step().numpy()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step().numpy()
        count += 1
    return (time.perf_counter() - started) / count
