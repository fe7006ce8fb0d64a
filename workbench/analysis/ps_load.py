"""Parameter-server load: which PS task holds which variables, and the bytes each moves per step.

In between-graph replication every worker pulls every variable from the PS task that holds it and
pushes a gradient of the same size back, once per step. So a PS task moves ``2 x (bytes it holds)``
per worker step, and the busiest task sets the pace: the imbalance ``max / mean`` of the bytes
held is the slowdown of the communication against a perfect split.

TensorFlow 1's ``replica_device_setter`` offered two placements, the published study's backup slide compares
them: **round-robin** (variable *i* on task *i mod P*, in creation order, whatever its size) and
**greedy** (each variable on the task holding the fewest bytes so far). TensorFlow 2's
``ParameterServerStrategy`` places whole variables round-robin unless a ``variable_partitioner``
shards the large ones over the tasks. ``placements`` computes all three from the variables' sizes,
so the measured placement can be put beside the ones not run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

PLACEMENT_COLUMNS: tuple[str, ...] = ("placement", "ps", "variables", "bytes", "bytes_per_step", "share")


def round_robin(sizes: Sequence[int], ps: int) -> list[int]:
    """The PS task of each variable, in creation order: ``i mod ps``."""
    _check(ps)
    return [index % ps for index in range(len(sizes))]


def greedy(sizes: Sequence[int], ps: int) -> list[int]:
    """The PS task of each variable, in creation order: the task with the fewest bytes so far (lowest index on ties)."""
    _check(ps)
    load = [0] * ps
    tasks = []
    for size in sizes:
        task = int(np.argmin(load))
        load[task] += int(size)
        tasks.append(task)
    return tasks


def sharded(sizes: Sequence[int], ps: int, *, min_shard_bytes: int = 256 << 10) -> list[list[tuple[int, int]]]:
    """Shards of each variable as ``(task, bytes)``, like TF's ``MinSizePartitioner`` over ``ps`` tasks.

    A variable is cut into ``min(ps, bytes // min_shard_bytes)`` near-equal shards (at least one),
    shard *k* on task *k*; small variables stay whole, round-robin over the tasks.
    """
    _check(ps)
    placed, small = [], 0
    for size in sizes:
        shards = max(1, min(ps, int(size) // min_shard_bytes))
        if shards == 1:
            placed.append([(small % ps, int(size))])
            small += 1
        else:
            cuts = np.array_split(np.arange(int(size)), shards)
            placed.append([(k, len(cut)) for k, cut in enumerate(cuts)])
    return placed


def load_table(tasks: Sequence[int], sizes: Sequence[int], ps: int, placement: str) -> pd.DataFrame:
    """Per PS task: variables held, bytes, bytes moved per worker step (pull + push), share of all bytes."""
    frame = pd.DataFrame({"ps": list(tasks), "bytes": [int(s) for s in sizes]})
    table = frame.groupby("ps").agg(variables=("bytes", "size"), bytes=("bytes", "sum")).reindex(range(ps))
    table = table.fillna(0).astype("int64").reset_index()
    total = max(int(table["bytes"].sum()), 1)
    table["bytes_per_step"] = 2 * table["bytes"]
    table["share"] = table["bytes"] / total
    table.insert(0, "placement", placement)
    return table[list(PLACEMENT_COLUMNS)]


def placements(sizes: Sequence[int], ps: int, dealt: Sequence[int] | None = None) -> pd.DataFrame:
    """Round-robin, greedy and sharded placements of the same variables over ``ps`` tasks (one frame).

    ``dealt``: the task TensorFlow gave each variable round-robin, where a run recorded it. It deals every
    variable it creates, the non-trainable ones too, in an order the model's lists do not keep: in
    InceptionV3 each convolution's kernel is followed by its batch norm's beta and two moving statistics,
    so over 2 tasks every kernel landed on task 0 (99.9 % of the bytes), where ``i mod ps`` over the
    trainable variables alone gives 56 %.
    """
    sizes = [int(s) for s in sizes]
    shards = [shard for variable in sharded(sizes, ps) for shard in variable]
    return pd.concat(
        [
            load_table(round_robin(sizes, ps) if dealt is None else list(dealt), sizes, ps, "round-robin"),
            load_table(greedy(sizes, ps), sizes, ps, "greedy"),
            load_table([t for t, _ in shards], [b for _, b in shards], ps, "sharded"),
        ],
        ignore_index=True,
    )


def imbalance(table: pd.DataFrame) -> pd.DataFrame:
    """Per placement: the busiest task's bytes over the mean (1.0 = a perfect split)."""
    rows = []
    for placement, group in table.groupby("placement", sort=False):
        mean = group["bytes"].mean()
        rows.append(
            {
                "placement": placement,
                "ps": len(group),
                "busiest_ps": int(group.loc[group["bytes"].idxmax(), "ps"]),
                "imbalance": float(group["bytes"].max() / mean) if mean > 0 else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def link_bytes_per_step(
    scheme: str,
    workers: int,
    gradient_bytes: float,
    shares: Sequence[float] = (),
    steps_per_worker: Sequence[int] | None = None,
) -> list[float]:
    """Bytes each node's link carries each way per step of every worker: one worker per node, node ``i``
    running worker ``i`` and the PS tasks ``j`` with ``j % workers == i`` (``ps_job``'s placement).

    - ``ps``: a node whose PS tasks hold the share ``s`` of the variables serves ``s`` of every other
      worker's pull and takes ``s`` of its push, and its own worker pulls and pushes the other ``1 - s``
      over the link: ``G((W - 1)s + 1 - s)`` each way. ``shares``: each PS task's share, in task order.
      ``steps_per_worker``: the steps each worker ran, where they differ (a ``ClusterCoordinator`` gives
      a step to whichever worker is free, and the worker beside the PS is free first): each worker's
      traffic weighs its steps over the mean.
    - ``allreduce`` (a ring): every node sends and receives ``2G(W - 1)/W``.
    """
    if workers < 1:
        raise ValueError(f"workers={workers}: a step needs at least one worker")
    if scheme == "allreduce":
        return [2.0 * gradient_bytes * (workers - 1) / workers] * workers
    if scheme != "ps":
        raise ValueError(f"scheme {scheme!r} is unknown: use ps or allreduce")
    if not shares:
        raise ValueError("the PS scheme needs each PS task's share of the variables")
    steps = list(steps_per_worker) if steps_per_worker else [1] * workers
    if len(steps) != workers or sum(steps) <= 0:
        raise ValueError(f"steps_per_worker={steps_per_worker!r}: give one count per worker ({workers})")
    weight = [count * workers / sum(steps) for count in steps]
    on_node = [sum(share for task, share in enumerate(shares) if task % workers == node) for node in range(workers)]
    return [
        gradient_bytes * (held * (sum(weight) - weight[node]) + (1.0 - held) * weight[node])
        for node, held in enumerate(on_node)
    ]


def _check(ps: int) -> None:
    if ps < 1:
        raise ValueError(f"ps={ps}: a placement needs at least one parameter server")


__all__ = ["greedy", "imbalance", "link_bytes_per_step", "load_table", "placements", "round_robin", "sharded"]
