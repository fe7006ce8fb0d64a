"""The dashboard's panels driven from made frames alone, and the Dashboard feeding each of them once per refresh."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from workbench.analysis import phase_breakdown
from workbench.analysis.activity import RankTimeGrid, describe_slowest, heatmap_marks, rank_activity
from workbench.events import events_frame
from workbench.widgets.dashboard import TAB_BREAKDOWN, TAB_COUNTERS, TAB_MEMORY, TAB_TIMELINE, Dashboard
from workbench.widgets.panels import (
    NO_MEMORY,
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
    StacksFrame,
    StacksPanel,
    StatusFrame,
    TimelineFrame,
    TimelinePanel,
)

S = 1_000_000_000
T0 = 1_700_000_000 * S


def spans(ranks: int = 2, slow: tuple[int, ...] = (), start_s: float = 0.0) -> pd.DataFrame:
    """One 1 s step per rank: compute, then communication up to 1 s (the slow ranks compute longer)."""
    rows = []
    for rank in range(ranks):
        middle = T0 + int((start_s + (0.9 if rank in slow else 0.5)) * S)
        rows.append((rank, "compute", T0 + int(start_s * S), middle))
        rows.append((rank, "communication", middle, T0 + int((start_s + 1.0) * S)))
    frame = pd.DataFrame(rows, columns=["rank", "phase", "start_ns", "end_ns"])
    frame["host"] = [f"node{r // 4}" for r in frame["rank"]]
    return events_frame(frame)


def memory_samples(ranks: int = 2, count: int = 3) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": np.repeat(np.arange(ranks), count),
            "host": "h",
            "time_ns": np.tile(T0 + np.arange(count) * S, ranks),
            "rss_bytes": np.tile([int((100 + i) * 1e6) for i in range(count)], ranks),
            "label": "interval",
            "iteration": -1,
        }
    )


def counter_samples(ranks: int = 2) -> pd.DataFrame:
    depths = [0.0, 3.0, 2.0]
    return pd.DataFrame(
        {
            "rank": np.repeat(np.arange(ranks), len(depths)),
            "name": "queue_depth",
            "time_ns": np.tile(T0 + np.arange(len(depths)) * S, ranks),
            "value": np.tile(depths, ranks),
        }
    )


# ---------------------------------------------------------------- each panel from a made frame
def test_banner_says_the_frame_in_its_colour():
    banner = Banner()
    banner.update(StatusFrame())
    assert WAITING in banner.root.value and "color:inherit" in banner.root.value
    stalled = StatusFrame(
        seen={0: 99.0, 1: 80.0}, now=100.0, run_id="r1", n_events=1234, stale=["rank 1 has sent nothing for 20 s"]
    )
    banner.update(stalled)
    assert stalled.stalled and "#a05a00" in banner.root.value
    assert stalled.text.startswith("run r1 · 2 ranks seen") and "1,234 events" in stalled.text
    assert "last event 1 s ago" in stalled.text and stalled.text.endswith("rank 1 has sent nothing for 20 s")
    failed = StatusFrame(alerts=["FAILED: rank 1 exited 1"], stopped=True, error="poll failed: OSError: gone")
    banner.update(failed)
    assert failed.text == f"FAILED: rank 1 exited 1 · stopped · poll failed: OSError: gone · {WAITING}"
    assert "#b00020" in banner.root.value and "white-space:normal" in banner.root.value


def test_controls_add_new_ranks_and_phases():
    toggled = []
    controls = Controls([("full", 0.0)], stacks=False, on_phase=toggled.append)
    assert controls.stacks_button.disabled and "on_stacks" in controls.stacks_button.tooltip
    controls.update(ControlsFrame(ranks=[0, 1, 2], hidden=frozenset({1}), phases=["compute", "communication"]))
    assert list(controls.rank_select.options) == [0, 1, 2] and list(controls.rank_select.value) == [0, 2]
    assert list(controls.phase_checks) == ["compute", "communication"] and len(controls.phase_box.children) == 2
    controls.update(ControlsFrame(ranks=list(range(20)), phases=["compute", "communication"], many_ranks=True))
    assert controls.rank_select.rows == 8 and len(controls.rank_select.value) == 20
    controls.phase_checks["compute"].value = False
    assert len(toggled) == 1  # a toggled phase is the dashboard's to handle


def test_stacks_panel_shows_every_ranks_stack():
    panel = StacksPanel()
    panel.update(StacksFrame({1: "  File <b>\n", 0: "main()"}, hosts={0: "n0", 1: "n1"}, when="12:00:00"))
    assert "at 12:00:00 (2 ranks)" in panel.root.value and "&lt;b&gt;" in panel.root.value
    assert panel.root.value.index("rank 0") < panel.root.value.index("rank 1")


def test_timeline_panel_draws_the_frames_spans():
    panel = TimelinePanel()
    events = spans(2)
    panel.update(TimelineFrame(events, t0_ns=T0, ranks=[0, 1], phases=["compute", "communication"]))
    assert [trace.name for trace in panel.root.data] == ["compute", "communication"]
    assert {int(y) for trace in panel.root.data for y in trace.y} == {0, 1}
    assert panel.drawn_spans == 4 and panel.drawn_range is None
    panel.update(TimelineFrame(events[events["rank"] == 1], t0_ns=T0, window=(0.0, 1.0), ranks=[1]))
    assert {int(y) for trace in panel.root.data for y in trace.y} == {1} and panel.drawn_range == (0.0, 1.0)


def test_heatmap_panel_draws_the_share_and_reads_clicks():
    clicks = []
    panel = HeatmapPanel(on_click=lambda *args: clicks.append(args))
    panel.update(HeatmapFrame(missing="ImportError: no activity"))
    assert "heatmap unavailable (ImportError: no activity)" in panel.note.value and panel._figure is None

    grid = RankTimeGrid()
    grid.add(spans(8, slow=(5,)))
    activity = rank_activity(grid, slowest=1)
    frame = HeatmapFrame(
        share=grid.share("waiting"),
        value="waiting",
        values=grid.values(),
        hosts=grid.hosts,
        marks=heatmap_marks(activity),
        n_ranks=8,
        slowest=describe_slowest(activity),
        shown=[5],
    )
    panel.update(frame)
    assert panel.root.children[-1] is panel.figure and len(set(panel.figure.data[0].y)) == 8
    assert list(panel.colour_by.options) == grid.values() and panel.colour_by.value == "waiting"
    assert panel.note.value.startswith("8 ranks · ") and "shows 1, the slowest 5" in panel.note.value
    assert panel.ranks_at(SimpleNamespace(ys=[3.0, None])) == {3}
    assert len(panel.figure.data[0]._click_callbacks) == 1  # the click goes to on_click


def test_breakdown_panel_draws_the_analysed_table_or_says_why_not():
    panel = BreakdownPanel()
    panel.update(BreakdownFrame(note=WAITING))
    assert panel.note.value == WAITING and panel._figure is None and panel.root.children == (panel.note,)
    panel.update(BreakdownFrame(table=phase_breakdown(spans(2, slow=(1,))), phases=["compute", "communication"]))
    traces = {trace.name: trace for trace in panel.figure.data}
    assert panel.note.value == "" and list(traces) == ["compute", "communication"]
    np.testing.assert_allclose(traces["compute"].y, [0.5, 0.9])


def test_memory_panel_draws_the_samples():
    panel = MemoryPanel()
    (note,) = panel.root.children
    assert note.value.startswith(NO_MEMORY[:20])
    panel.update(MemoryFrame(memory_samples(2), t0_ns=T0))
    assert panel.root.children == (panel.figure,)
    np.testing.assert_allclose(panel.figure.data[0].y, [100, 101, 102])


def test_counters_panel_draws_the_counters():
    panel = CountersPanel()
    assert "no counters recorded yet" in panel.root.children[0].value
    panel.update(CountersFrame(counter_samples(2), t0_ns=T0))
    assert {trace.name: list(trace.y) for trace in panel.figure.data} == {
        "rank 0": [0.0, 3.0, 2.0],
        "rank 1": [0.0, 3.0, 2.0],
    }


# ---------------------------------------------------------------- the Dashboard feeds each panel once
class Feed:
    """Events, memory and counters, each handed out once."""

    def __init__(self, events: pd.DataFrame, memory: pd.DataFrame, counters: pd.DataFrame) -> None:
        self.pending = [(events, memory, counters)]
        self.counters: pd.DataFrame | None = None

    def poll(self) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
        if not self.pending:
            self.counters = None
            return None, None
        events, memory, self.counters = self.pending.pop(0)
        return events, memory

    def poll_counters(self) -> pd.DataFrame | None:
        return self.counters


@pytest.fixture
def counted(monkeypatch):
    """A dashboard of 8 ranks (more than its timeline shows) whose panels count their ``update()`` calls."""
    dash = Dashboard(
        Feed(spans(8, slow=(5,)), memory_samples(8), counter_samples(8)),
        analyse=phase_breakdown,
        on_stacks=lambda: {0: "main()"},
        refresh_s=1.0,
        clock=lambda: 100.0,
        timeline_max_ranks=4,
        slowest_ranks=2,
    )
    calls: Counter[str] = Counter()
    for name, panel in dash.panels.items():

        def update(frame, name=name, draw=panel.update):
            calls[name] += 1
            draw(frame)

        monkeypatch.setattr(panel, "update", update)
    return dash, calls


def test_one_update_redraws_each_shown_panel_once(counted):
    dash, calls = counted
    dash.update()
    assert dash.error == "" and dash.many_ranks
    # the shown tab (timeline, with the heatmap of every rank above it), the controls and the banner
    assert calls == {"controls": 1, "heatmap": 1, "timeline": 1, "banner": 1}
    assert {int(y) for trace in dash.timeline.data for y in trace.y} == set(dash._visible_ranks())
    # hidden tabs wait until shown, then each draws once from what arrived
    for tab, name in ((TAB_BREAKDOWN, "breakdown"), (TAB_MEMORY, "memory"), (TAB_COUNTERS, "counters")):
        dash.tabs.selected_index = tab
        assert calls[name] == 1, name
    assert len(dash.breakdown.data) and len(dash.memory.data) and len(dash.counters.data)
    dash.show_stacks()
    assert calls["stacks"] == 1 and "main()" in dash.stacks_view.value
    assert set(calls) == set(dash.panels) and set(calls.values()) == {1}

    # nothing new: the drawn panels are left alone, only the status line is said again
    calls.clear()
    dash.tabs.selected_index = TAB_TIMELINE
    dash.update()
    assert calls == {"banner": 1}
