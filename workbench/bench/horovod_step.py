"""Where Horovod's cost per step goes, on the eval-frequency workload's step (MLP 784 -> 128 -> 10, batch 64).

The eval-frequency case's 2 ranks scale better with one fused ``MPI.Allreduce`` per step than with
Horovod on this project's 2-core machine. This bench runs the same training step under ``mpiexec`` on 1 and 2
ranks and times, interleaved in rounds within one process, the ways of averaging the gradients:

- ``mpi4py``: the gradients copied into one numpy buffer, one ``MPI.Allreduce`` (the case's baseline);
- ``grouped``: ``hvd.grouped_allreduce`` of the gradient list from eager Python, as the case does;
- ``fused``: the gradients concatenated into one tensor, one ``hvd.allreduce``, split again;
- ``in_graph``: forward, backward, ``hvd.grouped_allreduce`` and the update in one ``tf.function``
  (what ``hvd.DistributedGradientTape`` inside a ``tf.function`` step gives).

Each launch has one ``HOROVOD_CYCLE_TIME`` (Horovod reads it at ``hvd.init``). One rank runs the step
without any allreduce, as the case does. The speedup of a variant is 2 ranks' samples/s over one rank's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

VARIANTS: tuple[str, ...] = ("mpi4py", "grouped", "fused", "in_graph")
CYCLE_TIMES_MS: tuple[float, ...] = (0.1, 1.0, 5.0)


def _rank_program(steps: int, rounds: int, batch: int) -> None:
    """Runs on every rank under mpiexec; rank 0 prints one JSON line of seconds per step per variant."""
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    from workbench.workloads.training import fused_mpi_average

    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    hvd = None
    if size > 1:
        import horovod.tensorflow as hvd

        hvd.init()
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [tf.keras.Input((784,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
    )
    optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables
    shapes = [tuple(v.shape) for v in variables]
    sizes = [int(np.prod(s)) for s in shapes]
    mpi4py_average = fused_mpi_average(comm, variables)
    rng = np.random.default_rng(comm.Get_rank())
    x = tf.constant(rng.random((batch, 784), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, batch))

    @tf.function
    def gradients(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return tape.gradient(loss, variables)

    @tf.function
    def apply(grads: Any) -> None:
        optimizer.apply_gradients(zip(grads, variables))

    @tf.function
    def whole_step(x: Any, y: Any) -> None:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, variables)
        if hvd is not None:
            grads = hvd.grouped_allreduce(grads, op=hvd.Average)
        optimizer.apply_gradients(zip(grads, variables))

    def fused_average(grads: Any) -> Any:
        flat = hvd.allreduce(tf.concat([tf.reshape(g, [-1]) for g in grads], 0), op=hvd.Average)
        return [tf.reshape(piece, shape) for piece, shape in zip(tf.split(flat, sizes), shapes)]

    def step(variant: str) -> None:
        if variant == "in_graph":
            whole_step(x, y)
            return
        grads = gradients(x, y)
        if size > 1:
            if variant == "mpi4py":
                grads = mpi4py_average(grads)
            elif variant == "grouped":
                grads = hvd.grouped_allreduce(list(grads), op=hvd.Average)
            else:
                grads = fused_average(grads)
        apply(grads)

    timings: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for variant in VARIANTS:  # trace and warm up every path first
        for _ in range(20):
            step(variant)
    for _ in range(rounds):
        for variant in VARIANTS:
            comm.Barrier()
            started = time.perf_counter()
            for _ in range(steps):
                step(variant)
            elapsed = comm.allreduce(time.perf_counter() - started, op=MPI.MAX)
            timings[variant].append(elapsed / steps)
    # every variant averaged the gradients: the ranks, fed different batches, still hold the same weights
    weights = np.concatenate([v.numpy().ravel() for v in variables])
    agree = bool(comm.allreduce(float(np.abs(weights - comm.bcast(weights, root=0)).max()), op=MPI.MAX) < 1e-5)
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps({"ranks": size, "seconds_per_step": timings, "weights_agree": agree}), flush=True)


def _launch(ranks: int, cycle_time_ms: float | None, steps: int, rounds: int, batch: int) -> dict[str, Any]:
    from workbench.config import ClusterConfig

    program = [sys.executable, "-m", "workbench.bench.horovod_step", str(steps), str(rounds), str(batch)]
    done = ClusterConfig(n=ranks, horovod_cycle_time_ms=cycle_time_ms).launch(program)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the {ranks}-rank launch failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def run(
    steps: int = 300, rounds: int = 5, batch: int = 64, cycle_times_ms: tuple[float, ...] = CYCLE_TIMES_MS
) -> dict[str, Any]:
    """One rank without allreduce, then 2 ranks at each cycle time; rows of ms per step and speedup."""
    one_rank = _launch(1, None, steps, rounds, batch)["seconds_per_step"]
    one = {variant: statistics.median(times) for variant, times in one_rank.items()}
    rows = []
    for cycle_ms in cycle_times_ms:
        two = _launch(2, cycle_ms, steps, rounds, batch)
        if not two["weights_agree"]:
            raise RuntimeError("the ranks' weights differ after training: a variant did not average the gradients")
        for variant, times in two["seconds_per_step"].items():
            per_step = statistics.median(times)
            rows.append(
                {
                    "variant": variant,
                    "cycle_time_ms": cycle_ms,
                    "ms_per_step": per_step * 1e3,
                    "ms_per_step_range": [min(times) * 1e3, max(times) * 1e3],
                    "one_rank_ms_per_step": one[variant] * 1e3,
                    # what 2 ranks add to the same step on one rank: the allreduce and its waits
                    "added_ms_per_step": (per_step - one[variant]) * 1e3,
                    "speedup_2_over_1": 2 * one[variant] / per_step,
                }
            )
    return {"steps": steps, "rounds": rounds, "batch": batch, "rows": rows}


def format_result(result: dict[str, Any]) -> str:
    lines = [
        f"batch {result['batch']} per rank; median of {result['rounds']} rounds of {result['steps']} steps",
        f"{'variant':<10} {'cycle ms':>8} {'1 rank ms':>9} {'2 ranks ms':>10} {'added ms':>8} {'2 ranks / 1':>11}",
    ]
    for row in result["rows"]:
        lines.append(
            f"{row['variant']:<10} {row['cycle_time_ms']:>8g} {row['one_rank_ms_per_step']:>9.3g}"
            f" {row['ms_per_step']:>10.3g} {row['added_ms_per_step']:>8.3g} {row['speedup_2_over_1']:>10.3g}x"
        )
    return "\n".join(lines)


def command(args: argparse.Namespace) -> int:
    """``workbench bench horovod-step``."""
    from workbench.bench import print_result

    print_result(run(steps=args.steps, rounds=args.rounds), args, format_result)
    return 0


if __name__ == "__main__":
    _rank_program(*(int(value) for value in sys.argv[1:4]))
