"""The analysis benchmark: synthetic events conform to the schema and the timing run reports its keys."""

from __future__ import annotations

import pytest

from workbench import events as ev
from workbench.analysis import findings, phase_breakdown, pop_metrics
from workbench.bench.analysis import run, synthetic_events


def test_synthetic_events_look_like_a_recorded_run():
    events = synthetic_events(events=40_000, ranks=4)
    assert list(events.columns) == list(ev.EVENT_COLUMNS)
    assert abs(len(events) - 40_000) < 100
    assert (events["end_ns"] >= events["start_ns"]).all()
    assert set(events.loc[events["phase"] == "evaluation", "rank"]) == {0}
    breakdown = phase_breakdown(events)
    wall = (events["end_ns"].max() - events["start_ns"].min()) / 1e9
    assert breakdown.groupby("rank")["seconds"].sum().tolist() == pytest.approx([wall] * 4)
    kinds = set(findings(events)["kind"])
    assert "serial_evaluation" in kinds
    assert pop_metrics(events)["parallel_efficiency"].item() < 1


def test_run_reports_events_and_seconds():
    result = run(events=20_000, ranks=2, repeats=1)
    assert {"events", "seconds", "breakdown_seconds", "pop_seconds"} <= set(result)
    assert result["seconds"] == pytest.approx(result["breakdown_seconds"] + result["pop_seconds"], abs=1e-3)
    with pytest.raises(ValueError, match="events"):
        synthetic_events(events=3, ranks=2)
