from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from workbench.config import physical_cores
from workbench.events import EVENT_COLUMNS, events_frame
from workbench.store import (
    NotARunError,
    RunData,
    RunTail,
    StreamWriter,
    compact,
    create_run,
    list_runs,
    update_run_meta,
)


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
    run = RunData.load(run_path)
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
        RunData.load(tmp_path)
    with pytest.raises(NotARunError, match="does not exist"):
        RunData.load(tmp_path / "missing")
    broken = create_run(tmp_path, "broken")
    (broken / "run.json").write_text("{not json")
    with pytest.raises(NotARunError, match="is not valid JSON"):
        RunData.load(broken)


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
    assert len(RunData.load(run_path).events) == 9
    assert len(list((run_path / "events" / "rank-00000").glob("*.parquet"))) == 1


def test_tail_poll_with_nothing_new_gives_empty_frames_of_the_schema_that_callers_may_change(tmp_path):
    run_path = create_run(tmp_path, "quiet", ranks=1)
    tail = RunTail(run_path)
    StreamWriter(run_path, "events", 0).write(_rows(0, 2))
    assert len(tail.poll()[0]) == 2
    first, memory = tail.poll()
    assert len(first) == 0 and len(memory) == 0
    assert {"rank", "phase", "start_ns", "end_ns"} <= set(first.columns)
    first["added"] = 1  # a caller's change to one empty result does not reach the next
    second, _ = tail.poll()
    assert "added" not in second.columns and list(second.columns) == list(first.columns[:-1])
    assert second.dtypes["start_ns"] == first.dtypes["start_ns"]


@pytest.mark.parametrize(("status", "finished"), [("running", False), ("finished", True), ("failed", True)])
def test_tail_knows_when_the_run_ended(tmp_path, status, finished):
    run_path = create_run(tmp_path, "ending", ranks=1)
    tail = RunTail(run_path)
    assert tail.finished is False
    update_run_meta(run_path, status=status)
    assert tail.finished is finished  # read from run.json each time, not remembered


def test_list_runs_and_status(tmp_path):
    first = create_run(tmp_path, "a", ranks=1)
    update_run_meta(first, status="finished")
    create_run(tmp_path, "b", ranks=2)
    (tmp_path / "not-a-run").mkdir()
    runs = list_runs(tmp_path)
    assert set(runs["name"]) == {"a", "b"}
    assert dict(zip(runs["name"], runs["status"])) == {"a": "finished", "b": "running"}


def _visible_parts(run_path) -> list:
    """The part files a reader sees (temporary files start with a dot and are never read)."""
    return [p for p in run_path.rglob("*.parquet") if not p.name.startswith(".")]


def _wait_for(predicate, ceiling_s: float = 30.0, what: str = "the condition"):
    """Poll ``predicate`` until it returns something truthy; fail after a generous ceiling."""
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {ceiling_s} s")


def _count_if_at_least(run_path, least: int) -> int:
    count = len(RunData.load(run_path).events)
    return count if count >= least else 0


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
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        # kill it once at least 50 events are on disk, whatever the machine's speed
        seen = _wait_for(lambda: _count_if_at_least(run_path, 50), what="50 events on disk")
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=10)
    events = RunData.load(run_path).events
    assert len(events) >= seen
    assert list(events["step"]) == list(range(len(events)))  # a prefix, nothing torn or duplicated
    for part in _visible_parts(run_path):
        pq.read_table(part)  # every file a reader sees is whole
    assert json.loads((run_path / "ranks" / "rank-00000.json").read_text())["rank"] == 0


def test_a_write_torn_by_a_kill_never_becomes_a_visible_part(tmp_path):
    """The third flush dies half-way through its file: the first two stay, whole; the torn one is never read."""
    run_path = create_run(tmp_path, "torn", ranks=1)
    script = textwrap.dedent(
        f"""
        import os, signal, time
        import pyarrow.parquet as pq
        from workbench.recorder import Recorder
        real_write_table = pq.write_table
        written = []
        def torn_write_table(table, where, **options):
            real_write_table(table, where, **options)
            written.append(str(where))
            if len(written) == 3:
                with open(where, "r+b") as half:
                    half.truncate(os.path.getsize(where) // 2)
                os.kill(os.getpid(), signal.SIGKILL)
        pq.write_table = torn_write_table
        rec = Recorder({str(run_path)!r}, rank=0, flush_interval_s=3600)
        for step in range(30):
            now = time.time_ns()
            rec.record("compute", now, now + 1000, "train_step", step=step)
            if step % 10 == 9:
                rec.flush()
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], timeout=120, check=False)
    assert completed.returncode == -signal.SIGKILL
    events = RunData.load(run_path).events
    assert list(events["step"]) == list(range(20))
    assert [p.name for p in sorted(_visible_parts(run_path))] == [
        "00000001-00000001.parquet",
        "00000002-00000002.parquet",
    ]
    for part in _visible_parts(run_path):
        assert pq.read_table(part).num_rows == 10
    (torn,) = [p for p in run_path.rglob("*.tmp")]
    assert torn.name.startswith(".")  # the half file kept its temporary name
    # the next writer of this rank goes on after the last whole part
    assert StreamWriter(run_path, "events", 0).write(_rows(0, 1, offset=20)).name == "00000003-00000003.parquet"


@pytest.mark.parametrize(
    ("crash_in", "call"),
    [("replace", 1), ("unlink", 1), ("unlink", 2), ("unlink", 3)],
    ids=["before-the-rename", "after-the-rename", "after-one-old-part-is-deleted", "after-two-are-deleted"],
)
def test_a_crash_during_compaction_loses_and_doubles_nothing(tmp_path, crash_in, call):
    run_path = create_run(tmp_path, "compacting", ranks=1)
    writer = StreamWriter(run_path, "events", 0)
    for batch in range(3):
        writer.write(_rows(0, 4, offset=4 * batch))
    expected = RunData.load(run_path).events
    tail = RunTail(run_path)
    assert len(tail.poll()[0]) == 12
    script = textwrap.dedent(
        f"""
        import os, pathlib, signal
        from workbench import store
        target, crash_at = {crash_in!r}, {call}
        calls = []
        def crashing(real):
            def call(*args, **kwargs):
                calls.append(1)
                if len(calls) == crash_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(*args, **kwargs)
            return call
        if target == "replace":
            store.os.replace = crashing(os.replace)
        else:
            pathlib.Path.unlink = crashing(pathlib.Path.unlink)
        store.compact({str(run_path)!r})
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], timeout=120, check=False)
    assert completed.returncode == -signal.SIGKILL
    pd.testing.assert_frame_equal(RunData.load(run_path).events, expected)
    assert len(tail.poll()[0]) == 0  # a live reader gets no row twice
    compact(run_path)  # compaction run again finishes the job
    assert [p.name for p in _visible_parts(run_path)] == ["00000001-00000003.parquet"]
    pd.testing.assert_frame_equal(RunData.load(run_path).events, expected)
    assert len(tail.poll()[0]) == 0


def test_loads_use_regular_pages_and_restore_numpy_setting():
    from numpy.core.multiarray import _get_madvise_hugepage

    from workbench.store import _regular_pages

    before = _get_madvise_hugepage()
    with pytest.raises(RuntimeError), _regular_pages():
        assert _get_madvise_hugepage() is False
        raise RuntimeError("a failed load")
    assert _get_madvise_hugepage() == before
