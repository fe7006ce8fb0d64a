"""Workload of the "POP metrics and scaling" case: a ResNet on BigEarthNet-shaped patches with Horovod.

As in the published study (001): a ResNet (ResNet-50 in ``full``; a smaller bottleneck ResNet of the same
family in ``reduced``/``ci``) learns the 43 BigEarthNet labels (sigmoid, binary cross-entropy) from
12-band Sentinel-2 patches read from patch folders (``data/bigearthnet`` or the reduced copy). Each
batch is prepared **online** (resize to the input size, random flip and 90° rotation, mix-up) by
``workers`` parallel calls of a ``tf.data`` map, or taken from an **offline** cache prepared once.
After every epoch a **test phase** runs either on rank 0 alone while the others wait (the published study's
"before") or sharded over every rank with the sums reduced (the fix).

Recorded per rank: ``input`` (waiting for the next batch: the "device idle"), ``compute`` (forward,
backward, update), ``communication`` (Horovod's grouped allreduce of the gradients), ``evaluation``
(the test phase). The training loop is written out rather than ``model.fit`` so that waiting for
input is timed apart from compute; the gradient averaging is what ``hvd.DistributedOptimizer`` does.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

TEST_MODES: tuple[str, ...] = ("rank0", "sharded")
PREPROCESSING: tuple[str, ...] = ("online", "offline")


@dataclass(frozen=True)
class PopSettings:
    """One run; recorded in the run's metadata. ``global_batch`` > 0 means strong scaling."""

    model: str = "resnet-mini"  # or "resnet50": Keras' ResNet-50 with a 12-band input and 43 outputs
    image_size: int = 64
    batch: int = 16  # per rank (weak scaling)
    global_batch: int = 0  # strong scaling: per-rank batch = global_batch / ranks
    epoch_samples: int = 256
    epochs: int = 2
    test_mode: str = "rank0"
    test_samples: int = 128
    workers: int = 1
    preprocessing: str = "online"
    mixup_alpha: float = 0.2
    learning_rate: float = 0.01
    patches: int = 64  # patches loaded from the data folder (repeated if the folder has fewer)
    data: str = ""  # a folder of patch folders; "" = data/bigearthnet or the reduced copy
    seed: int = 0

    def __post_init__(self) -> None:
        if self.test_mode not in TEST_MODES:
            raise ValueError(f"test_mode {self.test_mode!r} is unknown: use one of {', '.join(TEST_MODES)}")
        if self.preprocessing not in PREPROCESSING:
            raise ValueError(f"preprocessing {self.preprocessing!r} is unknown: use online or offline")
        if self.model not in ("resnet-mini", "resnet50"):
            raise ValueError(f"model {self.model!r} is unknown: use resnet-mini or resnet50")
        if min(self.batch, self.epoch_samples, self.epochs, self.workers, self.image_size) < 1:
            raise ValueError("batch, epoch_samples, epochs, workers and image_size must be >= 1")

    def rank_batch(self, size: int) -> int:
        """Batch per rank: fixed (weak scaling), or the global batch shared out (strong scaling)."""
        return max(1, self.global_batch // size) if self.global_batch else self.batch

    def steps_per_epoch(self, size: int) -> int:
        """The epoch covers ``epoch_samples`` whatever the rank count."""
        return max(1, self.epoch_samples // (self.rank_batch(size) * size))


def resnet(input_shape: tuple[int, int, int], classes: int, *, stages: tuple[int, ...], width: int) -> Any:
    """A bottleneck ResNet (ResNet-50 is stages (3, 4, 6, 3), width 64): the published study's architecture family."""
    import tensorflow as tf

    layers = tf.keras.layers

    def bottleneck(x: Any, filters: int, stride: int) -> Any:
        shortcut = x
        if stride != 1 or x.shape[-1] != 4 * filters:
            shortcut = layers.BatchNormalization()(layers.Conv2D(4 * filters, 1, strides=stride)(x))
        y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(filters, 1, strides=stride)(x)))
        y = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same")(y)))
        y = layers.BatchNormalization()(layers.Conv2D(4 * filters, 1)(y))
        return layers.ReLU()(layers.Add()([shortcut, y]))

    inputs = tf.keras.Input(input_shape)
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(width, 7, strides=2, padding="same")(inputs)))
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for index, blocks in enumerate(stages):
        for block in range(blocks):
            x = bottleneck(x, width * 2**index, 2 if block == 0 and index > 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inputs, layers.Dense(classes, activation="sigmoid")(x))


def build_model(settings: PopSettings, bands: int, classes: int) -> Any:
    import tensorflow as tf

    shape = (settings.image_size, settings.image_size, bands)
    if settings.model == "resnet50":
        return tf.keras.applications.ResNet50(
            weights=None, input_shape=shape, classes=classes, classifier_activation="sigmoid"
        )
    return resnet(shape, classes, stages=(1, 1, 1, 1), width=16)


def load_patches(settings: PopSettings) -> Any:
    """Patches from the data folder, as many as ``patches`` (the folder's repeated if it has fewer)."""
    from pathlib import Path

    from workbench.datasets import dataset_path, load_bigearthnet_patches

    folder = Path(settings.data) if settings.data else dataset_path("bigearthnet")
    patches = load_bigearthnet_patches(folder, size=120, limit=settings.patches)
    repeat = -(-settings.patches // len(patches.names))
    return np.tile(patches.images, (repeat, 1, 1, 1))[: settings.patches], np.tile(patches.labels, (repeat, 1))[
        : settings.patches
    ]


def train_on_rank(run_path: str, settings_dict: dict[str, Any]) -> dict[str, Any]:
    """Run on every rank: epochs of training, each followed by the test phase; returns the rank's facts."""
    import tensorflow as tf
    from mpi4py import MPI

    from workbench.recorder import Recorder
    from workbench.workloads.training import (
        broadcast_weights,
        fresh_rank,
        recorded_step,
        step_functions,
        trace_before_timing,
    )

    settings = PopSettings(**settings_dict)
    comm, rank, size, hvd = fresh_rank(settings.seed)
    images, labels = load_patches(settings)
    test_images = np.tile(images, (-(-settings.test_samples // len(images)), 1, 1, 1))[: settings.test_samples]
    test_labels = np.tile(labels, (-(-settings.test_samples // len(labels)), 1))[: settings.test_samples]
    model = build_model(settings, images.shape[-1], labels.shape[-1])
    optimizer = tf.keras.optimizers.SGD(settings.learning_rate, momentum=0.9)
    loss_fn = tf.keras.losses.BinaryCrossentropy()
    variables = model.trainable_variables
    broadcast_weights(comm, model.variables)  # identical start on every rank: rank 0's initial weights
    gradient_bytes = int(sum(np.prod(v.shape) for v in variables) * 4)
    batch = settings.rank_batch(size)
    side = settings.image_size

    def prepare(x: Any, y: Any) -> tuple[Any, Any]:
        """The published study's online preprocessing: resize, random flip and rotation, mix-up within the batch."""
        x = tf.image.resize(x, (side, side))
        x = tf.image.random_flip_left_right(x)
        x = tf.image.rot90(x, k=tf.random.uniform([], 0, 4, dtype=tf.int32))
        mix = tf.random.shuffle(tf.range(tf.shape(x)[0]))
        weight = tf.random.uniform([], 0.0, settings.mixup_alpha)
        return (1 - weight) * x + weight * tf.gather(x, mix), (1 - weight) * y + weight * tf.gather(y, mix)

    shard = tf.data.Dataset.from_tensor_slices((images[rank::size], labels[rank::size]))
    if settings.preprocessing == "offline":  # prepared once, kept in memory: the published study's recommendation
        prepared = shard.batch(batch, drop_remainder=True).map(prepare).cache()
        dataset = prepared.repeat().prefetch(2)
    else:
        dataset = (
            shard.shuffle(len(images), seed=settings.seed + rank)
            .repeat()
            .batch(batch, drop_remainder=True)
            .map(prepare, num_parallel_calls=settings.workers)
            .prefetch(1)
        )
    iterator = iter(dataset)

    gradients, apply = step_functions(model, optimizer, loss_fn)

    @tf.function
    def test_sums(x: Any, y: Any) -> Any:
        predicted = tf.cast(model(x, training=False) > 0.5, tf.float32)
        return tf.reduce_sum(predicted * y), tf.reduce_sum(predicted), tf.reduce_sum(y)

    def test(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        sums = np.zeros(3)
        for start in range(0, len(x), 32):
            chunk = tf.image.resize(x[start : start + 32], (side, side))
            sums += np.array([float(v) for v in test_sums(chunk, y[start : start + 32])])
        return sums

    recorder = Recorder(run_path)
    recorder.align_clocks(comm)
    steps = settings.steps_per_epoch(size)
    history: list[dict[str, float]] = []
    # trace the step functions before the clock starts on one batch (zero gradients change no weight)
    trace_before_timing(gradients, apply, *next(iterator))
    comm.Barrier()
    started = time.perf_counter()
    step = 0
    for epoch in range(settings.epochs):
        recorder.epoch = epoch
        for _ in range(steps):
            recorder.step = step
            recorded_step(recorder, iterator, gradients, apply, hvd, gradient_bytes)
            step += 1
        if settings.test_mode == "rank0":
            sums = np.zeros(3)
            if rank == 0:  # the published study's sequential test phase: the other ranks wait in the next collective
                with recorder.phase("evaluation", "test"):
                    sums = test(test_images, test_labels)
        else:
            with recorder.phase("evaluation", "test_shard"):
                local = test(test_images[rank::size], test_labels[rank::size])
                sums = comm.allreduce(local, op=MPI.SUM)
        if rank == 0:
            true_positive, predicted, actual = sums
            history.append({"epoch": epoch, "test_f1": float(2 * true_positive / max(predicted + actual, 1))})
    with recorder.phase("communication", "final_barrier"):
        comm.Barrier()
    wall = time.perf_counter() - started
    recorder.close()
    return {
        "rank": rank,
        "size": size,
        "wall_s": wall,
        "steps": step,
        "batch": batch,
        "samples": step * batch,
        "gradient_bytes": gradient_bytes,
        "parameters": int(model.count_params()),
        "history": history,
        "settings": asdict(settings),
    }
