"""GPU activity as the workbench's own: steps, busy and idle time, communication hidden or not, findings.

Input: device activity (``events.DEVICE_SCHEMA``: kernels, collective kernels, copies, step markers per GPU
stream), as ``workbench import`` stores it from TensorFlow's profiles. Pure functions, frames in and out.

Definitions (per GPU and step; a step is the time from its marker's start to the next marker's start):
- ``busy``: time any stream of the GPU ran something (the union of its activities); ``idle = wall - busy``;
- ``compute``: union of compute kernels; ``communication``: union of collective kernels (NCCL's); ``copy``:
  union of memory copies and sets;
- ``overlapped``: communication while a compute kernel ran (``|comm ∩ compute|``); ``exposed``: the rest,
  the communication the step waited for.
``device_phase_spans`` turns the same into the phase spans every other analysis reads (one lane per GPU):
``compute`` while a compute kernel runs, else ``communication`` while a collective runs, else ``transfer``
while a copy runs, else ``idle``; the collective kernels also as ``in_flight`` spans (what overlapped).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from workbench import events as ev

#: Phase of the time a GPU only copied memory (no kernel running): a phase of its own, not useful work.
TRANSFER = "transfer"
DEVICE_STEP_COLUMNS: tuple[str, ...] = (
    "rank",
    "host",
    "device",
    "step",
    "wall_s",
    "busy_s",
    "idle_s",
    "compute_s",
    "communication_s",
    "copy_s",
    "overlapped_s",
    "exposed_communication_s",
)
#: Names of the spans ``device_phase_spans`` writes, per phase.
SPAN_NAMES = {
    ev.COMPUTE: "gpu_kernels",
    ev.COMMUNICATION: "collective_kernels",
    TRANSFER: "memory_copies",
    ev.IDLE: "gpu_idle",
}
STEP_SPAN = "train_step"
_CATEGORY = {ev.KERNEL: 0, ev.COLLECTIVE: 1, ev.MEMSET: 2, **{kind: 2 for kind in ev.COPY_KINDS}}
#: A GPU busy less than this share of the profile is named idle (``device_findings``).
IDLE_SHARE = 0.5
#: A GPU whose busy time per step exceeds the median GPU's by this share lags the others.
LAG_SHARE = 0.2


def union_ns(group: np.ndarray, start: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the ns covered by at least one of its intervals (overlaps counted once); vectorised.

    Groups are laid end to end on one axis (each shifted by the whole span), so one running maximum of the
    ends finds every merged segment of every group at once.
    """
    if len(start) == 0:
        return np.zeros(groups, np.float64)
    low = int(start.min())
    span = int(end.max()) - low + 1
    if groups > 1 and groups * span >= 2**62:  # too long to lay end to end: one group at a time (not shifted)
        return np.asarray(
            [union_ns(np.zeros(int((group == g).sum()), np.int64), start[group == g], end[group == g], 1)[0]
             for g in range(groups)]
        )  # fmt: skip
    shifted_start = (start - low) + group * span
    shifted_end = (end - low) + group * span
    order = np.argsort(shifted_start, kind="stable")
    s, e, g = shifted_start[order], shifted_end[order], group[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    first = np.flatnonzero(new)
    lengths = np.maximum.reduceat(e, first) - s[first]
    return np.bincount(g[first], weights=lengths.astype(np.float64), minlength=groups)


def group_codes(frame: pd.DataFrame, columns: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Each row's group of equal ``columns`` values (0..G-1) and the groups' values: from the columns' codes,
    without a tuple per row (a MultiIndex of millions of rows took most of the time)."""
    if frame.empty:
        return np.zeros(0, np.int64), pd.DataFrame(columns=columns)
    combined = np.zeros(len(frame), np.int64)
    parts = []
    for column in columns:
        codes, labels = pd.factorize(frame[column])
        combined = combined * (len(labels) + 1) + codes
        parts.append((codes, labels))
    _distinct, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    keys = pd.DataFrame({c: np.asarray(labels)[codes[first]] for c, (codes, labels) in zip(columns, parts)})
    return inverse.ravel().astype(np.int64), keys


def step_windows(activity: pd.DataFrame) -> pd.DataFrame:
    """``host, device, step, start_ns, end_ns`` of every step of every GPU: its own ``Steps`` markers, else its
    host's (``device`` CPU); a step ends where the next begins, the last at its marker's end or the GPU's last
    activity, whichever is later."""
    markers = activity[activity["kind"] == ev.STEP_MARKER]
    work = gpu_work(activity)
    rows = []
    for (host, device), lane in work.groupby(["host", "device"], sort=True, observed=True):
        own = markers[(markers["host"] == host) & (markers["device"] == device)]
        if own.empty:
            own = markers[(markers["host"] == host) & (markers["device"] == "CPU")]
        if own.empty:
            continue
        own = own.sort_values("start_ns")
        starts = own["start_ns"].to_numpy(np.int64)
        ends = np.r_[starts[1:], max(int(own["end_ns"].iloc[-1]), int(lane["end_ns"].max()))]
        rows.append(
            pd.DataFrame(
                {
                    "host": host,
                    "device": device,
                    "step": own["step"].to_numpy(np.int64),
                    "start_ns": starts,
                    "end_ns": ends,
                }
            )
        )
    if not rows:
        return pd.DataFrame(columns=["host", "device", "step", "start_ns", "end_ns"])
    return pd.concat(rows, ignore_index=True)


def with_steps(activity: pd.DataFrame, windows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The activity with ``step`` set to the step window its start falls in (-1 outside every step); rows that
    carry their step already (a PyTorch trace's, from the call that launched them) keep it."""
    windows = step_windows(activity) if windows is None else windows
    out = activity.copy()
    given = out["step"].to_numpy(np.int64)
    steps = np.full(len(out), -1, np.int64)
    for (host, device), own in windows.groupby(["host", "device"], sort=False):
        rows = np.flatnonzero(
            (out["host"] == host).to_numpy() & (out["device"] == device).to_numpy()
            & (out["kind"] != ev.STEP_MARKER).to_numpy()
        )  # fmt: skip
        starts = own["start_ns"].to_numpy(np.int64)
        at = np.searchsorted(starts, out["start_ns"].to_numpy(np.int64)[rows], side="right") - 1
        inside = (at >= 0) & (out["start_ns"].to_numpy(np.int64)[rows] < own["end_ns"].to_numpy(np.int64)[at.clip(0)])
        steps[rows[inside]] = own["step"].to_numpy(np.int64)[at[inside]]
    keep = (out["kind"] == ev.STEP_MARKER).to_numpy() | (given >= 0)
    steps[keep] = given[keep]
    out["step"] = steps
    return out


def gpu_work(activity: pd.DataFrame) -> pd.DataFrame:
    """The rows that ran on a GPU (kernels, collectives, copies, sets): not markers, not the host's calls."""
    return activity[activity["kind"].isin(ev.GPU_KINDS).to_numpy()]


def device_step_table(
    activity: pd.DataFrame, *, window_ns: tuple[int, int] | None = None, rebase: bool = False
) -> pd.DataFrame:
    """Per GPU and step (``DEVICE_STEP_COLUMNS``, seconds): busy, idle, compute, communication, copies, overlap.

    Without step markers a GPU has one row, step -1, over ``window_ns`` (default: the whole profile, first to
    last activity of any GPU), so a GPU that idled while others worked shows it. ``rebase``: keep what
    ``with_window`` needs to measure those rows against another window (a rank group's table against the run's
    profile): ``WINDOW_COLUMNS``.
    """
    work = gpu_work(activity)
    if work.empty:
        return pd.DataFrame(columns=list(DEVICE_STEP_COLUMNS) + (list(WINDOW_COLUMNS) if rebase else []))
    windows = step_windows(activity)
    work = with_steps(work, windows)
    keys = ["rank", "host", "device", "step"]
    codes, table = group_codes(work, keys)
    groups = len(table)
    start, end = work["start_ns"].to_numpy(np.int64), work["end_ns"].to_numpy(np.int64)
    category = _categories(work["kind"])
    busy = union_ns(codes, start, end, groups)
    compute = union_ns(codes[category == 0], start[category == 0], end[category == 0], groups)
    communication = union_ns(codes[category == 1], start[category == 1], end[category == 1], groups)
    copy = union_ns(codes[category == 2], start[category == 2], end[category == 2], groups)
    both = (category == 0) | (category == 1)
    compute_or_comm = union_ns(codes[both], start[both], end[both], groups)
    overlapped = compute + communication - compute_or_comm
    whole = window_ns or (int(start.min()), int(end.max()))
    wall = np.full(groups, float(whole[1] - whole[0]))
    # rows measured against the window: less the GPU's steps (its time outside them), or all of it
    by_window = np.ones(groups, bool)
    outside = np.zeros(groups, np.float64)
    if len(windows):
        sized = windows.assign(wall=windows["end_ns"] - windows["start_ns"])
        # a step whose marker is there twice (a trace written twice over, or damaged) is its windows together
        span = sized.groupby(["host", "device", "step"])["wall"].sum()
        in_steps = sized.groupby(["host", "device"])["wall"].sum()
        keys_of = list(zip(table["host"], table["device"], table["step"]))
        outside = np.asarray([float(in_steps.get((h, d), 0)) if s < 0 else 0.0 for h, d, s in keys_of])
        looked = np.asarray([span.get((h, d, s), np.nan) if s >= 0 else np.nan for h, d, s in keys_of], np.float64)
        by_window = np.isnan(looked)
        wall = np.where(by_window, wall - outside, looked)
    unclipped = wall
    wall = np.maximum(wall, busy)
    seconds = {
        "wall_s": wall,
        "busy_s": busy,
        "idle_s": wall - busy,
        "compute_s": compute,
        "communication_s": communication,
        "copy_s": copy,
        "overlapped_s": overlapped,
        "exposed_communication_s": communication - overlapped,
    }
    for name, values in seconds.items():
        table[name] = np.asarray(values, np.float64) / ev.NS_PER_S
    columns = list(DEVICE_STEP_COLUMNS)
    if rebase:
        table["by_window"] = by_window
        table["outside_steps_s"] = np.where(by_window, unclipped - (whole[1] - whole[0]), 0.0) / ev.NS_PER_S
        columns += list(WINDOW_COLUMNS)
    table = table.sort_values(["rank", "step"], kind="stable", ignore_index=True)
    return table[columns]


#: What ``device_step_table(rebase=True)`` adds: whether a row is measured against the profile's window, and
#: the seconds its GPU's own steps take from that window (negative).
WINDOW_COLUMNS: tuple[str, ...] = ("by_window", "outside_steps_s")


def with_window(steps: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """``device_step_table(rebase=True)`` rows measured against a profile window of ``window_s`` seconds (the whole
    run's: rank groups each saw their own), without ``WINDOW_COLUMNS``."""
    steps = steps.copy()
    rows = steps["by_window"].to_numpy(bool)
    wall = np.maximum(window_s + steps["outside_steps_s"].to_numpy(np.float64), steps["busy_s"].to_numpy(np.float64))
    steps.loc[rows, "wall_s"] = wall[rows]
    steps.loc[rows, "idle_s"] = wall[rows] - steps.loc[rows, "busy_s"]
    return steps.drop(columns=list(WINDOW_COLUMNS))


def profile_window(activity: pd.DataFrame) -> tuple[int, int] | None:
    """First start and last end of any GPU's work (None without GPU work): what ``device_step_table`` measures
    rows without steps against."""
    work = gpu_work(activity)
    if work.empty:
        return None
    return int(work["start_ns"].min()), int(work["end_ns"].max())


TEMPORAL_COLUMNS: tuple[str, ...] = (
    "rank",
    "host",
    "device",
    "kernel_time_s",
    "idle_s",
    "compute_s",
    "non_compute_s",
    "idle_share",
    "compute_share",
    "non_compute_share",
    "communication_s",
    "overlapped_s",
    "overlap_share",
)


def without_last_step(activity: pd.DataFrame) -> pd.DataFrame:
    """The activity less its last profiler step, as HTA reads a trace by default (the profiler's stop can cut off
    what that step launched): the step's marker and GPU activity, and the host's rows from its start on."""
    is_marker = (activity["kind"] == ev.STEP_MARKER).to_numpy()
    if not is_marker.any():
        return activity
    last = int(activity["step"].to_numpy()[is_marker].max())
    last_start = int(activity["start_ns"].to_numpy()[is_marker & (activity["step"].to_numpy() == last)].min())
    on_host = (activity["device"] == "CPU").to_numpy() & ~is_marker
    drop = (activity["step"].to_numpy() == last) | (on_host & (activity["start_ns"].to_numpy() >= last_start))
    return activity[~drop]


def temporal_breakdown(activity: pd.DataFrame, *, include_last_step: bool = False) -> pd.DataFrame:
    """Per GPU, the temporal breakdown and communication-computation overlap as Holistic Trace Analysis defines
    them (``TEMPORAL_COLUMNS``), so the two tools' numbers stand side by side on one trace.

    ``kernel_time``: from the GPU's first activity's start to its last one's end; ``idle``: the part of it with
    nothing running; ``compute``: compute kernels (merged: overlaps once); ``non_compute``: the rest
    (collectives, copies, sets); ``overlap_share``: ``|compute ∩ communication| / |communication|``. As HTA does
    by default, the activity of the last profiler step is left out (what its launches started can be cut off
    by the profiler's stop) unless ``include_last_step``.
    """
    work = gpu_work(activity if include_last_step else without_last_step(activity))
    if work.empty:
        return pd.DataFrame(columns=list(TEMPORAL_COLUMNS))
    codes, table = group_codes(work, ["rank", "host", "device"])
    groups = len(table)
    start, end = work["start_ns"].to_numpy(np.int64), work["end_ns"].to_numpy(np.int64)
    category = _categories(work["kind"])
    compute_rows, comm_rows = category == 0, category == 1
    either = compute_rows | comm_rows
    busy = union_ns(codes, start, end, groups)
    compute = union_ns(codes[compute_rows], start[compute_rows], end[compute_rows], groups)
    communication = union_ns(codes[comm_rows], start[comm_rows], end[comm_rows], groups)
    overlapped = compute + communication - union_ns(codes[either], start[either], end[either], groups)
    first = np.full(groups, np.iinfo(np.int64).max)
    last = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(first, codes, start)
    np.maximum.at(last, codes, end)
    span = (last - first).astype(np.float64)
    seconds = {
        "kernel_time_s": span,
        "idle_s": span - busy,
        "compute_s": compute,
        "non_compute_s": busy - compute,
    }
    for name, values in seconds.items():
        table[name] = values / ev.NS_PER_S
    for name in ("idle", "compute", "non_compute"):
        table[f"{name}_share"] = table[f"{name}_s"] / table["kernel_time_s"].where(table["kernel_time_s"] > 0)
    table["communication_s"] = communication / ev.NS_PER_S
    table["overlapped_s"] = overlapped / ev.NS_PER_S
    table["overlap_share"] = table["overlapped_s"] / table["communication_s"].where(table["communication_s"] > 0)
    return table.sort_values("rank", ignore_index=True)[list(TEMPORAL_COLUMNS)]


def gpu_time_table(activity: pd.DataFrame) -> pd.DataFrame:
    """``temporal_breakdown`` rank by rank, each less its own last profiler step: what Holistic Trace Analysis
    gives reading each rank's trace, so its numbers can be checked against any run's analysis, at any size."""
    if activity is None or activity.empty:
        return pd.DataFrame(columns=list(TEMPORAL_COLUMNS))
    parts = [temporal_breakdown(rows) for _rank, rows in activity.groupby("rank", sort=True, observed=True)]
    parts = [part for part in parts if len(part)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(TEMPORAL_COLUMNS))


def device_summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Per GPU over its steps: the sums of ``device_step_table`` and the shares of its wall time."""
    if steps.empty:
        return pd.DataFrame(columns=["rank", "host", "device", "steps", *DEVICE_STEP_COLUMNS[4:], "busy_share"])
    grouped = steps.groupby(["rank", "host", "device"], sort=True)
    table = grouped[list(DEVICE_STEP_COLUMNS[4:])].sum().reset_index()
    table.insert(3, "steps", grouped["step"].apply(lambda s: int((s >= 0).sum())).to_numpy())
    table["busy_share"] = table["busy_s"] / table["wall_s"].where(table["wall_s"] > 0)
    table["communication_hidden_share"] = table["overlapped_s"] / table["communication_s"].where(
        table["communication_s"] > 0
    )
    return table


def device_phase_spans(activity: pd.DataFrame, *, run_id: str = "") -> pd.DataFrame:
    """Phase spans (``events`` schema), one lane per rank, from its GPU's activity (see module docstring).

    Inside each step: a ``train_step`` compute span (the step, for the steps table) holding spans that cover
    it whole (the GPU's compute, communication, transfer and idle time), so the breakdown gives every instant
    to what the GPU did. Collective kernels are also written as ``in_flight`` spans. String columns are
    categoricals (millions of spans: no string per row).
    """
    work = gpu_work(activity)
    if work.empty:
        return ev.events_frame(pd.DataFrame(columns=["rank", "phase", "start_ns", "end_ns"]))
    windows = step_windows(activity)
    lanes: list[dict[str, np.ndarray]] = []
    lane_hosts: list[str] = []
    lane_devices: list[str] = []
    collective_names: dict[str, int] = {}
    for (rank, host, device), lane in work.groupby(["rank", "host", "device"], sort=True, observed=True):
        own = windows[(windows["host"] == host) & (windows["device"] == device)]
        spans = _lane_spans(lane, own, collective_names)
        spans["rank"] = np.full(len(spans["start_ns"]), int(rank), np.int32)
        spans["lane"] = np.full(len(spans["start_ns"]), len(lanes), np.int32)
        lanes.append(spans)
        lane_hosts.append(str(host))
        lane_devices.append(str(device))
    columns = {k: np.concatenate([lane[k] for lane in lanes]) for k in lanes[0]}
    order = np.lexsort((columns["start_ns"], columns["rank"]))
    columns = {k: v[order] for k, v in columns.items()}
    n = len(order)
    names = [*(SPAN_NAMES[p] for p in _PHASES), STEP_SPAN, *collective_names]
    lane_codes = columns["lane"]
    frame = {
        "run_id": pd.Categorical.from_codes(np.zeros(n, np.int8), categories=[run_id]),
        "rank": columns["rank"],
        "host": ev.labelled_codes(lane_codes, lane_hosts),
        "phase": pd.Categorical.from_codes(columns["phase"], categories=[*_PHASES, ev.IN_FLIGHT]),
        "name": ev.labelled_codes(columns["name"], names),
        "detail": ev.labelled_codes(lane_codes, lane_devices),
        "step": columns["step"],
        "epoch": np.full(n, -1, np.int64),
        "start_ns": columns["start_ns"],
        "end_ns": columns["end_ns"],
        "bytes": np.full(n, -1, np.int64),
    }
    return pd.DataFrame(frame, columns=list(ev.EVENT_COLUMNS))


#: Phases of the per-GPU spans, by code: what ran (compute first), else idle.
_PHASES = (ev.COMPUTE, ev.COMMUNICATION, TRANSFER, ev.IDLE)
_IN_FLIGHT_CODE = len(_PHASES)


def _lane_spans(lane: pd.DataFrame, windows: pd.DataFrame, collective_names: dict[str, int]) -> dict[str, np.ndarray]:
    """One GPU's spans as arrays: phase code, name code, step, start, end (see ``device_phase_spans``)."""
    start, end = lane["start_ns"].to_numpy(np.int64), lane["end_ns"].to_numpy(np.int64)
    category = _categories(lane["kind"])
    step_starts = windows["start_ns"].to_numpy(np.int64)
    step_ends = windows["end_ns"].to_numpy(np.int64)
    step_numbers = windows["step"].to_numpy(np.int64)
    points = np.unique(np.concatenate([start, end, step_starts, step_ends]))
    counts = np.zeros((3, len(points)), np.int64)
    for c in range(3):
        counts[c] += np.bincount(np.searchsorted(points, start[category == c]), minlength=len(points))
        counts[c] -= np.bincount(np.searchsorted(points, end[category == c]), minlength=len(points))
    active = np.cumsum(counts, axis=1)[:, :-1]  # over [points[i], points[i + 1])
    seg_start, seg_end = points[:-1], points[1:]
    phase_code = np.select([active[0] > 0, active[1] > 0, active[2] > 0], [0, 1, 2], 3)
    if len(step_starts):
        at = np.searchsorted(step_starts, seg_start, side="right") - 1
        in_step = (at >= 0) & (seg_start < step_ends[at.clip(0)])
        step = np.where(in_step, step_numbers[at.clip(0)], -1)
    else:
        in_step = np.zeros(len(seg_start), bool)
        step = np.full(len(seg_start), -1, np.int64)
    keep = (phase_code < 3) | in_step  # idle is written inside steps only (outside, no span is idle anyway)
    seg_start, seg_end, phase_code, step = seg_start[keep], seg_end[keep], phase_code[keep], step[keep]
    # neighbouring segments of one phase in one step become one span
    same = (phase_code[1:] == phase_code[:-1]) & (step[1:] == step[:-1])
    joined = np.r_[False, same & (seg_start[1:] == seg_end[:-1])]
    first = np.flatnonzero(~joined)
    last = np.r_[first[1:], len(seg_start)] - 1
    collective = np.flatnonzero(category == 1)
    kernel_names = lane["name"].to_numpy(object)[collective] if len(collective) else np.zeros(0, object)
    distinct, inverse = np.unique(kernel_names.astype(str), return_inverse=True) if len(collective) else ([], [])
    base = len(_PHASES) + 1  # the phases' span names, then the step's, then the collective kernels'
    name_of = np.asarray(
        [base + collective_names.setdefault(str(k), len(collective_names)) for k in distinct], np.int64
    )
    collective_steps = lane["step"].to_numpy(np.int64)[collective]
    return {
        "phase": np.concatenate(
            [np.zeros(len(step_starts), np.int64), phase_code[first], np.full(len(collective), _IN_FLIGHT_CODE)]
        ),
        "name": np.concatenate(
            [np.full(len(step_starts), len(_PHASES)), phase_code[first], name_of[np.asarray(inverse, np.int64)]]
        ),
        "step": np.concatenate([step_numbers, step[first], collective_steps]),
        "start_ns": np.concatenate([step_starts, seg_start[first], start[collective]]),
        "end_ns": np.concatenate([step_ends, seg_end[last], end[collective]]),
    }


def _categories(kinds: pd.Series) -> np.ndarray:
    """0 compute, 1 collective, 2 copy or set, per row; computed once per distinct kind."""
    codes, distinct = pd.factorize(kinds)
    lookup = np.asarray([_CATEGORY.get(str(kind), 0) for kind in distinct] or [0], np.int64)
    return lookup[codes]


def device_findings(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    idle_devices: Mapping[str, list[str]] | None = None,
    profile_s: float | None = None,
    min_fraction: float = 0.02,
) -> list[dict[str, object]]:
    """Findings on the GPUs, as rows of ``analysis.findings`` (largest loss first once combined).

    - ``idle_gpu``: a GPU busy less than ``IDLE_SHARE`` of its time; lost: its idle seconds. GPUs a file names
      that did nothing (``idle_devices``: host -> devices) lose the whole profile (``profile_s``).
    - ``lagging_gpu``: a GPU whose busy time per step exceeds the median GPU's by ``LAG_SHARE``: the others
      wait for it at each collective; lost: the excess, summed over its steps.
    - ``transfer_bound``: steps whose copies took longer than their compute kernels; lost: copy - compute.
    - ``exposed_communication``: collective kernels that ran with no compute beside them; lost: that time.
    """
    rows: list[dict[str, object]] = []
    if summary.empty:
        return rows
    wall = float(summary["wall_s"].max())
    if wall <= 0:
        return rows

    def label(row: pd.Series) -> str:
        return f"rank {int(row['rank'])} ({row['host']} {row['device']})"

    def add(kind: str, text: str, lost: float, ranks: list[int]) -> None:
        if lost / wall >= min_fraction:
            involved = ev.rank_list(ranks) if ranks else "none"
            rows.append(
                {"kind": kind, "text": text, "seconds_lost": lost, "fraction_of_wall": lost / wall, "ranks": involved}
            )

    idle = summary[summary["busy_share"] < IDLE_SHARE]
    if len(idle):
        worst = idle.sort_values("idle_s").iloc[-1]
        add(
            "idle_gpu",
            f"{len(idle)} of {len(summary)} GPUs were idle more than {1 - IDLE_SHARE:.0%} of their time; "
            f"{label(worst)} busy {worst['busy_share']:.0%} ({worst['idle_s']:.3g} s idle of {worst['wall_s']:.3g} s): "
            "feed them faster (input pipeline, larger batches) or use fewer GPUs",
            float(idle["idle_s"].sum()) / max(1, len(summary)),
            [int(r) for r in idle["rank"]],
        )
    for host, devices in (idle_devices or {}).items():
        if devices and profile_s:
            add(
                "unused_gpu",
                f"{len(devices)} GPUs of {host} ({', '.join(devices)}) ran nothing during the {profile_s:.3g} s"
                " profile: give them work (one rank per GPU) or do not allocate them",
                profile_s * len(devices) / max(1, len(summary) + len(devices)),
                [],
            )
    timed = steps[steps["step"] >= 0]
    if len(summary) > 1 and len(timed):
        per_step = timed.groupby(["rank", "host", "device"])["busy_s"].mean()
        median = float(per_step.median())
        slow = per_step[per_step > median * (1 + LAG_SHARE)]
        if len(slow) and median > 0:
            (rank, host, device), busy = max(slow.items(), key=lambda item: item[1])
            count = int((timed["rank"] == rank).sum())
            add(
                "lagging_gpu",
                f"rank {rank} ({host} {device}) is busy {busy * 1000:.3g} ms per step, the median GPU"
                f" {median * 1000:.3g} ms: the others wait for it at each collective",
                (busy - median) * count,
                [int(rank)],
            )
    if len(timed):
        bound = timed[timed["copy_s"] > timed["compute_s"]]
        if len(bound):
            add(
                "transfer_bound",
                f"{len(bound)} of {len(timed)} GPU steps spent longer copying memory than computing"
                f" ({bound['copy_s'].sum():.3g} s of copies, {bound['compute_s'].sum():.3g} s of kernels): prefetch"
                " to the GPU (tf.data prefetch_to_device) and keep tensors on it",
                float((bound["copy_s"] - bound["compute_s"]).sum()) / max(1, len(summary)),
                sorted({int(r) for r in bound["rank"]}),
            )
    exposed = float(summary["exposed_communication_s"].sum())
    communication = float(summary["communication_s"].sum())
    if communication > 0:
        hidden = 1 - exposed / communication
        add(
            "exposed_communication",
            f"collective kernels ran {communication / len(summary):.3g} s per GPU, {hidden:.0%} of it hidden behind"
            " compute kernels: the rest is time the step waited for communication; overlap it (Horovod's"
            " tensor fusion, HOROVOD_CYCLE_TIME; gradient bucketing) or communicate less",
            exposed / len(summary),
            [int(r) for r in summary["rank"]],
        )
    return rows
