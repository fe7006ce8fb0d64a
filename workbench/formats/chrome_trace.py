"""Export a run as Chrome-trace JSON: one process per rank, one track per phase; opens in Perfetto.

Spans become complete events (``ph: X``, µs since the run's first event) on the track of their
phase, so overlapping phases on one rank (communication inside a train step) stay visible.
Memory samples become counter events (``ph: C``) of each rank's RSS in MB.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.events import PHASES


def to_chrome_trace(events: pd.DataFrame, memory: pd.DataFrame | None = None, *, title: str = "") -> dict[str, Any]:
    """The trace as a dict (``traceEvents`` + metadata), ready for ``json.dump``."""
    memory = memory if memory is not None else pd.DataFrame(columns=["rank", "time_ns", "rss_bytes"])
    starts = [frame[column].min() for frame, column in ((events, "start_ns"), (memory, "time_ns")) if len(frame)]
    origin = int(min(starts)) if starts else 0
    phases = list(PHASES) + sorted(set(events["phase"]) - set(PHASES)) if len(events) else list(PHASES)
    track = {phase: index for index, phase in enumerate(phases)}
    trace: list[dict[str, Any]] = []
    ranks = sorted(set(events["rank"]).union(memory["rank"])) if len(events) or len(memory) else []
    for rank in ranks:
        rank = int(rank)
        trace.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
        for phase, tid in track.items():
            trace.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": phase}})
    for row in events.itertuples(index=False):
        known = (("step", row.step), ("epoch", row.epoch), ("bytes", row.bytes))
        args: dict[str, Any] = {key: int(value) for key, value in known if value >= 0}
        if row.detail:
            args["detail"] = row.detail
        trace.append(
            {
                "ph": "X",
                "name": row.name,
                "cat": row.phase,
                "pid": int(row.rank),
                "tid": track[row.phase],
                "ts": (int(row.start_ns) - origin) / 1000.0,
                "dur": (int(row.end_ns) - int(row.start_ns)) / 1000.0,
                "args": args,
            }
        )
    for row in memory.itertuples(index=False):
        trace.append(
            {
                "ph": "C",
                "name": "memory",
                "pid": int(row.rank),
                "ts": (int(row.time_ns) - origin) / 1000.0,
                "args": {"rss_mb": round(int(row.rss_bytes) / 2**20, 3)},
            }
        )
    return {
        "traceEvents": trace,
        "displayTimeUnit": "ms",
        "otherData": {"title": title, "origin_unix_ns": origin, "producer": "workbench"},
    }


def write_chrome_trace(path: str | Path, events: pd.DataFrame, memory: pd.DataFrame | None = None, *,
                       title: str = "") -> Path:
    """Write the trace to ``path`` (open it at https://ui.perfetto.dev or chrome://tracing)."""
    path = Path(path)
    path.write_text(json.dumps(to_chrome_trace(events, memory, title=title)))
    return path
