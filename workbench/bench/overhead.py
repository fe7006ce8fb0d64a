"""Recording overhead on a real training loop: throughput with and without the recorder.

The same MNIST-shaped Keras model (784 → 128 → 10, batch 64) and the same compiled train step
run in one process, plain and recorded in short alternating blocks, so that machine noise hits
both sides alike; the hot path (one span and one input wait per step) is also timed alone.
Recorded means what a user gets: a span per step, the wait for every
batch through ``wrap_iterator``, memory sampled every 0.25 s and a flush every 0.5 s in the
background. overhead_ratio = recorded / plain throughput (1.0 = free).

Wall-clock throughput on a shared machine moves by more than the 1 % it should resolve, so every
block also counts CPU time: of the training thread (``time.thread_time``: the recorder's hot path
runs there) and of the whole process (``time.process_time``: TensorFlow's pools, the recorder's
flush and memory thread too). A neighbour's job steals wall time, not CPU time, so the CPU ratios
resolve what the wall clock cannot.

How the blocks are compared, from measurements on this 2-core VM:

* This machine's speed drifts slowly (a block's rate correlates 0.6–0.8 with the next one's), so
  short blocks (25 steps, ~33 ms) paired side by side cancel far more of it than long ones: the
  same two minutes gave an interval of ±0.5 % instead of ±1.5 % with 100-step blocks.
* Each side keeps one iterator for the whole run; a fresh one per block put TensorFlow's
  iterator start-up (and its prefetch thread's burst) into every block.
* The ratio is of totals (all plain CPU seconds / all recorded CPU seconds, the same steps on
  each side), with a paired bootstrap interval. A median of per-pair ratios would drop exactly
  the few blocks a 0.5 s flush lands in, and so leave the background thread's cost out; it is
  kept in the JSON (``*_median_of_pairs``) as a cross-check.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

#: Spans per step at which the recorder's cost per span and per flush is measured.
SPANS_PER_STEP: tuple[int, ...] = (1, 8, 64)


def _model_and_step(batch: int) -> tuple[Any, Any, Any]:
    import numpy as np
    import tensorflow as tf

    tf.random.set_seed(0)
    model = tf.keras.Sequential(
        [tf.keras.Input((784,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
    )
    optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    rng = np.random.default_rng(0)
    x = rng.random((batch * 32, 784), dtype=np.float32)
    y = rng.integers(0, 10, batch * 32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat().prefetch(2)
    return train_step, dataset, model


def hot_path_ns(recorder: Any, calls: int = 20_000) -> float:
    """ns the recorder adds to one training step: one span plus one input wait, timed in a tight loop."""
    items = iter(range(calls + 1))
    batches = recorder.wrap_iterator(items)
    start = time.perf_counter_ns()
    for step in range(calls):
        recorder.step = step
        next(batches)
        with recorder.phase("compute", "train_step"):
            pass
    return (time.perf_counter_ns() - start) / calls


def background_cost_share(recorder: Any, steps_per_s: float, trials: int = 15) -> float:
    """Share of a second the background thread needs: one flush per interval, memory samples.

    A flush writes the rows of one interval (a span and an input wait per step); measured as the
    median of ``trials`` flushes of that many rows.
    """
    rows = max(1, int(steps_per_s * recorder.flush_interval_s))
    flushes = []
    for _ in range(trials):
        for step in range(rows):
            recorder.record("compute", step, step + 1, "train_step")
            recorder.record("input", step, step + 1, "next_batch")
        start = time.perf_counter()
        recorder.flush()
        flushes.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(100):
        recorder.sample_memory()
    sample_s = (time.perf_counter() - start) / 100
    memory_interval = recorder._memory_interval_s or 0.0
    return statistics.median(flushes) / recorder.flush_interval_s + (
        sample_s / memory_interval if memory_interval else 0.0
    )


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: order statistics k and n + 1 - k of the sorted values.

    With n pairs the median lies between the k-th smallest and k-th largest with probability
    ``1 - 2 P(Binomial(n, 1/2) < k)``; k is the largest that keeps that at least ``confidence``.
    Fewer than 6 values cannot give 95 %: the interval is then the full range.
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values: run at least one pair of blocks")
    tail = (1.0 - confidence) / 2
    k, below = 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2**n  # P(Binomial(n, 1/2) <= k)
        if below > tail:
            break
        k += 1
    k = max(k, 1)
    return ordered[k - 1], ordered[n - k]


def ratio_of_totals(
    plain_s: Sequence[float],
    recorded_s: Sequence[float],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, tuple[float, float]]:
    """recorded / plain throughput from paired block times, and its paired bootstrap interval.

    Blocks run the same steps on both sides, so throughput ratio = Σ plain seconds / Σ recorded
    seconds. The interval resamples whole pairs (keeping each pair's shared drift) ``resamples``
    times and takes the percentiles; seeded, so a result can be reproduced.
    """
    import numpy as np

    plain = np.asarray(plain_s, dtype=float)
    recorded = np.asarray(recorded_s, dtype=float)
    if len(plain) == 0 or len(plain) != len(recorded):
        raise ValueError(f"need paired blocks: got {len(plain)} plain and {len(recorded)} recorded")
    estimate = float(plain.sum() / recorded.sum())
    picks = np.random.default_rng(seed).integers(0, len(plain), (resamples, len(plain)))
    ratios = plain[picks].sum(axis=1) / recorded[picks].sum(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return estimate, (float(low), float(high))


def recorder_costs(recorder: Any, steps_per_s: float, spans_per_step: tuple[int, ...] = SPANS_PER_STEP) -> list[dict]:
    """CPU cost of one span and one flush at ``spans_per_step``, and their share of a second of training.

    A span is ``with recorder.phase(...)`` timed in a tight loop (CPU ns of the calling thread); a
    flush writes the rows of one flush interval at ``steps_per_s`` (median of 7, CPU ns of the
    flushing thread). ``cpu_share`` is the CPU they take per second of training; ``cpu_ratio`` the
    throughput left, ``1 / (1 + cpu_share)``.
    """
    calls = 20_000
    start = time.thread_time_ns()
    for step in range(calls):
        recorder.step = step
        with recorder.phase("compute", "train_step"):
            pass
    span_ns = (time.thread_time_ns() - start) / calls
    recorder.flush()
    rows = []
    for per_step in spans_per_step:
        steps = max(1, int(steps_per_s * recorder.flush_interval_s))
        flushes = []
        for _ in range(7):
            for step in range(steps * per_step):
                recorder.record("compute", step, step + 1, "train_step")
            start = time.thread_time_ns()
            recorder.flush()
            flushes.append(time.thread_time_ns() - start)
        flush_ns = statistics.median(flushes)
        share = (per_step * span_ns * steps_per_s + flush_ns / recorder.flush_interval_s) * 1e-9
        rows.append(
            {
                "spans_per_step": per_step,
                "ns_per_span": round(span_ns, 1),
                "rows_per_flush": steps * per_step,
                "ms_per_flush": round(flush_ns / 1e6, 3),
                "ns_per_row_flushed": round(flush_ns / (steps * per_step), 1),
                "cpu_share": share,
                "cpu_ratio": 1.0 / (1.0 + share),
            }
        )
    return rows


def _limit_tensorflow_threads(threads: int | None) -> int | None:
    """TensorFlow's intra- and inter-op pools of ``threads`` each; None if TF's runtime already started.

    Its pools spin-wait for work, so any disturbance (the recorder's thread waking, a neighbour's
    job) turns into CPU time in both clocks; one thread each takes that noise out of the ratio.
    """
    if threads is None:
        return None
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # already initialised in this process (e.g. a test run): left as it is
        return None
    return threads


def run(
    repetitions: int = 480, steps: int = 25, batch: int = 64, warmup: int = 20, *, tf_threads: int | None = None
) -> dict[str, Any]:
    """Interleaved blocks (plain, recorded, recorded, plain, ...): ratios of totals with intervals.

    Short blocks alternated in ABBA order put plain and recorded steps side by side in time, so
    the machine's drift cancels. Each block is measured in wall time, the training thread's CPU
    time and the process's CPU time.
    """
    from workbench.recorder import Recorder
    from workbench.store import create_run

    applied_threads = _limit_tensorflow_threads(tf_threads)
    train_step, dataset, _model = _model_and_step(batch)
    iterator = iter(dataset)
    for _ in range(warmup):
        train_step(*next(iterator))

    def clocks() -> tuple[float, float, float]:
        return time.perf_counter(), time.thread_time(), time.process_time()

    def seconds(started: tuple[float, float, float]) -> tuple[float, float, float]:
        return tuple(max(e - s, 1e-9) for s, e in zip(started, clocks()))  # type: ignore[return-value]

    plain_times: list[tuple[float, float, float]] = []
    recorded_times: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory() as root:
        recorder = Recorder(create_run(root, "overhead", ranks=1), rank=0, memory_interval_s=0.25)
        # one iterator per side for the whole run, created here: not inside any timed block
        plain_batches = iter(dataset)
        recorded_batches = recorder.wrap_iterator(iter(dataset))

        def plain() -> tuple[float, float, float]:
            started = clocks()
            for _ in range(steps):
                x, y = next(plain_batches)
                train_step(x, y)
            return seconds(started)

        def recorded() -> tuple[float, float, float]:
            started = clocks()
            for step in range(steps):
                recorder.step = step
                x, y = next(recorded_batches)
                with recorder.phase("compute", "train_step"):
                    train_step(x, y)
            return seconds(started)

        try:
            for repetition in range(repetitions):
                if repetition % 2 == 0:
                    plain_times.append(plain())
                    recorded_times.append(recorded())
                else:
                    recorded_times.append(recorded())
                    plain_times.append(plain())
            plain_steps_per_s = steps * len(plain_times) / sum(t[0] for t in plain_times)
            per_step_ns = hot_path_ns(recorder)
            background_share = background_cost_share(recorder, plain_steps_per_s)
            costs = recorder_costs(recorder, plain_steps_per_s)
        finally:
            recorder.close()
    result: dict[str, Any] = {
        "steps_per_s_plain": plain_steps_per_s,
        "steps_per_s_recorded": steps * len(recorded_times) / sum(t[0] for t in recorded_times),
    }
    for index, key in enumerate(("overhead", "thread_cpu_overhead", "cpu_overhead")):
        plain_s = [t[index] for t in plain_times]
        recorded_s = [t[index] for t in recorded_times]
        estimate, interval = ratio_of_totals(plain_s, recorded_s)
        pairs = [p / r for p, r in zip(plain_s, recorded_s)]
        result[f"{key}_ratio"] = estimate
        result[f"{key}_ci"] = list(interval)
        result[f"{key}_median_of_pairs"] = statistics.median(pairs)
        result[f"{key}_median_of_pairs_ci"] = list(median_interval(pairs))
    # where the recorder's CPU goes: the training thread (hot path) and every other thread (flush, memory)
    total_steps = steps * len(plain_times)
    for side, times in (("plain", plain_times), ("recorded", recorded_times)):
        result[f"training_thread_us_per_step_{side}"] = 1e6 * sum(t[1] for t in times) / total_steps
        result[f"other_threads_us_per_step_{side}"] = 1e6 * sum(t[2] - t[1] for t in times) / total_steps
    wall_pairs = [p[0] / r[0] for p, r in zip(plain_times, recorded_times)]
    quartiles = statistics.quantiles(wall_pairs, n=4) if len(wall_pairs) >= 2 else [wall_pairs[0]] * 3
    return {
        **result,
        "overhead_ratio_quartiles": [quartiles[0], quartiles[2]],
        "hot_path_ns_per_step": per_step_ns,
        "hot_path_bound_ratio": 1.0 / (1.0 + per_step_ns * 1e-9 * plain_steps_per_s),
        "background_cpu_share": background_share,
        "analytic_ratio": 1.0 / (1.0 + per_step_ns * 1e-9 * plain_steps_per_s + background_share),
        "recorder_costs": costs,
        "repetitions": repetitions,
        "steps": steps,
        "batch": batch,
        "tf_threads": applied_threads,
    }


def format_result(result: dict[str, Any]) -> str:
    """The ratios side by side (wall, process CPU, training-thread CPU), then the recorder's own costs."""
    def ratio(name: str, key: str) -> str:
        low, high = result[key.replace("ratio", "ci")]
        return f"{name:<22} {result[key]:.4f}  (95 % interval {low:.4f}-{high:.4f})"

    lines = [
        f"plain    {result['steps_per_s_plain']:8.1f} steps/s",
        f"recorded {result['steps_per_s_recorded']:8.1f} steps/s",
        f"recorded / plain, totals of {result['repetitions']} paired blocks of {result['steps']} steps:",
        ratio("  wall clock", "overhead_ratio"),
        ratio("  CPU time, process", "cpu_overhead_ratio"),
        ratio("  CPU time, training", "thread_cpu_overhead_ratio"),
        f"hot path {result['hot_path_ns_per_step']:.0f} ns per step, background thread "
        f"{100 * result['background_cpu_share']:.2f}% of a second: analytic ratio {result['analytic_ratio']:.4f}",
        "spans/step  ns/span  rows/flush  ms/flush  ns/row flushed  CPU share  ratio",
    ]
    for row in result["recorder_costs"]:
        lines.append(
            f"{row['spans_per_step']:>10}  {row['ns_per_span']:7.0f}  {row['rows_per_flush']:>10}"
            f"  {row['ms_per_flush']:8.2f}  {row['ns_per_row_flushed']:14.0f}  {100 * row['cpu_share']:8.2f}%"
            f"  {row['cpu_ratio']:.4f}"
        )
    return "\n".join(lines)


def command(args: argparse.Namespace) -> int:
    """``workbench bench overhead``."""
    from workbench.bench import print_result

    result = run(repetitions=args.repetitions, steps=args.steps, tf_threads=args.tf_threads)
    print_result(result, args, format_result)
    return 0
