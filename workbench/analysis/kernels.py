"""Which kernels took a GPU's time: kernel types with their overlap, and the kernels that took the most.

Defined as Holistic Trace Analysis's kernel breakdown defines them, so ``benchmarks/peers.py`` can set the two
side by side: the kernel-type breakdown is a GPU's time in compute kernels alone, communication kernels alone,
memory copies and sets alone, and in several at once ("computation overlapping communication"), each type's
activity merged first so that its own overlaps count once; the top kernels are, per GPU, the kernel names by
their total time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench import events as ev

#: Kernel types in HTA's order; time in several at once is named "A overlapping B".
KERNEL_TYPES: tuple[str, ...] = ("computation", "communication", "memory")
_TYPE_OF_KIND = {ev.KERNEL: 0, ev.COLLECTIVE: 1, ev.MEMSET: 2, **{kind: 2 for kind in ev.COPY_KINDS}}
KERNEL_TYPE_COLUMNS = ("rank", "kernel_type", "seconds", "share")
TOP_KERNEL_COLUMNS = ("rank", "kind", "name", "count", "total_s", "mean_us", "min_us", "max_us", "share")


def kernel_type_breakdown(activity: pd.DataFrame) -> pd.DataFrame:
    """Per rank, its GPU time by kernel type and overlap of types (``KERNEL_TYPE_COLUMNS``; ``share`` of the rank's
    GPU busy time): each type's activities merged, then the time with each set of types running."""
    on_gpu = activity["kind"].isin(list(_TYPE_OF_KIND)).to_numpy()
    if not on_gpu.any():
        return pd.DataFrame(columns=list(KERNEL_TYPE_COLUMNS))
    kinds = activity["kind"][on_gpu].astype(str).map(_TYPE_OF_KIND).to_numpy(np.int64)
    ranks = activity["rank"].to_numpy(np.int64)[on_gpu]
    starts, ends = activity["start_ns"].to_numpy(np.int64)[on_gpu], activity["end_ns"].to_numpy(np.int64)[on_gpu]
    rows = []
    for rank in np.unique(ranks):
        times, changes = [], []
        for bit in range(len(KERNEL_TYPES)):
            mine = (ranks == rank) & (kinds == bit)
            merged_start, merged_end = _merged(starts[mine], ends[mine])
            times += [merged_start, merged_end]
            changes += [np.full(len(merged_start), 1 << bit), np.full(len(merged_end), -(1 << bit))]
        time, change = np.concatenate(times), np.concatenate(changes)
        order = np.argsort(time, kind="stable")
        time, running = time[order], np.cumsum(change[order])
        seconds = np.bincount(running[:-1], weights=np.diff(time), minlength=1 << len(KERNEL_TYPES)) / ev.NS_PER_S
        busy = float(seconds[1:].sum())
        for mask in range(1, len(seconds)):
            if seconds[mask] > 0:
                label = " overlapping ".join(n for b, n in enumerate(KERNEL_TYPES) if mask & (1 << b))
                rows.append((int(rank), label, float(seconds[mask]), float(seconds[mask]) / busy))
    return pd.DataFrame(rows, columns=list(KERNEL_TYPE_COLUMNS))


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged where they overlap or touch."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    begins = np.r_[True, start[1:] > reach[:-1]]
    return start[begins], np.maximum.reduceat(end, np.flatnonzero(begins))


def top_kernels(activity: pd.DataFrame, *, count: int = 10) -> pd.DataFrame:
    """Per rank, its ``count`` kernels (compute and collective) with the most total time (``TOP_KERNEL_COLUMNS``;
    ``share`` of the rank's kernel time), longest first."""
    kernels = activity["kind"].isin([ev.KERNEL, ev.COLLECTIVE]).to_numpy()
    if not kernels.any():
        return pd.DataFrame(columns=list(TOP_KERNEL_COLUMNS))
    frame = pd.DataFrame(
        {
            "rank": activity["rank"].to_numpy(np.int64)[kernels],
            "kind": activity["kind"][kernels].astype(str).to_numpy(),
            "name": activity["name"][kernels].to_numpy(),
            "seconds": (activity["end_ns"].to_numpy() - activity["start_ns"].to_numpy())[kernels] / ev.NS_PER_S,
        }
    )
    grouped = frame.groupby(["rank", "kind", "name"], observed=True, sort=False)["seconds"]
    table = grouped.agg(["size", "sum", "mean", "min", "max"]).reset_index()
    table.columns = ["rank", "kind", "name", "count", "total_s", "mean_us", "min_us", "max_us"]
    for column in ("mean_us", "min_us", "max_us"):
        table[column] *= ev.US_PER_S
    table["share"] = table["total_s"] / table.groupby("rank")["total_s"].transform("sum")
    table = table.sort_values(["rank", "total_s"], ascending=[True, False], kind="stable")
    return table.groupby("rank", sort=False).head(count).reset_index(drop=True)[list(TOP_KERNEL_COLUMNS)]
