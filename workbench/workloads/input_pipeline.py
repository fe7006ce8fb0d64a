"""Workload of the "input pipeline" case: LeNet-5 on MNIST, data-parallel, fed through a queue.

As in the published study (003): N **enqueue threads** read batches of MNIST records from files and put them
into a **bounded queue**; the training loop dequeues one batch every ``interval`` steps (batch
repetition: ``interval`` = 1 is the standard pipeline) and trains LeNet-5 with Horovod. Reading
goes through ``ContestedStorage``: shared bandwidth and per-read latency, with other jobs competing
(see ``workbench.workloads.contested_io``).

Data sources, one per run:

- ``contested``: the enqueue threads read from the IDX files through the contested storage;
- ``memory``: the training set is read once (through the same storage, timed as phase ``input``,
  name ``load_into_memory``) and batches come from memory: the published study's 17x fix;
- ``tf.data``: today's way: ``Dataset.map(read, num_parallel_calls=threads).prefetch(capacity)``
  over the same contested reads (its queue is internal, so no depth signal).

Why IDX records: they are MNIST's own format, a batch is one contiguous range of records (one read
of ``batch`` x 784 bytes, plus the labels), and every byte read is charged to the shared bandwidth;
the per-read latency stands for what opening many small files would cost on a parallel file system.

Recorded per rank: spans ``input`` (waiting for the queue), ``compute`` (forward/backward, update),
``communication`` (gradient allreduce), ``evaluation``; counters ``queue_depth`` (after every put
and get) and ``queue_depth_at_dequeue`` (the depth the training loop found, before taking a batch).
Training runs for ``seconds`` of wall time (ranks agree when to stop), so every point costs the same.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.workloads.contested_io import ContestedStorage, StorageModel

SOURCES: tuple[str, ...] = ("contested", "memory", "tf.data")
IMAGE_BYTES = 28 * 28
IDX_IMAGE_HEADER, IDX_LABEL_HEADER = 16, 8


@dataclass(frozen=True)
class PipelineSettings:
    """One run of the workload; recorded in the run's metadata."""

    source: str = "contested"
    threads: int = 1
    interval: int = 1
    seconds: float = 6.0
    fresh_batches_for_accuracy: int = 8
    batch: int = 256
    queue_capacity: int = 8
    learning_rate: float = 0.05
    storage: StorageModel = field(default_factory=StorageModel)
    data: str = ""  # folder with the four IDX files; "" = data/mnist or the reduced mnist_jittered
    seed: int = 0

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source {self.source!r} is unknown: use one of {', '.join(SOURCES)}")
        if self.threads < 1 or self.interval < 1 or self.batch < 1 or self.queue_capacity < 1:
            raise ValueError("threads, interval, batch and queue_capacity must be >= 1")
        if self.seconds <= 0:
            raise ValueError(f"seconds={self.seconds}: the training time must be positive")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PipelineSettings:
        values = dict(values)
        if isinstance(values.get("storage"), dict):
            values["storage"] = StorageModel(**values["storage"])
        return cls(**values)


def data_folder(settings: PipelineSettings) -> Path:
    """Where the IDX files are: the setting, else real MNIST in data/mnist, else the reduced set."""
    from workbench.datasets import dataset_path

    return Path(settings.data) if settings.data else dataset_path("mnist", reduced="mnist_jittered")


def read_range(path: Path, offset: int, nbytes: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(nbytes)


class IdxBatches:
    """Contiguous batches of an IDX image/label file pair, read through the contested storage."""

    def __init__(self, folder: Path, storage: ContestedStorage, batch: int) -> None:
        from workbench.datasets.mnist import find_idx_files

        files = find_idx_files(folder)
        if files is None:
            raise FileNotFoundError(f"{folder}: no MNIST IDX files; see data/README.md")
        self.images, self.labels = Path(files["x_train"]), Path(files["y_train"])
        if self.images.suffix == ".gz":
            raise ValueError(f"{self.images}: gzipped IDX cannot be read by offset; gunzip it in place")
        self.count = (self.images.stat().st_size - IDX_IMAGE_HEADER) // IMAGE_BYTES
        if self.count < batch:
            raise ValueError(f"{self.images} holds {self.count} images, fewer than one batch of {batch}")
        self.storage, self.batch = storage, batch

    def read(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch of ``batch`` records from record ``start``: (float32 images n x 28 x 28 x 1, int64 labels).

        One request to the storage for the images and labels together (one latency, one share).
        """
        self.storage.charge(self.batch * (IMAGE_BYTES + 1))
        raw = read_range(self.images, IDX_IMAGE_HEADER + start * IMAGE_BYTES, self.batch * IMAGE_BYTES)
        labels = read_range(self.labels, IDX_LABEL_HEADER + start, self.batch)
        images = np.frombuffer(raw, dtype=np.uint8).reshape(self.batch, 28, 28, 1).astype(np.float32) / 255.0
        return images, np.frombuffer(labels, dtype=np.uint8).astype(np.int64)

    def random_start(self, rng: np.random.Generator) -> int:
        return int(rng.integers(0, self.count - self.batch + 1))


def lenet5() -> Any:
    """LeNet-5 as in the published study's MNIST runs (ReLU, average pooling), logits out."""
    import tensorflow as tf

    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            tf.keras.Input((28, 28, 1)),
            layers.Conv2D(6, 5, padding="same", activation="relu"),
            layers.AveragePooling2D(),
            layers.Conv2D(16, 5, activation="relu"),
            layers.AveragePooling2D(),
            layers.Flatten(),
            layers.Dense(120, activation="relu"),
            layers.Dense(84, activation="relu"),
            layers.Dense(10),
        ]
    )


class QueueFeed:
    """N enqueue threads filling a bounded queue; ``get()`` is what the training loop dequeues."""

    def __init__(self, batches: IdxBatches, threads: int, capacity: int, recorder: Any, seed: int) -> None:
        self.queue: queue.Queue[tuple[np.ndarray, np.ndarray]] = queue.Queue(maxsize=capacity)
        self.recorder = recorder
        self.enqueued = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._fill, args=(batches, np.random.default_rng(seed + i)), daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def _fill(self, batches: IdxBatches, rng: np.random.Generator) -> None:
        while not self._stop.is_set():
            item = batches.read(batches.random_start(rng))
            while not self._stop.is_set():
                try:
                    self.queue.put(item, timeout=0.1)
                except queue.Full:
                    continue
                with self._lock:
                    self.enqueued += 1
                self.recorder.counter("queue_depth", self.queue.qsize())
                break

    def get(self) -> tuple[np.ndarray, np.ndarray]:
        self.recorder.counter("queue_depth_at_dequeue", self.queue.qsize())
        item = self.queue.get()
        self.recorder.counter("queue_depth", self.queue.qsize())
        return item

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


def train_on_rank(run_path: str, settings_dict: dict[str, Any]) -> dict[str, Any]:
    """Run on every rank: train for ``seconds`` from the chosen source; returns the rank's facts."""
    import tensorflow as tf
    from mpi4py import MPI

    from workbench.datasets.mnist import load_mnist_idx
    from workbench.recorder import Recorder
    from workbench.workloads.training import broadcast_weights, fresh_rank, step_functions, trace_before_timing

    settings = PipelineSettings.from_dict(settings_dict)
    comm, rank, size, hvd = fresh_rank(settings.seed)
    folder = data_folder(settings)
    test = load_mnist_idx(folder)  # evaluation data are read directly: they are not what is measured
    x_test = test.x_test[rank::size].reshape(-1, 28, 28, 1).astype(np.float32)
    y_test = test.y_test[rank::size]

    storage = ContestedStorage(Path(run_path).name, settings.storage)
    batches = IdxBatches(folder, storage, settings.batch)
    if rank == 0 and settings.source != "memory":
        storage.start_other_jobs(settings.batch * IMAGE_BYTES)

    model = lenet5()
    optimizer = tf.keras.optimizers.SGD(settings.learning_rate)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables
    broadcast_weights(comm, variables)  # identical start on every rank: rank 0's initial weights

    gradients, apply = step_functions(model, optimizer, loss_fn)

    @tf.function
    def correct_count(x: Any, y: Any) -> Any:
        return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(model(x, training=False), axis=1), y), tf.float32))

    def test_accuracy() -> float:
        chunks = range(0, len(x_test), 512)
        correct = sum(float(correct_count(x_test[i : i + 512], y_test[i : i + 512])) for i in chunks)
        totals = comm.allreduce(np.array([correct, len(x_test)], dtype=np.float64), op=MPI.SUM)
        return float(totals[0] / max(totals[1], 1))

    recorder = Recorder(run_path)
    recorder.align_clocks(comm)
    rng = np.random.default_rng(settings.seed + 1000 * rank)
    feed: QueueFeed | None = None
    tf_iterator = None
    in_memory: tuple[np.ndarray, np.ndarray] | None = None
    # trace the step functions on a blank batch first (zero gradients change no weight), then start the
    # readers: the queue starts empty when the clock starts, as after the first epochs of a long run
    blank = (np.zeros((settings.batch, 28, 28, 1), np.float32), np.zeros(settings.batch, np.int64))
    trace_before_timing(gradients, apply, *blank)
    if settings.source == "memory":
        with recorder.phase("input", "load_into_memory"):
            starts = range(0, batches.count - settings.batch + 1, settings.batch)
            pieces = [batches.read(start) for start in starts]
            in_memory = (np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))
    elif settings.source == "contested":
        feed = QueueFeed(batches, settings.threads, settings.queue_capacity, recorder, settings.seed + 100 * rank)
    else:

        def read(_index: Any) -> tuple[np.ndarray, np.ndarray]:
            return batches.read(batches.random_start(rng))

        dataset = (
            tf.data.Dataset.range(1 << 40)
            .map(
                lambda i: tf.numpy_function(read, [i], (tf.float32, tf.int64)),
                num_parallel_calls=settings.threads,
                deterministic=False,
            )
            .prefetch(settings.queue_capacity)
        )
        tf_iterator = iter(dataset)

    def next_batch() -> tuple[Any, Any]:
        if feed is not None:
            return feed.get()
        if tf_iterator is not None:
            return next(tf_iterator)
        assert in_memory is not None
        index = int(rng.integers(0, len(in_memory[0]) - settings.batch + 1))
        return in_memory[0][index : index + settings.batch], in_memory[1][index : index + settings.batch]

    def allreduce(grads: Any) -> Any:
        return hvd.grouped_allreduce(list(grads), op=hvd.Average) if size > 1 else grads

    comm.Barrier()
    started = time.perf_counter()
    step, fresh, accuracy_at_fresh, accuracy_at_fresh_s = 0, 0, float("nan"), float("nan")
    current: tuple[Any, Any] | None = None
    while True:
        recorder.step = step
        if step % settings.interval == 0:
            with recorder.phase("input", "dequeue"):
                current = next_batch()
            fresh += 1
        assert current is not None
        with recorder.phase("compute", "train_step"):
            _loss, grads = gradients(current[0], current[1])
        with recorder.phase("communication", "allreduce"):
            grads = allreduce(grads)
        with recorder.phase("compute", "apply_gradients"):
            apply(grads)
        step += 1
        batch_used_up = step % settings.interval == 0
        if fresh == settings.fresh_batches_for_accuracy and batch_used_up and np.isnan(accuracy_at_fresh):
            with recorder.phase("evaluation", "accuracy_at_fresh_samples"):
                accuracy_at_fresh = test_accuracy()
            accuracy_at_fresh_s = time.perf_counter() - started
        # every rank stops after the same step: the slowest clock decides
        if comm.allreduce(time.perf_counter() - started >= settings.seconds, op=MPI.LOR):
            break
    wall = time.perf_counter() - started
    with recorder.phase("evaluation", "accuracy_at_time"):
        accuracy_at_time = test_accuracy()
    if feed is not None:
        feed.stop()
    storage.close()
    recorder.close()
    return {
        "rank": rank,
        "size": size,
        "wall_s": wall,
        "steps": step,
        "fresh_batches": fresh,
        "enqueued": feed.enqueued if feed is not None else None,
        "accuracy_at_time": accuracy_at_time,
        "accuracy_at_fresh_samples": accuracy_at_fresh,
        "accuracy_at_fresh_samples_s": accuracy_at_fresh_s,
        "settings": asdict(settings),
    }
