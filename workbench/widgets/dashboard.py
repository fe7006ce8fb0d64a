"""Live dashboard: timeline, phase breakdown and memory of a running job, refreshed in the notebook.

The dashboard composes panels (``workbench.widgets.panels``: each a widget and one ``update(frame)``)
and feeds them. Rows come from an injected ``source`` (``store.RunTail`` or anything with
``poll() -> (events, memory)`` returning new rows); numbers come from an injected ``analyse`` callable,
run here and nowhere in the panels. So it can be driven headless in tests by calling ``update()``, and a
failure anywhere becomes one line in the status bar instead of a traceback that would bury the notebook
output while a job runs.
"""

from __future__ import annotations

import asyncio
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

from workbench.events import NS_PER_S, host_count, rank_hosts, ranks_with_hosts
from workbench.figures import phase_order
from workbench.figures.timeline import DEFAULT_MAX_SPANS, MAX_TIMELINE_RANKS
from workbench.widgets.figure import preload
from workbench.widgets.panels import (
    WAITING,
    Banner,
    BreakdownFrame,
    BreakdownPanel,
    Controls,
    ControlsFrame,
    CountersFrame,
    CountersPanel,
    HeatmapFrame,
    HeatmapPanel,
    MemoryFrame,
    MemoryPanel,
    Panel,
    StacksFrame,
    StacksPanel,
    StatusFrame,
    TimelineFrame,
    TimelinePanel,
)

# sync_figure lives with the panels that use it; ``workbench.widgets.sync_figure`` reaches it through here
from workbench.widgets.panels import sync_figure as sync_figure

log = logging.getLogger(__name__)

#: Bars a live timeline redraws at most per refresh: half the static figures' budget
#: (``DEFAULT_MAX_SPANS``), because the browser redraws them on every refresh. Headless Chromium drew
#: 5 000 bars of a 64-rank timeline in 0.38-0.75 s and 2 500 in 0.18-0.20 s: with the flush and the
#: refresh interval, that decides whether a span is on screen within a second of its end.
LIVE_MAX_SPANS = DEFAULT_MAX_SPANS // 2

preload()  # in a kernel: plotly's widget bundle starts on its way to the browser now, not at the first figure

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

    The panels (``workbench.widgets.panels``) each redraw from one frame; the dashboard polls the
    source, keeps the rows, runs the injected analyses, owns what the controls do and calls each panel's
    ``update()`` (a hidden tab's when it is shown). ``update()`` polls once and redraws synchronously;
    ``start()`` does so every ``refresh_s`` without blocking the kernel; the Stop button (or ``stop()``)
    ends refreshing and calls ``on_stop``. ``on_stacks`` (e.g. ``cluster.stacks``: rank -> Python stack
    text) enables the Stacks button, which turns orange when a rank stalls and shows every rank's stack
    without stopping it. ``clock`` (monotonic seconds) is injectable for tests of the stale-rank message.
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
        #: every phase seen, in drawing order
        self._phases: list[str] = []
        self._hidden_ranks: set[int] = set()
        self._view: tuple[float, float] | None = None
        self._stale_tabs: set[int] = {TAB_TIMELINE, TAB_BREAKDOWN, TAB_MEMORY, TAB_COUNTERS}
        self._drawing = False
        self._running = False
        self._stopped = False
        self._task: asyncio.Task | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._build_widgets()
        self._show_status()

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        """The panels, laid out as tabs under the status line and the controls, and the controls' handlers."""
        self.banner = Banner()
        self.controls = Controls(WINDOWS, stacks=self.on_stacks is not None, on_phase=self._guarded(self._on_phase))
        self.stacks_panel = StacksPanel()
        self.timeline_panel = TimelinePanel()
        self.heatmap_panel = HeatmapPanel(on_click=self._guarded(self._on_heatmap_click))
        self.breakdown_panel = BreakdownPanel()
        self.memory_panel = MemoryPanel()
        self.counters_panel = CountersPanel()
        #: every panel by name: each redraws from one frame in its ``update()``
        self.panels: dict[str, Panel] = {
            "banner": self.banner,
            "controls": self.controls,
            "stacks": self.stacks_panel,
            "heatmap": self.heatmap_panel,
            "timeline": self.timeline_panel,
            "breakdown": self.breakdown_panel,
            "memory": self.memory_panel,
            "counters": self.counters_panel,
        }
        # the widgets tests, notebooks and benchmarks reach by their old names
        self.status = self.banner.root
        self.rank_select = self.controls.rank_select
        self.window_slider = self.controls.window_slider
        self.phase_box = self.controls.phase_box
        self.phase_checks = self.controls.phase_checks
        self.stop_button = self.controls.stop_button
        self.stacks_button = self.controls.stacks_button
        self.stacks_view = self.stacks_panel.root
        self.timeline = self.timeline_panel.root
        self.heatmap_note = self.heatmap_panel.note
        self.heatmap_value = self.heatmap_panel.colour_by
        self.breakdown_note = self.breakdown_panel.note
        self._memory_box = self.memory_panel.root

        timeline_tab = w.VBox([self.heatmap_panel.root, self.timeline])
        tabs = [timeline_tab, self.breakdown_panel.root, self.memory_panel.root, self.counters_panel.root]
        self.tabs = w.Tab(children=tabs)
        self.tabs.titles = ("timeline", "breakdown", "memory", "counters")
        self.widget = w.VBox([self.status, self.controls.root, self.stacks_view, self.tabs])
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
        return self.breakdown_panel.figure

    @property
    def heatmap(self) -> go.FigureWidget:
        """The rank × time heatmap above the timeline, created when first needed; a click on a row adds its rank."""
        return self.heatmap_panel.figure

    @property
    def _heatmap(self) -> go.FigureWidget | None:
        """The heatmap if it was made (None while the timeline shows every rank)."""
        return self.heatmap_panel._figure

    @property
    def memory(self) -> go.FigureWidget:
        """The memory tab's figure, created on first use."""
        return self.memory_panel.figure

    @property
    def counters(self) -> go.FigureWidget:
        """The counters tab's figure (queue depth, ...), created on first use."""
        return self.counters_panel.figure

    @property
    def _drawn_spans(self) -> int:
        return self.timeline_panel.drawn_spans

    @property
    def _resolution_s(self) -> float:
        return self.timeline_panel.resolution_s

    @property
    def _drawn_range(self) -> tuple[float, float] | None:
        return self.timeline_panel.drawn_range

    def _draw(self, panel: Panel, frame: Any) -> None:
        """``panel.update(frame)`` with the controls' handlers quiet: what it sets is not the user's doing."""
        self._drawing = True
        try:
            panel.update(frame)
        finally:
            self._drawing = False

    def _guarded(self, handler: Callable[..., object]) -> Callable[..., None]:
        """Wrap a widget callback so that an error lands in the status line, not the log area."""

        def run(*args: object) -> None:
            try:
                handler(*args)
            except Exception as exc:
                self._fail("redraw", exc)
                self._show_status()

        return run

    # ------------------------------------------------------------------ what the controls do
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
        picked = {rank for rank in self.heatmap_panel.ranks_at(points) if rank in self._last_seen}
        if not picked:
            return
        shown = set(self._visible_ranks())
        self._auto_ranks = False
        self._hidden_ranks -= picked
        self._set_ranks(sorted(shown | picked))
        self._redraw(force=True)

    def _set_ranks(self, ranks: list[int]) -> None:
        """Select ``ranks`` in the rank picker without it counting as the user's pick."""
        self._drawing = True
        try:
            self.rank_select.value = ranks
        finally:
            self._drawing = False

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
        """Poll the source once and redraw; errors become the status line, never a traceback.

        One refresh updates the controls, the shown tab's panels (a hidden tab's wait until it is shown)
        and the banner, each once.
        """
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
                if new_events:
                    self._draw(self.controls, self._controls_frame())
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
            added = [p for p in pd.unique(events["phase"].astype(str)) if p not in self._phases]
            if added:
                self._phases = phase_order([*self._phases, *added])
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
        self._set_ranks(slowest)

    # ------------------------------------------------------------------ frames: rows selected, numbers analysed
    def _controls_frame(self) -> ControlsFrame:
        return ControlsFrame(
            ranks=sorted(self._last_seen),
            hidden=frozenset(self._hidden_ranks),
            phases=list(self._phases),
            many_ranks=self.many_ranks,
        )

    def _heatmap_frame(self) -> HeatmapFrame:
        """Every rank's share of each time bin (waiting by default), the slowest ranks and host marked."""
        if self.grid is None or self._activity is None:
            return HeatmapFrame(missing=self._grid_missing)
        values = self.grid.values()
        current = self.heatmap_value.value
        value = current if current in values else values[0]
        activity = self._activity.rank_activity(self.grid, slowest=self.slowest_ranks, hosts=self._hosts)
        marks = self._activity.heatmap_marks(activity)
        self._follow_slowest(marks["marked"])
        return HeatmapFrame(
            share=self.grid.share(value),
            value=value,
            values=values,
            hosts={**self.grid.hosts, **self._hosts},
            marks=marks,
            n_ranks=len(self._last_seen),
            slowest=self._activity.describe_slowest(activity),
            shown=self._visible_ranks(),
            following=self._auto_ranks,
        )

    def _timeline_frame(self) -> TimelineFrame | None:
        events = self._filtered_events()
        if events is None:
            return None
        window = self._window(events)
        if window is not None and self._t0_ns is not None:  # only the window's spans go on: a bounded redraw
            inside = self._overlapping(events, window)
            if not inside.all():
                events = events[inside]
        return TimelineFrame(
            events,
            t0_ns=self._t0_ns,
            window=window,
            max_spans=self.max_spans,
            ranks=self._visible_ranks(),
            phases=self._shown_phases(),
            known_phases=self._phases,
            hosts=self._hosts,
        )

    def _breakdown_frame(self) -> BreakdownFrame:
        if self.analyse is None:
            return BreakdownFrame(note=f"analysis unavailable ({self._analyse_missing})")
        events = self._filtered_events()
        if events is None or len(events) == 0:
            return BreakdownFrame(note=WAITING)
        return BreakdownFrame(table=self.analyse(events), phases=self._shown_phases())

    def _memory_frame(self) -> MemoryFrame | None:
        samples = self.memory_samples
        if samples is None:
            return None
        if self._hidden_ranks:
            samples = samples[~samples["rank"].isin(self._hidden_ranks)]
        growth = self.analyse_memory(samples) if self.analyse_memory is not None else None
        return MemoryFrame(samples, growth, t0_ns=self._t0_ns)

    def _counters_frame(self) -> CountersFrame | None:
        if not self._counter_chunks:
            return None
        counters = pd.concat(self._counter_chunks, ignore_index=True)
        self._counter_chunks = [counters]
        if self._hidden_ranks:
            counters = counters[~counters["rank"].isin(self._hidden_ranks)]
        return CountersFrame(counters, t0_ns=self._t0_ns)

    # ------------------------------------------------------------------ drawing
    def _redraw(self, force: bool = False) -> None:
        """Redraw the visible tab's panels if their data or controls changed; other tabs wait until shown."""
        if force:
            self._stale_tabs.update((TAB_TIMELINE, TAB_BREAKDOWN, TAB_MEMORY, TAB_COUNTERS))
        tab = self.tabs.selected_index or 0
        if tab not in self._stale_tabs:
            return
        self._stale_tabs.discard(tab)
        if tab == TAB_TIMELINE:
            if self.many_ranks:
                self._draw(self.heatmap_panel, self._heatmap_frame())
            frame: Any = self._timeline_frame()
            panel: Panel = self.timeline_panel
        elif tab == TAB_BREAKDOWN:
            frame, panel = self._breakdown_frame(), self.breakdown_panel
        elif tab == TAB_MEMORY:
            frame, panel = self._memory_frame(), self.memory_panel
        else:
            frame, panel = self._counters_frame(), self.counters_panel
        if frame is not None:  # nothing received yet: the panel keeps its placeholder
            self._draw(panel, frame)

    # ------------------------------------------------------------------ status
    def _fail(self, where: str, exc: BaseException) -> None:
        self.error = one_line(where, exc)
        self.last_exception = exc
        log.debug("dashboard %s failed", where, exc_info=exc)

    def _status_frame(self) -> StatusFrame:
        alerts: list[str] = []
        try:  # a failed or stalled rank, from run.json (RunTail.alerts): the banner comes first
            alerts = list(self.source.alerts()) if hasattr(self.source, "alerts") else []
        except Exception:
            pass
        now = self.clock()
        return StatusFrame(
            alerts=alerts,
            stopped=self._stopped,
            error=self.error,
            seen=dict(self._last_seen),
            now=now,
            run_id=self.run_id,
            hosts=self._hosts,
            n_events=self._n_events,
            refresh_reason=self.refresh_reason,
            drawn_spans=self._drawn_spans,
            resolution_s=self._resolution_s,
            stale=self.stale_messages(now),
        )

    def status_text(self) -> str:
        """The status line as plain text (also what the widget shows)."""
        return self._status_frame().text

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
        self._draw(self.stacks_panel, StacksFrame(stacks, self._hosts, when=time.strftime("%H:%M:%S")))
        return stacks

    def _show_status(self) -> None:
        frame = self._status_frame()
        if self.on_stacks is not None:
            self.stacks_button.button_style = "warning" if frame.stalled else ""
        self._draw(self.banner, frame)

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
