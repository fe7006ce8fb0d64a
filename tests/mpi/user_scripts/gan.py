"""A GAN trained the way the published study's S-GAN was: a Horovod-wrapped Keras discriminator, a generator's
predictions on fresh noise every iteration. Written as a user writes it: no workbench import.

    mpiexec -n 2 python gan.py --iterations 400 --predict predict
    mpiexec -n 2 python gan.py --iterations 400 --predict predict_on_batch --keep

It times its own Keras calls with perf_counter and writes them to ``--truth`` (one file per rank):
what a profiler should find.
"""

import argparse
import json
import time

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf
from horovod.tensorflow import broadcast_variables

parser = argparse.ArgumentParser()
parser.add_argument("--iterations", type=int, default=400)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--latent", type=int, default=64)
parser.add_argument("--predict", choices=["predict", "predict_on_batch"], default="predict")
parser.add_argument("--keep", action="store_true", help="keep every generated batch (for a figure at the end)")
parser.add_argument("--truth", default="")
args = parser.parse_args()

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

generator = tf.keras.Sequential(
    [
        tf.keras.layers.Dense(7 * 7 * 16, activation="relu", input_shape=(args.latent,)),
        tf.keras.layers.Reshape((7, 7, 16)),
        tf.keras.layers.Conv2DTranspose(16, 4, strides=2, padding="same", activation="relu"),
        tf.keras.layers.Conv2DTranspose(1, 4, strides=2, padding="same", activation="tanh"),
    ],
    name="generator",
)
discriminator = tf.keras.Sequential(
    [
        tf.keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu", input_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(1, activation="sigmoid"),
    ],
    name="discriminator",
)
optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.0002 * hvd.size()))
discriminator.compile(optimizer=optimizer, loss="binary_crossentropy")

rng = np.random.default_rng(hvd.rank())
real_images = rng.uniform(-1, 1, (1024, 28, 28, 1)).astype("float32")
labels = np.concatenate([np.ones((args.batch, 1)), np.zeros((args.batch, 1))]).astype("float32")
generate = getattr(generator, args.predict)

predict_s, train_s, kept = 0.0, 0.0, []
loop_start = time.perf_counter()
for iteration in range(args.iterations):
    noise = rng.normal(size=(args.batch, args.latent)).astype("float32")
    start = time.perf_counter()
    fake = generate(noise) if args.predict == "predict_on_batch" else generate(noise, verbose=0)
    predict_s += time.perf_counter() - start
    if args.keep:
        kept.append(np.array(fake, copy=True))
    real = real_images[rng.integers(0, len(real_images), args.batch)]
    start = time.perf_counter()
    loss = discriminator.train_on_batch(np.concatenate([real, fake]), labels)
    train_s += time.perf_counter() - start
    if iteration == 0:
        broadcast_variables(discriminator.variables, root_rank=0)
loop_s = time.perf_counter() - loop_start

if args.truth:
    with open(f"{args.truth}.{hvd.rank()}", "w") as out:
        json.dump(
            {
                "iterations": args.iterations,
                "predict_s": predict_s,
                "train_s": train_s,
                "loop_s": loop_s,
                "kept_bytes_per_call": kept[0].nbytes if kept else 0,
            },
            out,
        )
