"""Live dashboard: timeline, phase breakdown and memory of a running job, refreshed in the notebook.

The dashboard only holds figures, controls and the frames it was sent. Rows come from an injected
``source`` (``store.RunTail`` or anything with ``poll() -> (events, memory)`` returning new rows);
numbers come from an injected ``analyse`` callable. So it can be driven headless in tests by calling
``update()``, and a failure anywhere becomes one line in the status bar instead of a traceback that
would bury the notebook output while a job runs.
"""

from __future__ import annotations

import asyncio
import html
import importlib
import logging
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pandas as pd
import plotly.graph_objects as go

from workbench.extras import require

try:
    import ipywidgets as w
except ImportError:  # the notebook extra is not installed: one line naming it
    require("notebook", for_what="the live dashboard (workbench.Dashboard)")
    raise

from workbench.events import NS_PER_S, host_count, hosts_summary, rank_hosts, rank_list, ranks_with_hosts
from workbench.figures import (
    breakdown_figure,
    colours_for,
    counter_figure,
    memory_figure,
    phase_order,
    rank_rows,
    rank_time_figure,
    timeline_figure,
)
from workbench.figures.timeline import DEFAULT_MAX_SPANS, MAX_TIMELINE_RANKS
from workbench.widgets.figure import figure_widget, preload

log = logging.getLogger(__name__)

#: Bars a live timeline redraws at most per refresh: half the static figures' budget
#: (``DEFAULT_MAX_SPANS``), because the browser redraws them on every refresh. Headless Chromium drew
#: 5 000 bars of a 64-rank timeline in 0.38-0.75 s and 2 500 in 0.18-0.20 s: with the flush and the
#: refresh interval, that decides whether a span is on screen within a second of its end.
LIVE_MAX_SPANS = DEFAULT_MAX_SPANS // 2

preload()  # in a kernel: plotly's widget bundle starts on its way to the browser now, not at the first figure

WAITING = "waiting for the first events from the ranks…"
#: Seconds between refreshes: while the ranks have cores to spare, and while they fill this machine's cores
#: (every redraw is then taken from them). benchmarks/dashboard_cost.py, 2 ranks on 2 cores, live against
#: headless: 0.29 of a core and 1.25x the ranks' wall time at 0.5 s; 0.18-0.26 of a core and 1.14-1.23x at
#: 1 s (two runs: the kernel's share follows the redraws, the browser's did not in the second).
REFRESH_S, SHARED_CORES_REFRESH_S = 0.5, 1.0
#: Choices of the time-window slider: label -> seconds (0 = the whole run).
WINDOWS: tuple[tuple[str, float], ...] = (
    ("10 s", 10.0),
    ("30 s", 30.0),
    ("1 min", 60.0),
    ("5 min", 300.0),
    ("15 min", 900.0),
    ("full", 0.0),
)
TAB_TIMELINE, TAB_BREAKDOWN, TAB_MEMORY, TAB_COUNTERS = 0, 1, 2, 3
#: Silent ranks named one by one in the status line; more are summed up in one message.
MAX_STALE_NAMED = 3
#: Up to this many ranks the timeline shows every rank; above, a rank × time heatmap of all ranks
#: sits above it and the timeline shows ``SLOWEST_RANKS`` ranks: the slowest, or those you select.
TIMELINE_MAX_RANKS = MAX_TIMELINE_RANKS
SLOWEST_RANKS = 16
#: What the memory tab says until the first sample arrives: an empty box reads as a broken tab.
NO_MEMORY = (
    "no memory samples yet: the ranks record them with Recorder(memory_interval_s=...) or "
    "Recorder.sample_memory(); this run has sent none so far"
)


class Source(Protocol):
    """Where rows come from: each ``poll()`` returns only rows not returned before."""

    def poll(self) -> tuple[pd.DataFrame, pd.DataFrame]: ...


Analyse = Callable[[pd.DataFrame], pd.DataFrame]


class Grid(Protocol):
    """A rank × time accumulator (``analysis.activity.RankTimeGrid``): fed every poll, read to draw."""

    hosts: dict[int, str]

    def add(self, events: pd.DataFrame | None) -> None: ...

    def share(self, value: str = ...) -> pd.DataFrame: ...

    def values(self) -> list[str]: ...


def default_activity() -> tuple[Any, str]:
    """``workbench.analysis.activity`` (the rank × time grid, the slowest ranks and hosts) if importable,
    else (None, why not): without it the dashboard still draws the timeline of every rank."""
    try:
        return importlib.import_module("workbench.analysis.activity"), ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def default_analyse() -> tuple[Analyse | None, str]:
    """``workbench.analysis``'s phase breakdown if it can be imported, else (None, why not).

    Imported lazily so that the dashboard works (timeline, memory) even when the analysis layer is
    missing or broken.
    """
    try:
        return importlib.import_module("workbench.analysis.breakdown").phase_breakdown, ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def default_refresh(source: Source) -> tuple[float, str | None]:
    """``SHARED_CORES_REFRESH_S`` when the run's ranks fill this machine's cores, else ``REFRESH_S``.

    Read from the run's ``run.json`` (a ``RunTail``'s ``path``): ranks started on this host (no
    hostfile, not Slurm) whose ranks × threads reach its cores share them with the notebook's kernel
    and the browser, so every redraw slows them. Another source, or metadata that does not say, keeps
    the faster refresh.
    """
    from workbench.config import physical_cores
    from workbench.store import read_run_meta

    path = getattr(source, "path", None)
    try:
        meta = read_run_meta(path) if path is not None else {}
    except Exception:
        return REFRESH_S, None
    cluster = (meta.get("config") or {}).get("cluster") or {}
    if cluster.get("launcher", "mpi") != "mpi" or cluster.get("hostfile"):
        return REFRESH_S, None
    ranks = int(meta.get("ranks") or cluster.get("ranks") or 0)
    threads = int(cluster.get("threads_per_rank") or cluster.get("threads") or 1)
    cores = physical_cores()
    if ranks and ranks * threads >= cores:
        reason = f"refresh every {SHARED_CORES_REFRESH_S:g} s: the ranks fill this machine's {cores} cores"
        return SHARED_CORES_REFRESH_S, reason
    return REFRESH_S, None


def one_line(where: str, exc: BaseException, limit: int = 200) -> str:
    """An exception as a single short line for the status bar."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{where} failed: {type(exc).__name__}" + (f": {text}" if text else "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Dashboard:
    """Live view of a run: tabs (timeline, breakdown, memory), controls and a status line.

    ``update()`` polls once and redraws synchronously; ``start()`` does so every ``refresh_s``
    without blocking the kernel; the Stop button (or ``stop()``) ends refreshing and calls
    ``on_stop``. ``on_stacks`` (e.g. ``cluster.stacks``: rank -> Python stack text) enables the Stacks
    button, which turns orange when a rank stalls and shows every rank's stack without stopping it.
    ``clock`` (monotonic seconds) is injectable for tests of the stale-rank message.
    """

    def __init__(
        self,
        source: Source,
        *,
        analyse: Analyse | None = None,
        analyse_memory: Analyse | None = None,
        on_stop: Callable[[], object] | None = None,
        on_stacks: Callable[[], Mapping[int, str]] | None = None,
        refresh_s: float | None = None,
        stale_s: float = 10.0,
        max_spans: int | None = LIVE_MAX_SPANS,
        run_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeline_max_ranks: int = TIMELINE_MAX_RANKS,
        slowest_ranks: int = SLOWEST_RANKS,
    ) -> None:
        self.source = source
        self.analyse_memory = analyse_memory
        self.on_stop = on_stop
        self.on_stacks = on_stacks
        #: why this refresh period (None: the caller chose it), said in the status line
        self.refresh_reason: str | None = None
        if refresh_s is None:
            refresh_s, self.refresh_reason = default_refresh(source)
        self.refresh_s = refresh_s
        self.stale_s = stale_s
        self.max_spans = max_spans
        self.run_id = run_id or getattr(source, "run_id", None)
        self.clock = clock
        if analyse is None:
            self.analyse, self._analyse_missing = default_analyse()
        else:
            self.analyse, self._analyse_missing = analyse, ""
        self.timeline_max_ranks = timeline_max_ranks
        self.slowest_ranks = slowest_ranks
        self._activity, self._grid_missing = default_activity()
        #: rank × time seconds per phase of every rank (None: analysis.activity unavailable)
        self.grid: Grid | None = self._activity.RankTimeGrid() if self._activity is not None else None
        #: the timeline's ranks follow the slowest until the user picks ranks
        self._auto_ranks = True
        #: One dict per update: started_ns (wall clock), poll_s, redraw_s, new_events, drawn_spans.
        self.timings: deque[dict[str, float]] = deque(maxlen=10_000)
        self.error: str = ""
        self.last_exception: BaseException | None = None

        self._event_chunks: list[pd.DataFrame] = []
        self._memory_chunks: list[pd.DataFrame] = []
        self._counter_chunks: list[pd.DataFrame] = []
        self._events: pd.DataFrame | None = None
        self._memory: pd.DataFrame | None = None
        self._n_events = 0
        self._t0_ns: int | None = None
        self._last_seen: dict[int, float] = {}
        #: each rank's host, as first seen in its events ({rank: host})
        self._hosts: dict[int, str] = {}
        self._phases: list[str] = []
        self._hidden_ranks: set[int] = set()
        self._view: tuple[float, float] | None = None
        self._drawn_range: tuple[float, float] | None = None
        self._stale_tabs: set[int] = {TAB_TIMELINE, TAB_BREAKDOWN, TAB_MEMORY, TAB_COUNTERS}
        self._drawing = False
        self._drawn_spans = 0
        self._resolution_s = 0.0
        self._running = False
        self._stopped = False
        self._task: asyncio.Task | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._build_widgets()
        self._show_status()

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        self.status = w.HTML(layout=w.Layout(width="100%"))
        self.rank_select = w.SelectMultiple(
            options=[], value=[], description="ranks", rows=4, layout=w.Layout(width="160px")
        )
        self.window_slider = w.SelectionSlider(
            options=list(WINDOWS), value=0.0, description="window", continuous_update=False
        )
        self.phase_box = w.HBox([], layout=w.Layout(flex_flow="row wrap"))
        self.phase_checks: dict[str, w.Checkbox] = {}
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop")
        self.stacks_button = w.Button(
            description="Stacks",
            icon="list",
            tooltip="every rank's Python stack now, without stopping it"
            if self.on_stacks is not None
            else "pass on_stacks=cluster.stacks to see the ranks' stacks",
            disabled=self.on_stacks is None,
        )
        self.stacks_view = w.HTML()
        self.timeline = figure_widget()
        self.heatmap_note = w.HTML()
        self.heatmap_value = w.Dropdown(options=["waiting"], value="waiting", description="colour by")
        # the rank × time heatmap: made when a run has more ranks than the timeline shows
        self._heatmap: go.FigureWidget | None = None
        #: the heatmap's ranks top down (``figures.rank_rows``): a click's row is one of them
        self._heatmap_rows: list[int] = []
        self._heatmap_box = w.VBox([])
        self.breakdown_note = w.HTML()
        # plotly's widget bundle (~5 MB) goes to the browser once per kernel (figure_widget); the other
        # tabs' figures are still made when first shown, so a dashboard opens with one figure to draw.
        self._breakdown: go.FigureWidget | None = None
        self._memory_figure: go.FigureWidget | None = None
        self._breakdown_box = w.VBox([self.breakdown_note])
        self._memory_box = w.VBox([w.HTML(html.escape(NO_MEMORY))])
        self._counters_figure: go.FigureWidget | None = None
        self._counters_box = w.VBox([w.HTML(html.escape("no counters recorded yet (Recorder.counter)"))])
        timeline_tab = w.VBox([self._heatmap_box, self.timeline])
        self.tabs = w.Tab(children=[timeline_tab, self._breakdown_box, self._memory_box, self._counters_box])
        self.tabs.titles = ("timeline", "breakdown", "memory", "counters")
        buttons = w.VBox([self.stop_button, self.stacks_button])
        controls = w.HBox([self.rank_select, w.VBox([self.window_slider, self.phase_box]), buttons])
        self.widget = w.VBox([self.status, controls, self.stacks_view, self.tabs])
        self.widget.add_class("workbench-dashboard")  # a hook for page styles and the browser tests

        self.rank_select.observe(self._guarded(self._on_ranks), names="value")
        self.window_slider.observe(self._guarded(self._on_window), names="value")
        self.heatmap_value.observe(self._guarded(self._on_heatmap_value), names="value")
        self.tabs.observe(self._guarded(self._on_tab), names="selected_index")
        self.stop_button.on_click(lambda _button: self.stop())
        self.stacks_button.on_click(lambda _button: self.show_stacks())
        self.timeline.layout.on_change(self._guarded(self._on_zoom), "xaxis.range", "xaxis.autorange")

    @property
    def breakdown(self) -> go.FigureWidget:
        """The breakdown tab's figure, created on first use."""
        if self._breakdown is None:
            self._breakdown = figure_widget()
            self._breakdown_box.children = (self.breakdown_note, self._breakdown)
        return self._breakdown

    @property
    def heatmap(self) -> go.FigureWidget:
        """The rank × time heatmap above the timeline, created when first needed; a click on a row adds its rank."""
        if self._heatmap is None:
            self._heatmap = figure_widget()
            self._heatmap_box.children = (w.HBox([self.heatmap_value, self.heatmap_note]), self._heatmap)
        return self._heatmap

    @property
    def memory(self) -> go.FigureWidget:
        """The memory tab's figure, created on first use."""
        if self._memory_figure is None:
            self._memory_figure = figure_widget()
            self._memory_box.children = (self._memory_figure,)
        return self._memory_figure

    @property
    def counters(self) -> go.FigureWidget:
        """The counters tab's figure (queue depth, ...), created on first use."""
        if self._counters_figure is None:
            self._counters_figure = figure_widget()
            self._counters_box.children = (self._counters_figure,)
        return self._counters_figure

    def _guarded(self, handler: Callable[..., object]) -> Callable[..., None]:
        """Wrap a widget callback so that an error lands in the status line, not the log area."""

        def run(*args: object) -> None:
            try:
                handler(*args)
            except Exception as exc:
                self._fail("redraw", exc)
                self._show_status()

        return run

    def _on_ranks(self, change: dict) -> None:
        if self._drawing:
            return
        self._auto_ranks = False
        self._hidden_ranks = set(self.rank_select.options) - set(change["new"])
        self._redraw(force=True)

    def _on_heatmap_value(self, _change: dict) -> None:
        if not self._drawing:
            self._stale_tabs.add(TAB_TIMELINE)
            self._redraw()

    def _on_heatmap_click(self, _trace: Any, points: Any, _state: Any) -> None:
        """A click on a heatmap cell adds that row's rank to the timeline (and stops following the slowest)."""
        meta = (self._heatmap.layout.meta or {}) if self._heatmap is not None else {}
        rows = self._heatmap_rows
        picked = {
            int(y) if meta.get("rank_order") else rows[int(y)]
            for y in points.ys
            if y is not None and (meta.get("rank_order") or 0 <= int(y) < len(rows))
        }
        picked = {rank for rank in picked if rank in self._last_seen}
        if not picked:
            return
        shown = set(self._visible_ranks())
        self._auto_ranks = False
        self._hidden_ranks -= picked
        self._drawing = True
        try:
            self.rank_select.value = sorted(shown | picked)
        finally:
            self._drawing = False
        self._redraw(force=True)

    def _on_window(self, _change: dict) -> None:
        self._view = None
        self._redraw(force=True)

    def _on_tab(self, _change: dict) -> None:
        self._redraw()

    def _on_phase(self, _change: dict) -> None:
        if not self._drawing:
            self._redraw(force=True)

    def _on_zoom(self, *_args: Any) -> None:
        """Re-decimate the window the user zoomed to, so that zooming in reveals merged detail.

        Only user-set axis properties count (the browser's autorange arrives as defaults), and a
        range equal to the one last drawn is the echo of our own redraw, not a zoom.
        """
        if self._drawing or not self._last_seen:
            return
        axis = self.timeline.layout.xaxis.to_plotly_json()
        xrange = axis.get("range")
        if axis.get("autorange") is True or xrange is None:
            view = None
        elif len(xrange) == 2 and all(isinstance(v, int | float) for v in xrange):
            view = (float(xrange[0]), float(xrange[1]))
            drawn = self._drawn_range
            if drawn is not None and all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(view, drawn)):
                return
        else:
            return
        if view == self._view:
            return
        self._view = view
        self._stale_tabs.add(TAB_TIMELINE)
        self._redraw()

    # ------------------------------------------------------------------ data
    def update(self) -> None:
        """Poll the source once and redraw; errors become the status line, never a traceback."""
        if not self._lock.acquire(blocking=False):
            return  # an update is already running (timer thread and a manual call)
        try:
            started = time.perf_counter()
            started_ns = time.time_ns()
            new_events = 0
            try:
                events, memory = self.source.poll()
                poll_counters = getattr(self.source, "poll_counters", None)
                counters = poll_counters() if poll_counters is not None else None
                poll_s = time.perf_counter() - started
                new_events = self._ingest(events, memory)
                if counters is not None and len(counters):
                    self._counter_chunks.append(counters)
                    self._stale_tabs.add(TAB_COUNTERS)
                self.error = ""
            except Exception as exc:
                poll_s = time.perf_counter() - started
                self._fail("poll", exc)
            drawn = time.perf_counter()
            try:
                self._redraw()
            except Exception as exc:
                self._fail("redraw", exc)
            self.timings.append(
                {
                    "started_ns": float(started_ns),
                    "poll_s": poll_s,
                    "redraw_s": time.perf_counter() - drawn,
                    "new_events": float(new_events),
                    "drawn_spans": float(self._drawn_spans),
                }
            )
            self._show_status()
        finally:
            self._lock.release()

    def _ingest(self, events: pd.DataFrame | None, memory: pd.DataFrame | None) -> int:
        now = self.clock()
        n_new = 0 if events is None else len(events)
        if n_new:
            if self.grid is not None:
                self.grid.add(events)
            self._event_chunks.append(events)
            self._events = None
            self._n_events += n_new
            first = int(events["start_ns"].min())
            self._t0_ns = first if self._t0_ns is None else min(self._t0_ns, first)
            for rank in pd.unique(events["rank"]):
                self._last_seen[int(rank)] = now
            if len(self._hosts) < len(self._last_seen):  # hosts do not change: look only until all are known
                for rank, host in rank_hosts(events).items():
                    self._hosts.setdefault(rank, host)
            if self.run_id is None and "run_id" in events:
                ids = [r for r in pd.unique(events["run_id"]) if r]
                self.run_id = str(ids[0]) if ids else None
            self._sync_controls(pd.unique(events["phase"].astype(str)))
            self._stale_tabs.add(TAB_BREAKDOWN)
            if self._in_view(events):  # a zoomed view that the new spans miss would be redrawn unchanged
                self._stale_tabs.add(TAB_TIMELINE)
        if memory is not None and len(memory):
            self._memory_chunks.append(memory)
            self._memory = None
            if self._t0_ns is None:
                self._t0_ns = int(memory["time_ns"].min())
            self._stale_tabs.add(TAB_MEMORY)
        return n_new

    def _in_view(self, events: pd.DataFrame) -> bool:
        """Whether any of ``events`` falls in the time range the user zoomed to (always, without a zoom)."""
        if self._view is None or self._t0_ns is None:
            return True
        return bool(self._overlapping(events, self._view).any())

    def _overlapping(self, events: pd.DataFrame, window: tuple[float, float]) -> Any:
        """Mask of the spans that overlap ``window`` (seconds since the run's first event)."""
        low, high = (self._t0_ns + int(edge * NS_PER_S) for edge in window)  # type: ignore[operator]
        return (events["end_ns"].to_numpy() >= low) & (events["start_ns"].to_numpy() <= high)

    def _sync_controls(self, new_phases: Any) -> None:
        """Add newly seen ranks (shown unless hidden before) and phases (checked) to the controls."""
        self._drawing = True
        try:
            ranks = sorted(self._last_seen)
            if list(self.rank_select.options) != ranks:
                self.rank_select.options = ranks
                self.rank_select.value = [r for r in ranks if r not in self._hidden_ranks]
                self.rank_select.rows = 4 if len(ranks) <= self.timeline_max_ranks else 8
            added = [p for p in new_phases if p not in self._phases]
            if added:
                self._phases = phase_order([*self._phases, *added])
                colours = colours_for(self._phases)
                for phase in added:
                    box = w.Checkbox(value=True, description=phase, indent=False, layout=w.Layout(width="auto"))
                    box.observe(self._guarded(self._on_phase), names="value")
                    self.phase_checks[phase] = box
                self.phase_box.children = [
                    w.HBox(
                        [
                            w.HTML(f'<span style="color:{colours[p]};font-size:1.3em">■</span>'),
                            self.phase_checks[p],
                        ]
                    )
                    for p in self._phases
                ]
        finally:
            self._drawing = False

    @property
    def events(self) -> pd.DataFrame | None:
        """All events received so far (None before the first)."""
        if self._events is None and self._event_chunks:
            self._events = pd.concat(self._event_chunks, ignore_index=True)
            self._event_chunks = [self._events]
        return self._events

    @property
    def memory_samples(self) -> pd.DataFrame | None:
        """All memory samples received so far (None before the first)."""
        if self._memory is None and self._memory_chunks:
            self._memory = pd.concat(self._memory_chunks, ignore_index=True)
            self._memory_chunks = [self._memory]
        return self._memory

    def _visible_ranks(self) -> list[int]:
        return [r for r in sorted(self._last_seen) if r not in self._hidden_ranks]

    def _shown_phases(self) -> list[str]:
        return [p for p in self._phases if self.phase_checks[p].value]

    def _window(self, events: pd.DataFrame) -> tuple[float, float] | None:
        if self._view is not None:
            return self._view
        seconds = self.window_slider.value
        if not seconds or self._t0_ns is None:
            return None
        end = (int(events["end_ns"].max()) - self._t0_ns) / NS_PER_S
        return (max(end - seconds, 0.0), end)

    # ------------------------------------------------------------------ drawing
    def _redraw(self, force: bool = False) -> None:
        """Redraw the visible tab if its data or controls changed; other tabs wait until shown."""
        if force:
            self._stale_tabs.update((TAB_TIMELINE, TAB_BREAKDOWN, TAB_MEMORY, TAB_COUNTERS))
        tab = self.tabs.selected_index or 0
        if tab not in self._stale_tabs:
            return
        self._stale_tabs.discard(tab)
        if tab == TAB_TIMELINE:
            self._draw_timeline()
        elif tab == TAB_BREAKDOWN:
            self._draw_breakdown()
        elif tab == TAB_MEMORY:
            self._draw_memory()
        else:
            self._draw_counters()

    def _filtered_events(self) -> pd.DataFrame | None:
        events = self.events
        if events is None:
            return None
        if self._hidden_ranks:
            shown = self._visible_ranks()
            if len(shown) < len(self._hidden_ranks):
                return events[events["rank"].isin(shown)]
            events = events[~events["rank"].isin(self._hidden_ranks)]
        return events

    @property
    def many_ranks(self) -> bool:
        """More ranks than the timeline shows: the heatmap shows them all, the timeline a selection."""
        return len(self._last_seen) > self.timeline_max_ranks

    def _follow_slowest(self, slowest: list[int]) -> None:
        """Show the slowest ranks on the timeline until the user picks ranks themselves."""
        if not self._auto_ranks or not slowest or slowest == self._visible_ranks():
            return
        self._hidden_ranks = set(self._last_seen) - set(slowest)
        self._drawing = True
        try:
            self.rank_select.value = slowest
        finally:
            self._drawing = False

    def _draw_heatmap(self) -> None:
        """Every rank's share of each time bin (waiting by default), the slowest ranks and host marked."""
        if self.grid is None or self._activity is None:
            self.heatmap_note.value = html.escape(f"rank × time heatmap unavailable ({self._grid_missing})")
            return
        heatmap = self.heatmap
        values = self.grid.values()
        if list(self.heatmap_value.options) != values:
            self._drawing = True
            try:
                current = self.heatmap_value.value
                self.heatmap_value.options = values
                self.heatmap_value.value = current if current in values else values[0]
            finally:
                self._drawing = False
        activity = self._activity.rank_activity(self.grid, slowest=self.slowest_ranks, hosts=self._hosts)
        marks = self._activity.heatmap_marks(activity)
        self._follow_slowest(marks["marked"])
        hosts = {**self.grid.hosts, **self._hosts}
        share = self.grid.share(self.heatmap_value.value)
        self._heatmap_rows = rank_rows(list(share.index), hosts)
        fig = rank_time_figure(share, value=self.heatmap_value.value, hosts=hosts, **marks)
        first = not heatmap.data
        self._sync(heatmap, fig)
        if first and heatmap.data:
            heatmap.data[0].on_click(self._guarded(self._on_heatmap_click))
        shown = self._visible_ranks()
        chosen = "the slowest" if self._auto_ranks else "your selection:"
        self.heatmap_note.value = html.escape(
            f"{len(self._last_seen)} ranks · {self._activity.describe_slowest(activity)} · the timeline below"
            f" shows {len(shown)}, {chosen} {rank_list(shown)} (pick in 'ranks' or click a row)"
        )

    def _draw_timeline(self) -> None:
        if self.many_ranks:
            self._draw_heatmap()
        events = self._filtered_events()
        if events is None:
            return
        window = self._window(events)
        if window is not None and self._t0_ns is not None:  # only the window's spans go on: a bounded redraw
            inside = self._overlapping(events, window)
            if not inside.all():
                events = events[inside]
        fig = timeline_figure(
            events,
            t0_ns=self._t0_ns,
            window=window,
            max_spans=self.max_spans,
            ranks=self._visible_ranks(),
            phases=self._shown_phases(),
            known_phases=self._phases,
            hosts=self._hosts,
        )
        meta = fig.layout.meta or {}
        self._drawn_spans = int(meta.get("drawn", 0))
        self._resolution_s = float(meta.get("resolution_s", 0.0))
        self._drawn_range = window
        self._sync(self.timeline, fig)

    def _draw_breakdown(self) -> None:
        if self.analyse is None:
            self.breakdown_note.value = html.escape(f"analysis unavailable ({self._analyse_missing})")
            return
        events = self._filtered_events()
        if events is None or len(events) == 0:
            self.breakdown_note.value = html.escape(WAITING)
            return
        self.breakdown_note.value = ""
        fig = breakdown_figure(self.analyse(events), phases=self._shown_phases())
        self._sync(self.breakdown, fig)

    def _draw_memory(self) -> None:
        samples = self.memory_samples
        if samples is None:
            return
        if self._hidden_ranks:
            samples = samples[~samples["rank"].isin(self._hidden_ranks)]
        growth = self.analyse_memory(samples) if self.analyse_memory is not None else None
        self._sync(self.memory, memory_figure(samples, growth, t0_ns=self._t0_ns))

    def _draw_counters(self) -> None:
        if not self._counter_chunks:
            return
        counters = pd.concat(self._counter_chunks, ignore_index=True)
        self._counter_chunks = [counters]
        if self._hidden_ranks:
            counters = counters[~counters["rank"].isin(self._hidden_ranks)]
        self._sync(self.counters, counter_figure(counters, t0_ns=self._t0_ns))

    def _sync(self, widget: go.FigureWidget, fig: go.Figure) -> None:
        self._drawing = True
        try:
            sync_figure(widget, fig)
        finally:
            self._drawing = False

    # ------------------------------------------------------------------ status
    def _fail(self, where: str, exc: BaseException) -> None:
        self.error = one_line(where, exc)
        self.last_exception = exc
        log.debug("dashboard %s failed", where, exc_info=exc)

    def status_text(self) -> str:
        """The status line as plain text (also what the widget shows)."""
        parts = []
        if self._stopped:
            parts.append("stopped")
        if self.error:
            parts.append(self.error)
        try:  # a failed or stalled rank, from run.json (RunTail.alerts): the banner comes first
            parts[:0] = self.source.alerts() if hasattr(self.source, "alerts") else []
        except Exception:
            pass
        if not self._last_seen:
            parts.append(WAITING)
            return " · ".join(parts)
        now = self.clock()
        if self.run_id:
            parts.append(f"run {self.run_id}")
        ranks = sorted(self._last_seen)
        where = hosts_summary({rank: self._hosts.get(rank, "") for rank in ranks}, ranks_word="ranks seen")
        parts.append(where or f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''} seen ({rank_list(ranks)})")
        parts.append(f"{self._n_events:,} events")
        parts.append(f"last event {now - max(self._last_seen.values()):.0f} s ago")
        if self.refresh_reason:
            parts.append(self.refresh_reason)
        if self._resolution_s > 0:
            parts.append(f"drawing {self._drawn_spans:,} bars (spans closer than {self._resolution_s:.2g} s merged)")
        parts.extend(self.stale_messages(now))
        return " · ".join(parts)

    def stale_messages(self, now: float | None = None) -> list[str]:
        """Ranks silent for more than ``stale_s`` while another rank is not: one message per rank, up to
        ``MAX_STALE_NAMED``; more are one message (a large job's silent node is one line, not hundreds)."""
        now = self.clock() if now is None else now
        ages = {rank: now - seen for rank, seen in self._last_seen.items()}
        if not any(age <= self.stale_s for age in ages.values()):
            return []
        stale = {rank: age for rank, age in sorted(ages.items()) if age > self.stale_s}
        if len(stale) <= MAX_STALE_NAMED:
            return [
                f"{ranks_with_hosts([rank], self._hosts)} has sent nothing for {age:.0f} s"
                for rank, age in stale.items()
            ]
        named = ranks_with_hosts(stale, self._hosts)
        if len(named) > 120:
            named = f"{len(stale)} ranks"
        low, high = min(stale.values()), max(stale.values())
        return [
            f"{named} have sent nothing for {low:.0f}–{high:.0f} s"
            if high - low >= 1
            else f"{named} have sent nothing for {low:.0f} s"
        ]

    def show_stacks(self) -> dict[int, str]:
        """Ask ``on_stacks`` for every rank's stack now and show them under the controls; returns them."""
        if self.on_stacks is None:
            return {}
        try:
            stacks = dict(self.on_stacks())
        except Exception as exc:
            self._fail("stacks", exc)
            self._show_status()
            return {}
        text = "\n".join(
            f"=== {ranks_with_hosts([rank], self._hosts)} ===\n{stack.rstrip()}"
            for rank, stack in sorted(stacks.items())
        )
        when = time.strftime("%H:%M:%S")
        self.stacks_view.value = (
            f"<details open><summary>every rank's Python stack at {when} ({len(stacks)} ranks)</summary>"
            f'<pre style="max-height:24em;overflow:auto;white-space:pre">{html.escape(text)}</pre></details>'
        )
        return stacks

    def _show_status(self) -> None:
        text = self.status_text()
        stalled = "sent nothing for" in text or text.startswith("STALL")
        if self.on_stacks is not None:
            self.stacks_button.button_style = "warning" if stalled else ""
        colour = "#b00020" if self.error or text.startswith("FAILED") else ("#a05a00" if stalled else "inherit")
        self.status.value = (
            f'<div style="white-space:normal;overflow-wrap:anywhere;line-height:1.4;color:{colour}" '
            f'title="{html.escape(text)}">{html.escape(text)}</div>'
        )

    # ------------------------------------------------------------------ refresh loop
    def start(self) -> Dashboard:
        """Refresh every ``refresh_s``: an asyncio task on the kernel's loop, else a daemon timer."""
        if self._running:
            return self
        self._running, self._stopped = True, False
        self.stop_button.disabled = False
        loop = _running_loop()
        if loop is not None:
            self._task = loop.create_task(self._run_async())
        else:
            self._tick()
        return self

    async def _run_async(self) -> None:
        while self._running:
            self.update()
            await asyncio.sleep(self.refresh_s)

    def _tick(self) -> None:
        if not self._running:
            return
        self.update()
        if self._running:
            self._timer = threading.Timer(self.refresh_s, self._tick)
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        """Stop refreshing and call ``on_stop`` (e.g. to end the job); errors go to the status line."""
        self._running, self._stopped = False, True
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.stop_button.disabled = True
        if self.on_stop is not None:
            try:
                self.on_stop()
            except Exception as exc:
                self._fail("stop", exc)
        self._show_status()

    @property
    def running(self) -> bool:
        """True while the periodic refresh is active."""
        return self._running

    # ------------------------------------------------------------------ text fallback
    def text_summary(self) -> str:
        """Status plus a plain-text table of per-rank phase seconds (for terminals and logs)."""
        lines = [self.status_text()]
        events = self._filtered_events()
        if events is None or len(events) == 0:
            return "\n".join(lines)
        if self.analyse is None:
            counts = events.groupby(["rank", "phase"]).size().unstack(fill_value=0)
            lines.append(f"per-phase seconds need workbench.analysis ({self._analyse_missing}); events per rank:")
            lines.append(counts.to_string())
            return "\n".join(lines)
        try:
            table = self.analyse(events)
            by = [c for c in table.columns if c not in ("phase", "seconds", "fraction")]
            grid = table.pivot_table(index=by[0], columns="phase", values="seconds", aggfunc="sum", fill_value=0.0)
            grid = grid[[p for p in phase_order(grid.columns) if p in grid.columns]]
            if by[0] == "rank" and host_count(self._hosts) > 1:  # which host each rank ran on
                grid.insert(0, "host", [self._hosts.get(int(rank), "") for rank in grid.index])
            lines.append("seconds per phase:")
            lines.append(grid.to_string(float_format=lambda v: f"{v:.3f}"))
        except Exception as exc:
            lines.append(one_line("analysis", exc))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text_summary()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("Dashboard(...)" if cycle else self.text_summary())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = self.text_summary()
        return bundle


def sync_figure(widget: go.FigureWidget, fig: go.Figure) -> None:
    """Copy ``fig`` into ``widget`` with as few messages as possible.

    Same traces (type and name, in order): one batched restyle of the changed properties, which
    keeps the browser's zoom and legend state. Otherwise the traces are replaced.
    """
    same = [(t.type, t.name) for t in widget.data] == [(t.type, t.name) for t in fig.data]
    if not same:
        widget.data = []
        widget.add_traces(list(fig.data))
    with widget.batch_update():
        if same:
            for old, new in zip(widget.data, fig.data, strict=True):
                props = new.to_plotly_json()
                props.pop("type", None)
                old.update(props, overwrite=True)
        layout = fig.layout.to_plotly_json()
        layout.pop("template", None)
        # plotly.js fixes the width (autosize off) when a relayout changes the height alone:
        # keep the plot as wide as its container by sending autosize with every layout update.
        layout.pop("width", None)
        layout["autosize"] = True
        widget.layout.update(layout, overwrite=True)
        widget.layout.annotations = fig.layout.annotations
        widget.layout.shapes = fig.layout.shapes  # the timeline's host bands: gone when the hosts are


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread (ipykernel has one), or None in a plain script."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:
            return None
    return loop if loop.is_running() else None
