"""Ranks whose threads waited for a core: CPU contention and CPU-quota throttling, from the heartbeat's counters.

A rank's spans say how long a step took, not that its threads spent part of it ready to run with no
core free. The recorder's heartbeat writes, each second, the process's CPU % (``CPU_PERCENT``), its
threads' wait for a core (``CPU_WAIT_PERCENT``, from the kernel's per-thread run delay) and, where
its cgroup has a CFS quota, the share of periods the quota ran out (``CPU_THROTTLED_PERCENT``).
``cpu_wait_table`` integrates them per rank; ``cpu_wait_finding`` names the ranks that waited.

The time lost is an estimate: threads that waited a share ``w`` of the time they were ready would
have run their work in ``1 - w`` of it with a core each, so a rank ready throughout loses up to
``seconds * w``; it never loses more than the thread-seconds it waited. Steps are synchronous, so
the run loses about what its most delayed rank does (the finding's ``seconds_lost``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from workbench.events import (
    CPU_PERCENT,
    CPU_THROTTLED_PERCENT,
    CPU_WAIT_PERCENT,
    NS_PER_S,
    rank_list,
    ranks_with_hosts,
    significant_figures,
)

CPU_WAIT_COLUMNS: tuple[str, ...] = (
    "rank",
    "seconds",
    "cpu_cores",
    "waiting_cores",
    "wait_share",
    "throttled_share",
    "quota_cores",
    "cpus_allowed",
)
#: A rank whose threads spent at least this share of their ready time waiting for a core is named.
CPU_WAIT_SHARE = 0.10
#: Named ranks whose cgroup ran out of quota in at least this share of its periods are called throttled.
THROTTLED_SHARE = 0.20
#: A beat's interval where a rank has only one (the recorder's heartbeat interval).
DEFAULT_BEAT_S = 1.0
FINDING_FIELDS = ["kind", "ranks", "seconds_lost", "fraction_of_wall", "text"]


def _integrated(series: pd.DataFrame | None) -> tuple[float, float]:
    """(seconds covered, value × seconds) of one rank's counter, each beat standing for the time since the last."""
    if series is None or len(series) == 0:
        return 0.0, 0.0
    ordered = series.sort_values("time_ns")
    values = ordered["value"].to_numpy(dtype=float)
    gaps = np.diff(ordered["time_ns"].to_numpy()) / NS_PER_S
    first = float(np.median(gaps)) if len(gaps) else DEFAULT_BEAT_S
    spans = np.concatenate([[first], gaps])
    finite = np.isfinite(values)
    return float(spans[finite].sum()), float((values[finite] * spans[finite]).sum())


def cpu_wait_table(counters: pd.DataFrame | None, rank_meta: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank (columns ``CPU_WAIT_COLUMNS``): the seconds its heartbeats cover, the cores it used and the
    cores' worth of threads that waited, ``wait_share = waiting / (used + waiting)``, the share of its
    quota's periods throttled (NaN without a quota), and from ``rank_meta`` (``Run.rank_meta``) its quota
    and the cores it was allowed (NaN where not recorded). Ranks without wait counters (a recorder older
    than them, or not Linux) are left out."""
    if counters is None or len(counters) == 0 or not {"rank", "name", "time_ns", "value"} <= set(counters.columns):
        return pd.DataFrame(columns=CPU_WAIT_COLUMNS)
    names = counters["name"].astype(str)  # a categorical column too
    ours = counters.assign(name=names)[names.isin([CPU_PERCENT, CPU_WAIT_PERCENT, CPU_THROTTLED_PERCENT])]
    facts = _rank_facts(rank_meta)
    rows = []
    for rank, group in ours.groupby("rank", sort=True):
        by_name = dict(tuple(group.groupby("name")))
        if CPU_WAIT_PERCENT not in by_name:
            continue
        seconds, waited = _integrated(by_name[CPU_WAIT_PERCENT])
        used_s, used = _integrated(by_name.get(CPU_PERCENT))
        throttled_s, throttled = _integrated(by_name.get(CPU_THROTTLED_PERCENT))
        waiting_cores = waited / 100 / seconds if seconds else math.nan
        cpu_cores = used / 100 / used_s if used_s else 0.0
        ready = cpu_cores + waiting_cores
        quota, allowed = facts.get(int(rank), (math.nan, math.nan))
        rows.append(
            {
                "rank": int(rank),
                "seconds": seconds,
                "cpu_cores": cpu_cores,
                "waiting_cores": waiting_cores,
                "wait_share": waiting_cores / ready if ready > 0 else math.nan,
                "throttled_share": throttled / 100 / throttled_s if throttled_s else math.nan,
                "quota_cores": quota,
                "cpus_allowed": allowed,
            }
        )
    return pd.DataFrame(rows, columns=CPU_WAIT_COLUMNS)


def _rank_facts(rank_meta: pd.DataFrame | None) -> dict[int, tuple[float, float]]:
    """{rank: (CPU quota in cores, cores allowed)} from the ranks' meta files, NaN where absent."""
    if not isinstance(rank_meta, pd.DataFrame) or "rank" not in rank_meta or len(rank_meta) == 0:
        return {}

    def numbers(column: str) -> pd.Series:
        values = rank_meta[column] if column in rank_meta else pd.Series(math.nan, index=rank_meta.index)
        return pd.to_numeric(values, errors="coerce")

    quota, allowed = numbers("cpu_quota_cores"), numbers("cpus_allowed")
    return {int(r): (float(q), float(a)) for r, q, a in zip(rank_meta["rank"], quota, allowed, strict=True)}


def cpu_wait_finding(
    table: pd.DataFrame,
    *,
    wall_s: float | None,
    hosts: Mapping[int, str] | None = None,
    min_fraction: float = 0.02,
) -> pd.DataFrame:
    """A ``cpu_wait`` finding when ranks' threads spent ``CPU_WAIT_SHARE`` or more of their ready time
    waiting for a core and the most delayed rank lost at least ``min_fraction`` of the wall time; it says
    whether their CPU quota ran out (the limit is the quota) or not (other threads share the cores)."""
    if table is None or len(table) == 0 or not wall_s or wall_s <= 0:
        return pd.DataFrame(columns=FINDING_FIELDS)
    waited = table[table["wait_share"] >= CPU_WAIT_SHARE]
    if waited.empty:
        return pd.DataFrame(columns=FINDING_FIELDS)
    seconds = waited["seconds"].to_numpy(dtype=float)
    share, waiting = waited["wait_share"].to_numpy(dtype=float), waited["waiting_cores"].to_numpy(dtype=float)
    lost = min(float(np.max(np.minimum(seconds * share, seconds * waiting))), float(wall_s))
    if lost < min_fraction * wall_s:
        return pd.DataFrame(columns=FINDING_FIELDS)
    ranks = [int(r) for r in waited["rank"]]
    several = len(ranks) > 1
    who = f"the threads of {ranks_with_hosts(ranks, hosts or {})}"
    typical = "the median rank's " if several else ""
    typical_share, typical_waiting, typical_running = (
        finite_median(waited[column]) for column in ("wait_share", "waiting_cores", "cpu_cores")
    )
    text = (
        f"CPU contention: {who} waited for a core {typical_share:.0%} of the time they were ready to run"
        f" ({typical}{cores_text(typical_waiting)} waiting beside {cores_text(typical_running)} running, on"
        " average), which costs up to"
        f" {significant_figures(lost)} s ({lost / wall_s:.0%} of wall time)"
    )
    throttled = finite_median(waited["throttled_share"])
    quota = finite_median(waited["quota_cores"])
    if math.isfinite(throttled) and throttled >= THROTTLED_SHARE:
        limit = f" of {quota:.3g} core{'' if quota == 1 else 's'}" if math.isfinite(quota) else ""
        text += (
            f"; their cgroup's CPU quota{limit} ran out in {throttled:.0%} of its periods, so the quota is the limit: "
        )
        if math.isfinite(quota) and quota < 1:
            text += "it is under one core, so even one thread is held back; raise the limit"
        else:
            threads = max(1, math.floor(quota)) if math.isfinite(quota) else None
            pools = f" ({threads} thread{'' if threads == 1 else 's'})" if threads else ""
            text += (
                f"size TensorFlow's thread pools to it{pools} (tf.config.threading.set_intra_op_parallelism_threads and"
                " set_inter_op_parallelism_threads, OMP_NUM_THREADS) or raise the limit"
            )
    else:
        allowed = finite_median(waited["cpus_allowed"])
        cores = f" ({allowed:.0f} allowed)" if math.isfinite(allowed) else ""
        quota_note = "no CPU quota ran out" if math.isfinite(throttled) else "no CPU quota held them"
        text += (
            f"; {quota_note}: more threads were ready than the cores they may run on{cores}, so other ranks'"
            " or processes' threads share those cores. Keep ranks × threads within the cores (TensorFlow's"
            " intra-op threads, OMP_NUM_THREADS), bind each rank to its own cores, or find what else runs there"
        )
    row = {
        "kind": "cpu_wait",
        "ranks": rank_list(ranks),
        "seconds_lost": lost,
        "fraction_of_wall": lost / wall_s,
        "text": text,
    }
    return pd.DataFrame([row], columns=FINDING_FIELDS)


def finite_median(values: pd.Series) -> float:
    """The median of the numbers among ``values``; NaN (without numpy's warning) where there are none."""
    finite = pd.to_numeric(values, errors="coerce").dropna()
    return float(finite.median()) if len(finite) else math.nan


def cores_text(cores: float) -> str:
    return f"{significant_figures(cores)} core" + ("" if cores == 1 else "s")


__all__ = [
    "CPU_WAIT_COLUMNS",
    "CPU_WAIT_SHARE",
    "THROTTLED_SHARE",
    "cpu_wait_finding",
    "cpu_wait_table",
    "finite_median",
]
