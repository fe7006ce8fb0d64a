"""Dashboard and progress widgets driven headless, fed by real recorders through a real run on disk."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import workbench.widgets.dashboard as dashboard_module
from workbench.analysis import phase_breakdown
from workbench.analysis.memory import memory_growth
from workbench.config import physical_cores
from workbench.recorder import Recorder
from workbench.store import RunTail, StreamWriter, create_run, read_run_meta
from workbench.widgets import WAITING, Dashboard, ProgressBar, ProgressState, progress
from workbench.widgets.dashboard import REFRESH_S, SHARED_CORES_REFRESH_S

S = 1_000_000_000
T0 = 1_700_000_000 * S


class RecordedRun:
    """A run on disk that tests write into as ranks do (``Recorder.record`` + ``flush``)."""

    def __init__(self, root: Path) -> None:
        self.path = create_run(root, "dashboard", ranks=2)
        self.run_id: str = read_run_meta(self.path)["run_id"]
        self.recorders: dict[int, Recorder] = {}

    def add(self, rank: int, phase: str, start_s: float, end_s: float, name: str | None = None) -> None:
        if rank not in self.recorders:
            self.recorders[rank] = Recorder(self.path, rank=rank, host="h", flush_interval_s=3600)
        self.recorders[rank].record(phase, T0 + int(start_s * S), T0 + int(end_s * S), name, aligned=True)

    def add_memory(self, rank: int, samples_mb: list[float], label: str = "interval", calls: bool = False) -> None:
        """Memory samples one second apart, as ``sample_memory`` writes them (``calls``: after call 0, 1, ...)."""
        count = len(samples_mb)
        StreamWriter(self.path, "memory", rank).write(
            {
                "run_id": [self.run_id] * count, "rank": [rank] * count, "host": ["h"] * count,
                "time_ns": [T0 + i * S for i in range(count)], "rss_bytes": [int(mb * 1e6) for mb in samples_mb],
                "gpu_bytes": [-1] * count, "cpu_percent": [1.0] * count, "label": [label] * count,
                "iteration": list(range(count)) if calls else [-1] * count,
            }
        )  # fmt: skip

    def flush(self) -> None:
        for recorder in self.recorders.values():
            recorder.flush()

    def close(self) -> None:
        for recorder in self.recorders.values():
            recorder.close()


class Tail(RunTail):
    """The real live feed; before each poll the ranks' buffered rows are flushed (their timer does it live).

    ``error`` makes the next polls fail, as a vanished file system would.
    """

    def __init__(self, run: RecordedRun) -> None:
        super().__init__(run.path)
        self.run = run
        self.error: Exception | None = None
        self.polls = 0

    def poll(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        self.polls += 1
        if self.error is not None:
            raise self.error
        self.run.flush()
        return super().poll()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def run(tmp_path):
    recorded = RecordedRun(tmp_path)
    yield recorded
    recorded.close()


@pytest.fixture
def source(run: RecordedRun) -> RecordedRun:
    """Where the tests write spans: the run the dashboard's tail reads."""
    return run


@pytest.fixture
def tail(run: RecordedRun) -> Tail:
    return Tail(run)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dash(tail: Tail, clock: Clock) -> Dashboard:
    return Dashboard(tail, analyse=phase_breakdown, clock=clock, stale_s=10.0)


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
    assert f"run {source.run_id}" in text and "2 ranks seen" in text and "3 events" in text
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


def test_time_window_and_zoom(source, tail, clock):
    dash = Dashboard(tail, analyse=phase_breakdown, clock=clock, max_spans=50)
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


def test_spans_outside_a_zoomed_view_do_not_redraw_the_timeline(source, tail, clock):
    dash = Dashboard(tail, analyse=phase_breakdown, clock=clock)
    for i in range(20):
        source.add(0, "compute", float(i), i + 0.5)
    dash.update()
    dash.timeline.plotly_relayout({"xaxis.range[0]": 2.0, "xaxis.range[1]": 4.0})
    drawn = dash.timeline.to_json()
    source.add(0, "communication", 30.0, 31.0)  # later than the view: nothing on screen changes
    dash.update()
    assert dash.timeline.to_json() == drawn and "21 events" in dash.status_text()
    assert "communication" in dash.phase_checks  # the controls and the count still follow the data
    source.add(1, "communication", 3.0, 3.5)  # inside the view: drawn
    dash.update()
    assert ranks_drawn(dash) == {0, 1}
    dash.timeline.plotly_relayout({"xaxis.autorange": True})  # back to following the job: everything drawn
    assert max(max(trace.base) + max(trace.x) for trace in dash.timeline.data if len(trace.x)) >= 31.0 - 1e-6


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


def test_poll_exception_becomes_a_one_line_status_and_updates_go_on(dash, source, tail):
    source.add(0, "compute", 0.0, 1.0)
    dash.update()
    tail.error = OSError("part file vanished\nsecond line of detail")
    dash.update()
    assert dash.error == "poll failed: OSError: part file vanished"
    assert "\n" not in dash.status.value
    assert "Traceback" not in dash.status.value
    tail.error = None
    source.add(0, "compute", 1.0, 2.0)
    dash.update()
    assert dash.error == ""
    assert "2 events" in dash.status_text()


def test_draw_exception_becomes_a_status(source, tail, clock):
    def broken(_events):
        raise ValueError("no phases")

    dash = Dashboard(tail, analyse=broken, clock=clock)
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


def test_breakdown_says_when_analysis_is_unavailable(source, tail, clock, monkeypatch):
    monkeypatch.setattr(dashboard_module, "default_analyse", lambda: (None, "no module"))
    dash = Dashboard(tail, clock=clock)
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
    source.add_memory(0, [100, 101, 102])
    dash.update()
    dash.tabs.selected_index = 2
    np.testing.assert_allclose(dash.memory.data[0].y, [100, 101, 102])


def test_memory_tab_overlays_the_growth_fit_and_its_verdict(source, tail, clock):
    def growth(samples: pd.DataFrame) -> pd.DataFrame:
        return memory_growth(samples, x="iteration", leak_threshold_mb=0.5)

    dash = Dashboard(tail, analyse=phase_breakdown, analyse_memory=growth, clock=clock)
    source.add_memory(0, [100.0 + 2.0 * call for call in range(12)], label="predict", calls=True)
    source.add_memory(1, [100.0] * 12, label="predict", calls=True)
    dash.update()
    dash.tabs.selected_index = 2
    fits = {trace.name: trace for trace in dash.memory.data if "MB" in (trace.name or "")}
    assert len(fits) == 2, [trace.name for trace in dash.memory.data]
    leak = next(trace for name, trace in fits.items() if "leak" in name and "no leak" not in name)
    assert "+2" in leak.name  # 2 MB per call, the slope drawn on the samples
    np.testing.assert_allclose(np.diff(np.asarray(leak.y, dtype=float)) / np.diff(np.asarray(leak.x, dtype=float)), 2.0)
    assert any("no leak" in name for name in fits)


def test_stop_button_calls_on_stop_and_stops_refreshing(tail, clock):
    stopped = []
    dash = Dashboard(tail, analyse=phase_breakdown, clock=clock, on_stop=lambda: stopped.append(True))
    dash.start()
    dash.stop_button.click()
    assert stopped == [True]
    assert not dash.running and dash.stop_button.disabled
    assert dash.status_text().startswith("stopped")


def _wait_until(predicate, ceiling_s: float = 10.0) -> None:
    """Wait for what the test needs, with a generous ceiling instead of a fixed short sleep."""
    deadline = time.monotonic() + ceiling_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {ceiling_s} s"
        time.sleep(0.01)


def test_start_without_a_loop_uses_a_daemon_timer(source, tail):
    dash = Dashboard(tail, analyse=phase_breakdown, refresh_s=0.01)
    dash.start()
    try:
        assert dash._timer is not None and dash._timer.daemon
        source.add(0, "compute", 0.0, 1.0)  # written after start(): only the timer's refresh can draw it
        _wait_until(lambda: "1 events" in dash.status_text())
        source.add(1, "compute", 0.0, 1.0)
        _wait_until(lambda: "2 events" in dash.status_text())
    finally:
        dash.stop()
    with dash._lock:  # a refresh in flight when stop() came has ended
        polls = tail.polls
    time.sleep(0.1)  # ten refresh periods: a timer left running would poll again
    assert tail.polls == polls and dash._timer is None


def test_start_in_a_running_loop_uses_a_task(source, tail):
    async def scenario() -> Dashboard:
        dash = Dashboard(tail, analyse=phase_breakdown, refresh_s=0.01)
        dash.start()
        assert dash._task is not None and dash._timer is None
        source.add(0, "compute", 0.0, 1.0)
        deadline = time.monotonic() + 10
        while "1 events" not in dash.status_text():
            assert time.monotonic() < deadline, "the task never refreshed"
            await asyncio.sleep(0.01)
        dash.stop()
        return dash

    assert asyncio.run(scenario())._task is None


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
    """The state is read without a display; its line is tqdm's meter of the same numbers."""
    clock = Clock()
    state = ProgressState(total=10, desc="sweep", clock=clock)
    clock.now += 4
    state.advance(4)
    assert state.elapsed == 4 and state.rate == 1 and state.eta == 6 and state.fraction == 0.4
    line = state.line()
    assert line.startswith("sweep:  40%|") and "4/10 [00:04<00:06,  1.00it/s]" in line


def test_progress_text_mode_prints_lines():
    out = io.StringIO()
    items = list(progress(range(3), desc="runs", widget=False, stream=out))
    assert items == [0, 1, 2]
    last = out.getvalue().split("\r")[-1].strip()
    assert last.startswith("runs: 100%|") and "3/3 [" in last
    with ProgressBar(total=1, widget=False, stream=io.StringIO()) as logged:
        assert logged.min_interval_s == 1.0  # not a terminal: a log gets at most a line a second


def test_progress_in_a_terminal_writes_a_tqdm_line_and_counts():
    """Outside a notebook the bar is tqdm's text line on the given stream, and the state counts as it goes."""
    from tqdm.std import tqdm

    out = io.StringIO()
    with ProgressBar(total=5, desc="points", widget=False, stream=out, min_interval_s=0) as bar:
        assert type(bar.tqdm) is tqdm and bar.box is None
        bar.update(2)
        assert bar.state.done == 2 and bar.tqdm.n == 2
        assert out.getvalue().split("\r")[-1].startswith("points:  40%|")
        bar.set_total(4)
        bar.update(2)
    assert bar.state.done == 4 and bar.state.total == 4 and bar.state.fraction == 1.0 and bar.tqdm.n == 4
    final = out.getvalue().rstrip("\n").split("\r")[-1]
    assert final.startswith("points: 100%|") and "4/4 [" in final
    assert repr(bar).startswith("ProgressBar(points: 100%|")


def test_progress_widget_mode():
    with ProgressBar(total=4, desc="runs", widget=True, min_interval_s=0) as bar:
        bar.update(3)
        label, gauge, numbers = bar.box.children  # tqdm.notebook's container
        assert gauge.value == 3 and "3/4" in numbers.value and label.value.startswith("runs")
    assert gauge.bar_style == "danger"  # closed before the end (tqdm.notebook's colour)
    with ProgressBar(total=2, desc="runs", widget=True) as done:
        done.update(2)
    assert done.box.children[1].value == 2 and done.box.children[1].bar_style == "success"
    assert done.state.done == 2


@pytest.mark.parametrize(
    ("ranks", "cluster", "expected"),
    [
        (64, {"launcher": "mpi", "threads": 1}, SHARED_CORES_REFRESH_S),  # more ranks than any machine's cores here
        (1, {"launcher": "mpi", "threads": 1}, None),  # decided below from this machine's cores
        (64, {"launcher": "slurm", "threads": 1}, REFRESH_S),  # ranks on other nodes: the kernel's cores are free
        (64, {"launcher": "mpi", "hostfile": "hosts", "threads": 1}, REFRESH_S),
    ],
)
def test_default_refresh_is_slower_when_the_ranks_fill_this_machines_cores(tmp_path, ranks, cluster, expected):
    run_path = create_run(tmp_path, "r", ranks=ranks, config={"cluster": {**cluster, "ranks": ranks}})
    dash = Dashboard(RunTail(run_path))
    if expected is None:  # 1 rank x 1 thread fills a 1-core machine only
        expected = SHARED_CORES_REFRESH_S if physical_cores() <= 1 else REFRESH_S
    assert dash.refresh_s == expected
    assert (dash.refresh_reason is not None) == (expected == SHARED_CORES_REFRESH_S)
    assert Dashboard(RunTail(run_path), refresh_s=0.25).refresh_s == 0.25  # a caller's choice stands


class Batches:
    """A source that hands out prepared event batches, one per poll."""

    def __init__(self, *batches: pd.DataFrame) -> None:
        self.batches = list(batches)

    def poll(self) -> tuple[pd.DataFrame | None, None]:
        return (self.batches.pop(0) if self.batches else None), None


def many_ranks(ranks: int, slow: tuple[int, ...], start_s: float = 0.0) -> pd.DataFrame:
    """One 1 s step per rank: compute, then communication (waiting for the slow ranks) up to 1 s."""
    from workbench.events import events_frame

    compute_s = np.where(np.isin(np.arange(ranks), slow), 0.9, 0.5)
    rows = []
    for rank in range(ranks):
        middle = T0 + int((start_s + compute_s[rank]) * S)
        rows.append((rank, "compute", T0 + int(start_s * S), middle))
        rows.append((rank, "communication", middle, T0 + int((start_s + 1.0) * S)))
    frame = pd.DataFrame(rows, columns=["rank", "phase", "start_ns", "end_ns"])
    frame["host"] = [f"node{r // 8}" for r in frame["rank"]]
    return events_frame(frame)


def test_past_the_timeline_limit_a_heatmap_shows_every_rank_and_the_timeline_the_slowest(clock):
    source = Batches(many_ranks(80, slow=(5, 41, 77)), many_ranks(80, slow=(5, 41, 77), start_s=1.0))
    dash = Dashboard(source, refresh_s=1.0, clock=clock, slowest_ranks=3)
    dash.update()
    assert dash.error == "" and dash.many_ranks
    heat = dash.heatmap.data[0]
    assert len(set(heat.y)) == 80 and dash.heatmap.layout.meta["rank_order"]
    assert list(dash.rank_select.value) == [5, 41, 77] and dash._visible_ranks() == [5, 41, 77]
    drawn = {int(r) for trace in dash.timeline.data if trace.y is not None for r in trace.y}
    assert drawn == {5, 41, 77}  # the timeline holds the slowest ranks only
    assert "slowest (waits least): rank 5 (node0) 90%" in dash.heatmap_note.value
    assert list(dash.heatmap_value.options)[:2] == ["waiting", "compute"]

    clicked = SimpleNamespace(ys=[2.0], point_inds=[[2, 0]])  # what plotly hands a click callback
    dash._on_heatmap_click(heat, clicked, None)  # rank 2: added, the slowest no longer followed
    assert dash._visible_ranks() == [2, 5, 41, 77] and not dash._auto_ranks
    dash.update()
    assert dash._visible_ranks() == [2, 5, 41, 77]
    dash.heatmap_value.value = "compute"
    assert dash.heatmap.data[0].name == "compute"


def test_up_to_the_timeline_limit_there_is_no_heatmap_and_every_rank_is_drawn(clock):
    dash = Dashboard(Batches(many_ranks(16, slow=(3,))), refresh_s=1.0, clock=clock)
    dash.update()
    assert not dash.many_ranks and dash._heatmap is None and dash._visible_ranks() == list(range(16))
