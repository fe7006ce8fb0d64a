"""Two runs compared per rank and phase, by hand: deltas, ratios, totals, wall time, missing ranks."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.analysis import compare_runs
from workbench.analysis.compare import COMPARISON_COLUMNS
from workbench.events import empty_events, events_frame

S = 1_000_000_000


def span(rank, phase, start, end, name=None):
    return {"rank": rank, "phase": phase, "name": name or phase, "start_ns": start * S, "end_ns": end * S}


def run_a():
    """10 s. rank 0: compute [0, 6), evaluation [6, 10); rank 1: compute [0, 6), negotiation [6, 10)."""
    return events_frame(
        [
            span(0, "compute", 0, 6),
            span(0, "evaluation", 6, 10),
            span(1, "compute", 0, 6),
            span(1, "communication", 6, 10, "NEGOTIATE_ALLREDUCE"),
        ]
    )


def run_b():
    """7 s, ranks 0 and 2. rank 0: compute [0, 6), evaluation [6, 7); rank 2: compute [0, 5), idle [5, 7)."""
    return events_frame([span(0, "compute", 0, 6), span(0, "evaluation", 6, 7), span(2, "compute", 0, 5)])


def rows(frame, scope):
    """{(rank, phase): (seconds_a, seconds_b, delta_s, present)} of one scope."""
    part = frame[frame["scope"] == scope]
    return {
        (int(row.rank), row.phase): (row.seconds_a, row.seconds_b, row.delta_s, row.present)
        for row in part.itertuples()
    }


def test_per_rank_rows_with_ranks_in_one_run_only():
    result = compare_runs(run_a(), run_b())
    assert tuple(result.columns) == COMPARISON_COLUMNS
    per_rank = rows(result, "rank")
    assert per_rank[(0, "compute")] == (6, 6, 0, "both")
    assert per_rank[(0, "evaluation")] == (4, 1, -3, "both")
    assert per_rank[(1, "communication_wait")] == (4, 0, -4, "a only")
    assert per_rank[(1, "compute")] == (6, 0, -6, "a only")
    assert per_rank[(2, "compute")] == (0, 5, 5, "b only")
    assert per_rank[(2, "idle")] == (0, 2, 2, "b only")
    # display order: by rank, phases in the one phase order
    rank0 = result[(result["scope"] == "rank") & (result["rank"] == 0)]["phase"].tolist()
    assert rank0 == ["compute", "communication_wait", "evaluation", "idle"]
    # a rank in both runs: its deltas add up to the change in wall time, 7 - 10 = -3 s
    assert result.loc[(result["scope"] == "rank") & (result["rank"] == 0), "delta_s"].sum() == pytest.approx(-3)


def test_ratios_totals_and_wall_time():
    result = compare_runs(run_a(), run_b())
    evaluation = result[(result["scope"] == "rank") & (result["rank"] == 0) & (result["phase"] == "evaluation")]
    assert evaluation["ratio"].item() == pytest.approx(0.25)  # 1 s / 4 s
    new = result[(result["scope"] == "rank") & (result["rank"] == 2) & (result["phase"] == "compute")]
    assert math.isinf(new["ratio"].item())  # 5 s / 0 s
    nothing = result[(result["scope"] == "rank") & (result["rank"] == 0) & (result["phase"] == "idle")]
    assert math.isnan(nothing["ratio"].item())  # 0 s / 0 s
    totals = rows(result, "total")
    # rank-seconds: compute 6 + 6 = 12 vs 6 + 5 = 11; waiting only in A; evaluation 4 vs 1; idle 0 vs 2
    assert totals == {
        (-1, "compute"): (12, 11, -1, "both"),
        (-1, "communication_wait"): (4, 0, -4, "a only"),
        (-1, "evaluation"): (4, 1, -3, "both"),
        (-1, "idle"): (0, 2, 2, "both"),
    }
    wall = result[result["scope"] == "wall"].iloc[0]
    assert (wall["phase"], wall["seconds_a"], wall["seconds_b"], wall["delta_s"]) == ("wall", 10, 7, -3)
    assert wall["ratio"] == pytest.approx(0.7)
    assert result["scope"].tolist()[-1] == "wall"


def test_a_run_without_events_compares_as_zero():
    result = compare_runs(empty_events(), run_b())
    assert set(result.loc[result["scope"] == "rank", "present"]) == {"b only"}
    wall = result[result["scope"] == "wall"].iloc[0]
    assert (wall["seconds_a"], wall["seconds_b"], wall["present"]) == (0, 7, "b only")
    both_empty = compare_runs(empty_events(), empty_events())
    assert both_empty["scope"].tolist() == ["wall"]
    assert math.isnan(both_empty["ratio"].item())


def test_listed_ranks_without_events_are_idle_for_the_whole_run():
    result = compare_runs(run_b(), run_b(), ranks_a=[0, 1, 2])
    # rank 1 is listed in A only: idle 7 s there, absent from B
    assert rows(result, "rank")[(1, "idle")] == (7, 0, -7, "a only")


def test_rows_labelled_with_other_run_ids_count_as_the_same_run():
    relabelled = run_a().assign(run_id=["recorder", "recorder", "timeline", "timeline"])
    pd.testing.assert_frame_equal(compare_runs(relabelled, run_b()), compare_runs(run_a(), run_b()))
