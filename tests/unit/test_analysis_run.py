"""analyse_run: one call for breakdown, POP, findings, steps and memory; degenerate runs give findings."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from workbench.analysis import analyse_run, json_ready, run_header
from workbench.analysis.input import python_input_busy
from workbench.events import empty_events, empty_memory, events_frame

S = 1_000_000_000
MB = 1_000_000


def span(rank, phase, start, end, name=None, run_id="r1"):
    return {
        "run_id": run_id,
        "rank": rank,
        "phase": phase,
        "name": name or phase,
        "start_ns": int(start * S),
        "end_ns": int(end * S),
    }


def meta(**changes):
    base = {
        "run_id": "r1",
        "name": "eval-k1",
        "created": 0.0,
        "created_iso": "2026-01-01T00:00:00+0000",
        "host": "node1",
        "ranks": 3,
        "status": "finished",
        "versions": {"python": "3.11.9"},
        "config": {"cluster": {"ranks": 3, "threads": 2, "cores": 4}},
    }
    return {**base, **changes}


def two_rank_events():
    """10 s. ranks 0, 1: train_step [0, 2), [2, 4), [4, 6) then rank 0 evaluates [6, 10), rank 1 waits."""
    rows = []
    for rank in (0, 1):
        rows += [span(rank, "compute", 2 * i, 2 * i + 2, "train_step") for i in range(3)]
    rows.append(span(0, "evaluation", 6, 10))
    rows.append(span(1, "communication", 6, 10, "NEGOTIATE_ALLREDUCE"))
    return events_frame(rows)


def memory_samples():
    return pd.DataFrame(
        {
            "run_id": "r1",
            "rank": [0, 0, 1],
            "host": "node1",
            "time_ns": [0, S, 0],
            "rss_bytes": [100 * MB, 150 * MB, 80 * MB],
            "gpu_bytes": -1,
            "cpu_percent": 0.0,
            "label": "interval",
            "iteration": -1,
        }
    )


def test_a_recorded_run_analysed_in_one_call():
    result = analyse_run(two_rank_events(), memory_samples(), meta())
    assert result.header == {
        "run_id": "r1",
        "name": "eval-k1",
        "created": "2026-01-01T00:00:00+0000",
        "host": "node1",
        "ranks": 3,
        "cores": 4,
        "status": "finished",
        "versions": {"python": "3.11.9"},
        "rank_hosts": {0: "node1", 1: "node1"},  # from the memory samples: these events name no host
    }
    # declared rank 2 recorded nothing: idle for the whole 10 s
    breakdown = result.breakdown.set_index(["rank", "phase"])["seconds"]
    assert list(result.breakdown.columns) == ["rank", "host", "phase", "seconds", "fraction"]
    assert result.breakdown.set_index("rank")["host"].to_dict() == {0: "node1", 1: "node1", 2: ""}
    assert breakdown[(2, "idle")] == pytest.approx(10)
    assert breakdown[(0, "evaluation")] == pytest.approx(4)
    # useful 6, 6, 0 of 10 s: LB = 4 / 6, CommE = 6 / 10, PE = 0.4
    assert result.pop["useful_phases"] == ["compute", "input"]
    assert result.pop["load_balance"] == pytest.approx(4 / 6)
    assert result.pop["communication_efficiency"] == pytest.approx(0.6)
    assert result.pop["parallel_efficiency"] == pytest.approx(0.4)
    lost = dict(zip(result.findings["kind"], result.findings["seconds_lost"], strict=True))
    # 3 ranks x 2 threads = 6 on 4 cores: 10 s * (1 - 4 / 6) = 3.33 s, from the recorded settings
    assert lost["oversubscription"] == pytest.approx(10 / 3)
    assert lost["low_parallel_efficiency"] == pytest.approx(6)
    assert "no_memory_samples" not in lost and "no_step_spans" not in lost
    assert result.findings["order"].tolist() == list(range(1, len(result.findings) + 1))
    steps = result.steps.set_index("rank")
    assert steps["steps"].tolist() == [3, 3, 0]
    assert steps.loc[0, "steps_per_s"] == pytest.approx(0.5)  # 3 steps over 6 s
    memory = result.memory.set_index("rank")
    assert memory.loc[0, "peak_mb"] == 150 and memory.loc[1, "samples"] == 1


def test_to_dict_is_strict_json_with_the_documented_fields():
    payload = analyse_run(two_rank_events(), empty_memory(), meta(ranks=2)).to_dict()
    text = json.dumps(payload, allow_nan=False)  # NaN (steps/s of a silent rank, ...) became null
    back = json.loads(text)
    assert {"run", "pop", "breakdown", "findings", "steps", "memory"} <= set(back)
    assert {"load_balance", "communication_efficiency", "parallel_efficiency", "useful_phases"} <= set(back["pop"])
    assert {"rank", "phase", "seconds"} <= set(back["breakdown"][0])
    assert {"kind", "ranks", "seconds_lost", "text"} <= set(back["findings"][0])
    assert {"rank", "steps", "steps_per_s"} <= set(back["steps"][0])
    assert back["findings"][-1]["kind"] == "no_memory_samples" and back["findings"][-1]["seconds_lost"] is None


def test_a_run_with_nothing_recorded_gets_findings_not_an_error():
    result = analyse_run(empty_events(), empty_memory(), meta(config={}))
    assert result.findings["kind"].tolist() == ["no_events", "no_memory_samples", "settings_not_recorded"]
    assert math.isnan(result.pop["parallel_efficiency"])
    assert result.pop["useful_phases"] == ["compute", "input"]
    assert result.pop["ranks"] == 3
    assert result.breakdown.empty and result.memory.empty
    assert result.steps["steps"].tolist() == [0, 0, 0]
    json.dumps(result.to_dict(), allow_nan=False)


def test_one_rank_without_steps_or_memory_and_without_metadata():
    # 1 rank, 10 s: compute 4 s (not named train_step), evaluation 6 s
    events = events_frame([span(0, "compute", 0, 4, "fit"), span(0, "evaluation", 4, 10)])
    result = analyse_run(events)
    kinds = result.findings["kind"].tolist()
    # no meta: no oversubscription check at all; the rest say what is missing
    assert kinds == ["outside_useful_phases", "no_memory_samples", "no_step_spans", "single_rank"]
    assert result.findings["seconds_lost"].iloc[0] == pytest.approx(6)
    assert result.pop["note"].startswith("1 rank: load balance is 1 by definition")
    assert result.header["run_id"] is None


def test_backwards_spans_are_left_out_with_a_finding():
    events = events_frame([span(0, "compute", 0, 4, "train_step"), span(1, "compute", 1, 4, "train_step")])
    events.loc[1, "end_ns"] = 0  # rank 1's span [1 s, 0 s) ends before it starts
    result = analyse_run(events, memory_samples(), meta(ranks=2))
    row = result.findings.set_index("kind").loc["backwards_spans"]
    assert row["text"].startswith("1 span(s) end before they start (first: rank 1, 'train_step')")
    assert row["ranks"] == "1"
    assert result.breakdown.set_index(["rank", "phase"])["seconds"][(1, "idle")] == pytest.approx(4)


def test_events_labelled_with_another_run_id_count_as_this_run():
    events = two_rank_events()
    events.loc[events["rank"] == 1, "run_id"] = "imported-timeline"
    result = analyse_run(events, memory_samples(), meta(ranks=2))
    assert result.pop["ranks"] == 2 and result.pop["run_id"] == "r1"


def test_run_header_and_json_ready():
    header = run_header({"run_id": "x", "created": 0.0, "config": {"cluster": {"cores": 8}}, "exit_code": 1})
    assert header["cores"] == 8 and header["exit_code"] == 1 and header["created"].startswith("1970-01-01")
    assert json_ready({"a": float("nan"), "b": [float("inf"), 1.5], "c": pd.Timestamp(0)}) == {
        "a": None,
        "b": [None, 1.5],
        "c": "1970-01-01T00:00:00",
    }


def test_a_serial_python_generator_busy_nearly_all_of_a_ranks_training_is_named():
    """Training from the first step's end (1 s: the first step is warm-up) to 10 s with a 2 s evaluation inside
    (an evaluate span around its test_function: merged, counted once) is 7 s. Rank 0's generator took 6.6 s in
    two counter pairs: 94 % >= 90 %, named; rank 1's 3.5 s is 50 %: not."""
    rows = []
    for rank in (0, 1):
        rows += [span(rank, "compute", start, start + 1, "train_step") for start in (0, 1, 2, 3, 6, 7, 8, 9)]
        rows += [span(rank, "evaluation", 4, 6, "evaluate"), span(rank, "evaluation", 4.5, 5.5, "test_function")]
    events = events_frame(pd.DataFrame(rows))

    def counter(rank, name, value):
        return {"run_id": "r1", "rank": rank, "host": "", "name": name, "time_ns": 10 * S, "value": value}

    counters = pd.DataFrame(
        [
            counter(0, "python_input_busy_s", 4.4),
            counter(0, "python_input_elements", 60),
            counter(0, "python_input_busy_s", 2.2),
            counter(0, "python_input_elements", 40),
            counter(1, "python_input_busy_s", 3.5),
            counter(1, "python_input_elements", 100),
        ]
    )
    table = python_input_busy(events, counters).set_index("rank")
    assert table.loc[0, "training_s"] == pytest.approx(7.0) and table.loc[0, "busy_s"] == pytest.approx(6.6)
    assert table.loc[0, "elements"] == 100 and table.loc[1, "busy_share"] == pytest.approx(0.5)
    found = analyse_run(events, meta=meta(ranks=2), counters=counters).findings.set_index("kind")
    text = found.loc["serial_python_input", "text"]
    assert found.loc["serial_python_input", "ranks"] == "0"
    assert "busy 94% of rank 0's training (6.60 s of 7.00 s, 100 elements, 66.0 ms each)" in text
    assert "Dataset.map" in text
    assert "serial_python_input" not in analyse_run(events, meta=meta(ranks=2)).findings["kind"].tolist()
    # where the steps' waits for their batches were timed (Keras's own generator input), those speak instead
    waited = events_frame(pd.DataFrame([*rows, span(0, "input", 9.5, 9.6, "next_batch")]))
    found = analyse_run(waited, meta=meta(ranks=2), counters=counters).findings
    assert "serial_python_input" not in found["kind"].tolist()
