"""Allreduce as the product measures it: raw MPI (mpi4py, numpy buffers) beside Horovod (TF tensors), on ranks.

Method of nccl-tests and the OSU micro-benchmarks: per message size, warm-up calls, then a timed
loop between barriers; the time of a call is the slowest rank's mean. algbw = bytes / time and
busbw = algbw · 2(n−1)/n, the bandwidth each link must sustain in a ring allreduce, comparable
across rank counts. Both libraries run on the same ranks in the same process, interleaved per size.

Beside the collectives it measures what Horovod costs a rank that is *not* communicating: its background
thread wakes every cycle (``HOROVOD_CYCLE_TIME``) to negotiate with the other ranks, and on CPU-only
training it takes that time from the rank's compute. A small TF convolution step is timed on every rank
with Horovod stopped and running idle, interleaved; ``horovod_thread_cores`` is the share of the rank's
cores the compute lost (0.35: a third of one core). The projection charges it at 2 ranks and more.

``measure`` runs on every rank (a node sweep measures its link with it); ``workbench bench allreduce``
(``bench.allreduce``) starts ranks that run it and prints the table.
"""

from __future__ import annotations

import time
from typing import Any

DEFAULT_SIZES = tuple(2**k for k in range(10, 27, 2))  # 1 KiB, 4 KiB, ..., 64 MiB


def bus_bandwidth_factor(ranks: int) -> float:
    """busbw / algbw for a ring allreduce: 2(n−1)/n (0 for one rank: nothing crosses a link)."""
    return 2.0 * (ranks - 1) / ranks


def _time_calls(call: Any, comm: Any, min_seconds: float, min_iterations: int, max_iterations: int) -> float:
    """Mean seconds per call of the slowest rank, after warm-up; all ranks agree on the count."""
    from mpi4py import MPI

    for _ in range(3):
        call()
    comm.Barrier()
    start = time.perf_counter()
    call()
    estimate = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    iterations = int(min(max_iterations, max(min_iterations, min_seconds / max(estimate, 1e-7))))
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    elapsed = time.perf_counter() - start
    return comm.allreduce(elapsed, op=MPI.MAX) / iterations


#: Interleaved rounds (Horovod stopped, then running) and seconds of compute timed in each.
IDLE_ROUNDS, IDLE_BLOCK_S = 3, 0.6


def _compute_step(batch: int = 256) -> Any:
    """A LeNet-sized convolution training step (batch 256, ~15 ms on one core) as a ``tf.function``."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = tf.constant(rng.random((batch, 28, 28, 1), dtype=np.float32))
    kernels = [tf.Variable(rng.normal(0, 0.1, shape).astype(np.float32)) for shape in ((5, 5, 1, 6), (5, 5, 6, 16))]

    @tf.function
    def step() -> Any:
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, kernels[0], 1, "VALID"))
            h = tf.nn.relu(tf.nn.conv2d(tf.nn.max_pool2d(h, 2, 2, "VALID"), kernels[1], 1, "VALID"))
            loss = tf.reduce_mean(h * h)
        for kernel, gradient in zip(kernels, tape.gradient(loss, kernels)):
            kernel.assign_sub(0.01 * gradient)
        return loss

    return step


def _steps_per_s(step: Any, comm: Any, seconds: float) -> float:
    """This rank's compute rate over ``seconds``, all ranks starting together."""
    comm.Barrier()
    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return count / (time.perf_counter() - start)


def horovod_thread_cores(comm: Any, threads: int, rounds: int = IDLE_ROUNDS, seconds: float = IDLE_BLOCK_S) -> float:
    """Cores' worth of compute each rank loses while Horovod runs idle beside it (0 on one rank).

    ``threads`` × (1 − rate with Horovod / rate without), medians of interleaved rounds, the slowest
    rank's loss (a step waits for it). Leaves Horovod running.
    """
    import statistics

    import horovod.tensorflow as hvd

    step = _compute_step()
    for _ in range(5):
        step()
    stopped, running = [], []
    for _ in range(rounds):
        if hvd.is_initialized():
            hvd.shutdown()
        stopped.append(_steps_per_s(step, comm, seconds))
        hvd.init()
        time.sleep(0.05)  # the background thread's first cycles
        running.append(_steps_per_s(step, comm, seconds))
    lost = max(0.0, 1.0 - statistics.median(running) / statistics.median(stopped))
    return threads * max(comm.allgather(lost))


def measure(
    sizes: tuple[int, ...] = DEFAULT_SIZES, min_seconds: float = 0.25, with_horovod: bool = True
) -> list[dict[str, Any]]:
    """Run on every rank (under mpiexec); rank 0 gets the rows, the others an empty list.

    ``with_horovod=False`` measures raw MPI only (Horovod is linked to Open MPI, not MPICH).
    """
    import numpy as np
    from mpi4py import MPI

    if with_horovod:
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init()
    comm = MPI.COMM_WORLD
    ranks = comm.Get_size()
    factor = bus_bandwidth_factor(ranks)
    rows = []
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        send = np.ones(count, dtype=np.float32)
        receive = np.empty_like(send)

        def mpi_call(send: Any = send, receive: Any = receive) -> None:
            comm.Allreduce(send, receive, op=MPI.SUM)

        mpi_seconds = _time_calls(mpi_call, comm, min_seconds, 5, 2000)
        horovod_seconds = float("nan")
        if with_horovod:
            tensor = tf.constant(send)

            def horovod_call(tensor: Any = tensor, name: str = f"bench_allreduce_{nbytes}") -> None:
                hvd.allreduce(tensor, op=hvd.Sum, name=name).numpy()

            horovod_seconds = _time_calls(horovod_call, comm, min_seconds, 5, 2000)
        if not np.allclose(receive[:4], ranks):
            raise RuntimeError(f"MPI allreduce returned {receive[:4]} instead of {ranks}")
        actual = count * 4
        rows.append(
            {
                "bytes": actual,
                "ranks": ranks,
                "mpi_seconds": mpi_seconds,
                "horovod_seconds": horovod_seconds,
                "mpi_algbw_gbps": actual / mpi_seconds / 1e9,
                "horovod_algbw_gbps": actual / horovod_seconds / 1e9,
                "mpi_busbw_gbps": actual / mpi_seconds / 1e9 * factor,
                "horovod_busbw_gbps": actual / horovod_seconds / 1e9 * factor,
                "horovod_over_mpi": mpi_seconds / horovod_seconds,
            }
        )
    if with_horovod:  # last: stopping and starting Horovod must not touch the collectives' timings
        from workbench.workloads.training import intra_op_threads

        idle_cores = horovod_thread_cores(comm, intra_op_threads())
        rows = [{**row, "horovod_thread_cores": idle_cores} for row in rows]
    return rows if comm.Get_rank() == 0 else []
