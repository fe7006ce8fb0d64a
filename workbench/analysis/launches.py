"""Why a GPU sat idle, and what launching its kernels cost: from the host's launch calls tied to what they launched.

Input: device activity (``events.DEVICE_SCHEMA``) whose rows carry ``correlation``, the id a PyTorch (Kineto)
trace gives a CUDA runtime call and the GPU activity it launched. Defined as Holistic Trace Analysis defines
them, so that ``benchmarks/peers.py`` can set the two tools' numbers side by side:

- ``idle_by_cause``: on each stream, in start order, the gap before each activity is idle time, and its cause
  is ``host_wait`` when the host called the launch after the previous activity had ended (the GPU waited for
  the CPU), else ``kernel_wait`` when the gap is under ``KERNEL_GAP_NS`` (back-to-back launch overhead), else
  ``other`` (waiting for an event: another stream, a collective, a synchronisation).
- ``kernel_launches``: per launch call (``LAUNCH_CALLS``) and the activity it launched, the call's CPU time,
  the activity's GPU time and the launch delay (from the call's end to the activity's start, at least 0).

Activity without correlation (TensorFlow profiles, Horovod timelines) gives empty tables: the finding then
says nothing, rather than a cause it cannot see.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.devices import group_codes

HOST_WAIT, KERNEL_WAIT, OTHER = "host_wait", "kernel_wait", "other"
IDLE_CAUSES: tuple[str, ...] = (HOST_WAIT, KERNEL_WAIT, OTHER)
#: A gap shorter than this between two activities of a stream is launch overhead (HTA's default, 30 µs).
KERNEL_GAP_NS = 30_000
#: The runtime calls that launch GPU work (HTA's list, memory copies and sets included).
LAUNCH_CALLS: tuple[str, ...] = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
#: A launch call longer than this is a runtime outlier; a kernel shorter than its call, under it, is short.
RUNTIME_CUTOFF_NS = 50_000
#: A launch delay longer than this is an outlier (HTA's defaults: 50 and 100 µs).
LAUNCH_DELAY_CUTOFF_NS = 100_000
#: A finding is made when the GPUs waited for their hosts at least this share of their idle time.
HOST_WAIT_SHARE = 0.5

IDLE_CAUSE_COLUMNS = ("rank", "host", "device", "stream", "cause", "idle_s", "idle_share")
LAUNCH_COLUMNS = ("rank", "correlation", "cpu_s", "gpu_s", "launch_delay_s")
LAUNCH_SUMMARY_COLUMNS = (
    "rank",
    "launches",
    "cpu_mean_us",
    "gpu_mean_us",
    "launch_delay_mean_us",
    "launch_delay_median_us",
    "short_kernels",
    "runtime_outliers",
    "launch_delay_outliers",
)


def _has_correlation(activity: pd.DataFrame) -> bool:
    """Whether any row ties a launch to its activity (checked first: a large profile without any is not copied)."""
    return "correlation" in activity.columns and bool((activity["correlation"].to_numpy() >= 0).any())


def _launch_rows(activity: pd.DataFrame) -> pd.DataFrame:
    """The runtime calls with a correlation, the first per (rank, correlation), and whether each launches GPU work
    (``LAUNCH_CALLS``). Columns are taken as arrays first: filtering the whole frame would copy every column."""
    columns = ["rank", "correlation", "launch_start_ns", "launch_end_ns", "launches_work"]
    correlation = activity["correlation"].to_numpy(np.int64)
    keep = (activity["kind"] == ev.RUNTIME).to_numpy() & (correlation >= 0)
    calls = pd.DataFrame(
        {
            "rank": activity["rank"].to_numpy(np.int64)[keep],
            "correlation": correlation[keep],
            "launch_start_ns": activity["start_ns"].to_numpy(np.int64)[keep],
            "launch_end_ns": activity["end_ns"].to_numpy(np.int64)[keep],
            "launches_work": activity["name"].isin(LAUNCH_CALLS).to_numpy()[keep],
        }
    )
    return calls.drop_duplicates(["rank", "correlation"])[columns]


def _gpu_rows(activity: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The GPU's activity, only ``columns``."""
    on_gpu = activity["kind"].isin(ev.GPU_KINDS).to_numpy()
    out = {}
    for column in columns:
        values = activity[column]
        out[column] = values[on_gpu] if isinstance(values.dtype, pd.CategoricalDtype) else values.to_numpy()[on_gpu]
    return pd.DataFrame(out).reset_index(drop=True)


def idle_by_cause(activity: pd.DataFrame, *, kernel_gap_ns: int = KERNEL_GAP_NS) -> pd.DataFrame:
    """Per stream of each GPU, its idle time by cause (``IDLE_CAUSE_COLUMNS``; ``idle_share`` of the stream's idle).

    Empty when no GPU activity carries a correlation (the cause of a gap needs its launch's time).
    """
    if not _has_correlation(activity):
        return pd.DataFrame(columns=list(IDLE_CAUSE_COLUMNS))
    gpu = _gpu_rows(activity, ["rank", "host", "device", "stream", "start_ns", "end_ns", "correlation"])
    if gpu.empty or not (gpu["correlation"].to_numpy() >= 0).any():
        return pd.DataFrame(columns=list(IDLE_CAUSE_COLUMNS))
    launches = _launch_rows(activity)
    keys = pd.MultiIndex.from_arrays([gpu["rank"].to_numpy(np.int64), gpu["correlation"].to_numpy(np.int64)])
    by_key = pd.Series(
        launches["launch_start_ns"].to_numpy(), index=pd.MultiIndex.from_frame(launches[["rank", "correlation"]])
    )
    launch_start = by_key.reindex(keys, fill_value=-1).to_numpy(np.int64)  # -1: no launch call found
    codes, streams = group_codes(gpu, ["rank", "host", "device", "stream"])
    start, end = gpu["start_ns"].to_numpy(np.int64), gpu["end_ns"].to_numpy(np.int64)
    order = np.lexsort((start, codes))
    codes, start, end, launch_start = codes[order], start[order], end[order], launch_start[order]
    has_previous = np.r_[False, codes[1:] == codes[:-1]]
    previous_end = np.r_[np.int64(0), end[:-1]]  # ns since the epoch stay integers: float64 would round them
    gap = (start - previous_end)[has_previous]
    waited_for_host = launch_start[has_previous] > previous_end[has_previous]  # no launch found: -1, not later
    cause = np.where(waited_for_host, 0, np.where(gap < kernel_gap_ns, 1, 2))
    groups = len(streams)
    idle = np.zeros((groups, len(IDLE_CAUSES)))
    np.add.at(idle, (codes[has_previous], cause), gap)
    table = streams.loc[np.repeat(np.arange(groups), len(IDLE_CAUSES))].reset_index(drop=True)
    table["cause"] = np.tile(IDLE_CAUSES, groups)
    table["idle_s"] = idle.ravel() / ev.NS_PER_S
    stream_idle = np.repeat(idle.sum(axis=1), len(IDLE_CAUSES)) / ev.NS_PER_S
    table["idle_share"] = table["idle_s"] / np.where(stream_idle > 0, stream_idle, np.nan)
    return table[list(IDLE_CAUSE_COLUMNS)]


def kernel_launches(activity: pd.DataFrame) -> pd.DataFrame:
    """Per launch call and the GPU activity it launched: the call's CPU seconds, the activity's GPU seconds and the
    launch delay (``LAUNCH_COLUMNS``)."""
    if not _has_correlation(activity):
        return pd.DataFrame(columns=list(LAUNCH_COLUMNS))
    launches = _launch_rows(activity)
    launches = launches[launches["launches_work"].to_numpy(bool)]
    gpu = _gpu_rows(activity, ["rank", "correlation", "start_ns", "end_ns"])
    gpu = gpu[(gpu["correlation"] >= 0).to_numpy()]
    if launches.empty or gpu.empty:
        return pd.DataFrame(columns=list(LAUNCH_COLUMNS))
    joined = gpu.astype({"rank": np.int64}).merge(launches, on=["rank", "correlation"], how="inner")
    return pd.DataFrame(
        {
            "rank": joined["rank"],
            "correlation": joined["correlation"],
            "cpu_s": (joined["launch_end_ns"] - joined["launch_start_ns"]) / ev.NS_PER_S,
            "gpu_s": (joined["end_ns"] - joined["start_ns"]) / ev.NS_PER_S,
            "launch_delay_s": (joined["start_ns"] - joined["launch_end_ns"]).clip(lower=0) / ev.NS_PER_S,
        }
    )


def launch_summary(
    launches: pd.DataFrame,
    *,
    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS,
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS,
) -> pd.DataFrame:
    """Per rank: launches, mean CPU and GPU time, launch delay (mean, median) and HTA's three outlier counts —
    short kernels (the GPU ran shorter than the call that launched it, a call under the runtime cutoff), runtime
    outliers (calls over it) and launch-delay outliers (``LAUNCH_SUMMARY_COLUMNS``)."""
    if launches.empty:
        return pd.DataFrame(columns=list(LAUNCH_SUMMARY_COLUMNS))
    cutoff_s, delay_cutoff_s = runtime_cutoff_ns / ev.NS_PER_S, launch_delay_cutoff_ns / ev.NS_PER_S
    flagged = launches.assign(
        short=(launches["cpu_s"] <= cutoff_s) & (launches["gpu_s"] < launches["cpu_s"]),
        runtime_outlier=launches["cpu_s"] > cutoff_s,
        delay_outlier=launches["launch_delay_s"] > delay_cutoff_s,
    )
    grouped = flagged.groupby("rank", sort=True)
    table = pd.DataFrame(
        {
            "launches": grouped.size(),
            "cpu_mean_us": grouped["cpu_s"].mean() * ev.US_PER_S,
            "gpu_mean_us": grouped["gpu_s"].mean() * ev.US_PER_S,
            "launch_delay_mean_us": grouped["launch_delay_s"].mean() * ev.US_PER_S,
            "launch_delay_median_us": grouped["launch_delay_s"].median() * ev.US_PER_S,
            "short_kernels": grouped["short"].sum(),
            "runtime_outliers": grouped["runtime_outlier"].sum(),
            "launch_delay_outliers": grouped["delay_outlier"].sum(),
        }
    ).reset_index()
    return table[list(LAUNCH_SUMMARY_COLUMNS)]


def launch_findings(
    causes: pd.DataFrame, summary: pd.DataFrame, *, wall_s: float | None, min_fraction: float = 0.02
) -> list[dict[str, object]]:
    """``host_bound_gpu``: the GPUs waited for their hosts to launch work for at least ``HOST_WAIT_SHARE`` of their
    idle time; lost: that wait, per GPU. Rows of ``analysis.findings``."""
    if causes.empty or not wall_s or wall_s <= 0:
        return []
    per_gpu = causes.pivot_table(
        index=["rank", "host", "device"], columns="cause", values="idle_s", aggfunc="sum", observed=True
    ).reindex(columns=list(IDLE_CAUSES), fill_value=0.0)
    idle = float(per_gpu.to_numpy().sum())
    host_wait = float(per_gpu[HOST_WAIT].sum())
    lost = host_wait / len(per_gpu)
    if idle <= 0 or host_wait / idle < HOST_WAIT_SHARE or lost / wall_s < min_fraction:
        return []
    (rank, host, device), worst = max(per_gpu[HOST_WAIT].items(), key=lambda item: item[1])
    launches = ""
    if len(summary):
        count = int(summary["launches"].sum())
        slow_calls = int(summary["runtime_outliers"].sum())
        cpu_us = float(np.average(summary["cpu_mean_us"], weights=summary["launches"]))
        launches = (
            f"; {count:,} launches, each {cpu_us:.3g} µs of CPU on average,"
            f" {slow_calls:,} over {RUNTIME_CUTOFF_NS / 1000:.0f} µs"
        )
    text = (
        f"the GPUs waited for their hosts to launch the next kernel {lost:.3g} s per GPU, {host_wait / idle:.0%} of"
        f" their idle time (rank {int(rank)}, {host} {device}: {worst:.3g} s){launches}: the CPU side sets the pace;"
        " launch fewer, larger kernels (fuse operations: XLA, torch.compile; CUDA graphs) and keep the input"
        " pipeline off the training thread"
    )
    return [
        {
            "kind": "host_bound_gpu",
            "text": text,
            "seconds_lost": lost,
            "fraction_of_wall": lost / wall_s,
            "ranks": ev.rank_list([int(r) for r, *_ in per_gpu.index]),
        }
    ]
