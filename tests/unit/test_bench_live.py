"""The 64-rank live bench: its synthetic job writes what a job's recorders write; the dashboard follows it."""

from __future__ import annotations

import numpy as np

from docsbench.live import STEP_SPANS, LiveSyntheticJob, marker_latencies, run
from workbench.events import CHECKPOINT, NS_PER_S
from workbench.store import RunData, create_run


def test_synthetic_job_writes_every_ranks_finished_steps_and_one_marker_per_second(tmp_path):
    path = create_run(tmp_path, "live", ranks=4)
    job = LiveSyntheticJob(path, ranks=4, step_s=0.1, seed=1)
    origin = job.clock[0]
    for k in range(1, 5):  # 2 s of flushes every 0.5 s
        job.flush(origin + k * NS_PER_S // 2)
    events = RunData.load(path).events
    assert set(events["rank"]) == {0, 1, 2, 3}
    steps = events[events["phase"] != CHECKPOINT]
    assert (steps.groupby("rank").size() % len(STEP_SPANS) == 0).all()  # whole steps only
    assert (steps["end_ns"] <= origin + 2 * NS_PER_S).all()  # nothing written before it finished
    markers = events[events["phase"] == CHECKPOINT]
    assert list(markers["rank"]) == [0, 1]  # one a second, ranks in turn
    assert list(markers["end_ns"] - markers["start_ns"]) == [NS_PER_S + 1_000_000, NS_PER_S + 2_000_000]
    assert job.spans == len(events)


def test_marker_latency_is_the_first_refresh_whose_bar_covers_its_end():
    t0 = 10 * NS_PER_S
    markers = [(3, t0 + 2 * NS_PER_S), (5, t0 + 4 * NS_PER_S)]
    refreshes = [
        (t0 + int(2.4 * NS_PER_S), t0, []),  # nothing drawn yet
        (t0 + int(2.9 * NS_PER_S), t0, [(3, 1.0, 2.0), (5, 1.0, 2.0)]),  # rank 3's marker; rank 5's is older
        (t0 + int(4.7 * NS_PER_S), t0, [(3, 1.0, 2.0), (5, 3.5, 4.5)]),  # a bucket of rank 5 covers its end
    ]
    assert np.allclose(marker_latencies(markers, refreshes), [0.9, 0.7])


def test_dashboard_follows_64_ranks_and_keeps_each_ranks_longest_span():
    result = run(ranks=64, seconds=4.0)
    assert result["dashboard_error"] == ""
    assert result["spans_at_end"] > 64 * len(STEP_SPANS)
    assert result["refreshes"] >= 2 and result["refresh_max_s"] > 0
    assert result["markers_drawn"] >= 1 and result["marker_latency_max_s"] < 10
    assert result["ranks_missing_longest_span"] == [] and result["ranks_with_longest_span_drawn"] == 64
