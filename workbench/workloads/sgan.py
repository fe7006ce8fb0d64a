"""Workload of the "CPU tuning" case: a semi-supervised GAN (S-GAN) trained with Horovod (study 002).

As in the published study, the discriminator has a supervised head (softmax over the classes, trained on a few
labelled images) and an unsupervised one (real vs generated, from the same logits: D(x) = Z / (Z + 1)
with Z = Σ exp(logits), Salimans et al. 2016); the generator learns to fool it. Data: scikit-learn's
digits at 28×28 (ships with the package), ``labelled`` of them with their labels; ``image_size``
resizes them (bilinear) to the published study's shapes (its tuning runs used 256×256 images) and the models grow
with it: the generator upsamples by 2 until it reaches the size, the discriminator halves it as often.

Each iteration: one discriminator step (supervised + unsupervised loss) and one generator step,
each with Horovod's grouped allreduce of its gradients. Rank 0 evaluates the classifier on the test
set on a schedule:

- ``per_epoch`` (the published study's "before"): once per epoch; the epoch is ``eval_every`` iterations on one
  rank and the data is split over the ranks, so an epoch is ``eval_every / ranks`` iterations: with
  more ranks rank 0 evaluates more often per iteration while the others wait in the next allreduce;
- ``fixed``: every ``eval_every`` iterations whatever the rank count (the published study's fix: 15).

Recorded per rank: ``compute`` (``train_step``: the discriminator's forward and backward; ``generator_step``;
``apply_gradients``), ``communication`` (``allreduce``), ``evaluation`` (rank 0).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

SCHEDULES: tuple[str, ...] = ("per_epoch", "fixed")


@dataclass(frozen=True)
class SganSettings:
    """One run; recorded in the run's metadata. ``batch`` is per rank."""

    batch: int = 32
    latent: int = 32
    width: int = 32
    labelled: int = 100
    iterations: int = 60
    warmup_iterations: int = 5
    eval_schedule: str = "fixed"
    eval_every: int = 15
    eval_images: int = 2880
    learning_rate: float = 2e-4
    #: square images of this many pixels a side: 28 (the digits as they are) or more, a multiple of 4
    image_size: int = 28
    seed: int = 0

    def __post_init__(self) -> None:
        if self.eval_schedule not in SCHEDULES:
            raise ValueError(f"eval_schedule {self.eval_schedule!r} is unknown: use per_epoch or fixed")
        if min(self.batch, self.latent, self.width, self.labelled, self.iterations, self.eval_every) < 1:
            raise ValueError("batch, latent, width, labelled, iterations and eval_every must be >= 1")
        if not 0 <= self.warmup_iterations < self.iterations:
            raise ValueError(f"warmup_iterations={self.warmup_iterations} must be in [0, iterations)")
        if self.image_size < 8 or self.image_size % 4:
            raise ValueError(f"image_size={self.image_size} is not possible: use a multiple of 4, at least 8")

    @property
    def upsamplings(self) -> int:
        """Stride-2 stages of the generator (and of the discriminator): 2 at 28 px, one more per doubling."""
        stages, side = 2, self.image_size // 4
        while side > 8 and side % 2 == 0:
            side //= 2
            stages += 1
        return stages

    def eval_interval(self, ranks: int) -> int:
        """Iterations between evaluations: an epoch's worth (shrinks with ranks), or ``eval_every``."""
        if self.eval_schedule == "fixed":
            return self.eval_every
        return max(1, self.eval_every // ranks)


def build_models(settings: SganSettings, classes: int = 10) -> tuple[Any, Any]:
    """Generator (latent -> image_size² x 1 in [0, 1]) and discriminator (image -> class logits)."""
    import tensorflow as tf

    layers = tf.keras.layers
    width, size, stages = settings.width, settings.image_size, settings.upsamplings
    base = size >> stages  # 7 at 28 px, 8 at 256 px
    upsampling = []
    for _ in range(stages - 1):
        upsampling += [layers.Conv2DTranspose(width, 4, strides=2, padding="same"), layers.LeakyReLU(0.2)]
    generator = tf.keras.Sequential(
        [
            tf.keras.Input((settings.latent,)),
            layers.Dense(base * base * 2 * width),
            layers.LeakyReLU(0.2),
            layers.Reshape((base, base, 2 * width)),
            *upsampling,
            layers.Conv2DTranspose(1, 4, strides=2, padding="same", activation="sigmoid"),
        ],
        name="generator",
    )
    downsampling = []
    for stage in range(stages):
        downsampling += [layers.Conv2D(width * min(2**stage, 4), 3, strides=2, padding="same"), layers.LeakyReLU(0.2)]
    discriminator = tf.keras.Sequential(
        [
            tf.keras.Input((size, size, 1)),
            *downsampling,
            layers.Flatten(),
            layers.Dropout(0.3),
            layers.Dense(classes),
        ],
        name="discriminator",
    )
    return generator, discriminator


def resized(images: np.ndarray, size: int) -> np.ndarray:
    """Images (n, h, w) as (n, size, size, 1) float32, bilinear; unchanged at their own size."""
    images = images[..., None].astype(np.float32)
    if images.shape[1] == size:
        return images
    import tensorflow as tf

    return tf.image.resize(images, (size, size), method="bilinear").numpy()


def train_on_rank(run_path: str, settings_dict: dict[str, Any]) -> dict[str, Any]:
    """Run on every rank: ``iterations`` of S-GAN training, evaluation on rank 0; returns the rank's facts."""
    import tensorflow as tf

    from workbench import datasets
    from workbench.recorder import Recorder
    from workbench.workloads.training import average_gradients, broadcast_weights, fresh_rank, intra_op_threads

    settings = SganSettings(**settings_dict)
    comm, rank, size, hvd = fresh_rank(settings.seed)
    data = datasets.load_digits_28x28(seed=settings.seed)
    x_train = resized(data.x_train, settings.image_size)
    y_train = data.y_train
    x_test = resized(np.resize(data.x_test, (settings.eval_images, *data.x_test.shape[1:])), settings.image_size)
    y_test = np.resize(data.y_test, settings.eval_images)
    labelled_x, labelled_y = x_train[: settings.labelled], y_train[: settings.labelled]
    generator, discriminator = build_models(settings)
    d_optimizer = tf.keras.optimizers.Adam(settings.learning_rate, beta_1=0.5)
    g_optimizer = tf.keras.optimizers.Adam(settings.learning_rate, beta_1=0.5)
    broadcast_weights(comm, [*generator.variables, *discriminator.variables])
    d_vars, g_vars = discriminator.trainable_variables, generator.trainable_variables
    gradient_bytes = int(sum(np.prod(v.shape) for v in [*d_vars, *g_vars]) * 4)
    rng = np.random.default_rng(settings.seed + rank)

    def real_probability_logit(logits: Any) -> Any:
        """log D(x) / (1 - D(x)) for D = Z / (Z + 1): the log-sum-exp of the class logits."""
        return tf.reduce_logsumexp(logits, axis=-1)

    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    sce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def discriminator_gradients(x_sup: Any, y_sup: Any, x_real: Any, noise: Any) -> Any:
        fake = generator(noise, training=True)
        with tf.GradientTape() as tape:
            supervised = sce(y_sup, discriminator(x_sup, training=True))
            real = real_probability_logit(discriminator(x_real, training=True))
            generated = real_probability_logit(discriminator(fake, training=True))
            unsupervised = bce(tf.ones_like(real), real) + bce(tf.zeros_like(generated), generated)
            loss = supervised + unsupervised
        return loss, tape.gradient(loss, d_vars)

    @tf.function
    def generator_gradients(noise: Any) -> Any:
        with tf.GradientTape() as tape:
            generated = real_probability_logit(discriminator(generator(noise, training=True), training=True))
            loss = bce(tf.ones_like(generated), generated)
        return loss, tape.gradient(loss, g_vars)

    @tf.function
    def apply(d_grads: Any, g_grads: Any) -> None:
        d_optimizer.apply_gradients(zip(d_grads, d_vars))
        g_optimizer.apply_gradients(zip(g_grads, g_vars))

    @tf.function
    def correct(x: Any, y: Any) -> Any:
        return tf.reduce_sum(tf.cast(tf.argmax(discriminator(x, training=False), -1) == y, tf.int32))

    def evaluate() -> float:
        hits = sum(int(correct(x_test[i : i + 128], y_test[i : i + 128])) for i in range(0, len(x_test), 128))
        return hits / len(x_test)

    def batch() -> tuple[Any, ...]:
        sup = rng.integers(0, len(labelled_x), settings.batch)
        real = rng.integers(0, len(x_train), settings.batch)
        noise = rng.standard_normal((settings.batch, settings.latent)).astype(np.float32)
        return labelled_x[sup], labelled_y[sup], x_train[real], noise

    recorder = Recorder(run_path, flush_interval_s=0.5)
    recorder.align_clocks(comm)
    x_sup, y_sup, x_real, noise = batch()  # trace before the clock starts; zero gradients change nothing
    _, d_grads = discriminator_gradients(x_sup, y_sup, x_real, noise)
    _, g_grads = generator_gradients(noise)
    apply([tf.zeros_like(g) for g in d_grads], [tf.zeros_like(g) for g in g_grads])
    evaluate()
    interval = settings.eval_interval(size)
    accuracy, evaluations, eval_seconds = float("nan"), 0, 0.0  # eval_seconds: in the measured iterations
    comm.Barrier()
    started = measured_from = time.perf_counter()
    for iteration in range(settings.iterations):
        if iteration == settings.warmup_iterations:
            measured_from = time.perf_counter()
        recorder.step = iteration
        x_sup, y_sup, x_real, noise = batch()
        with recorder.phase("compute", "train_step"):
            _d_loss, d_grads = discriminator_gradients(x_sup, y_sup, x_real, noise)
        with recorder.phase("compute", "generator_step"):
            _g_loss, g_grads = generator_gradients(noise)
        with recorder.phase("communication", "allreduce", nbytes=gradient_bytes):
            d_grads, g_grads = average_gradients(hvd, d_grads), average_gradients(hvd, g_grads)
        with recorder.phase("compute", "apply_gradients"):
            apply(d_grads, g_grads)
        if (iteration + 1) % interval == 0 and rank == 0:
            began = time.perf_counter()
            with recorder.phase("evaluation", "evaluate"):
                accuracy = evaluate()
            evaluations += 1
            if iteration >= settings.warmup_iterations:
                eval_seconds += time.perf_counter() - began
    with recorder.phase("communication", "final_barrier"):
        comm.Barrier()
    finished = time.perf_counter()
    recorder.close()
    measured = settings.iterations - settings.warmup_iterations
    wall = finished - measured_from
    return {
        "rank": rank,
        "size": size,
        "threads": intra_op_threads(),
        "iterations": settings.iterations,
        "measured_iterations": measured,
        "wall_s": wall,
        "total_s": finished - started,
        "images_per_s": measured * settings.batch * size / wall,
        "evaluations": evaluations,
        "eval_interval": interval,
        "eval_s": eval_seconds,
        "accuracy": accuracy,
        "gradient_bytes": gradient_bytes,
        "horovod_size": hvd.size() if hvd is not None else 1,
        "settings": asdict(settings),
    }


__all__ = ["SCHEDULES", "SganSettings", "build_models", "train_on_rank"]
