"""Workload of the "evaluation frequency" case: an MNIST-shaped classifier, data-parallel.

Modelled on the published study's MPI + TensorFlow toolkit run: every rank trains on its shard, gradients
are averaged across ranks every step, and every ``eval_interval`` epochs rank 0 computes loss
and accuracy on the whole training and test sets while the other ranks wait (they block in the
next step's allreduce — which is exactly what a profile of the published study showed as "time in MPI").
``eval_mode="sharded"`` is the other fix: every rank evaluates its shard and the sums are reduced.

Two gradient-averaging backends:
- ``mpi4py`` — as in the published study's toolkit: TF computes gradients, one fused numpy buffer is
  averaged with ``MPI.Allreduce``;
- ``horovod`` — ``hvd.grouped_allreduce`` of the gradient list (what ``DistributedGradientTape``
  does), kept as its own call so that communication is timed apart from compute.

Everything the loop does is recorded as phases: input (next batch), compute (forward, backward,
update), communication (allreduce), evaluation.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

BACKENDS: tuple[str, ...] = ("mpi4py", "horovod")


@dataclass(frozen=True)
class TrainSettings:
    """What one training run does; recorded in the run's metadata."""

    backend: str = "mpi4py"
    epochs: int = 30
    eval_interval: int = 1
    eval_mode: str = "rank0"  # or "sharded"
    eval_passes: int = 2  # the published study's toolkit ran loss and accuracy as separate passes
    eval_batch: int = 64
    batch: int = 64
    hidden: int = 128
    learning_rate: float = 0.05
    dataset: str = "digits"
    dataset_repeat: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r} is unknown: use one of {', '.join(BACKENDS)}")
        if self.eval_mode not in ("rank0", "sharded"):
            raise ValueError(f"eval_mode {self.eval_mode!r} is unknown: use 'rank0' or 'sharded'")
        if self.eval_interval < 1 or self.epochs < 1:
            raise ValueError("epochs and eval_interval must be >= 1")

    def evaluates_at(self, epoch: int) -> bool:
        """Evaluate after every k-th epoch and after the last (the what-if model's schedule)."""
        return (epoch + 1) % self.eval_interval == 0 or epoch == self.epochs - 1


def load_data(settings: TrainSettings) -> Any:
    """The run's training and test sets (also what the projection's check reads the training set's size from)."""
    from workbench import datasets

    if settings.dataset == "digits":
        return datasets.load_digits_28x28(seed=settings.seed, repeat=settings.dataset_repeat)
    if settings.dataset == "synthetic":
        return datasets.synthetic_mnist(
            1438 * settings.dataset_repeat, 359 * settings.dataset_repeat, seed=settings.seed
        )
    return datasets.load(settings.dataset)


def train_on_rank(run_path: str, settings_dict: dict[str, Any]) -> dict[str, Any]:
    """Run on every rank (an ipyparallel engine or a process under mpiexec); returns rank facts."""
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    from workbench.recorder import Recorder
    from workbench.workloads.training import (
        broadcast_weights,
        fused_mpi_average,
        step_functions,
        stop_idle_horovod,
    )

    settings = TrainSettings(**settings_dict)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if settings.backend == "horovod":
        import horovod.tensorflow as hvd

        hvd.init()
    else:
        stop_idle_horovod()  # a Horovod thread left by an earlier point would slow this one's steps
    tf.keras.utils.set_random_seed(settings.seed)  # Keras draws unseeded initialisers from Python: seed all three
    data = load_data(settings)
    x_train = data.x_train.reshape(len(data.x_train), -1)
    x_test = data.x_test.reshape(len(data.x_test), -1)
    shard_x, shard_y = x_train[rank::size], data.y_train[rank::size]

    model = tf.keras.Sequential(
        [
            tf.keras.Input((x_train.shape[1],)),
            tf.keras.layers.Dense(settings.hidden, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(settings.learning_rate)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables
    broadcast_weights(comm, variables)  # identical start on every rank: rank 0's initial weights

    gradients, apply = step_functions(model, optimizer, loss_fn)

    @tf.function
    def batch_metrics(x: Any, y: Any) -> Any:
        logits = model(x, training=False)
        loss_sum = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), tf.cast(y, tf.int64)), tf.float32))
        return loss_sum, correct

    gradient_bytes = 4 * sum(int(np.prod(v.shape)) for v in variables)
    average_mpi4py = fused_mpi_average(comm, variables)

    def average_horovod(grads: Any) -> list[Any]:
        return hvd.grouped_allreduce(list(grads), op=hvd.Average)

    average = average_mpi4py if settings.backend == "mpi4py" else average_horovod

    def evaluate(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
        loss_total, correct_total = 0.0, 0.0
        for _ in range(settings.eval_passes):
            loss_total, correct_total = 0.0, 0.0
            for start in range(0, len(x), settings.eval_batch):
                loss_sum, correct = batch_metrics(
                    x[start : start + settings.eval_batch], y[start : start + settings.eval_batch]
                )
                loss_total += float(loss_sum)
                correct_total += float(correct)
        return loss_total, correct_total, len(x)

    # CPU samples tell the scaling projection how many cores a rank really kept busy
    recorder = Recorder(run_path, memory_interval_s=0.25)
    recorder.align_clocks(comm)
    steps_per_epoch = len(shard_x) // settings.batch
    history = []
    rng = np.random.default_rng(settings.seed + rank)
    comm.Barrier()
    started = time.perf_counter()
    step = 0
    for epoch in range(settings.epochs):
        recorder.epoch = epoch
        order = rng.permutation(len(shard_x))
        batches = (
            (
                shard_x[order[i * settings.batch : (i + 1) * settings.batch]],
                shard_y[order[i * settings.batch : (i + 1) * settings.batch]],
            )
            for i in range(steps_per_epoch)
        )
        for x, y in recorder.wrap_iterator(batches):
            recorder.step = step
            with recorder.phase("compute", "train_step"):
                _loss, grads = gradients(x, y)
            with recorder.phase("communication", "allreduce", nbytes=gradient_bytes):
                grads = average(grads) if size > 1 else grads
            with recorder.phase("compute", "apply_gradients"):
                apply(grads)
            step += 1
        if settings.evaluates_at(epoch):
            if settings.eval_mode == "rank0":
                # as in the published study: rank 0 alone evaluates; the others go on and wait in the next allreduce
                train_metrics = test_metrics = (0.0, 0.0, 0)
                if rank == 0:
                    with recorder.phase("evaluation", "evaluate"):
                        train_metrics = evaluate(x_train, data.y_train)
                        test_metrics = evaluate(x_test, data.y_test)
            else:
                with recorder.phase("evaluation", "evaluate_shard"):
                    local = np.array(
                        [*evaluate(shard_x, shard_y), *evaluate(x_test[rank::size], data.y_test[rank::size])],
                        dtype=np.float64,
                    )
                    total = np.empty_like(local)
                    comm.Allreduce(local, total, op=MPI.SUM)
                    train_metrics, test_metrics = tuple(total[:3]), tuple(total[3:])
            if rank == 0:
                history.append(
                    {
                        "epoch": epoch,
                        "train_loss": train_metrics[0] / max(train_metrics[2], 1),
                        "train_accuracy": train_metrics[1] / max(train_metrics[2], 1),
                        "test_loss": test_metrics[0] / max(test_metrics[2], 1),
                        "test_accuracy": test_metrics[1] / max(test_metrics[2], 1),
                    }
                )
    with recorder.phase("communication", "final_barrier"):
        comm.Barrier()
    wall = time.perf_counter() - started
    recorder.close()
    return {
        "rank": rank,
        "size": size,
        "wall_s": wall,
        "steps": step,
        "samples": step * settings.batch,
        "history": history,
        "settings": asdict(settings),
        "clock_offset_ns": recorder.clock_offset_ns,
        "clock_precision_ns": recorder.clock_precision_ns,
    }
