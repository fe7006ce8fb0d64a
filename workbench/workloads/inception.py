"""InceptionV3 on images, the model of the "parameter servers vs allreduce" case: settings, model, data.

Apart from ``ps_vs_allreduce`` (the allreduce scheme, on every rank) and ``ps_job`` (the
parameter-server scheme, in processes of its own) because both build the same model on the
same data: each imports this module, and neither imports the other at module level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SCHEMES: tuple[str, ...] = ("allreduce", "ps")
DATA_KINDS: tuple[str, ...] = ("synthetic", "real")
PLACEMENTS: tuple[str, ...] = ("round-robin", "sharded")
MIN_IMAGE_SIZE = 75  # InceptionV3's smallest input
#: Image files the real-data pipeline reads (what ``tf.io.decode_image`` decodes of the image folder's formats).
DECODED_SUFFIXES: tuple[str, ...] = (".jpg", ".jpeg", ".png")


@dataclass(frozen=True)
class InceptionSettings:
    """One run of the workload; recorded in the run's metadata. ``batch`` is per worker."""

    scheme: str = "allreduce"
    data: str = "synthetic"
    ps: int = 1
    placement: str = "round-robin"
    image_size: int = MIN_IMAGE_SIZE
    classes: int = 10
    batch: int = 8
    warmup_steps: int = 10
    measured_steps: int = 100
    repetitions: int = 5
    learning_rate: float = 0.01
    images: str = ""  # folder of <class>/<image> files; "" = data/image_folder or the reduced copy
    threads_per_worker: int = 0  # 0: the machine's cores shared out over the workers
    timeout_s: float = 900.0  # the ps job is stopped after this long
    seed: int = 0

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme {self.scheme!r} is unknown: use one of {', '.join(SCHEMES)}")
        if self.data not in DATA_KINDS:
            raise ValueError(f"data {self.data!r} is unknown: use synthetic or real")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r} is unknown: use one of {', '.join(PLACEMENTS)}")
        if self.image_size < MIN_IMAGE_SIZE:
            raise ValueError(f"image_size={self.image_size}: InceptionV3 needs at least {MIN_IMAGE_SIZE} pixels")
        if min(self.classes, self.batch, self.measured_steps, self.repetitions, self.ps) < 1 or self.warmup_steps < 0:
            raise ValueError("classes, batch, measured_steps, repetitions and ps must be >= 1, warmup_steps >= 0")

    @property
    def steps_per_repetition(self) -> int:
        return self.warmup_steps + self.measured_steps


def build_model(settings: InceptionSettings) -> Any:
    """Keras' InceptionV3, untrained (``weights=None``), at the preset's input size and classes."""
    import tensorflow as tf

    side = settings.image_size
    return tf.keras.applications.InceptionV3(weights=None, input_shape=(side, side, 3), classes=settings.classes)


def image_files(settings: InceptionSettings) -> tuple[list[str], list[int]]:
    """Paths and class indices of the real images (class = sub-folder, in sorted order)."""
    from workbench.datasets import dataset_path

    folder = Path(settings.images) if settings.images else dataset_path("image_folder")
    classes = sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    paths, labels = [], []
    for index, class_dir in enumerate(classes):
        for path in sorted(class_dir.rglob("*")):
            if path.suffix.lower() in DECODED_SUFFIXES:
                paths.append(str(path))
                labels.append(index % settings.classes)
    if not paths:
        raise FileNotFoundError(f"{folder}: no JPEG or PNG files under <class>/ folders; see data/README.md")
    return paths, labels


def make_dataset(settings: InceptionSettings, seed: int | None) -> Any:
    """Batches of (images, labels): one tensor repeated (synthetic), or files decoded by ``tf.data`` (real)."""
    import tensorflow as tf

    side, batch = settings.image_size, settings.batch
    if settings.data == "synthetic":
        rng = np.random.default_rng(seed)
        images = rng.random((batch, side, side, 3), dtype=np.float32)
        labels = rng.integers(0, settings.classes, batch).astype(np.int64)
        return tf.data.Dataset.from_tensors((images, labels)).repeat()
    paths, labels = image_files(settings)

    def load(path: Any, label: Any) -> tuple[Any, Any]:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, (side, side))
        return tf.image.random_flip_left_right(image), label

    return (
        tf.data.Dataset.from_tensor_slices((paths, np.asarray(labels, dtype=np.int64)))
        .shuffle(len(paths), seed=seed)
        .repeat()
        .map(load, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch, drop_remainder=True)
        .prefetch(1)
    )


def threads_for_workers(settings: InceptionSettings, workers: int) -> int:
    """Intra-op threads per worker: the setting, else the cores shared out between the ``workers`` on
    this host (at least one)."""
    from workbench.config import physical_cores

    return settings.threads_per_worker or max(1, physical_cores() // workers)


__all__ = [
    "DATA_KINDS",
    "DECODED_SUFFIXES",
    "MIN_IMAGE_SIZE",
    "PLACEMENTS",
    "SCHEMES",
    "InceptionSettings",
    "build_model",
    "image_files",
    "make_dataset",
    "threads_for_workers",
]
