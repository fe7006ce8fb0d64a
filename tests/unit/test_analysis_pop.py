"""POP metrics: hand-computed load balance, communication efficiency, scalability."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.analysis import phase_breakdown, pop_metrics, pop_scaling, useful_phase_set
from workbench.analysis.pop import POP_COLUMNS
from workbench.events import events_frame

S = 1_000_000_000


def run_with_useful(useful_s, runtime_s, run_id="r", useful_phase="compute"):
    """Each rank computes ``useful_s[r]`` seconds from 0, then communicates until ``runtime_s``."""
    rows = []
    for rank, useful in enumerate(useful_s):
        if useful > 0:
            rows.append({"rank": rank, "phase": useful_phase, "start_ns": 0, "end_ns": int(useful * S)})
        rows.append(
            {"rank": rank, "phase": "communication", "start_ns": int(useful * S), "end_ns": runtime_s * S}
        )
    return events_frame(pd.DataFrame(rows).assign(run_id=run_id))


def test_hand_computed_four_ranks():
    # useful 10, 10, 10, 5 s in a 12 s run:
    #   LB   = mean / max = 8.75 / 10 = 0.875
    #   CommE = max / runtime = 10 / 12 = 0.8333
    #   PE   = 0.875 * 0.8333 = 0.7292
    result = pop_metrics(run_with_useful([10, 10, 10, 5], 12))
    row = result.iloc[0]
    assert list(result.columns)[:10] == [
        "run_id",
        "ranks",
        "runtime_s",
        "useful_mean_s",
        "useful_max_s",
        "useful_total_s",
        "load_balance",
        "communication_efficiency",
        "parallel_efficiency",
        "useful_phases",
    ]
    assert row["ranks"] == 4
    assert row["runtime_s"] == pytest.approx(12)
    assert row["useful_total_s"] == pytest.approx(35)
    assert row["load_balance"] == pytest.approx(0.875)
    assert row["communication_efficiency"] == pytest.approx(10 / 12)
    assert row["parallel_efficiency"] == pytest.approx(0.7292, abs=1e-4)
    assert row["useful_phases"] == "compute+input"


def test_input_counts_as_useful_only_when_asked():
    # rank 0: compute 6 s + input 2 s; rank 1: compute 8 s; runtime 8 s.
    events = events_frame(
        [
            {"rank": 0, "phase": "compute", "start_ns": 0, "end_ns": 6 * S},
            {"rank": 0, "phase": "input", "start_ns": 6 * S, "end_ns": 8 * S},
            {"rank": 1, "phase": "compute", "start_ns": 0, "end_ns": 8 * S},
        ]
    )
    # input useful: useful 8, 8 -> LB 1, CommE 8/8 = 1
    assert pop_metrics(events)["load_balance"].item() == pytest.approx(1.0)
    # input not useful: useful 6, 8 -> LB = 7 / 8 = 0.875, CommE = 8 / 8 = 1, PE 0.875
    strict = pop_metrics(events, input_is_useful=False)
    assert strict["load_balance"].item() == pytest.approx(0.875)
    assert strict["parallel_efficiency"].item() == pytest.approx(0.875)
    assert strict["useful_phases"].item() == "compute"


def test_evaluation_is_not_useful_unless_named():
    # rank 0 evaluates 4 s after 4 s of compute; rank 1 computes 4 s and waits. runtime 8 s.
    events = events_frame(
        [
            {"rank": 0, "phase": "compute", "start_ns": 0, "end_ns": 4 * S},
            {"rank": 0, "phase": "evaluation", "start_ns": 4 * S, "end_ns": 8 * S},
            {"rank": 1, "phase": "compute", "start_ns": 0, "end_ns": 4 * S},
        ]
    )
    # default: useful 4, 4 -> LB 1, CommE 4/8 = 0.5
    assert pop_metrics(events)["communication_efficiency"].item() == pytest.approx(0.5)
    # evaluation useful: useful 8, 4 -> LB 6/8 = 0.75, CommE 8/8 = 1, PE 0.75
    counted = pop_metrics(events, useful_phases=("compute", "evaluation"))
    assert counted["load_balance"].item() == pytest.approx(0.75)
    assert counted["parallel_efficiency"].item() == pytest.approx(0.75)
    assert counted["useful_phases"].item() == "compute+evaluation"
    assert useful_phase_set(False) == ("compute",)
    with pytest.raises(ValueError, match="useful_phases is empty"):
        useful_phase_set(useful_phases=())


def test_one_rank_is_perfectly_balanced():
    row = pop_metrics(run_with_useful([6], 8)).iloc[0]
    # LB = 6/6 = 1; CommE = 6/8 = 0.75
    assert (row["ranks"], row["load_balance"], row["communication_efficiency"]) == (1, 1.0, 0.75)


def test_listed_rank_without_events_counts_with_zero_useful_time():
    # useful 10, 10 and a silent rank 2: mean 20/3, max 10 -> LB 0.6667; runtime 10 -> CommE 1.
    row = pop_metrics(run_with_useful([10, 10], 10), ranks=[0, 1, 2]).iloc[0]
    assert row["ranks"] == 3
    assert row["load_balance"] == pytest.approx(2 / 3)
    assert row["communication_efficiency"] == pytest.approx(1.0)


def test_one_row_per_run_and_precomputed_breakdown():
    events = pd.concat([run_with_useful([4, 2], 4, "a"), run_with_useful([3], 6, "b")], ignore_index=True)
    result = pop_metrics(events)
    assert result["run_id"].tolist() == ["a", "b"]
    # a: LB 3/4 = 0.75, CommE 4/4 = 1; b: LB 1, CommE 3/6 = 0.5
    assert result["parallel_efficiency"].tolist() == pytest.approx([0.75, 0.5])
    breakdown = phase_breakdown(events, by=("run_id", "rank"))
    pd.testing.assert_frame_equal(pop_metrics(events, breakdown=breakdown), result)


def test_degenerate_runs_give_nan_metrics_with_a_note_not_an_error():
    # no events: no run, no row
    empty = pop_metrics(events_frame(pd.DataFrame(columns=["rank", "phase", "start_ns", "end_ns"])))
    assert empty.empty and list(empty.columns) == list(POP_COLUMNS)
    # communication only, 1 s: no useful time -> efficiencies NaN, runtime and useful times still measured
    row = pop_metrics(events_frame([{"rank": 0, "phase": "communication", "start_ns": 0, "end_ns": S}])).iloc[0]
    assert (row["runtime_s"], row["useful_max_s"], row["useful_total_s"]) == (1.0, 0.0, 0.0)
    assert math.isnan(row["load_balance"]) and math.isnan(row["parallel_efficiency"])
    assert row["note"].startswith("no time in the useful phases (compute+input): record the training steps")
    # only a zero-length span: zero wall time
    row = pop_metrics(events_frame([{"rank": 0, "phase": "compute", "start_ns": S, "end_ns": S}])).iloc[0]
    assert row["runtime_s"] == 0.0 and math.isnan(row["communication_efficiency"])
    assert row["note"].startswith("zero wall time")


def test_note_says_what_one_rank_measures_and_is_empty_otherwise():
    one = pop_metrics(run_with_useful([6], 8)).iloc[0]
    assert one["note"] == (
        "1 rank: load balance is 1 by definition; communication efficiency is the share of wall time"
        " in the useful phases (compute+input)"
    )
    assert pop_metrics(run_with_useful([10, 5], 10))["note"].item() == ""


def scaling_input():
    return pd.DataFrame(
        {
            "run_id": ["n1", "n2", "n4"],
            "ranks": [1, 2, 4],
            "useful_total_s": [10.0, 12.0, 16.0],
            "parallel_efficiency": [1.0, 0.9, 0.8],
        }
    )


def test_pop_scaling_strong():
    result = pop_scaling(scaling_input())
    # CompSc = useful(1) / useful(n): 10/10 = 1, 10/12 = 0.8333, 10/16 = 0.625
    assert result["computation_scalability"].tolist() == pytest.approx([1.0, 10 / 12, 0.625])
    # GE = PE * CompSc: 1, 0.9 * 0.8333 = 0.75, 0.8 * 0.625 = 0.5
    assert result["global_efficiency"].tolist() == pytest.approx([1.0, 0.75, 0.5])
    assert (result["reference_ranks"] == 1).all()


def test_pop_scaling_weak_and_reference():
    # weak: expected useful(n) = 10 * n: CompSc = 20/12 = 1.667, 40/16 = 2.5
    weak = pop_scaling(scaling_input(), kind="weak")
    assert weak["computation_scalability"].tolist() == pytest.approx([1.0, 20 / 12, 2.5])
    # reference 2 ranks, strong: 12/10 = 1.2, 12/12 = 1, 12/16 = 0.75
    ref2 = pop_scaling(scaling_input(), reference_ranks=2)
    assert ref2["computation_scalability"].tolist() == pytest.approx([1.2, 1.0, 0.75])
    # repetitions at the reference are averaged: (10 + 14) / 2 = 12 -> 12/12 = 1 for the 2-rank run
    repeated = pd.concat([scaling_input(), scaling_input().iloc[[0]].assign(useful_total_s=14.0)])
    assert pop_scaling(repeated)["computation_scalability"].iloc[-2] == pytest.approx(1.0)


def test_pop_scaling_refuses_bad_input():
    with pytest.raises(ValueError, match="lacks columns"):
        pop_scaling(pd.DataFrame({"ranks": [1]}))
    with pytest.raises(ValueError, match="kind"):
        pop_scaling(scaling_input(), kind="both")
    with pytest.raises(ValueError, match="no run with 3 ranks"):
        pop_scaling(scaling_input(), reference_ranks=3)
    with pytest.raises(ValueError, match="empty"):
        pop_scaling(scaling_input().iloc[:0])
