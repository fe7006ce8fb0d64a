from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from workbench.config import physical_cores
from workbench.events import EVENT_COLUMNS, events_frame
from workbench.store import NotARunError, Run, RunTail, StreamWriter, compact, create_run, list_runs, update_run_meta


def _rows(rank: int, count: int, offset: int = 0) -> dict[str, list]:
    frame = events_frame(
        [
            {
                "rank": rank,
                "phase": "compute",
                "name": "train_step",
                "step": offset + i,
                "start_ns": 1_000 * (offset + i),
                "end_ns": 1_000 * (offset + i) + 500,
            }
            for i in range(count)
        ]
    )
    return frame.to_dict(orient="list")


def test_schema_round_trip(tmp_path):
    run_path = create_run(tmp_path, "roundtrip", ranks=2, config={"lr": 0.1})
    written = events_frame(
        [
            {
                "run_id": run_path.name,
                "rank": 1,
                "host": "h",
                "phase": "communication",
                "name": "MPI_ALLREDUCE",
                "detail": "grad/w",
                "step": 3,
                "epoch": 1,
                "start_ns": 10,
                "end_ns": 25,
                "bytes": 4096,
            },
            {
                "run_id": run_path.name,
                "rank": 0,
                "host": "h",
                "phase": "evaluation",
                "name": "evaluate",
                "start_ns": 5,
                "end_ns": 9,
            },
        ]
    )
    for rank, rows in written.groupby("rank"):
        StreamWriter(run_path, "events", int(rank)).write(rows.to_dict(orient="list"))
    run = Run.load(run_path)
    assert list(run.events.columns) == list(EVENT_COLUMNS)
    expected = written.sort_values(["rank", "start_ns"], ignore_index=True)
    pd.testing.assert_frame_equal(run.events, expected)
    assert run.meta["config"] == {"lr": 0.1}
    assert run.ranks == [0, 1]
    assert "python" in run.meta["versions"]
    # the cores ranks x threads will be checked against later, on another machine perhaps
    assert run.meta["cores"] == physical_cores()


def test_not_a_run_is_one_clear_line(tmp_path):
    with pytest.raises(NotARunError, match=r"is not a workbench run \(no run.json\)"):
        Run.load(tmp_path)
    with pytest.raises(NotARunError, match="does not exist"):
        Run.load(tmp_path / "missing")
    broken = create_run(tmp_path, "broken")
    (broken / "run.json").write_text("{not json")
    with pytest.raises(NotARunError, match="is not valid JSON"):
        Run.load(broken)


def test_tail_delivers_every_row_exactly_once_across_compaction(tmp_path):
    run_path = create_run(tmp_path, "tail", ranks=2)
    tail = RunTail(run_path)
    writers = {rank: StreamWriter(run_path, "events", rank) for rank in (0, 1)}
    writers[0].write(_rows(0, 3))
    writers[1].write(_rows(1, 2))
    first, _memory = tail.poll()
    assert len(first) == 5
    writers[0].write(_rows(0, 4, offset=3))
    compact(run_path)  # merges rank 0's batches 1..2, one of which the tail has not read
    second, _ = tail.poll()
    assert sorted(second["step"]) == [3, 4, 5, 6]
    assert len(tail.poll()[0]) == 0
    assert len(Run.load(run_path).events) == 9
    assert len(list((run_path / "events" / "rank-00000").glob("*.parquet"))) == 1


def test_list_runs_and_status(tmp_path):
    first = create_run(tmp_path, "a", ranks=1)
    update_run_meta(first, status="finished")
    create_run(tmp_path, "b", ranks=2)
    (tmp_path / "not-a-run").mkdir()
    runs = list_runs(tmp_path)
    assert set(runs["name"]) == {"a", "b"}
    assert dict(zip(runs["name"], runs["status"])) == {"a": "finished", "b": "running"}


def test_a_killed_rank_leaves_its_flushed_events_readable(tmp_path):
    run_path = create_run(tmp_path, "killed", ranks=1)
    script = textwrap.dedent(
        f"""
        import time
        from workbench.recorder import Recorder
        rec = Recorder({str(run_path)!r}, rank=0, flush_interval_s=0.05)
        step = 0
        while True:
            with rec.phase("compute", "train_step", step=step):
                time.sleep(0.002)
            step += 1
            if step == 50:
                print("flushed-soon", flush=True)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "flushed-soon"
        time.sleep(0.5)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=10)
    events = Run.load(run_path).events
    assert len(events) >= 50
    assert list(events["step"]) == list(range(len(events)))  # a prefix, nothing torn or duplicated
    assert not list(run_path.rglob("*.tmp")) or all(p.name.startswith(".") for p in run_path.rglob("*.tmp"))
    assert json.loads((run_path / "ranks" / "rank-00000.json").read_text())["rank"] == 0
