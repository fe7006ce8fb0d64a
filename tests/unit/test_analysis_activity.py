"""The rank × time grid: hand-computed bins, chunked arrival, coarsening, slowest ranks and hosts, its figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.analysis.activity import (
    WAITING,
    RankTimeGrid,
    describe_slowest,
    grid_frame,
    host_activity,
    rank_activity,
    rank_time_grid,
    slowest_ranks,
)
from workbench.analysis.breakdown import phase_breakdown
from workbench.datasets.made_traces.job import made_events
from workbench.events import events_frame
from workbench.figures import rank_rows, rank_time_figure

S = 1_000_000_000
T0 = 1_700_000_000 * S


def spans(rows: list[tuple[int, str, float, float]], name: str = "span") -> pd.DataFrame:
    """(rank, phase, start s, end s) rows as events, the host node<rank // 2>."""
    return events_frame(
        pd.DataFrame(
            {
                "rank": [r for r, *_ in rows],
                "host": [f"node{r // 2}" for r, *_ in rows],
                "phase": [p for _, p, *_ in rows],
                "name": [name] * len(rows),
                "start_ns": [T0 + round(a * S) for *_, a, _ in rows],
                "end_ns": [T0 + round(b * S) for *_, b in rows],
            }
        )
    )


#: rank 0: a 1 s train_step holding an allreduce at 0.6-0.9 s; rank 1: input, 0.2 s in no span, compute.
STEP = [(0, "compute", 0.0, 1.0), (0, "communication", 0.6, 0.9)]
OTHER = [(1, "input", 0.0, 0.2), (1, "compute", 0.4, 1.0)]


def seconds(grid: RankTimeGrid, phase: str) -> np.ndarray:
    return np.round(grid.seconds(phase)[grid.ranks], 9)


def test_each_instant_counts_once_for_its_innermost_span():
    grid = rank_time_grid(spans(STEP + OTHER), bin_s=0.5)
    assert grid.bins == 2 and grid.bin_s == 0.5
    # rank 0: bin 0 all compute; bin 1 0.2 s compute and the 0.3 s allreduce inside the step
    assert seconds(grid, "compute").tolist() == [[0.5, 0.2], [0.1, 0.5]]
    assert seconds(grid, "communication").tolist() == [[0.0, 0.3], [0.0, 0.0]]
    assert seconds(grid, "input").tolist() == [[0.0, 0.0], [0.2, 0.0]]
    # waiting: communication, plus rank 1's 0.2 s in no span
    share = grid.share(WAITING)
    assert share.round(9).to_numpy().tolist() == [[0.0, 0.6], [0.4, 0.0]]
    assert share.index.tolist() == [0, 1] and share.columns.tolist() == [0.0, 0.5]


def test_children_that_arrive_before_their_parent_leave_its_bins():
    """A recorder that flushed between the allreduce's end and the step's: the same grid."""
    whole = rank_time_grid(spans(STEP + OTHER), bin_s=0.5)
    chunked = RankTimeGrid(bin_s=0.5)
    chunked.add(spans([STEP[1], OTHER[0]]))
    chunked.add(spans([STEP[0], OTHER[1]]))
    for phase in ("compute", "communication", "input", WAITING):
        assert np.allclose(seconds(chunked, phase), seconds(whole, phase)), phase


def test_a_late_parent_loses_only_its_share_of_a_bin_it_covers_in_part():
    """The grid keeps no detail inside a bin: a parent over part of a bin loses the part's share."""
    grid = RankTimeGrid(bin_s=1.0)
    grid.add(spans([(0, "input", 0.0, 0.4), (0, "communication", 0.5, 0.6)]))
    grid.add(spans([(0, "compute", 0.4, 1.0)]))  # holds the allreduce, received before it
    # rank 0 knew 0.6 s of bin 0 before (0 .. 0.6); 0.4 .. 0.6 is a third of it: 0.5 s × 1/3 taken
    assert seconds(grid, "compute")[0, 0] == pytest.approx(0.6 - 0.5 / 3)
    assert seconds(grid, "communication")[0, 0] == pytest.approx(0.1)


def test_spans_of_several_bins_fill_the_bins_between():
    grid = rank_time_grid(spans([(0, "compute", 0.25, 1.75)]), bin_s=0.5)
    assert seconds(grid, "compute").tolist() == [[0.25, 0.5, 0.5, 0.25]]
    assert grid.share(WAITING).to_numpy().tolist() == [[0.0, 0.0, 0.0, 0.0]]


def test_bins_double_in_width_when_the_run_outgrows_them():
    grid = RankTimeGrid(bin_s=0.5, max_bins=4)
    grid.add(spans([(0, "compute", 0.0, 1.0)]))
    assert grid.bins == 2
    grid.add(spans([(0, "communication", 1.0, 3.5)]))
    assert grid.bin_s == 1.0 and grid.bins == 4
    assert seconds(grid, "compute").tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert seconds(grid, "communication").tolist() == [[0.0, 1.0, 1.0, 0.5]]


def test_a_rank_that_started_earlier_gets_bins_in_front():
    grid = RankTimeGrid(bin_s=0.5)
    grid.add(spans([(0, "compute", 1.0, 1.5)]))
    grid.add(spans([(1, "compute", 0.0, 0.5)]))
    assert grid.bins == 3 and grid.ranks == [0, 1]
    assert seconds(grid, "compute").tolist() == [[0.0, 0.0, 0.5], [0.5, 0.0, 0.0]]
    share = grid.share(WAITING)  # a rank's bins before its first span or after its last are unknown
    assert np.isnan(share.loc[0, 0.0]) and np.isnan(share.loc[1, 1.0]) and share.loc[0, 1.0] == 0.0


def test_a_whole_run_matches_the_phase_breakdown():
    events = made_events(100_000, 8)
    table = grid_frame(rank_time_grid(events, bin_s=1.0))
    grid_seconds = table.groupby(["rank", "phase"])["seconds"].sum()
    breakdown = phase_breakdown(events, by=("rank",)).set_index(["rank", "phase"])["seconds"]
    for (rank, phase), value in breakdown.items():
        if phase != "idle":  # the breakdown's idle counts the run's wall, the grid a rank's own extent
            assert grid_seconds.get((rank, phase), 0.0) == pytest.approx(value, rel=1e-9, abs=1e-6)


def test_a_run_fed_in_chunks_stays_close_to_the_whole():
    """Chunks cut by end time, so steps and their allreduces land in different chunks now and then."""
    events = made_events(100_000, 8)
    whole = rank_time_grid(events, bin_s=1.0)
    chunked = RankTimeGrid(bin_s=1.0)
    by_end = events.sort_values("end_ns")
    for rows in np.array_split(np.arange(len(by_end)), 40):
        chunked.add(by_end.iloc[rows])
    assert chunked.bins == whole.bins
    difference = (chunked.share() - whole.share()).abs().to_numpy()
    assert np.nanmax(difference) < 0.05
    assert np.nanmean(difference) < 0.005


def test_the_slowest_ranks_wait_least_and_the_slowest_host_is_named():
    events = made_events(60_000, 8)  # the last rank computes 10 % longer; rank 0 evaluates
    events["host"] = [f"node{r // 4}" for r in events["rank"]]
    activity = rank_activity(rank_time_grid(events, bin_s=1.0), slowest=2)
    assert set(slowest_ranks(activity, 2)) == {0, 7}
    assert activity.loc[activity["slowest"], "rank"].tolist() == [0, 7]
    assert (activity["known_s"] >= activity["waiting_s"]).all()
    hosts = host_activity(activity)
    assert hosts["ranks"].tolist() == [4, 4]
    line = describe_slowest(activity, 2)
    assert "rank 7 (node1)" in line and "rank 0 (node0)" in line and "slowest host" in line


def test_nothing_recorded_reads_as_nothing():
    grid = RankTimeGrid()
    grid.add(None)
    assert grid.ranks == [] and grid.share().empty
    activity = rank_activity(grid)
    assert activity.empty and describe_slowest(activity) == "no spans yet"


def test_the_figure_groups_rows_by_host_and_marks_the_slowest():
    rows = [(r, "compute", 0.0, 1.0 + 0.01 * r) for r in range(100)] + [
        (r, "communication", 1.0 + 0.01 * r, 2.5) for r in range(100)
    ]
    events = spans(rows)
    events["host"] = [f"node{r % 10}" for r in events["rank"]]  # ranks dealt round-robin over 10 hosts
    grid = rank_time_grid(events, bin_s=0.5)
    activity = rank_activity(grid, slowest=3)
    marked = activity.loc[activity["slowest"], "rank"].tolist()
    assert marked == [97, 98, 99]
    fig = rank_time_figure(grid.share(), hosts=grid.hosts, marked=marked, marked_host="node9")
    heat, triangles, lines = fig.data
    assert fig.layout.meta["rank_order"] is False  # hosts deal the ranks round-robin: y is the row top down
    order = rank_rows(grid.ranks, grid.hosts)
    assert order[:3] == [0, 10, 20] and order[-1] == 99  # node0's ranks first, node9's last
    # one cell per rank and bin, as 1-D float32 columns (binary buffers in the widget, not nested lists)
    assert len(heat.z) == len(heat.x) == len(heat.y) == 100 * 5 and heat.z.dtype == np.float32
    assert heat.y[0] == 0 and heat.y[5] == 1 and heat.z[0] == pytest.approx(grid.share().loc[0].iloc[0])
    assert list(fig.layout.yaxis.ticktext) == [f"node{h}" for h in range(10)]  # one label per host
    assert [order[int(y)] for y in triangles.y] == marked
    assert len(lines.y) == 3 * 9  # a line between each two hosts
    (frame,) = fig.layout.shapes
    assert (frame.y0, frame.y1) == (89.5, 99.5)  # node9's ten rows


def test_the_figures_rows_are_the_ranks_when_hosts_hold_consecutive_ranks():
    events = spans([(r, "compute", 0.0, 1.0) for r in range(6)])  # node0: 0-1, node1: 2-3, node2: 4-5
    grid = rank_time_grid(events, bin_s=0.5)
    fig = rank_time_figure(grid.share(), hosts=grid.hosts, marked=[4])
    assert fig.layout.meta["rank_order"] is True
    assert sorted(set(fig.data[0].y)) == [0, 1, 2, 3, 4, 5] and list(fig.data[1].y) == [4]
    assert "rank %{y}" in fig.data[0].hovertemplate
