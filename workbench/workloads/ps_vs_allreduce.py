"""Workload of the "parameter servers vs allreduce" case: InceptionV3 trained two ways (study 004).

- ``allreduce``: every MPI rank is a worker; gradients averaged by Horovod's grouped allreduce
  (what ``hvd.DistributedOptimizer`` does), the step written out so that each part is timed.
- ``ps``: TensorFlow 2's ``ParameterServerStrategy``. Each rank's engine starts a worker server
  (``tf.distribute.Server``, gRPC) and its share of the ``ps`` parameter-server tasks (task ``j`` on
  rank ``j % ranks``) on its own host (127.0.0.1 when all ranks share one), and rank 0's engine a
  chief process that builds the model under ``strategy.scope()`` (variables on
  the PS tasks, round-robin or sharded by ``MinSizePartitioner``) and schedules steps on the workers
  with a ``ClusterCoordinator`` (between-graph replication, asynchronous updates). Everything runs
  in processes of its own (``workbench.workloads.ps_job``) so the engines stay clean for the
  next point, and is stopped by PID when the chief ends.

Both are measured the same way (``workbench.analysis.benchmark_method``): per repetition, ``warmup_steps``
steps per worker not timed, then ``measured_steps`` per worker timed from the first to the last;
images/s = measured images / that wall time. Data is **synthetic** (one tensor in memory) or
**real** (image files of ``data/image_folder`` read and decoded by ``tf.io`` in ``tf.data``).

Recorded per worker (for the ``ps`` scheme the chief writes each worker's lane from timestamps the
workers take inside the step, ``tf.timestamp``): ``input`` (next batch), ``compute`` ``train_step``
(forward and backward; under ``ps`` it includes reading the variables from the PS tasks),
``communication`` (``allreduce``, or ``push_gradients``: gradients sent and applied on the PS),
``compute`` ``apply_gradients`` (allreduce only: the update is local).
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from workbench.config import physical_cores
from workbench.workloads.inception import (
    DATA_KINDS,
    PLACEMENTS,
    SCHEMES,
    InceptionSettings,
    build_model,
    image_files,
    make_dataset,
)


# -- allreduce: every rank a worker ------------------------------------------------------------------------
def train_allreduce(run_path: str, settings: InceptionSettings) -> dict[str, Any]:
    """Run on every rank: repetitions of warm-up + measured steps; returns the rank's facts."""
    import tensorflow as tf

    from workbench.recorder import Recorder
    from workbench.workloads.training import (
        broadcast_weights,
        fresh_rank,
        intra_op_threads,
        recorded_step,
        step_functions,
        trace_before_timing,
    )

    comm, rank, size, hvd = fresh_rank(settings.seed)
    model = build_model(settings)
    optimizer = tf.keras.optimizers.SGD(settings.learning_rate, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    broadcast_weights(comm, model.variables)
    gradient_bytes = int(sum(np.prod(v.shape) for v in model.trainable_variables) * 4)
    iterator = iter(make_dataset(settings, settings.seed + rank))
    gradients, apply = step_functions(model, optimizer, loss_fn)
    recorder = Recorder(run_path, flush_interval_s=0.5)
    recorder.align_clocks(comm)
    trace_before_timing(gradients, apply, *next(iterator))
    rates, step = [], 0
    for repetition in range(settings.repetitions):
        recorder.epoch = repetition
        comm.Barrier()
        for index in range(settings.steps_per_repetition):
            if index == settings.warmup_steps:
                comm.Barrier()
                started = time.perf_counter()
            recorder.step = step
            recorded_step(recorder, iterator, gradients, apply, hvd, gradient_bytes)
            step += 1
        comm.Barrier()
        seconds = time.perf_counter() - started
        rates.append(settings.measured_steps * settings.batch * size / seconds)
    recorder.close()
    return {
        "rank": rank,
        "size": size,
        "role": "worker",
        "workers": size,
        "images_per_s": rates,
        "steps": step,
        "gradient_bytes": gradient_bytes,
        "parameters": int(model.count_params()),
        "threads": intra_op_threads(),
        "host": socket.gethostname(),
        "cores": physical_cores(),
        "settings": asdict(settings),
    }


# -- parameter servers: a TensorFlow job in processes of its own ---------------------------------------------
def train_ps(run_path: str, settings: InceptionSettings) -> dict[str, Any]:
    """Run on every rank: each rank starts its worker (and its share of the PS tasks); rank 0 the chief."""
    from mpi4py import MPI

    from workbench.workloads.ps_job import run_job  # the PS job's own processes; ps_job never imports this module
    from workbench.workloads.training import stop_idle_horovod

    # an allreduce point before this one left Horovod running in the engines: its background thread would
    # take about a third of a core per rank from the PS job's processes (measured: bench allreduce)
    stopped = stop_idle_horovod()
    comm = MPI.COMM_WORLD
    job = run_job(run_path, settings, comm)
    return {"size": comm.Get_size(), "workers": comm.Get_size(), "horovod_stopped": stopped, **job}


def train_on_rank(run_path: str, settings_dict: dict[str, Any]) -> dict[str, Any]:
    """Entry point of every rank: one point of the sweep, either scheme."""
    settings = InceptionSettings(**settings_dict)
    if settings.scheme == "ps":
        return train_ps(run_path, settings)
    return train_allreduce(run_path, settings)


__all__ = [
    "DATA_KINDS",
    "PLACEMENTS",
    "SCHEMES",
    "InceptionSettings",
    "build_model",
    "image_files",
    "make_dataset",
    "train_on_rank",
]
