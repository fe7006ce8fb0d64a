"""What the heartbeat's wait-for-a-core reading costs a rank: ``CpuWaitProbe.sample()`` in a TensorFlow process.

    .venv/bin/python benchmarks/cpu_probe_cost.py --json     # about 30 s on 2 cores

The recorder reads every thread's ``/proc/self/task/*/schedstat`` once a heartbeat (a second), so the cost
grows with the threads a rank has. A rank's threads are mostly TensorFlow's: its pools, started by the first
step. This builds and trains the eval-frequency workload's model (784-128-10, batch 64) a few steps, as a rank
does, then times ``sample()`` (this thread's CPU per call) beside the heartbeat's older read
(``psutil.Process.cpu_percent``), alternating in rounds. The cost per second of a heartbeat a second is set
beside a node of 0.2 core, where the recorder's CPU comes out of the steps' quota. ``--threads N`` instead
starts N idle Python threads and no TensorFlow (a quick check, and the cost's growth with threads).
``--json`` prints one object (``benchmarks/results/cpu-probe-cost.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from typing import Any

SAMPLES = 200
ROUNDS = 5
NODE_SHARE = 0.2


def tensorflow_rank() -> dict[str, Any]:
    """A trained-a-few-steps Keras model in this process, as a rank has; what it is."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    model = tf.keras.Sequential(
        [tf.keras.Input((784,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
    )
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x, y = rng.random((640, 784), dtype=np.float32), rng.integers(0, 10, 640)
    model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    model.evaluate(x, y, batch_size=64, verbose=0)
    return {"process": f"TensorFlow {tf.__version__}, the eval-frequency model trained 10 steps"}


def idle_threads(count: int) -> dict[str, Any]:
    stop = threading.Event()
    for _ in range(count):
        threading.Thread(target=stop.wait, daemon=True).start()
    return {"process": f"{count} idle Python threads, no TensorFlow"}


def per_call_cpu_us(call: Any, samples: int) -> list[float]:
    """This thread's CPU (µs) for each of ``samples`` calls."""
    costs = []
    for _ in range(samples):
        started = time.thread_time_ns()
        call()
        costs.append((time.thread_time_ns() - started) / 1e3)
    return costs


def measure(threads: int | None, samples: int, rounds: int) -> dict[str, Any]:
    import psutil

    from workbench.cpu_probe import CpuWaitProbe

    what = idle_threads(threads) if threads else tensorflow_rank()
    probe, process = CpuWaitProbe(), psutil.Process()
    process.cpu_percent(None)
    costs: dict[str, list[float]] = {"probe": [], "cpu_percent": []}
    for _ in range(rounds):  # alternating: a drift of the machine falls on both
        costs["probe"] += per_call_cpu_us(probe.sample, samples)
        costs["cpu_percent"] += per_call_cpu_us(lambda: process.cpu_percent(None), samples)
    probe_us = statistics.median(costs["probe"])
    return {
        **what,
        "threads": len(os.listdir("/proc/self/task")),
        "samples": samples * rounds,
        "probe_us": probe_us,
        "probe_p90_us": statistics.quantiles(costs["probe"], n=10)[-1],
        "cpu_percent_us": statistics.median(costs["cpu_percent"]),
        "per_thread_us": probe_us / len(os.listdir("/proc/self/task")),
        "node_share": NODE_SHARE,
        "share_of_node": probe_us / 1e6 / NODE_SHARE,  # at a heartbeat a second
        "quota_cores": probe.quota_cores,
    }


def text(result: dict[str, Any]) -> str:
    return (
        f"{result['process']}: {result['threads']} threads. CpuWaitProbe.sample() {result['probe_us']:.0f} µs of CPU"
        f" (90th percentile {result['probe_p90_us']:.0f} µs; {result['per_thread_us']:.1f} µs a thread), psutil's"
        f" cpu_percent {result['cpu_percent_us']:.0f} µs; at a heartbeat a second"
        f" {result['share_of_node']:.2%} of a node of {result['node_share']:g} core"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="idle Python threads instead of TensorFlow")
    parser.add_argument("--samples", type=int, default=SAMPLES, help="calls a round, each side")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args()
    started = time.perf_counter()
    result = measure(options.threads, options.samples, options.rounds)
    result["seconds"] = time.perf_counter() - started
    print(json.dumps(result, indent=1) if options.json else text(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
