"""What Horovod's fusion buffer costs a step's gradients on two nodes of the miniature cluster.

    .venv/bin/python benchmarks/fusion_copy.py --link unshaped --json     # root; about 3 minutes on 2 cores

Why: the projection takes a step's allreduce from the link measured with one tensor per size (``bench
allreduce``), while a step allreduces every gradient tensor, which Horovod copies into its fusion buffer and
back out on the node's own share of a core. This times, on 2 nodes of ``--cpus`` of a core each and the
same bytes, interleaved in rounds (medians of the slowest rank):

- ``grouped_s``: ``hvd.grouped_allreduce`` of InceptionV3's gradient tensors (what the ps-vs-allreduce
  case's step does, ``workloads.training.average_gradients``);
- ``one_tensor_s``: ``hvd.allreduce`` of one tensor of the same bytes (what the link measurement does);
- ``mpi_s``: ``MPI.Allreduce`` of one numpy buffer of those bytes (no Horovod);
- ``copy_s``: one numpy copy of the bytes on the node (what one pass through a buffer costs its CPU).

The cluster is brought up for the run and taken down after (one per machine: it refuses beside another).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

ROUNDS = 6


def measure_on_rank(image_size: int, rounds: int) -> dict[str, Any]:
    """On every rank: the medians over ``rounds`` of each way of allreducing InceptionV3's gradients."""
    import statistics

    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    hvd.init()
    comm = MPI.COMM_WORLD
    model = tf.keras.applications.InceptionV3(weights=None, input_shape=(image_size, image_size, 3), classes=10)
    shapes = [tuple(v.shape) for v in model.trainable_variables]
    tensors = [tf.ones(shape, tf.float32) for shape in shapes]
    elements = sum(int(np.prod(shape)) for shape in shapes)
    one = tf.ones([elements], tf.float32)
    send = np.ones(elements, np.float32)
    receive = np.empty_like(send)
    calls = {
        "grouped_s": lambda: hvd.grouped_allreduce(tensors, op=hvd.Average),
        "one_tensor_s": lambda: hvd.allreduce(one, op=hvd.Average),
        "mpi_s": lambda: comm.Allreduce(send, receive),
        "copy_s": lambda: np.copyto(receive, send),
    }

    def slowest(call: Any) -> float:
        comm.Barrier()
        started = time.perf_counter()
        call()
        return comm.allreduce(time.perf_counter() - started, op=MPI.MAX)

    for call in calls.values():  # warm-up: Horovod's first negotiation, TF's first kernels
        call()
        call()
    each: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            each[name].append(slowest(call))
    result: dict[str, Any] = {name: statistics.median(values) for name, values in each.items()}
    result.update(tensors=len(shapes), bytes=elements * 4, each=each, rounds=rounds)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--link", default="unshaped", help="each node's link: a rate (1gbit) or unshaped")
    parser.add_argument("--cpus", type=float, default=0.4, help="each node's share of a core (default 0.4)")
    parser.add_argument("--image-size", type=int, default=75, help="InceptionV3's input side (75: the ci preset)")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    from workbench.minicluster import MiniCluster, MiniClusterError, MiniClusterSpec

    try:
        link = None if args.link == "unshaped" else args.link
        spec = MiniClusterSpec.make(nodes=2, cpus_per_node=args.cpus, link=link)
        with MiniCluster.up(spec) as mini, mini.cluster(2) as cluster:
            result = cluster.view.apply_sync(measure_on_rank, args.image_size, args.rounds)[0]
    except MiniClusterError as error:
        print(f"fusion_copy: {error}", file=sys.stderr)
        return 1
    result.update(link=args.link, cpus_per_node=args.cpus, nodes=2, image_size=args.image_size)
    result["grouped_over_one_tensor"] = result["grouped_s"] / result["one_tensor_s"]
    if args.json:
        print(json.dumps(result))
    else:
        mb = result["bytes"] / 1e6
        print(f"{result['tensors']} tensors, {mb:.3g} MB, 2 nodes of {args.cpus:g} core, link {args.link}")
        for name in ("grouped_s", "one_tensor_s", "mpi_s", "copy_s"):
            print(f"  {name:13s} {result[name] * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
