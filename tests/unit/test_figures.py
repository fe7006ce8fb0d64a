"""Figures are pure: frames in, plotly figures out. Asserted on data and layout, headless."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from workbench.events import EXTRA_COLOURS, PHASE_COLOURS, events_frame
from workbench.figures import (
    POP_COLOURS,
    breakdown_figure,
    comparison_figure,
    decimate_spans,
    heatmap_figure,
    memory_figure,
    phase_order,
    pop_colour,
    pop_table_figure,
    scaling_figure,
    spans_frame,
    timeline_figure,
)

S = 1_000_000_000  # ns per second
T0 = 1_700_000_000 * S


@pytest.fixture
def events() -> pd.DataFrame:
    return events_frame(
        [
            dict(rank=0, phase="compute", name="train_step", step=1, epoch=0,
                 start_ns=T0, end_ns=T0 + S // 2),
            dict(rank=0, phase="communication", name="allreduce", step=1, epoch=0,
                 start_ns=T0 + S // 2, end_ns=T0 + S * 7 // 10),
            dict(rank=1, phase="compute", name="train_step", step=1, epoch=0,
                 start_ns=T0 + S // 10, end_ns=T0 + S * 8 // 10),
        ]
    )  # fmt: skip


def traces_by_name(fig):
    return {t.name: t for t in fig.data}


# ---------------------------------------------------------------- timeline
def test_timeline_one_trace_per_phase_in_order_with_phase_colours(events):
    fig = timeline_figure(events)
    assert [t.name for t in fig.data] == ["compute", "communication"]
    assert all(t.type == "bar" and t.orientation == "h" for t in fig.data)
    for trace in fig.data:
        assert trace.marker.color == PHASE_COLOURS[trace.name]
    assert fig.layout.barmode == "overlay"


def test_timeline_bars_match_hand_made_events(events):
    bars = traces_by_name(timeline_figure(events))
    compute = bars["compute"]
    np.testing.assert_allclose(np.asarray(compute.base, dtype=float), [0.0, 0.1])
    np.testing.assert_allclose(compute.x, [0.5, 0.7])
    assert list(compute.y) == [0, 1]
    np.testing.assert_allclose(np.asarray(bars["communication"].base, dtype=float), [0.5])
    np.testing.assert_allclose(bars["communication"].x, [0.2])
    assert list(compute.hovertext) == ["train_step", "train_step"]
    # customdata: start, step, epoch, count, busy
    np.testing.assert_allclose(compute.customdata[1], [0.1, 1, 0, 1, 0.7])


def test_timeline_y_categories_are_the_ranks_and_time_is_seconds_since_start(events):
    fig = timeline_figure(events, ranks=[0, 1, 2], t0_ns=T0 - S)
    assert fig.layout.yaxis.type == "category"
    assert list(fig.layout.yaxis.categoryarray) == [0, 1, 2]
    assert fig.layout.yaxis.autorange == "reversed"
    assert "seconds" in fig.layout.xaxis.title.text
    base = np.asarray(traces_by_name(fig)["compute"].base, dtype=float)
    np.testing.assert_allclose(base, [1.0, 1.1])  # t0 one second earlier


def test_timeline_hidden_phase_keeps_an_empty_invisible_trace(events):
    fig = timeline_figure(events, phases=["compute"], known_phases=["input"])
    bars = traces_by_name(fig)
    assert list(bars) == ["compute", "communication", "input"]
    assert bars["communication"].visible is False and len(bars["communication"].x) == 0
    assert bars["input"].marker.color == PHASE_COLOURS["input"]


def test_timeline_window_filters_and_fixes_range(events):
    fig = timeline_figure(events, window=(0.55, 2.0))
    assert tuple(fig.layout.xaxis.range) == (0.55, 2.0)
    assert len(traces_by_name(fig)["communication"].x) == 1
    assert list(traces_by_name(fig)["compute"].y) == [1]  # rank 0's compute ended at 0.5 s
    assert fig.layout.meta["drawn"] == 2


def test_timeline_user_phase_gets_extra_colour():
    ev = events_frame([dict(rank=0, phase="augment", start_ns=T0, end_ns=T0 + S)])
    assert timeline_figure(ev).data[0].marker.color == EXTRA_COLOURS[0]


def test_timeline_empty_events_say_so():
    fig = timeline_figure(events_frame([dict(rank=0, phase="compute", start_ns=0, end_ns=1)]).iloc[0:0])
    assert len(fig.data) == 0
    assert fig.layout.annotations[0].text == "no events"


def test_timeline_gl_style_draws_segments():
    ev = events_frame([dict(rank=r, phase="compute", start_ns=T0 + r * S, end_ns=T0 + (r + 2) * S) for r in (0, 1)])
    (trace,) = timeline_figure(ev, style="gl").data
    assert trace.type == "scattergl"
    x = np.asarray(trace.x, dtype=float)
    np.testing.assert_allclose(x[[0, 1, 3, 4]], [0, 2, 1, 3])
    assert math.isnan(x[2])


def test_decimation_merges_adjacent_same_phase_spans_and_keeps_busy_time():
    # 2 ranks x 5 000 back-to-back 1 ms compute spans, 10 us apart: one bar per rank at 1600 px.
    n = 5_000
    starts = T0 + np.arange(n) * 1_010_000
    rows = [
        dict(rank=r, phase="compute", start_ns=int(s), end_ns=int(s) + 1_000_000, step=i)
        for r in (0, 1)
        for i, s in enumerate(starts)
    ]
    spans = spans_frame(events_frame(rows))
    drawn, resolution = decimate_spans(spans, max_spans=1_000)
    assert len(drawn) == 2 and resolution > 0
    assert drawn["count"].sum() == 2 * n
    assert drawn["busy_s"].sum() == pytest.approx(2 * n * 1e-3)
    assert list(drawn["step"]) == [0, 0] and list(drawn["last_step"]) == [n - 1, n - 1]


def test_decimation_bins_interleaved_phases_in_their_busiest_phase():
    # compute 7 ms then communication 3 ms, 4 000 times per rank: phases alternate below a pixel.
    n, rows = 4_000, []
    for r in (0, 1):
        for i in range(n):
            t = T0 + i * 10_000_000
            rows.append(dict(rank=r, phase="compute", start_ns=t, end_ns=t + 7_000_000))
            rows.append(dict(rank=r, phase="communication", start_ns=t + 7_000_000, end_ns=t + 10_000_000))
    fig = timeline_figure(events_frame(rows), max_spans=500)
    assert fig.layout.meta["spans"] == 4 * n
    assert fig.layout.meta["drawn"] <= 500
    bars = traces_by_name(fig)
    assert len(bars["compute"].x) > 0.9 * fig.layout.meta["drawn"]
    assert "compute 70%, communication 30%" in bars["compute"].hovertext[0]


def test_decimation_leaves_small_windows_alone(events):
    drawn, resolution = decimate_spans(spans_frame(events), max_spans=10)
    assert len(drawn) == 3 and resolution == 0.0


# ---------------------------------------------------------------- breakdown
@pytest.fixture
def breakdown() -> pd.DataFrame:
    rows = []
    for rank in (0, 1):
        for epoch in (0, 1):
            for phase, seconds in (
                ("communication_wait", 1.0),
                ("compute", 6.0 + rank),
                ("communication", 3.0),
            ):
                rows.append(dict(rank=rank, epoch=epoch, phase=phase, seconds=seconds))
    frame = pd.DataFrame(rows)
    frame["fraction"] = frame["seconds"] / frame.groupby(["rank", "epoch"])["seconds"].transform("sum")
    return frame


def test_breakdown_stacks_phases_per_rank_in_phase_order(breakdown):
    per_rank = breakdown.groupby(["rank", "phase"], as_index=False)[["seconds", "fraction"]].sum()
    fig = breakdown_figure(per_rank)
    assert fig.layout.barmode == "stack"
    assert [t.name for t in fig.data] == ["compute", "communication", "communication_wait"]
    compute = traces_by_name(fig)["compute"]
    assert list(compute.x) == [0, 1]
    np.testing.assert_allclose(compute.y, [12.0, 14.0])
    for trace in fig.data:
        assert trace.marker.color == PHASE_COLOURS[trace.name]


def test_breakdown_per_epoch_uses_epoch_groups(breakdown):
    fig = breakdown_figure(breakdown, value="fraction")
    outer, inner = traces_by_name(fig)["compute"].x
    assert list(outer) == ["epoch 0", "epoch 0", "epoch 1", "epoch 1"]
    assert list(inner) == ["0", "1", "0", "1"]
    np.testing.assert_allclose(traces_by_name(fig)["compute"].y, [0.6, 7 / 11, 0.6, 7 / 11])
    assert fig.layout.yaxis.tickformat == ".0%"


def test_phase_order_puts_known_phases_first():
    # one order everywhere (workbench.events.phase_order): user phases before idle, as in tables
    assert phase_order(["mine", "idle", "communication_wait", "compute"]) == [
        "compute",
        "communication_wait",
        "mine",
        "idle",
    ]


# ---------------------------------------------------------------- memory
def test_memory_lines_per_rank_with_fit_and_verdict():
    samples = pd.DataFrame(
        {
            "rank": [0] * 4 + [1] * 4,
            "time_ns": [T0 + i * S for i in range(4)] * 2,
            "rss_bytes": [100e6, 101e6, 102e6, 103e6, 200e6, 200e6, 200e6, 200e6],
            "label": "interval",
            "iteration": -1,
        }
    )
    growth = pd.DataFrame(
        {
            "rank": [0, 1], "label": ["interval"] * 2, "n": [4, 4], "slope_mb_per_x": [1.0, 0.0],
            "ci_low": [0.9, -0.1], "ci_high": [1.1, 0.1], "peak_mb": [103, 200], "start_mb": [100, 200],
            "end_mb": [103, 200], "verdict": ["growing", "flat"],
        }
    )  # fmt: skip
    fig = memory_figure(samples, growth)
    names = [t.name for t in fig.data]
    assert names[0] == "rank 0" and names[2] == "rank 1"
    assert "growing" in names[1] and "+1 MB/s" in names[1]
    assert "flat" in names[3]
    np.testing.assert_allclose(fig.data[0].y, [100, 101, 102, 103])
    np.testing.assert_allclose(fig.data[1].y, [100, 103])  # the fitted line over the samples
    assert fig.data[1].line.dash == "dash"
    assert fig.layout.xaxis.title.text == "seconds since run start"


def test_memory_uses_iterations_for_call_site_samples():
    samples = pd.DataFrame(
        {"rank": 0, "time_ns": [T0, T0 + S], "rss_bytes": [1e6, 2e6], "label": "predict", "iteration": [0, 1]}
    )
    fig = memory_figure(samples)
    assert fig.layout.xaxis.title.text == "iteration"
    assert list(fig.data[0].x) == [0, 1]


def test_memory_with_several_methods_colours_by_method_with_a_panel_per_rank():
    methods = ["call", "predict", "predict_on_batch", "tf_function", "leaky_control"]
    samples = pd.DataFrame(
        [
            {"rank": r, "time_ns": T0 + i * S, "rss_bytes": (100 + i) * 1e6, "label": m, "iteration": i}
            for r in (0, 1)
            for m in methods
            for i in range(5)
        ]
    )
    growth = pd.DataFrame(
        [
            {"rank": r, "label": m, "slope_mb_per_x": 1.0, "ci_low": 0.9, "ci_high": 1.1, "verdict": "leak"}
            for r in (0, 1)
            for m in methods
        ]
    )
    fig = memory_figure(samples, growth)
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend == sorted(methods)  # one entry per method, not per rank x method x fit
    colours = {t.legendgroup: t.line.color for t in fig.data}
    assert len(set(colours.values())) == len(methods)
    assert {t.line.color for t in fig.data if t.legendgroup == "predict"} == {colours["predict"]}  # fit too
    assert {t.xaxis for t in fig.data} == {"x", "x2"}  # rank 0 and rank 1 in their own panels
    assert [a.text for a in fig.layout.annotations][:2] == ["rank 0", "rank 1"]
    fits = [t for t in fig.data if t.line.dash == "dash"]
    assert len(fits) == 10 and all("leak" in t.name for t in fits)


# ---------------------------------------------------------------- scaling, heatmap
def test_scaling_has_speedup_ideal_and_efficiency_with_error_bars():
    table = pd.DataFrame(
        {
            "ranks": [1, 2, 4], "throughput_mean": [100.0, 180.0, 300.0], "throughput_std": [2.0, 3.6, 15.0],
            "speedup": [1.0, 1.8, 3.0], "efficiency": [1.0, 0.9, 0.75], "ideal_speedup": [1.0, 2.0, 4.0],
        }
    )  # fmt: skip
    fig = scaling_figure(table)
    by_name = traces_by_name(fig)
    assert set(by_name) == {"ideal", "measured speedup", "efficiency"}
    np.testing.assert_allclose(by_name["ideal"].y, [1, 2, 4])
    np.testing.assert_allclose(by_name["measured speedup"].error_y.array, [0.02, 0.036, 0.15])
    assert by_name["efficiency"].xaxis == "x2"


def test_heatmap_cells_and_annotations():
    frame = pd.DataFrame({"omp": [1, 2, 1, 2], "ranks": [2, 2, 4, 4], "throughput": [10.0, 12.0, 18.0, 21.0]})
    (trace,) = heatmap_figure(frame, "omp", "ranks", "throughput").data
    assert list(trace.x) == ["1", "2"] and list(trace.y) == ["2", "4"]
    np.testing.assert_allclose(trace.z, [[10, 12], [18, 21]])
    assert trace.texttemplate == "%{z:.3g}"
    with pytest.raises(ValueError, match="aggregate"):
        heatmap_figure(pd.concat([frame, frame]), "omp", "ranks", "throughput")


def test_heatmap_shows_failed_points_as_grey_cells_with_their_reason():
    frame = pd.DataFrame({"intra": [1, 2, 1], "inter": [1, 1, 2], "images_per_s": [10.0, 12.0, 11.0]})
    failed = pd.DataFrame({"intra": [4, 2], "inter": [2, 2], "reason": ["RankFailedError: rank 0 died", "timeout"]})
    cells, grey = heatmap_figure(frame, "intra", "inter", "images_per_s", failed=failed).data
    assert list(cells.x) == ["1", "2", "4"] and list(cells.y) == ["1", "2"]
    np.testing.assert_allclose(cells.z, [[10, 12, np.nan], [11, np.nan, np.nan]])  # no value where it failed
    assert list(zip(grey.x, grey.y)) == [("4", "2"), ("2", "2")]
    assert list(grey.text) == ["failed", "failed"] and not grey.showscale
    assert [row[0] for row in grey.customdata] == ["RankFailedError: rank 0 died", "timeout"]
    assert "failed: %{customdata[0]}" in grey.hovertemplate
    # a point that failed once and finished later is a value, not a grey cell
    rerun = pd.DataFrame({"intra": [1], "inter": [1], "reason": ["an earlier failure"]})
    assert len(heatmap_figure(frame, "intra", "inter", "images_per_s", failed=rerun).data) == 1
    with pytest.raises(ValueError, match="lack column"):
        heatmap_figure(frame, "intra", "inter", "images_per_s", failed=failed.drop(columns="reason"))


# ---------------------------------------------------------------- POP table
@pytest.mark.parametrize(
    ("value", "band"),
    [(0.95, "good"), (0.8, "good"), (0.79, "fair"), (0.6, "fair"), (0.59, "poor"), (float("nan"), "missing")],
)
def test_pop_colour_thresholds(value, band):
    assert pop_colour(value) == POP_COLOURS[band]


def test_pop_table_colours_cells_by_threshold():
    frame = pd.DataFrame(
        {
            "ranks": [2, 4],
            "load_balance": [0.95, 0.7],
            "communication_efficiency": [0.85, 0.5],
            "parallel_efficiency": [0.81, 0.35],
        }
    )
    (table,) = pop_table_figure(frame).data
    assert table.type == "table"
    assert list(table.header.values) == ["ranks", "2", "4"]
    labels, _two, four = table.cells.values
    assert [label.strip() for label in labels] == [
        "Parallel efficiency",
        "Load balance",
        "Communication efficiency",
    ]
    assert list(four) == ["0.35", "0.70", "0.50"]
    fills = table.cells.fill.color
    assert list(fills[1]) == [POP_COLOURS["good"]] * 3
    assert list(fills[2]) == [POP_COLOURS["poor"], POP_COLOURS["fair"], POP_COLOURS["poor"]]


# ---------------------------------------------------------------- comparison of two runs
def comparison_frame() -> pd.DataFrame:
    """As compare_runs gives it: rank 0 in both runs, rank 1 only in A; wall 10 s -> 7 s."""
    rows = [
        ("rank", 0, "compute", 6.0, 6.0, "both"),
        ("rank", 0, "evaluation", 4.0, 1.0, "both"),
        ("rank", 1, "compute", 6.0, 0.0, "a only"),
        ("rank", 1, "evaluation", 0.0, 0.0, "a only"),
        ("total", -1, "compute", 12.0, 6.0, "both"),
        ("total", -1, "evaluation", 4.0, 1.0, "both"),
        ("wall", -1, "wall", 10.0, 7.0, "both"),
    ]
    frame = pd.DataFrame(rows, columns=["scope", "rank", "phase", "seconds_a", "seconds_b", "present"])
    frame["delta_s"] = frame["seconds_b"] - frame["seconds_a"]
    frame["ratio"] = frame["seconds_b"] / frame["seconds_a"]
    return frame


def test_comparison_draws_deltas_per_phase_and_per_rank_in_phase_colours():
    fig = comparison_figure(comparison_frame(), names=("every epoch", "every 30"))
    assert fig.layout.barmode == "relative"
    # one trace per phase and panel: totals (no legend entry) then ranks
    assert [(t.name, t.showlegend) for t in fig.data] == [
        ("compute", False),
        ("compute", True),
        ("evaluation", False),
        ("evaluation", True),
    ]
    total_compute, rank_compute, total_evaluation, rank_evaluation = fig.data
    assert list(total_compute.y) == ["compute"] and list(total_compute.x) == [-6.0]
    assert list(rank_evaluation.y) == ["rank 0", "rank 1 (a only)"]
    assert list(rank_evaluation.x) == [-3.0, 0.0]
    assert rank_compute.marker.color == PHASE_COLOURS["compute"]
    assert total_evaluation.marker.color == PHASE_COLOURS["evaluation"]
    # hover carries both runs' seconds and the ratio, under the runs' names
    assert list(rank_evaluation.customdata[0]) == [4.0, 1.0, 0.25]
    assert "every 30 − every epoch" in rank_evaluation.hovertemplate
    # the change in wall time, -3 s, as a line on the per-rank panel
    (line,) = [shape for shape in fig.layout.shapes if shape.type == "line"]
    assert (line.x0, line.x1) == (-3.0, -3.0)
    assert fig.layout.title.text == "every 30 − every epoch: where the time went differently"


def test_comparison_needs_compare_runs_columns():
    with pytest.raises(ValueError, match="compare_runs"):
        comparison_figure(pd.DataFrame({"phase": ["compute"]}))


def test_figure_modules_import_shared_style_not_the_package():
    """No import cycle: submodules take phase order and colours from figures.style, not figures."""
    import ast
    from pathlib import Path

    import workbench.figures

    package = Path(workbench.figures.__file__).parent
    for module in package.glob("*.py"):
        if module.name == "__init__.py":
            continue
        tree = ast.parse(module.read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "workbench.figures" not in imported, module.name


def test_timeline_puts_collectives_in_flight_on_their_own_lane():
    from workbench.events import events_frame
    from workbench.figures import timeline_figure

    events = events_frame(
        [
            {"rank": 0, "phase": "compute", "start_ns": 0, "end_ns": 10},
            {"rank": 1, "phase": "compute", "start_ns": 0, "end_ns": 10},
            {"rank": 0, "phase": "in_flight", "name": "ALLREDUCE", "start_ns": 2, "end_ns": 8},
        ]
    )
    for style in ("bar", "gl"):
        fig = timeline_figure(events, style=style)
        assert list(fig.layout.yaxis.categoryarray) == [0, "0 in flight", 1]
        (flight,) = [trace for trace in fig.data if trace.name == "in_flight"]
        assert {y for y in flight.y if y is not None} == {"0 in flight"}
        (compute,) = [trace for trace in fig.data if trace.name == "compute"]
        assert "0 in flight" not in list(compute.y)


def test_binning_keeps_every_ranks_longest_span_and_wide_spans_as_they_are():
    # 64 ranks of 10 ms steps (7 ms compute + 3 ms communication) for 20 s: binned at 5 000 bars. Rank 5
    # stalls in a 0.4 s checkpoint (wider than a bucket); rank 9's longest span is a 9 ms compute.
    rows = []
    for rank in range(64):
        for i in range(2_000):
            t = T0 + i * 10_000_000
            compute_ns = 9_000_000 if (rank == 9 and i == 700) else 7_000_000
            rows.append(dict(rank=rank, phase="compute", start_ns=t, end_ns=t + compute_ns))
            rows.append(dict(rank=rank, phase="communication", start_ns=t + 7_000_000, end_ns=t + 10_000_000))
    rows.append(dict(rank=5, phase="checkpoint", start_ns=T0 + 5 * S, end_ns=T0 + 5 * S + 400_000_000))
    events = events_frame(rows)
    drawn, resolution = decimate_spans(spans_frame(events, t0_ns=T0), max_spans=5_000)
    assert resolution > 0 and len(drawn) <= 5_000
    stall = drawn[(drawn["rank"] == 5) & (drawn["phase"] == "checkpoint")]
    assert stall[["start_s", "end_s", "count"]].values.tolist() == [[5.0, 5.4, 1]]  # exactly, not binned
    nine = drawn[(drawn["rank"] == 9) & (drawn["count"] == 1) & (drawn["phase"] == "compute")]
    assert nine[["start_s", "end_s"]].to_numpy().ravel() == pytest.approx([7.0, 7.009])
    assert set(drawn.groupby("rank")["count"].max().index) == set(range(64))
