"""Dashboard and progress widgets driven headless: update() with an in-memory source."""

from __future__ import annotations

import asyncio
import io
import time

import numpy as np
import pandas as pd
import pytest

import workbench.widgets.dashboard as dashboard_module
from workbench.events import empty_events, empty_memory, events_frame
from workbench.widgets import WAITING, Dashboard, ProgressBar, ProgressState, progress

S = 1_000_000_000
T0 = 1_700_000_000 * S


class FakeSource:
    """Returns the rows appended since the previous poll, like store.RunTail; can be told to fail."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.memory: list[dict] = []
        self.error: Exception | None = None
        self.polls = 0

    def add(self, rank: int, phase: str, start_s: float, end_s: float, **extra: object) -> None:
        row = dict(rank=rank, phase=phase, start_ns=T0 + int(start_s * S), end_ns=T0 + int(end_s * S))
        self.events.append({"run_id": "run-1", **row, **extra})

    def poll(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        self.polls += 1
        if self.error is not None:
            raise self.error
        events = events_frame(self.events) if self.events else empty_events()
        memory = pd.DataFrame(self.memory) if self.memory else empty_memory()
        self.events, self.memory = [], []
        return events, memory


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake_breakdown(events: pd.DataFrame) -> pd.DataFrame:
    """Stands in for the analysis layer: seconds per (rank, phase)."""
    seconds = (events["end_ns"] - events["start_ns"]) / 1e9
    table = events.assign(seconds=seconds).groupby(["rank", "phase"], as_index=False)["seconds"].sum()
    table["fraction"] = table["seconds"] / table.groupby("rank")["seconds"].transform("sum")
    return table


@pytest.fixture
def source() -> FakeSource:
    return FakeSource()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dash(source: FakeSource, clock: Clock) -> Dashboard:
    return Dashboard(source, analyse=fake_breakdown, clock=clock, stale_s=10.0)


def ranks_drawn(dash: Dashboard) -> set[int]:
    return {int(y) for trace in dash.timeline.data for y in trace.y}


def test_no_events_yet_says_waiting(dash):
    dash.update()
    assert WAITING in dash.status_text()
    assert WAITING in dash.status.value
    assert len(dash.timeline.data) == 0


def test_spans_of_both_ranks_appear_in_the_figure_widget(dash, source):
    dash.update()
    source.add(0, "compute", 0.0, 0.5, name="train_step")
    source.add(0, "communication", 0.5, 0.7)
    source.add(1, "compute", 0.1, 0.8)
    dash.update()
    assert [t.name for t in dash.timeline.data] == ["compute", "communication"]
    assert ranks_drawn(dash) == {0, 1}
    compute = dash.timeline.data[0]
    np.testing.assert_allclose(np.asarray(compute.base, dtype=float), [0.0, 0.1])
    np.testing.assert_allclose(compute.x, [0.5, 0.7])
    text = dash.status_text()
    assert "run run-1" in text and "2 ranks seen" in text and "3 events" in text
    assert WAITING not in text
    # new rows are appended to the same traces
    source.add(1, "communication", 0.8, 0.9)
    dash.update()
    assert list(dash.timeline.data[1].y) == [0, 1]
    assert "4 events" in dash.status_text()


def test_rank_filter_hides_a_rank(dash, source):
    source.add(0, "compute", 0.0, 1.0)
    source.add(1, "compute", 0.0, 1.0)
    dash.update()
    dash.rank_select.value = (0,)
    assert ranks_drawn(dash) == {0}
    assert list(dash.timeline.layout.yaxis.categoryarray) == [0]
    # a new rank appears shown; the hidden one stays hidden
    source.add(2, "compute", 1.0, 2.0)
    dash.update()
    assert set(dash.rank_select.value) == {0, 2}
    assert ranks_drawn(dash) == {0, 2}


def test_phase_toggle_hides_a_phase(dash, source):
    source.add(0, "compute", 0.0, 1.0)
    source.add(0, "communication", 1.0, 2.0)
    dash.update()
    dash.phase_checks["communication"].value = False
    comm = next(t for t in dash.timeline.data if t.name == "communication")
    assert comm.visible is False and len(comm.x) == 0


def test_time_window_and_zoom(source, clock):
    dash = Dashboard(source, analyse=fake_breakdown, clock=clock, max_spans=50)
    for i in range(200):  # 100 s of alternating phases
        source.add(0, "compute", i * 0.5, i * 0.5 + 0.3)
        source.add(0, "communication", i * 0.5 + 0.3, i * 0.5 + 0.5)
    dash.update()
    assert dash.timeline.layout.meta["drawn"] <= 50
    dash.window_slider.value = 10.0
    assert tuple(dash.timeline.layout.xaxis.range) == (90.0, 100.0)
    dash.window_slider.value = 0.0
    assert dash.timeline.layout.xaxis.range is None
    # the browser reports a zoom: the zoomed window is redrawn without merging
    dash.timeline.plotly_relayout({"xaxis.range[0]": 10.0, "xaxis.range[1]": 12.0})
    assert dash.timeline.layout.meta["resolution_s"] == 0.0
    assert dash.timeline.layout.meta["drawn"] == 10
    dash.timeline.plotly_relayout({"xaxis.autorange": True})
    assert dash.timeline.layout.meta["drawn"] <= 50 and dash.timeline.layout.meta["resolution_s"] > 0


def test_stale_rank_is_reported(dash, source, clock):
    source.add(0, "compute", 0.0, 1.0)
    source.add(1, "compute", 0.0, 1.0)
    dash.update()
    clock.now += 12
    source.add(0, "compute", 1.0, 2.0)
    dash.update()
    assert "rank 1 has sent nothing for 12 s" in dash.status_text()
    assert "rank 0 has sent" not in dash.status_text()
    # everyone silent (e.g. the job finished): no single rank is blamed
    clock.now += 30
    dash.update()
    assert "has sent nothing" not in dash.status_text()


def test_poll_exception_becomes_a_one_line_status_and_updates_go_on(dash, source):
    source.add(0, "compute", 0.0, 1.0)
    dash.update()
    source.error = OSError("part file vanished\nsecond line of detail")
    dash.update()
    assert dash.error == "poll failed: OSError: part file vanished"
    assert "\n" not in dash.status.value
    assert "Traceback" not in dash.status.value
    source.error = None
    source.add(0, "compute", 1.0, 2.0)
    dash.update()
    assert dash.error == ""
    assert "2 events" in dash.status_text()


def test_draw_exception_becomes_a_status(source, clock):
    def broken(_events):
        raise ValueError("no phases")

    dash = Dashboard(source, analyse=broken, clock=clock)
    source.add(0, "compute", 0.0, 1.0)
    dash.update()
    dash.tabs.selected_index = 1  # breakdown tab: analysis raises while drawing
    assert dash.error == "redraw failed: ValueError: no phases"
    dash.update()  # and the next update still works
    assert "1 events" in dash.status_text()


def test_breakdown_tab_draws_the_injected_analysis(dash, source):
    source.add(0, "compute", 0.0, 3.0)
    source.add(0, "communication", 3.0, 4.0)
    source.add(1, "compute", 0.0, 2.0)
    dash.update()
    dash.tabs.selected_index = 1
    traces = {t.name: t for t in dash.breakdown.data}
    assert list(traces) == ["compute", "communication"]
    np.testing.assert_allclose(traces["compute"].y, [3.0, 2.0])


def test_breakdown_says_when_analysis_is_unavailable(source, clock, monkeypatch):
    monkeypatch.setattr(dashboard_module, "default_analyse", lambda: (None, "no module"))
    dash = Dashboard(source, clock=clock)
    source.add(0, "compute", 0.0, 1.0)
    dash.update()
    dash.tabs.selected_index = 1
    assert "analysis unavailable" in dash.breakdown_note.value
    assert "need workbench.analysis" in dash.text_summary()


def test_memory_tab_says_why_it_is_empty_and_the_status_wraps(dash, source):
    (note,) = dash._memory_box.children
    assert note.value.startswith("no memory samples yet") and "sample_memory" in note.value
    assert "white-space:normal" in dash.status.value and "nowrap" not in dash.status.value


def test_dashboard_figures_share_one_copy_of_plotlys_widget_bundle(dash, source):
    from workbench.widgets.figure import figure_widget

    source.add(0, "compute", 0.0, 1.0)
    dash.update()
    later = [dash.breakdown, dash.memory, figure_widget()]
    carried = [f for f in (dash.timeline, *later) if len(f._esm) > 1_000_000]
    assert len(carried) <= 1  # the kernel's first figure widget carries the bundle, the rest reuse it
    assert all(len(f._esm) < 2_000 for f in later)


def test_memory_tab_draws_samples(dash, source):
    source.memory = [
        dict(run_id="run-1", rank=0, host="h", time_ns=T0 + i * S, rss_bytes=int(1e8 + i * 1e6), gpu_bytes=-1,
             cpu_percent=1.0, label="interval", iteration=-1)
        for i in range(3)
    ]  # fmt: skip
    dash.update()
    dash.tabs.selected_index = 2
    np.testing.assert_allclose(dash.memory.data[0].y, [100, 101, 102])


def test_stop_button_calls_on_stop_and_stops_refreshing(source, clock):
    stopped = []
    dash = Dashboard(source, analyse=fake_breakdown, clock=clock, on_stop=lambda: stopped.append(True))
    dash.start()
    dash.stop_button.click()
    assert stopped == [True]
    assert not dash.running and dash.stop_button.disabled
    assert dash.status_text().startswith("stopped")


def test_start_without_a_loop_uses_a_daemon_timer(source):
    dash = Dashboard(source, analyse=fake_breakdown, refresh_s=0.01)
    dash.start()
    try:
        deadline = time.monotonic() + 5
        while source.polls < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        dash.stop()
    assert source.polls >= 3
    polls = source.polls
    time.sleep(0.05)
    assert source.polls <= polls + 1  # at most one tick in flight when stopped


def test_start_in_a_running_loop_uses_a_task(source):
    async def scenario() -> int:
        dash = Dashboard(source, analyse=fake_breakdown, refresh_s=0.01)
        dash.start()
        assert dash._task is not None
        await asyncio.sleep(0.1)
        dash.stop()
        return source.polls

    assert asyncio.run(scenario()) >= 3


def test_timings_and_text_fallback(dash, source):
    source.add(0, "compute", 0.0, 3.0)
    source.add(1, "communication", 0.0, 1.0)
    dash.update()
    timing = dash.timings[-1]
    assert set(timing) >= {"poll_s", "redraw_s"} and timing["poll_s"] >= 0
    text = dash.text_summary()
    assert "seconds per phase" in text
    lines = text.splitlines()
    assert any(line.split()[:1] == ["0"] and "3.000" in line for line in lines)
    assert repr(dash) == text
    bundle = dash._repr_mimebundle_()
    assert bundle["text/plain"] == text
    assert "application/vnd.jupyter.widget-view+json" in bundle


# ---------------------------------------------------------------- progress
def test_progress_state_eta():
    clock = Clock()
    state = ProgressState(total=10, desc="sweep", clock=clock)
    clock.now += 4
    state.advance(4)
    assert state.elapsed == 4 and state.rate == 1 and state.eta == 6
    assert state.line() == "sweep  40% 4/10 [00:04<00:06, 1 it/s]"


def test_progress_text_mode_prints_lines():
    out = io.StringIO()
    items = list(progress(range(3), desc="runs", widget=False, stream=out))
    assert items == [0, 1, 2]
    assert out.getvalue().splitlines()[-1].startswith("runs 100% 3/3")


def test_progress_widget_mode():
    with ProgressBar(total=4, desc="runs", widget=True, min_interval_s=0) as bar:
        bar.update(3)
        assert bar._bar.value == 3 and "3/4" in bar._label.value
    assert bar._bar.bar_style == "warning"  # closed before the end
    with ProgressBar(total=2, desc="runs", widget=True) as done:
        done.update(2)
    assert done._bar.value == 2 and done._bar.bar_style == "success"
