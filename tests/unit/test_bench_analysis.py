"""The docs' analysis and timeline benchmarks (`workbench bench analysis`, `bench timeline`) on small made runs."""

from __future__ import annotations

import pandas as pd
import pytest

from docsbench.analysis import run
from workbench import events as ev
from workbench.analysis import findings, phase_breakdown, pop_metrics
from workbench.datasets.made_traces.job import made_events, write_run
from workbench.store import RunData


def test_stored_run_loads_as_written_whole_or_in_part(tmp_path):
    events = made_events(events=20_000, ranks=4)
    path = write_run(events, tmp_path, 4)
    pd.testing.assert_frame_equal(RunData.load(path).events, events)
    categorical = RunData.load(path, categorical=True).events
    assert isinstance(categorical["phase"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(phase_breakdown(categorical), phase_breakdown(events))
    low, high = int(events["start_ns"].quantile(0.4)), int(events["start_ns"].quantile(0.6))
    part = RunData.load(path, ranks=[1, 3], window_ns=(low, high))
    expected = events[events["rank"].isin([1, 3]) & (events["end_ns"] >= low) & (events["start_ns"] <= high)]
    pd.testing.assert_frame_equal(part.events, expected.reset_index(drop=True))
    assert part.ranks == [1, 3]


def test_made_events_look_like_a_recorded_run():
    events = made_events(events=40_000, ranks=4)
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


def test_run_loads_and_analyses_the_stored_run_it_reports_on():
    result = run(events=20_000, ranks=2, repeats=1)
    assert {"events", "seconds", "load_seconds", "peak_rss_mb", "breakdown_seconds", "pop_seconds"} <= set(result)
    # the child process loaded the run from the store and analysed it: the same events, the same answer
    events = made_events(events=20_000, ranks=2)
    assert result["events"] == len(events)
    assert result["parallel_efficiency"] == pytest.approx(pop_metrics(events)["parallel_efficiency"].item())
    assert result["findings"] == list(findings(events)["kind"])
    parts = ("load_seconds", "breakdown_seconds", "pop_seconds", "findings_seconds")
    assert all(result[part] > 0 for part in parts)
    assert result["seconds"] >= max(result[part] for part in parts)
    assert result["peak_rss_mb"] > 0
    with pytest.raises(ValueError, match="events"):
        made_events(events=3, ranks=2)


def test_split_bench_times_each_way_on_one_stored_job_and_they_agree():
    from docsbench.analysis import format_split, run_split

    result = run_split(events=60_000, ranks=16, workers=(0, 2), group_ranks=4)
    modes = result["modes"]
    assert set(modes) == {"whole", "split-0", "split-2"}
    # one stored job, three ways of analysing it: the same events, efficiency and findings
    assert len({m["events"] for m in modes.values()}) == 1
    assert len({round(m["parallel_efficiency"], 12) for m in modes.values()}) == 1
    assert modes["split-0"]["findings"] == modes["whole"]["findings"]
    assert result["same_numbers"] and len({m["numbers"] for m in modes.values()}) == 1  # every table, every finding
    assert len(modes["split-2"]["worker_peak_rss_mb"]) == 2 and not modes["split-0"]["worker_peak_rss_mb"]
    # 16 ranks, 8 a node: 2 nodes, one made slow; its ranks arrive last most often
    assert len(result["slow_hosts"]) == 1 and modes["split-2"]["latest_hosts"][:1] == result["slow_hosts"]
    assert "split-2:" in format_split(result)


def test_a_step_split_into_many_transfers_covers_the_same_allreduce():
    """``allreduce_parts``: a timeline's transfers a step, back to back over the allreduce; the other spans and the
    step times do not change, so the same events come from fewer steps."""
    two = made_events(20_000, 4, seed=3)
    many = made_events(20_000, 4, seed=3, allreduce_parts=40)
    per_step = many[(many["step"] == 1) & (many["rank"] == 2)]
    transfers = per_step[per_step["name"] == "MPI_ALLREDUCE"].sort_values("start_ns")
    assert len(transfers) == 40 and len(per_step) == 3 + 40
    assert (transfers["start_ns"].to_numpy()[1:] == transfers["end_ns"].to_numpy()[:-1]).all()
    negotiation = per_step[per_step["name"] == "NEGOTIATE_ALLREDUCE"]
    step = per_step[per_step["name"] == "train_step"]
    assert transfers["start_ns"].min() == negotiation["end_ns"].item()  # from the meeting to the step's end
    assert transfers["end_ns"].max() == step["end_ns"].item()
    assert many["step"].max() < two["step"].max()
    with pytest.raises(ValueError, match="allreduce_parts >= 1"):
        made_events(20_000, 4, allreduce_parts=0)


def test_bench_timeline_reports_speed_and_memory(tmp_path):
    from docsbench.timeline import run as bench_timeline

    result = bench_timeline(0.5)
    assert {"file_mb", "mb_per_s", "peak_rss_mb", "events"} <= set(result)
    assert result["mb_per_s"] > 0 and result["peak_rss_mb"] > 0 and result["events"] > 0
    assert set(result["engines"]) == {"auto", "arrow"}
    assert result["engines"]["arrow"]["events"] == result["events"]  # both engines read the same spans
