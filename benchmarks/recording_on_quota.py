"""What recording costs a training step on nodes with a CPU quota, as nodes are added.

    sudo .venv/bin/python benchmarks/recording_on_quota.py --json     # root; about 5 minutes on 2 cores

On a node of its own a rank's recorder writes from a background thread on a spare core, and its cost is
the hot path's (``workbench bench overhead``). A node with a CPU quota (a container's CPU limit, a node of the
miniature cluster) has no spare core: the thread's CPU comes out of the rank's quota, and where it lands
depends on the step. On one node it lengthens the compute; with other nodes, a rank waiting in its allreduce
leaves the thread the CPU, and an allreduce that completes while the quota is spent waits for the next period.

Each rank runs the eval-frequency workload's step (a 784-128-10 dense network on batches of 64, its
gradients averaged through one ``MPI.Allreduce`` as the case's ``mpi4py`` backend does, then applied), plain
and recorded as the workload records it (three spans a step, the recorder's default flush, memory sampled
every 0.25 s), and with MPI's allreduce of the same bytes alone (no copy out of TensorFlow and back), in
alternating rounds on the same ranks. Each count's steps are split as the projection's check
splits a run's (``analysis.collective_split``): the time between collectives, the wait for the last rank,
the collective after its arrival. ``--json`` prints one object (``benchmarks/results/recording-on-quota.json``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from cluster_options import engines_split, run_measurement

from workbench.analysis.straggler import SPLIT_PARTS

STEPS = 150
ROUNDS = 3
WARMUP_STEPS = 3
#: the cadence the eval-frequency workload records at: the default flush (every 0.5 s), memory every 0.25 s
MEMORY_INTERVAL_S = 0.25
#: each round's sides: MPI's allreduce alone, the workload's averaging around it, the same recorded
SIDES = ("bare", "plain", "recorded")


# -- run on the engines (pickled by value: this file is not importable there) --------------------------------
def dense_steps(
    run_path: str | None, steps: int, seed: int, flush_interval_s: float | None, bare: bool = False
) -> dict[str, Any]:
    """On every rank: ``steps`` training steps, recorded into ``run_path`` (None: not recorded); each step's
    wall seconds outside its allreduce and inside it. ``bare``: MPI's allreduce of the gradients' bytes alone,
    without copying them out of TensorFlow and back (the gradients are applied as they are)."""
    import contextlib
    import time

    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    from workbench.workloads.training import fused_mpi_average, step_functions

    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(seed + 7919 * comm.rank)
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential(
        [tf.keras.Input((784,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
    )
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    gradients, apply = step_functions(model, tf.keras.optimizers.SGD(0.01), loss)
    average = fused_mpi_average(comm, model.trainable_variables)
    x = rng.random((64, 784), dtype=np.float32)
    y = rng.integers(0, 10, 64)
    for _ in range(WARMUP_STEPS):
        apply(average(gradients(x, y)[1]))
    recorder = None
    if run_path is not None:
        from workbench.recorder import Recorder

        recorder = Recorder(run_path, flush_interval_s=flush_interval_s, memory_interval_s=MEMORY_INTERVAL_S)

    def phase(kind: str, name: str, **fields: Any) -> Any:
        return recorder.phase(kind, name, **fields) if recorder is not None else contextlib.nullcontext()

    nbytes = 4 * sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    send = np.ones(nbytes // 4, dtype=np.float32)
    receive = np.empty_like(send)
    comm.Barrier()
    between, collective = [], []
    for step in range(steps):
        if recorder is not None:
            recorder.step = step
        started = time.perf_counter()
        with phase("compute", "train_step"):
            grads = gradients(x, y)[1]
        arrived = time.perf_counter()
        with phase("communication", "allreduce", nbytes=nbytes):
            if bare:
                comm.Allreduce(send, receive, op=MPI.SUM)
            else:
                grads = average(grads)
        left = time.perf_counter()
        with phase("compute", "apply_gradients"):
            apply(grads)
        between.append(arrived - started + time.perf_counter() - left)
        collective.append(left - arrived)
    if recorder is not None:
        recorder.close()
    return {"rank": comm.rank, "between_s": between, "collective_s": collective}


# -- the measurement -----------------------------------------------------------------------------------------
def split_of(results: list[dict[str, Any]]) -> dict[str, float]:
    split = engines_split(results, WARMUP_STEPS)
    split["step_s"] = sum(split[name] for name in SPLIT_PARTS)
    return split


def measure(
    counts: list[int], cpus_per_node: float, link: str | None, steps: int, rounds: int, flush_interval_s: float | None
) -> dict[str, Any]:
    import tempfile

    from workbench import minicluster
    from workbench.store import create_run

    minicluster.check_host_for_own_cluster()
    spec = minicluster.MiniClusterSpec.make(nodes=max(counts), cpus_per_node=cpus_per_node, link=link)
    sides: dict[int, dict[str, list[dict[str, float]]]] = {}
    with minicluster.MiniCluster.up(spec) as mini, tempfile.TemporaryDirectory(dir=mini.directory) as root:
        for count in counts:
            with mini.cluster(count) as cluster:
                for round_number in range(rounds):
                    print(f"{count} node(s), round {round_number + 1} of {rounds}", file=sys.stderr, flush=True)
                    for side in SIDES:  # the same ranks, one side after the other
                        run_path = str(create_run(root, "recording", ranks=count)) if side == "recorded" else None
                        results = cluster.view.apply_sync(
                            dense_steps, run_path, steps, round_number, flush_interval_s, side == "bare"
                        )
                        sides.setdefault(count, {}).setdefault(side, []).append(split_of(results))
    by_count = {}
    for count, measured in sides.items():
        medians = {
            side: {name: statistics.median(s[name] for s in splits) for name in splits[0]}
            for side, splits in measured.items()
        }
        medians["recorded_over_plain"] = medians["recorded"]["step_s"] / medians["plain"]["step_s"]
        if "bare" in medians:
            medians["plain_over_bare"] = medians["plain"]["step_s"] / medians["bare"]["step_s"]
        by_count[str(count)] = medians
    return {
        "cpus_per_node": cpus_per_node,
        "link": link or "unshaped",
        "steps": steps,
        "rounds": rounds,
        "flush_interval_s": flush_interval_s,
        "memory_interval_s": MEMORY_INTERVAL_S,
        "by_count": by_count,
    }


def text(result: dict[str, Any]) -> str:
    lines = [
        f"nodes of {result['cpus_per_node']:g} core, {result['link']} links; {result['steps']} steps x"
        f" {result['rounds']} rounds a side; flush every {result['flush_interval_s'] or 'default'} s;"
        " ms per step (between, wait, collective; the ranks' correlation), each side",
    ]
    for count, sides in result["by_count"].items():
        lines.append(f"  {count} node(s):")
        for side in SIDES:
            if side not in sides:
                continue
            numbers = sides[side]
            parts = "  ".join(f"{name[:-2]} {numbers[name] * 1e3:.3g}" for name in SPLIT_PARTS)
            lines.append(
                f"    {side:9s} {parts}  correlation {numbers['correlation']:.2f}  step {numbers['step_s'] * 1e3:.3g}"
            )
        lines.append(f"    recorded / plain {sides['recorded_over_plain']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,2,8", help="node counts to measure (default 1,2,8)")
    parser.add_argument("--cpus-per-node", type=float, default=0.2, help="each node's share of a core (default 0.2)")
    parser.add_argument("--link", default="1gbit", help="each node's link, e.g. 50mbit, or unshaped (default 1gbit)")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps a round and side ({STEPS})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds ({ROUNDS})")
    parser.add_argument(
        "--flush-interval", type=float, default=None, help="the recorder's flush interval (default: its own)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    counts = sorted({int(c) for c in args.counts.split(",")})
    if counts[0] < 1:
        parser.error(f"--counts {args.counts}: give node counts of 1 or more, e.g. 1,2,8")
    link = None if args.link == "unshaped" else args.link
    return run_measurement(
        "benchmarks/recording_on_quota.py",
        lambda: measure(counts, args.cpus_per_node, link, args.steps, args.rounds, args.flush_interval),
        text,
        as_json=args.json,
    )


if __name__ == "__main__":
    sys.exit(main())
