"""Input-pipeline case: the contested-storage model, the queue signals, and the case's pure parts."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid

import numpy as np
import pandas as pd
import pytest

from workbench.analysis import input_bound_level, input_findings, input_share, queue_exhaustion, step_times
from workbench.cases.input_pipeline import CASE, flattening
from workbench.events import empty_events, events_frame
from workbench.experiment import Experiment, parse_counts
from workbench.recorder import Recorder
from workbench.store import RunData, RunTail, create_run
from workbench.workloads.contested_io import ContestedStorage, StorageModel, TokenBucket
from workbench.workloads.input_pipeline import PipelineSettings


@pytest.fixture
def bucket_name():
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    TokenBucket(name, 1.0).remove()


def test_token_bucket_reserves_in_arrival_order(bucket_name):
    bucket = TokenBucket(bucket_name, rate_bytes_per_s=1_000_000, burst_bytes=100_000)
    first = bucket.reserve(100_000)  # the burst covers it
    second = bucket.reserve(500_000)  # 0.5 s of bandwidth behind nothing
    third = bucket.reserve(500_000)  # ...and behind the second
    assert first == pytest.approx(0.0, abs=0.01)
    assert second == pytest.approx(0.5, abs=0.01)
    assert third == pytest.approx(1.0, abs=0.01)


def test_token_bucket_is_shared_between_processes(bucket_name):
    TokenBucket(bucket_name, rate_bytes_per_s=1_000_000, burst_bytes=0)
    code = (
        "from workbench.workloads.contested_io import TokenBucket;"
        f"print(TokenBucket({bucket_name!r}, 1_000_000, 0).reserve(2_000_000))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(other.stdout) == pytest.approx(2.0, abs=0.05)
    # this process now queues behind the other one's 2 MB (less the little that refilled since)
    assert TokenBucket(bucket_name, 1_000_000, 0).reserve(1_000_000) == pytest.approx(3.0, abs=0.5)


def test_ranks_on_two_nodes_share_the_file_system_but_each_has_its_own_link(bucket_name, monkeypatch):
    """Nodes of a miniature cluster share this machine's /dev/shm: the link's bucket is named by host."""
    model = StorageModel(filesystem_mb_s=16.0, node_link_mb_s=4.0)
    storages = []
    for host in ("node1", "node2"):
        monkeypatch.setattr(socket, "gethostname", lambda host=host: host)
        storages.append(ContestedStorage(bucket_name, model))
    try:
        first, second = storages
        assert first.filesystem.path == second.filesystem.path
        assert first.node_link.path != second.node_link.path
        # node1's link owes 0.5 s after 2 MB beyond its burst; node2's link is still untouched
        first.node_link.reserve(int(model.node_link_mb_s * 1e6 * 0.05) + 2_000_000)
        assert second.node_link.reserve(0) == pytest.approx(0.0, abs=0.01)
    finally:
        for storage in storages:
            storage.close()
            storage.node_link.remove()
            storage.filesystem.remove()


def test_bad_rate_is_one_clear_error():
    with pytest.raises(ValueError, match="rate 0 B/s must be positive"):
        TokenBucket("never", 0)


def test_input_share_and_levels():
    ms = 1_000_000
    rows = []
    for step in range(4):  # rank 0: 10 ms input + 30 ms compute + 10 ms communication per step
        t = step * 50 * ms
        rows += [
            {"rank": 0, "phase": "input", "name": "dequeue", "start_ns": t, "end_ns": t + 10 * ms},
            {"rank": 0, "phase": "compute", "name": "train_step", "start_ns": t + 10 * ms, "end_ns": t + 40 * ms},
            {"rank": 0, "phase": "communication", "name": "allreduce", "start_ns": t + 40 * ms, "end_ns": t + 50 * ms},
            {"rank": 1, "phase": "input", "name": "dequeue", "start_ns": t, "end_ns": t + 1 * ms},
            {"rank": 1, "phase": "compute", "name": "train_step", "start_ns": t + 1 * ms, "end_ns": t + 50 * ms},
        ]
    rows.append({"rank": 1, "phase": "input", "name": "load_into_memory", "start_ns": 0, "end_ns": 900 * ms})
    shares = input_share(events_frame(rows)).set_index("rank")
    assert shares.loc[0, "input_share"] == pytest.approx(0.2) and shares.loc[0, "level"] == "highly input-bound"
    assert shares.loc[1, "input_share"] == pytest.approx(0.02) and shares.loc[1, "level"] == "not input-bound"
    assert shares.loc[1, "step_s"] == pytest.approx(0.2)  # the one-off load is not a step's wait
    assert input_bound_level(0.05) == "moderately input-bound" and input_bound_level(float("nan")) == "unknown"
    found = input_findings(events_frame(rows), pd.DataFrame(columns=["rank", "name", "time_ns", "value"]))
    assert list(found["kind"]) == ["input_bound"] and found.loc[0, "ranks"] == "0"
    assert found.loc[0, "text"].startswith("highly input-bound: rank 0 waits for input 20% of its step time")


def _depths(rank: int, values: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": rank,
            "name": "queue_depth_at_dequeue",
            "time_ns": [i * 500_000_000 for i in range(len(values))],
            "value": values,
        }
    )


def test_queue_exhaustion_from_the_depth_at_dequeue():
    counters = pd.concat([_depths(0, [3, 2, 1, 0, 0, 1, 0, 0]), _depths(1, [4, 4, 4, 4])], ignore_index=True)
    table = queue_exhaustion(counters).set_index("rank")
    assert table.loc[0, "dequeues"] == 8 and table.loc[0, "empty_fraction"] == pytest.approx(4 / 8)
    assert table.loc[0, "ran_dry_after_s"] == pytest.approx(1.5)
    assert table.loc[0, "empty_fraction_after"] == pytest.approx(4 / 5)
    assert np.isnan(table.loc[1, "ran_dry_after_s"]) and table.loc[1, "empty_fraction"] == 0.0
    found = input_findings(empty_events(), counters)
    assert list(found["kind"]) == ["queue_exhaustion"]
    assert found.loc[0, "text"].startswith("input queue empty at 80% of dequeues on rank 0 after 1.5 s")


def test_counters_go_through_the_store_and_the_live_feed(tmp_path):
    path = create_run(tmp_path, "counters", ranks=1)
    tail = RunTail(path)
    with Recorder(path, rank=0) as recorder:
        for depth in (1, 2, 1, 0):
            recorder.counter("queue_depth", depth)
    assert tail.poll_counters()["value"].tolist() == [1.0, 2.0, 1.0, 0.0]
    assert tail.poll_counters().empty  # exactly once
    counters = RunData.load(path).counters
    assert counters["name"].unique().tolist() == ["queue_depth"] and (counters["time_ns"].diff().dropna() >= 0).all()


def test_flattening_finds_the_knee():
    table = pd.DataFrame({"interval": [1, 2, 4, 8, 16, 32], "step_ms": [200, 100, 50, 26, 15, 14.5]})
    assert flattening(table) == {"k": 16, "last_k": 32, "gain_beyond": pytest.approx(1 - 14.5 / 15)}
    assert flattening(table.iloc[:2]) is None


def test_plan_and_settings():
    experiment = Experiment("input-pipeline", preset="ci", ranks=2)
    assert [p.key for p in experiment.plan()] == [
        "n2/source=contested/threads=1/k=1",
        "n2/source=contested/threads=1/k=8",
        "n2/source=memory",
    ]
    reduced = Experiment("input-pipeline", preset="reduced", ranks=1).plan()
    assert len(reduced) == 2 * 6 + 1 + 2  # threads x intervals, memory, tf.data per thread count
    kwargs = CASE.workload_kwargs(experiment.settings, experiment.plan()[1])["settings_dict"]
    settings = PipelineSettings.from_dict(kwargs)
    assert (settings.source, settings.threads, settings.interval, settings.batch) == ("contested", 1, 8, 256)
    assert parse_counts("1,4") == (1, 4)
    with pytest.raises(ValueError, match="give at least 1 whole number"):
        parse_counts("0,4")
    with pytest.raises(ValueError, match="source 'disk' is unknown"):
        PipelineSettings(source="disk")


def test_dashboard_draws_counters_from_the_live_feed(tmp_path):
    from workbench.widgets import Dashboard
    from workbench.widgets.dashboard import TAB_COUNTERS

    path = create_run(tmp_path, "counters", ranks=2)
    dashboard = Dashboard(RunTail(path))
    dashboard.tabs.selected_index = TAB_COUNTERS
    dashboard.update()
    note = dashboard.tabs.children[TAB_COUNTERS].children[0]  # nothing recorded yet: a note, no figure
    assert "no counters recorded yet" in note.value
    for rank in (0, 1):
        with Recorder(path, rank=rank) as recorder:
            for depth in (0, 3, 2):
                recorder.counter("queue_depth", depth)
    dashboard.update()
    traces = {trace.name: list(trace.y) for trace in dashboard.counters.data}
    assert traces == {"rank 0": [0.0, 3.0, 2.0], "rank 1": [0.0, 3.0, 2.0]}


def test_step_times_leave_out_warmup_and_evaluation():
    ms = 1_000_000
    rows, t = [], 0
    for step, compute_ms in enumerate([500, 20, 20, 40]):  # step 0 traces the graph
        rows.append(
            {"rank": 0, "phase": "input", "name": "dequeue", "step": step, "start_ns": t, "end_ns": t + 10 * ms}
        )
        rows.append(
            {
                "rank": 0,
                "phase": "compute",
                "name": "train_step",
                "step": step,
                "start_ns": t + 10 * ms,
                "end_ns": t + (10 + compute_ms) * ms,
            }
        )
        t += (10 + compute_ms) * ms
    rows.append(
        {"rank": 0, "phase": "evaluation", "name": "accuracy", "step": 2, "start_ns": t, "end_ns": t + 900 * ms}
    )
    table = step_times(events_frame(rows), warmup_steps=1).set_index("rank")
    assert table.loc[0, "steps"] == 3
    assert table.loc[0, "mean_ms"] == pytest.approx((30 + 30 + 50) / 3)
    assert table.loc[0, "median_ms"] == pytest.approx(30)


def test_interval_figure_draws_lines_per_thread_count_and_reference_levels():
    from workbench.figures import interval_figure

    runs = pd.DataFrame(
        {
            "source": ["contested"] * 4 + ["memory", "tf.data"],
            "threads": [1, 1, 4, 4, 0, 4],
            "interval": [1, 16, 1, 16, 1, 1],
            "step_ms": [190.0, 12.0, 55.0, 11.5, 13.0, 101.0],
        }
    )
    fig = interval_figure(runs)
    traces = {trace.name: (list(trace.x), list(trace.y)) for trace in fig.data}
    assert traces["queue, 1 enqueue thread"] == ([1, 16], [190.0, 12.0])
    assert traces["queue, 4 enqueue threads"] == ([1, 16], [55.0, 11.5])
    assert traces["data in memory: 13 ms"] == ([1, 16], [13.0, 13.0])  # in ms, across the plotted k
    assert traces["tf.data, 4 parallel reads: 101 ms"] == ([1, 16], [101.0, 101.0])
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
