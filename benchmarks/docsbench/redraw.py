"""Redraw cost of the live timeline: 8 ranks x 10 000 spans, figure build and FigureWidget update.

Measures the Python side (building traces, decimating, validating, serialising the widget message).
The browser's render time is not measured here; the payload size says what the browser receives.

    workbench bench redraw [--ranks 8] [--spans-per-rank 10000]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.events import empty_memory, events_frame
from workbench.figures.timeline import DEFAULT_MAX_SPANS, timeline_figure
from workbench.widgets.dashboard import Dashboard
from workbench.widgets.panels import sync_figure


def made_spans(ranks: int = 8, spans_per_rank: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """Steps of input -> compute -> communication per rank, ~30 ms each, with jitter."""
    rng = np.random.default_rng(seed)
    phases = np.array(["input", "compute", "communication"])
    rows = []
    for rank in range(ranks):
        n = spans_per_rank
        phase = phases[np.arange(n) % 3]
        mean = np.select([phase == "input", phase == "compute"], [2e6, 22e6], 6e6)
        duration = (mean * rng.uniform(0.5, 1.5, n)).astype(np.int64)
        gap = rng.integers(5_000, 50_000, n)
        start = 1_700_000_000 * 10**9 + np.concatenate([[0], np.cumsum(duration + gap)[:-1]])
        rows.append(
            pd.DataFrame(
                {
                    "run_id": "bench",
                    "rank": rank,
                    "phase": phase,
                    "name": np.where(phase == "communication", "allreduce", "train_step"),
                    "step": np.arange(n) // 3,
                    "epoch": np.arange(n) // 3 // 1000,
                    "start_ns": start,
                    "end_ns": start + duration,
                }
            )
        )
    return events_frame(pd.concat(rows, ignore_index=True))


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def _widget_update(first: go.Figure, second: go.Figure) -> tuple[float, int]:
    """Seconds to sync ``second`` into a FigureWidget showing ``first``, and bytes it would send."""
    widget = go.FigureWidget()
    sync_figure(widget, first)
    sent: list[int] = []

    def capture(msg: dict, buffers: list | None = None) -> None:
        sent.append(len(json.dumps(msg, default=str)) + sum(memoryview(b).nbytes for b in buffers or ()))

    widget._send = capture  # type: ignore[method-assign]
    # a full collection of what the process made before (it falls inside a one-shot timing or not, by the heap's
    # size: the CLI's parsers were enough to move it in): done first, as timeit does
    gc.collect()
    started = time.perf_counter()
    sync_figure(widget, second)
    return time.perf_counter() - started, sum(sent)


class _Source:
    def __init__(self, events: pd.DataFrame) -> None:
        self.pending = [events]

    def poll(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        chunk = self.pending.pop(0) if self.pending else events_frame([]).iloc[0:0]
        return chunk, empty_memory()


def run(ranks: int = 8, spans_per_rank: int = 10_000) -> dict:
    """Build/update timings for ranks x spans_per_rank spans (seconds, best of 3)."""
    events = made_spans(ranks, spans_per_rank)
    later = events.assign(start_ns=events["start_ns"] + 1_000, end_ns=events["end_ns"] + 1_000)
    t0 = int(events["start_ns"].min())
    result: dict = {"spans": len(events), "max_spans": DEFAULT_MAX_SPANS}

    fig = timeline_figure(events, t0_ns=t0)
    result["drawn_spans"] = fig.layout.meta["drawn"]
    result["build_seconds"] = _best(lambda: timeline_figure(events, t0_ns=t0))
    update, payload = _widget_update(fig, timeline_figure(later, t0_ns=t0))
    result["update_seconds"], result["update_payload_bytes"] = update, payload

    full = timeline_figure(events, t0_ns=t0, max_spans=None)
    result["build_seconds_all_80k_bars"] = _best(lambda: timeline_figure(events, t0_ns=t0, max_spans=None))
    update, payload = _widget_update(full, timeline_figure(later, t0_ns=t0, max_spans=None))
    result["update_seconds_all_80k_bars"], result["update_payload_bytes_all_80k_bars"] = update, payload
    result["build_seconds_all_80k_scattergl"] = _best(
        lambda: timeline_figure(events, t0_ns=t0, max_spans=None, style="gl")
    )

    # End to end: a dashboard receiving all spans in one poll, then a steady-state refresh.
    frames = [events.iloc[:-ranks], events.iloc[-ranks:]]
    dashboard = Dashboard(_Source(frames[0]), analyse=lambda e: pd.DataFrame())
    dashboard.source.pending.append(frames[1])  # type: ignore[attr-defined]
    dashboard.update()
    dashboard.update()
    first, steady = list(dashboard.timings)[:2]
    result["dashboard_first_update"] = {k: first[k] for k in ("poll_s", "redraw_s")}
    result["dashboard_refresh"] = {k: steady[k] for k in ("poll_s", "redraw_s")}
    result["dashboard_error"] = dashboard.error
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()}


def command(args: argparse.Namespace) -> int:
    """``workbench bench redraw`` (its result is JSON either way)."""
    import json

    print(json.dumps(run(ranks=args.ranks, spans_per_rank=args.spans_per_rank), indent=2, default=str))
    return 0


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    out = run(*args)
    out = json.loads(json.dumps(out, default=float))
    for key in ("dashboard_first_update", "dashboard_refresh"):
        out[key] = {k: round(v, 4) for k, v in out[key].items()}
    print(json.dumps(out, indent=1))
