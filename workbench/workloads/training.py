"""What every data-parallel workload here shares: rank 0's weights everywhere, and a step in two halves.

The step is split so each half can be timed as its own phase: ``gradients`` (forward and backward,
compute) and ``apply`` (the update, compute), with the gradient allreduce between them timed as
communication — what ``hvd.DistributedOptimizer`` does inside one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def broadcast_weights(comm: Any, variables: Any) -> None:
    """Identical start on every rank: rank 0's initial values of ``variables``, over MPI."""
    for variable in variables:
        variable.assign(comm.bcast(variable.numpy(), root=0))


def step_functions(model: Any, optimizer: Any, loss_fn: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``gradients(x, y) -> (loss, grads)`` and ``apply(grads)``, each a ``tf.function``."""
    import tensorflow as tf

    variables = model.trainable_variables

    @tf.function
    def gradients(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return loss, tape.gradient(loss, variables)

    @tf.function
    def apply(grads: Any) -> None:
        optimizer.apply_gradients(zip(grads, variables))

    return gradients, apply


def trace_before_timing(gradients: Callable[..., Any], apply: Callable[..., Any], x: Any, y: Any) -> None:
    """Trace both functions on one batch before the clock starts; zero gradients change no weight."""
    import tensorflow as tf

    apply([tf.zeros_like(g) for g in gradients(x, y)[1]])


def average_gradients(hvd: Any, grads: Any) -> Any:
    """Horovod's grouped allreduce (average) of ``grads``; the gradients as they are on one rank (``hvd`` None)."""
    return hvd.grouped_allreduce(list(grads), op=hvd.Average) if hvd is not None else grads


def fused_mpi_average(comm: Any, variables: Any) -> Callable[[Any], list[Any]]:
    """``average(grads)`` as the published study's toolkit did it: the gradients copied into one numpy buffer, one
    ``MPI.Allreduce``, divided by the ranks and split back into tensors of the variables' shapes."""
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    shapes = [tuple(v.shape) for v in variables]
    sizes = [int(np.prod(shape)) for shape in shapes]
    fused = np.empty(sum(sizes), dtype=np.float32)
    averaged = np.empty_like(fused)
    size = comm.Get_size()

    def average(grads: Any) -> list[Any]:
        offset = 0
        for grad, count in zip(grads, sizes):
            fused[offset : offset + count] = grad.numpy().ravel()
            offset += count
        comm.Allreduce(fused, averaged, op=MPI.SUM)
        np.divide(averaged, size, out=averaged)
        pieces, offset = [], 0
        for shape, count in zip(shapes, sizes):
            pieces.append(tf.constant(averaged[offset : offset + count].reshape(shape)))
            offset += count
        return pieces

    return average


def stop_idle_horovod() -> bool:
    """Shut Horovod down if an earlier point (or a notebook's rank map) started it in this process.

    Its background thread keeps polling on the rank's core and slows whatever the process does next:
    a 0.2 ms MPI step took 1.7 ms here while Horovod merely ran, 0.2 ms again after ``hvd.shutdown()``.
    Returns whether it was running. A later ``hvd.init()`` starts it again.
    """
    import sys

    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None or not hvd.is_initialized():
        return False
    hvd.shutdown()
    return True


def intra_op_threads() -> int:
    """TF's intra-op threads in this process: set explicitly, else from the engine's environment, else TF's
    default (every core)."""
    import os

    import tensorflow as tf

    from workbench.config import physical_cores

    return (
        tf.config.threading.get_intra_op_parallelism_threads()
        or int(os.environ.get("TF_NUM_INTRAOP_THREADS", "0") or 0)
        or physical_cores()
    )


def recorded_step(
    recorder: Any,
    iterator: Any,
    gradients: Callable[..., Any],
    apply: Callable[..., Any],
    hvd: Any,
    gradient_bytes: int,
) -> None:
    """One data-parallel step, each part its own span: the next batch (``input``), forward and backward
    (``compute`` ``train_step``), Horovod's grouped allreduce of the gradients (``communication``; none
    when ``hvd`` is None, one rank) and the update (``compute`` ``apply_gradients``)."""
    with recorder.phase("input", "next_batch"):
        x, y = next(iterator)
    with recorder.phase("compute", "train_step"):
        _loss, grads = gradients(x, y)
    with recorder.phase("communication", "allreduce", nbytes=gradient_bytes):
        grads = average_gradients(hvd, grads)
    with recorder.phase("compute", "apply_gradients"):
        apply(grads)


def fresh_rank(seed: int) -> tuple[Any, int, int, Any]:
    """Start a point on a long-lived engine: drop the previous point's models, join MPI, Horovod when > 1 rank.

    Returns ``(comm, rank, size, hvd)`` with ``hvd`` None on a single rank.
    """
    import gc

    import tensorflow as tf
    from mpi4py import MPI

    tf.keras.backend.clear_session()
    gc.collect()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    hvd = None
    if size > 1:
        import horovod.tensorflow as hvd

        hvd.init()
    tf.random.set_seed(seed)
    return comm, rank, size, hvd
