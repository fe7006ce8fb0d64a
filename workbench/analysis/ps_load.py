"""Parameter-server load: which PS task holds which variables, and the bytes each moves per step.

In between-graph replication every worker pulls every variable from the PS task that holds it and
pushes a gradient of the same size back, once per step. So a PS task moves ``2 x (bytes it holds)``
per worker step, and the busiest task sets the pace: the imbalance ``max / mean`` of the bytes
held is the slowdown of the communication against a perfect split.

TensorFlow 1's ``replica_device_setter`` offered two placements, the seed's backup slide compares
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


def placements(sizes: Sequence[int], ps: int) -> pd.DataFrame:
    """Round-robin, greedy and sharded placements of the same variables over ``ps`` tasks (one frame)."""
    sizes = [int(s) for s in sizes]
    shards = [shard for variable in sharded(sizes, ps) for shard in variable]
    return pd.concat(
        [
            load_table(round_robin(sizes, ps), sizes, ps, "round-robin"),
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


def _check(ps: int) -> None:
    if ps < 1:
        raise ValueError(f"ps={ps}: a placement needs at least one parameter server")


__all__ = ["greedy", "imbalance", "load_table", "placements", "round_robin", "sharded"]
