"""A plain Horovod TF2 training script, written as Horovod's examples write one; its last rank is slow.

Usage: python train_slow_rank.py STEPS SLOW_MS. Before each step the last rank sleeps SLOW_MS (as if its data
came late), so every other rank waits about SLOW_MS at each step's allreduce: the truth a profile must find.
"""

import sys
import time

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

steps, slow_ms = int(sys.argv[1]), float(sys.argv[2])
hvd.init()
gpus = tf.config.experimental.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

rng = np.random.default_rng(hvd.rank())
images = rng.random((32, 784), dtype=np.float32)
labels = rng.integers(0, 10, 32)
model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
loss = tf.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.optimizers.Adam(0.001 * hvd.size())


@tf.function
def training_step(x, y, first_batch):
    with tf.GradientTape() as tape:
        value = loss(y, model(x, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(value, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        # Keras 2.11+: a property (Horovod's older examples call it)
        variables = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
        hvd.broadcast_variables(variables, root_rank=0)
    return value


slow = hvd.rank() == hvd.size() - 1
for step in range(steps):
    if slow:
        time.sleep(slow_ms / 1000)
    value = training_step(images, labels, step == 0)
if hvd.rank() == 0:
    print(f"trained {steps} steps on {hvd.size()} ranks, loss {float(value):.3f}")
