"""A run folder that fills while a rank records: said once, records held and written when there is room.

On a real small disk (a tmpfs mounted here, root only) filled to its last byte by a file, as a job's
checkpoints or another user's files fill a shared one.
"""

from __future__ import annotations

import time

import pytest
from small_disk import fill, mounted_tmpfs

from workbench import recorder as recorder_module
from workbench.api import Run
from workbench.recorder import Recorder
from workbench.store import RunData, create_run, read_rank_meta


@pytest.fixture
def small_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "small", "8m") as disk:
        yield disk


def _record(recorder: Recorder, first: int, count: int) -> None:
    for step in range(first, first + count):
        now = time.time_ns()
        recorder.record("compute", now, now + 1000, "train_step", step=step)


def _wait_flushes(recorder: Recorder, seconds: float = 0.6) -> None:
    time.sleep(seconds)


def test_a_full_disk_mid_run_is_said_once_and_nothing_is_lost(small_disk, capfd):
    run = create_run(small_disk, name="full")
    recorder = Recorder(run, rank=0, flush_interval_s=0.05)
    _record(recorder, 0, 100)
    _wait_flushes(recorder)
    filler = fill(small_disk)
    for part in range(5):  # records while the disk is full, over several flushes
        _record(recorder, 100 + 100 * part, 100)
        _wait_flushes(recorder, 0.2)
    said = capfd.readouterr().err
    assert said.count("cannot write to") == 1, said
    assert "No space left on device" in said and "holding its records in memory" in said
    filler.unlink()
    _record(recorder, 600, 100)
    recorder.close()
    again = capfd.readouterr().err
    assert "writing to" in again and "again after" in again, again
    steps = sorted(RunData.load(run).events["step"])
    assert steps == list(range(700))  # every record, the held ones written late
    stalls = read_rank_meta(run, 0)["write_stalls"]
    assert len(stalls) == 1 and stalls[0]["dropped"] == 0 and "No space left" in stalls[0]["error"]
    findings = Run.load(run).analyse().findings
    note = findings[findings["kind"] == "records_held"]
    assert len(note) == 1 and "nothing was lost" in note["text"].iloc[0]


def test_past_what_a_recorder_holds_the_newest_records_are_dropped_and_counted(small_disk, capfd, monkeypatch):
    monkeypatch.setattr(recorder_module, "MAX_HELD_ROWS", 150)
    run = create_run(small_disk, name="dropped")
    recorder = Recorder(run, rank=0, flush_interval_s=0.05, heartbeat_interval_s=None)
    _record(recorder, 0, 50)
    _wait_flushes(recorder)
    filler = fill(small_disk)
    _record(recorder, 50, 400)  # 400 while full: 150 held, 250 dropped
    _wait_flushes(recorder)
    filler.unlink()
    _wait_flushes(recorder)
    recorder.close()
    steps = sorted(RunData.load(run).events["step"])
    assert steps == list(range(200))  # the first 50, then the 150 held; the newest 250 dropped
    stalls = read_rank_meta(run, 0)["write_stalls"]
    assert stalls[0]["dropped"] == 250
    assert "250 rows past the limit were dropped" in capfd.readouterr().err
    note = Run.load(run).analyse().findings.query("kind == 'records_held'")["text"].iloc[0]
    assert "250 records past what a recorder holds were dropped" in note


def test_a_disk_still_full_at_the_end_is_said_and_not_raised(small_disk, capfd):
    """The training ends well: closing the recorder says what could not be written; what was written stays."""
    run = create_run(small_disk, name="end")
    recorder = Recorder(run, rank=0, flush_interval_s=0.05)
    _record(recorder, 0, 100)
    _wait_flushes(recorder)
    fill(small_disk)
    _record(recorder, 100, 100)
    recorder.close()
    said = capfd.readouterr().err
    assert said.count("cannot write to") <= 1 and "records could not be written to" in said, said
    assert "the run keeps what was written before" in said
    assert sorted(RunData.load(run).events["step"]) == list(range(100))
