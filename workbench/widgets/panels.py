"""The dashboard's panels, each a small component in the shape of dask.distributed's dashboard components.

A panel holds its ``root`` (the widget it shows) and has one ``update(frame)`` that redraws it from a frame:
rows already selected and numbers already analysed by the ``Dashboard``, which polls the run, owns the
controls' behaviour and decides which panel to redraw. Panels draw (``workbench.figures``) but never
analyse, so each can be driven from a made frame alone, without a run or a dashboard.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import pandas as pd
import plotly.graph_objects as go

from workbench.extras import require

try:
    import ipywidgets as w
except ImportError:  # the notebook extra is not installed: one line naming it
    require("notebook", for_what="the live dashboard (workbench.Dashboard)")
    raise

from workbench.events import hosts_summary, rank_list, ranks_with_hosts
from workbench.figures import (
    breakdown_figure,
    colours_for,
    counter_figure,
    memory_figure,
    rank_rows,
    rank_time_figure,
    timeline_figure,
)
from workbench.widgets.figure import figure_widget

WAITING = "waiting for the first events from the ranks…"
#: What the memory tab says until the first sample arrives: an empty box reads as a broken tab.
NO_MEMORY = (
    "no memory samples yet: the ranks record them with Recorder(memory_interval_s=...) or "
    "Recorder.sample_memory(); this run has sent none so far"
)
NO_COUNTERS = "no counters recorded yet (Recorder.counter)"


class Panel(Protocol):
    """What the dashboard composes: a widget to show and one redraw from a frame."""

    root: w.Widget

    def update(self, frame: Any) -> None: ...


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


class FigurePanel:
    """A tab whose figure is made when first drawn: plotly's widget bundle goes to the browser once per
    kernel, so a dashboard opens with one figure to draw. Until then ``root`` shows ``placeholder``."""

    def __init__(self, placeholder: Sequence[w.Widget] = (), above: Sequence[w.Widget] = ()) -> None:
        self.root = w.VBox(list(placeholder))
        self._above = tuple(above)
        self._figure: go.FigureWidget | None = None

    @property
    def figure(self) -> go.FigureWidget:
        """The panel's figure, created (and put in ``root`` under ``above``) on first use."""
        if self._figure is None:
            self._figure = figure_widget()
            self.root.children = (*self._above, self._figure)
        return self._figure


# ---------------------------------------------------------------------- frames
@dataclass(frozen=True)
class StatusFrame:
    """What the status line says: the run's alerts, the dashboard's error and what arrived from which rank."""

    alerts: Sequence[str] = ()
    stopped: bool = False
    error: str = ""
    #: rank -> when it last sent events (the dashboard's clock)
    seen: Mapping[int, float] = field(default_factory=dict)
    now: float = 0.0
    run_id: str | None = None
    hosts: Mapping[int, str] = field(default_factory=dict)
    n_events: int = 0
    refresh_reason: str | None = None
    drawn_spans: int = 0
    resolution_s: float = 0.0
    #: silent ranks, one message each (``Dashboard.stale_messages``)
    stale: Sequence[str] = ()

    @cached_property
    def text(self) -> str:
        """The status line as plain text: the banner (a failed or stalled rank) first."""
        parts = [*self.alerts]
        if self.stopped:
            parts.append("stopped")
        if self.error:
            parts.append(self.error)
        if not self.seen:
            parts.append(WAITING)
            return " · ".join(parts)
        if self.run_id:
            parts.append(f"run {self.run_id}")
        ranks = sorted(self.seen)
        where = hosts_summary({rank: self.hosts.get(rank, "") for rank in ranks}, ranks_word="ranks seen")
        parts.append(where or f"{len(ranks)} rank{'s' if len(ranks) != 1 else ''} seen ({rank_list(ranks)})")
        parts.append(f"{self.n_events:,} events")
        parts.append(f"last event {self.now - max(self.seen.values()):.0f} s ago")
        if self.refresh_reason:
            parts.append(self.refresh_reason)
        if self.resolution_s > 0:
            parts.append(f"drawing {self.drawn_spans:,} bars (spans closer than {self.resolution_s:.2g} s merged)")
        parts.extend(self.stale)
        return " · ".join(parts)

    @property
    def stalled(self) -> bool:
        """A rank went silent or the run says it stalled (the Stacks button turns orange)."""
        return "sent nothing for" in self.text or self.text.startswith("STALL")


@dataclass(frozen=True)
class ControlsFrame:
    """The ranks and phases seen so far, and which ranks are hidden."""

    ranks: Sequence[int] = ()
    hidden: frozenset[int] = frozenset()
    #: every phase seen, in drawing order (``figures.phase_order``)
    phases: Sequence[str] = ()
    many_ranks: bool = False


@dataclass(frozen=True)
class StacksFrame:
    """Every rank's Python stack, as ``on_stacks`` returned them, and when."""

    stacks: Mapping[int, str] = field(default_factory=dict)
    hosts: Mapping[int, str] = field(default_factory=dict)
    when: str = ""


@dataclass(frozen=True)
class TimelineFrame:
    """The spans to draw (already filtered to the shown ranks and the window) and how to draw them."""

    events: pd.DataFrame
    t0_ns: int | None = None
    window: tuple[float, float] | None = None
    max_spans: int | None = None
    #: None: every rank, phase in the events
    ranks: list[int] | None = None
    phases: list[str] | None = None
    known_phases: list[str] | None = None
    #: None: from the events' host column
    hosts: Mapping[int, str] | None = None


@dataclass(frozen=True)
class HeatmapFrame:
    """Every rank's share of each time bin for ``value``, the marks of the slowest ranks and host, and the
    words of the note above; ``missing`` (why there is no grid) instead when the activity analysis is absent."""

    share: pd.DataFrame | None = None
    value: str = ""
    #: what the grid can colour by (the dropdown's options)
    values: Sequence[str] = ()
    hosts: Mapping[int, str] = field(default_factory=dict)
    #: ``analysis.activity.heatmap_marks``: keywords of ``figures.rank_time_figure``
    marks: Mapping[str, Any] = field(default_factory=dict)
    n_ranks: int = 0
    #: ``analysis.activity.describe_slowest``: the slowest ranks and host in words
    slowest: str = ""
    #: the ranks the timeline shows, and whether they follow the slowest (else the user's pick)
    shown: Sequence[int] = ()
    following: bool = True
    missing: str = ""


@dataclass(frozen=True)
class BreakdownFrame:
    """The analysed phase table to draw, or (``table`` None) the note saying why there is none."""

    table: pd.DataFrame | None = None
    #: None: every phase in the table
    phases: list[str] | None = None
    note: str = ""


@dataclass(frozen=True)
class MemoryFrame:
    """Memory samples of the shown ranks and the analysed growth fit (None without ``analyse_memory``)."""

    samples: pd.DataFrame
    growth: pd.DataFrame | None = None
    t0_ns: int | None = None


@dataclass(frozen=True)
class CountersFrame:
    """Counter samples (queue depth, ...) of the shown ranks."""

    counters: pd.DataFrame
    t0_ns: int | None = None


# ---------------------------------------------------------------------- panels
class Banner:
    """The status line: alerts, errors and silent ranks in colour, wrapping rather than cut."""

    def __init__(self) -> None:
        self.root = w.HTML(layout=w.Layout(width="100%"))

    def update(self, frame: StatusFrame) -> None:
        text = frame.text
        failed = frame.error or text.startswith("FAILED")
        colour = "#b00020" if failed else ("#a05a00" if frame.stalled else "inherit")
        self.root.value = (
            f'<div style="white-space:normal;overflow-wrap:anywhere;line-height:1.4;color:{colour}" '
            f'title="{html.escape(text)}">{html.escape(text)}</div>'
        )


class Controls:
    """The rank, window and phase pickers and the Stop and Stacks buttons.

    The Dashboard wires what they do; ``update`` only adds newly seen ranks (shown unless hidden before)
    and phases (checked, each calling ``on_phase`` when toggled).
    """

    def __init__(self, windows: Sequence[tuple[str, float]], *, stacks: bool, on_phase: Callable[..., None]) -> None:
        self.on_phase = on_phase
        self.rank_select = w.SelectMultiple(
            options=[], value=[], description="ranks", rows=4, layout=w.Layout(width="160px")
        )
        self.window_slider = w.SelectionSlider(
            options=list(windows), value=0.0, description="window", continuous_update=False
        )
        self.phase_box = w.HBox([], layout=w.Layout(flex_flow="row wrap"))
        self.phase_checks: dict[str, w.Checkbox] = {}
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop")
        self.stacks_button = w.Button(
            description="Stacks",
            icon="list",
            tooltip="every rank's Python stack now, without stopping it"
            if stacks
            else "pass on_stacks=cluster.stacks to see the ranks' stacks",
            disabled=not stacks,
        )
        buttons = w.VBox([self.stop_button, self.stacks_button])
        self.root = w.HBox([self.rank_select, w.VBox([self.window_slider, self.phase_box]), buttons])

    def update(self, frame: ControlsFrame) -> None:
        ranks = list(frame.ranks)
        if list(self.rank_select.options) != ranks:
            self.rank_select.options = ranks
            self.rank_select.value = [r for r in ranks if r not in frame.hidden]
            self.rank_select.rows = 8 if frame.many_ranks else 4
        added = [p for p in frame.phases if p not in self.phase_checks]
        if not added:
            return
        for phase in added:
            box = w.Checkbox(value=True, description=phase, indent=False, layout=w.Layout(width="auto"))
            box.observe(self.on_phase, names="value")
            self.phase_checks[phase] = box
        colours = colours_for(list(frame.phases))
        self.phase_box.children = [
            w.HBox([w.HTML(f'<span style="color:{colours[p]};font-size:1.3em">■</span>'), self.phase_checks[p]])
            for p in frame.phases
        ]


class StacksPanel:
    """Every rank's Python stack under the controls, folded in a <details>."""

    def __init__(self) -> None:
        self.root = w.HTML()

    def update(self, frame: StacksFrame) -> None:
        text = "\n".join(
            f"=== {ranks_with_hosts([rank], frame.hosts)} ===\n{stack.rstrip()}"
            for rank, stack in sorted(frame.stacks.items())
        )
        self.root.value = (
            f"<details open><summary>every rank's Python stack at {frame.when} ({len(frame.stacks)} ranks)</summary>"
            f'<pre style="max-height:24em;overflow:auto;white-space:pre">{html.escape(text)}</pre></details>'
        )


class TimelinePanel:
    """The spans of the shown ranks over time; remembers what it drew (bars, merge resolution, window)."""

    def __init__(self) -> None:
        self.root = figure_widget()
        self.drawn_spans = 0
        self.resolution_s = 0.0
        self.drawn_range: tuple[float, float] | None = None

    def update(self, frame: TimelineFrame) -> None:
        fig = timeline_figure(
            frame.events,
            t0_ns=frame.t0_ns,
            window=frame.window,
            max_spans=frame.max_spans,
            ranks=frame.ranks,
            phases=frame.phases,
            known_phases=frame.known_phases,
            hosts=frame.hosts,
        )
        meta = fig.layout.meta or {}
        self.drawn_spans = int(meta.get("drawn", 0))
        self.resolution_s = float(meta.get("resolution_s", 0.0))
        self.drawn_range = frame.window
        sync_figure(self.root, fig)


class HeatmapPanel(FigurePanel):
    """The rank × time heatmap above the timeline (runs with more ranks than it shows), with its colour-by
    dropdown and note; a click on a row calls ``on_click(trace, points, state)`` (``ranks_at`` reads it)."""

    def __init__(self, on_click: Callable[..., None]) -> None:
        self.note = w.HTML()
        self.colour_by = w.Dropdown(options=["waiting"], value="waiting", description="colour by")
        super().__init__(above=[w.HBox([self.colour_by, self.note])])
        self.on_click = on_click
        #: the heatmap's ranks top down (``figures.rank_rows``): a click's row is one of them
        self.rows: list[int] = []

    def update(self, frame: HeatmapFrame) -> None:
        if frame.share is None:
            self.note.value = html.escape(f"rank × time heatmap unavailable ({frame.missing})")
            return
        figure = self.figure
        values = list(frame.values)
        if list(self.colour_by.options) != values:
            self.colour_by.options = values
        self.colour_by.value = frame.value
        self.rows = rank_rows(list(frame.share.index), dict(frame.hosts))
        fig = rank_time_figure(frame.share, value=frame.value, hosts=dict(frame.hosts), **frame.marks)
        first = not figure.data
        sync_figure(figure, fig)
        if first and figure.data:
            figure.data[0].on_click(self.on_click)
        chosen = "the slowest" if frame.following else "your selection:"
        self.note.value = html.escape(
            f"{frame.n_ranks} ranks · {frame.slowest} · the timeline below"
            f" shows {len(frame.shown)}, {chosen} {rank_list(list(frame.shown))} (pick in 'ranks' or click a row)"
        )

    def ranks_at(self, points: Any) -> set[int]:
        """The ranks of the rows a click's ``points`` fell on."""
        meta = (self._figure.layout.meta or {}) if self._figure is not None else {}
        by_rank = meta.get("rank_order")
        return {
            int(y) if by_rank else self.rows[int(y)]
            for y in points.ys
            if y is not None and (by_rank or 0 <= int(y) < len(self.rows))
        }


class BreakdownPanel(FigurePanel):
    """Seconds per phase and rank from the injected analysis, or a note saying why not yet."""

    def __init__(self) -> None:
        self.note = w.HTML()
        super().__init__(placeholder=[self.note], above=[self.note])

    def update(self, frame: BreakdownFrame) -> None:
        self.note.value = html.escape(frame.note)
        if frame.table is not None:
            sync_figure(self.figure, breakdown_figure(frame.table, phases=frame.phases))


class MemoryPanel(FigurePanel):
    """Memory per rank over time, with the growth fit and its verdict when one was analysed."""

    def __init__(self) -> None:
        super().__init__(placeholder=[w.HTML(html.escape(NO_MEMORY))])

    def update(self, frame: MemoryFrame) -> None:
        sync_figure(self.figure, memory_figure(frame.samples, frame.growth, t0_ns=frame.t0_ns))


class CountersPanel(FigurePanel):
    """Counters the ranks recorded (queue depth, ...) over time."""

    def __init__(self) -> None:
        super().__init__(placeholder=[w.HTML(html.escape(NO_COUNTERS))])

    def update(self, frame: CountersFrame) -> None:
        sync_figure(self.figure, counter_figure(frame.counters, t0_ns=frame.t0_ns))
