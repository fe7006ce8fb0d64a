"""phase_breakdown and rank_wall_time: hand-computed seconds, innermost-wins rules, degenerate input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench import events as ev
from workbench.analysis import lane_table, phase_breakdown, phase_order, rank_wall_time
from workbench.analysis.breakdown import _busy_per_lane
from workbench.events import events_frame

S = 1_000_000_000  # ns per second


def span(rank, phase, start_s, end_s, name=None, **extra):
    row = {"rank": rank, "phase": phase, "start_ns": int(start_s * S), "end_ns": int(end_s * S), **extra}
    if name is not None:
        row["name"] = name
    return row


def frame(*rows):
    rows = [{"name": r.get("name", r["phase"]), **r} for r in rows]
    return events_frame(list(rows))


def seconds(result, **where):
    mask = np.ones(len(result), dtype=bool)
    for column, value in where.items():
        mask &= (result[column] == value).to_numpy()
    picked = result.loc[mask, "seconds"]
    assert len(picked) == 1, f"expected one row for {where}, got {len(picked)}"
    return float(picked.iloc[0])


def test_nested_communication_is_not_counted_as_compute():
    # rank 0: train_step [0, 10) holds a negotiation [6, 8) and a transfer [8, 9).
    # compute = 10 - 2 - 1 = 7 s; communication_wait = 2 s; communication = 1 s; idle = 0.
    events = frame(
        span(0, "compute", 0, 10, "train_step"),
        span(0, "communication", 6, 8, "NEGOTIATE_ALLREDUCE"),
        span(0, "communication", 8, 9, "MPI_ALLREDUCE"),
    )
    result = phase_breakdown(events)
    assert list(result.columns) == ["rank", "phase", "seconds", "fraction"]
    assert seconds(result, phase="compute") == pytest.approx(7)
    assert seconds(result, phase="communication_wait") == pytest.approx(2)
    assert seconds(result, phase="communication") == pytest.approx(1)
    assert seconds(result, phase="idle") == 0
    # fractions of the 10 s wall time: 0.7, 0.1, 0.2
    assert result.set_index("phase")["fraction"].to_dict() == pytest.approx(
        {"compute": 0.7, "communication": 0.1, "communication_wait": 0.2, "idle": 0.0}
    )


def test_partial_overlap_goes_to_the_span_that_started_latest():
    # compute [0, 10) and input [5, 15) overlap on [5, 10): input started later, so it wins there.
    # compute = 5 s, input = 10 s, wall = 15 s.
    result = phase_breakdown(frame(span(0, "compute", 0, 10), span(0, "input", 5, 15)))
    assert seconds(result, phase="compute") == pytest.approx(5)
    assert seconds(result, phase="input") == pytest.approx(10)
    assert result["seconds"].sum() == pytest.approx(15)


def test_same_start_the_shorter_span_wins():
    # compute [0, 10) and input [0, 4) start together: the shorter (input) wins [0, 4).
    # input = 4 s, compute = 6 s, whatever the row order.
    for rows in (
        [span(0, "compute", 0, 10), span(0, "input", 0, 4)],
        [span(0, "input", 0, 4), span(0, "compute", 0, 10)],
    ):
        result = phase_breakdown(frame(*rows))
        assert seconds(result, phase="input") == pytest.approx(4)
        assert seconds(result, phase="compute") == pytest.approx(6)


def test_exact_duplicate_spans_the_later_row_wins():
    # Two identical spans [0, 3): the later row (input) gets all 3 s, never 6 s in total.
    result = phase_breakdown(frame(span(0, "compute", 0, 3), span(0, "input", 0, 3)))
    assert seconds(result, phase="input") == pytest.approx(3)
    assert seconds(result, phase="compute") == 0
    assert result["seconds"].sum() == pytest.approx(3)


def test_rank_that_finishes_early_is_idle_until_the_run_ends():
    # Wall time = [0, 10) over all ranks. rank 1 computes [0, 6): idle 4 s (fraction 0.4).
    # rank 0 has a gap [4, 5) between spans: idle 1 s.
    events = frame(span(0, "compute", 0, 4), span(0, "compute", 5, 10), span(1, "compute", 0, 6))
    result = phase_breakdown(events)
    assert seconds(result, rank=1, phase="idle") == pytest.approx(4)
    assert result.loc[(result["rank"] == 1) & (result["phase"] == "idle"), "fraction"].item() == pytest.approx(0.4)
    assert seconds(result, rank=0, phase="idle") == pytest.approx(1)
    per_rank = result.groupby("rank")["seconds"].sum()
    assert per_rank.tolist() == pytest.approx([10, 10])


def test_rank_with_no_events_is_fully_idle_when_listed():
    events = frame(span(0, "compute", 0, 10), span(1, "compute", 0, 10))
    result = phase_breakdown(events, ranks=[0, 1, 2])
    assert sorted(result["rank"].unique()) == [0, 1, 2]
    assert seconds(result, rank=2, phase="idle") == pytest.approx(10)
    assert seconds(result, rank=2, phase="compute") == 0
    assert result.loc[(result["rank"] == 2) & (result["phase"] == "idle"), "fraction"].item() == 1.0


def test_every_group_lists_every_phase_in_display_order():
    events = frame(
        span(0, "my_phase", 0, 1),
        span(0, "input", 1, 2),
        span(0, "compute", 2, 3),
        span(1, "evaluation", 0, 3),
    )
    result = phase_breakdown(events)
    expected = ["compute", "evaluation", "input", "my_phase", "idle"]
    assert result[result["rank"] == 0]["phase"].tolist() == expected
    assert result[result["rank"] == 1]["phase"].tolist() == expected
    # user phases keep their order of first appearance (a live run's colours stay put), idle last
    assert phase_order(["idle", "zeta", "communication_wait", "compute", "alpha"]) == [
        "compute",
        "communication_wait",
        "zeta",
        "alpha",
        "idle",
    ]


def test_wait_activities_only_split_communication_spans():
    # An input span named QUEUE stays input; a communication span named QUEUE is waiting.
    events = frame(span(0, "input", 0, 2, "QUEUE"), span(0, "communication", 2, 3, "QUEUE"))
    result = phase_breakdown(events)
    assert seconds(result, phase="input") == pytest.approx(2)
    assert seconds(result, phase="communication_wait") == pytest.approx(1)
    assert "communication" not in set(result["phase"])


def test_one_rank():
    result = phase_breakdown(frame(span(3, "compute", 0, 2), span(3, "input", 2, 3)))
    assert result["rank"].unique().tolist() == [3]
    assert result["fraction"].sum() == pytest.approx(1.0)


def test_empty_events_give_an_empty_frame_with_the_columns():
    result = phase_breakdown(ev.empty_events(), by=("rank", "epoch"))
    assert result.empty
    assert list(result.columns) == ["rank", "epoch", "phase", "seconds", "fraction"]
    assert rank_wall_time(ev.empty_events()).empty


def test_zero_length_spans_give_zero_seconds_and_zero_fraction_not_nan():
    result = phase_breakdown(frame(span(0, "compute", 1, 1), span(1, "compute", 1, 1)))
    assert (result["seconds"] == 0).all()
    assert (result["fraction"] == 0).all()
    assert not result.isna().any().any()


def test_by_epoch_idle_is_measured_against_the_epoch_extent_over_all_ranks():
    # epoch 0: rank 0 [0, 10), rank 1 [0, 6)  -> extent 10 s; rank 1 idle 4 s in epoch 0.
    # epoch 1: rank 0 [10, 12), rank 1 [10, 20) -> extent 10 s; rank 0 idle 8 s in epoch 1.
    events = frame(
        span(0, "compute", 0, 10, epoch=0),
        span(1, "compute", 0, 6, epoch=0),
        span(0, "compute", 10, 12, epoch=1),
        span(1, "compute", 10, 20, epoch=1),
    )
    result = phase_breakdown(events, by=("rank", "epoch"))
    assert list(result.columns) == ["rank", "epoch", "phase", "seconds", "fraction"]
    assert seconds(result, rank=1, epoch=0, phase="idle") == pytest.approx(4)
    assert seconds(result, rank=0, epoch=1, phase="idle") == pytest.approx(8)
    assert seconds(result, rank=0, epoch=1, phase="compute") == pytest.approx(2)
    totals = result.groupby(["rank", "epoch"])["seconds"].sum()
    assert totals.tolist() == pytest.approx([10, 10, 10, 10])


def test_by_step_and_by_nothing():
    # Two steps on two ranks; step 1 extent [2, 5) = 3 s; rank 0 spends [2, 3) in it: idle 2 s.
    events = frame(
        span(0, "compute", 0, 2, step=0),
        span(1, "compute", 0, 2, step=0),
        span(0, "compute", 2, 3, step=1),
        span(1, "compute", 2, 5, step=1),
    )
    by_step = phase_breakdown(events, by=("rank", "step"))
    assert seconds(by_step, rank=0, step=1, phase="idle") == pytest.approx(2)
    # by=(): rank-seconds over the run: compute 2 + 2 + 1 + 3 = 8, idle 2 (rank 0, [3, 5)); wall 5 x 2 ranks.
    total = phase_breakdown(events, by=())
    assert list(total.columns) == ["phase", "seconds", "fraction"]
    assert seconds(total, phase="compute") == pytest.approx(8)
    assert seconds(total, phase="idle") == pytest.approx(2)
    assert seconds(total, phase="compute") / 10 == pytest.approx(total["fraction"].iloc[0])


def test_window_clips_spans():
    # window [5, 15): compute [0, 10) -> [5, 10) = 5 s; input [12, 20) -> [12, 15) = 3 s; gap 2 s idle.
    events = frame(span(0, "compute", 0, 10), span(0, "input", 12, 20), span(0, "compute", 30, 40))
    result = phase_breakdown(events, window=(5 * S, 15 * S))
    assert seconds(result, phase="compute") == pytest.approx(5)
    assert seconds(result, phase="input") == pytest.approx(3)
    assert seconds(result, phase="idle") == pytest.approx(2)
    with pytest.raises(ValueError, match="window"):
        phase_breakdown(events, window=(5, 5))


def test_several_runs_need_run_id_in_by():
    events = frame(span(0, "compute", 0, 2, run_id="a"), span(0, "compute", 100, 104, run_id="b"))
    with pytest.raises(ValueError, match="2 runs"):
        phase_breakdown(events)
    result = phase_breakdown(events, by=("run_id", "rank"))
    # each run has its own wall time: 2 s and 4 s, no idle
    assert seconds(result, run_id="a", phase="compute") == pytest.approx(2)
    assert seconds(result, run_id="b", phase="compute") == pytest.approx(4)
    assert result.loc[result["phase"] == "idle", "seconds"].tolist() == [0, 0]


def test_bad_input_is_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="end before they start"):
        phase_breakdown(frame(span(0, "compute", 2, 1)))
    with pytest.raises(ValueError, match="cannot group by"):
        phase_breakdown(frame(span(0, "compute", 0, 1)), by=("name",))
    with pytest.raises(ValueError, match="lack columns"):
        phase_breakdown(pd.DataFrame({"rank": [0]}))


def test_host_grouping():
    events = frame(
        span(0, "compute", 0, 2, host="a"),
        span(1, "compute", 0, 1, host="a"),
        span(2, "compute", 0, 2, host="b"),
    )
    result = phase_breakdown(events, by=("host",))
    # host a: ranks 0 and 1, 2 s wall each: compute 3 rank-seconds, idle 1.
    assert seconds(result, host="a", phase="compute") == pytest.approx(3)
    assert seconds(result, host="a", phase="idle") == pytest.approx(1)
    assert seconds(result, host="b", phase="idle") == 0


def _brute_force(events: pd.DataFrame) -> dict:
    """Seconds per (rank, phase) by walking every integer second (times are whole seconds)."""
    start, end = events["start_ns"] // S, events["end_ns"] // S
    phases = ev_phases(events)
    result: dict = {}
    for rank in events["rank"].unique():
        for t in range(int(start.min()), int(end.max())):
            covering = [(start[i], -end[i], i) for i in events.index[events["rank"] == rank] if start[i] <= t < end[i]]
            phase = phases[max(covering)[2]] if covering else "idle"
            result[(rank, phase)] = result.get((rank, phase), 0) + 1
    return result


def ev_phases(events):
    from workbench.analysis import effective_phase

    return effective_phase(events)


@pytest.mark.parametrize("seed", range(6))
def test_random_overlaps_match_a_brute_force_walk(seed):
    rng = np.random.default_rng(seed)
    n = 60
    start = rng.integers(0, 50, n)
    rows = [
        span(
            int(rng.integers(0, 3)),
            str(rng.choice(["compute", "input", "communication", "evaluation"])),
            int(s),
            int(s + rng.integers(0, 12)),
            str(rng.choice(["x", "NEGOTIATE_ALLREDUCE"])),
        )
        for s in start
    ]
    events = frame(*rows)
    expected = _brute_force(events)
    result = phase_breakdown(events)
    got = {(r.rank, r.phase): r.seconds for r in result.itertuples() if r.seconds > 0}
    assert got == pytest.approx({k: float(v) for k, v in expected.items()})


def test_exclusive_time_survives_key_overflow_by_chunking_lanes():
    # 3 lanes over a 2**61 ns range: lane * stride would overflow int64, so lanes are swept apart.
    big = 2**61
    lane = np.array([0, 1, 2, 2])
    start = np.array([0, 0, 0, 10])
    end = np.array([big, 5, big, 20])
    lanes, cells, ns, present, last = _busy_per_lane(lane, np.arange(4), start, end)  # a cell per row
    assert list(zip(lanes.tolist(), cells.tolist(), ns.tolist())) == [
        (0, 0, float(big)),
        (1, 1, 5.0),
        (2, 2, float(big - 10)),
        (2, 3, 10.0),
    ]
    assert present.tolist() == [0, 1, 2] and last.tolist() == [0, 1, 3]


def test_busy_per_lane_groups_interleaved_lanes_and_sums_cells():
    # lane 1's rows are split by lane 0's; cell 7 on lane 1 holds a span and the one nested in it
    lane = np.array([1, 0, 1, 0])
    cell = np.array([7, 3, 7, 3])
    start = np.array([0, 0, 2, 10])
    end = np.array([10, 5, 4, 10])  # lane 0's second span has no length: counted, 0 ns
    lanes, cells, ns, present, last = _busy_per_lane(lane, cell, start, end)
    assert list(zip(lanes.tolist(), cells.tolist(), ns.tolist())) == [(0, 3, 5.0), (1, 7, 10.0)]
    assert present.tolist() == [0, 1] and last.tolist() == [3, 2]  # each lane's last row in the input


def test_rank_wall_time():
    # run extent [0, 10); rank 1 active [2, 6) with a 1 s gap -> busy 3 s, idle 7 s; rank 4 listed, no events.
    events = frame(
        span(0, "compute", 0, 10), span(1, "compute", 2, 4), span(1, "input", 5, 6), span(1, "input", 5.5, 6)
    )
    result = rank_wall_time(events, ranks=[4])
    assert list(result.columns) == [
        "run_id",
        "rank",
        "first_start_ns",
        "last_end_ns",
        "busy_s",
        "wall_s",
        "idle_s",
    ]
    row = result.set_index("rank").loc[1]
    assert (row["first_start_ns"], row["last_end_ns"]) == (2 * S, 6 * S)
    assert (row["busy_s"], row["wall_s"], row["idle_s"]) == pytest.approx((3, 10, 7))
    missing = result.set_index("rank").loc[4]
    assert (missing["first_start_ns"], missing["busy_s"], missing["idle_s"]) == (-1, 0, 10)


def test_lane_table_has_idle_for_every_lane_and_piece():
    events = frame(span(0, "compute", 0, 1, epoch=0), span(1, "compute", 1, 2, epoch=1))
    table = lane_table(events, ("epoch",))
    idle = table[table["phase"] == "idle"]
    assert len(idle) == 4  # 2 ranks x 2 epochs
    assert idle["ns"].sum() == pytest.approx(2 * S)  # each rank idle through the other epoch (1 s)


def test_many_steps_sorted_by_rank_keep_their_own_seconds():
    # 6000 steps x 7 phases exceed a 16-bit cell code: codes are widened before they are combined
    steps = 6000
    start = np.arange(steps, dtype=np.int64) * 10 * S
    events = events_frame(
        pd.DataFrame(
            {
                "rank": np.zeros(steps, dtype=np.int32),
                "phase": np.asarray(["compute", "input", "evaluation", "checkpoint", "host", "communication"])[
                    np.arange(steps) % 6
                ],
                "name": "x",
                "step": np.arange(steps, dtype=np.int64),
                "start_ns": start,
                "end_ns": start + (np.arange(steps) % 9 + 1) * S,
            }
        )
    )
    result = phase_breakdown(events, by=("rank", "step"))
    busy = result[result["phase"] != "idle"].groupby("step")["seconds"].sum()
    assert busy.to_numpy() == pytest.approx((np.arange(steps) % 9 + 1).astype(float))


def test_breakdown_leaves_categorical_events_unchanged():
    events = frame(
        span(0, "communication", 0, 2, name="NEGOTIATE_ALLREDUCE"), span(0, "compute", 2, 5, name="step")
    ).astype({"phase": "category", "name": "category", "run_id": "category"})
    before = events.copy()
    result = phase_breakdown(events)
    assert seconds(result, rank=0, phase=ev.COMMUNICATION_WAIT) == pytest.approx(2)
    pd.testing.assert_frame_equal(events, before)  # the wait was split out in a copy of the phase codes


def _nested_spans(rng, depth: int, low: int, high: int) -> list[tuple[int, int]]:
    """Spans side by side in [low, high), each holding spans of its own down to ``depth`` levels (touching
    ends, equal twins and zero-length spans included)."""
    spans, at = [], low
    while at < high - 1:
        length = int(rng.integers(1, max(2, (high - low) // 2)))
        end = min(high, at + length)
        spans.append((at, end))
        if rng.random() < 0.2:
            spans.append((at, end))  # an equal twin: the later row inside
        if rng.random() < 0.1:
            spans.append((at, at))  # no length: no parent, no children
        if depth > 1 and end - at > 2:
            spans += _nested_spans(rng, depth - 1, at, end)
        at = end + int(rng.integers(0, 3))
    return spans


def _innermost_parents(start: np.ndarray, end: np.ndarray) -> list[int]:
    """Each positive span's innermost enclosing span by walking every pair (the later row of equal twins inside)."""
    order = sorted(range(len(start)), key=lambda i: (start[i], -end[i], i))
    place = {row: k for k, row in enumerate(order)}
    parents = []
    for i in range(len(start)):
        holders = [
            j for j in range(len(start))
            if j != i and end[j] > start[j] and end[i] > start[i]
            and start[j] <= start[i] and end[i] <= end[j] and place[j] < place[i]
        ]  # fmt: skip
        parents.append(max(holders, key=place.__getitem__) if holders else -1)
    return parents


@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("seed", range(4))
def test_nesting_parents_match_a_walk_of_every_pair_at_any_depth(depth, seed):
    from workbench.analysis.breakdown import nesting_parents

    rng = np.random.default_rng(seed)
    spans = _nested_spans(rng, depth, 0, 200)
    shuffled = rng.permutation(len(spans)) if seed % 2 else np.arange(len(spans))  # stored order or not
    start = np.asarray([spans[i][0] for i in shuffled], dtype=np.int64)
    end = np.asarray([spans[i][1] for i in shuffled], dtype=np.int64)
    assert nesting_parents(start, end).tolist() == _innermost_parents(start, end)
    crossing_start, crossing_end = np.append(start, start[0] + 1), np.append(end, end[0] + 1)
    if end[0] - start[0] > 1 and not ((start == start[0] + 1) & (end == end[0] + 1)).any():
        assert nesting_parents(crossing_start, crossing_end) is None  # one span shifted across an end
