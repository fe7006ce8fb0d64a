from __future__ import annotations

import itertools
import time

import pytest

from workbench.events import UnknownPhaseError
from workbench.recorder import Recorder, default_flush_interval, detect_rank
from workbench.store import RunData, create_run


@pytest.fixture()
def recorder(tmp_path):
    rec = Recorder(create_run(tmp_path, "rec", ranks=1), rank=0, flush_interval_s=0.05)
    yield rec
    rec.close()


def test_context_manager_decorator_and_iterator(recorder):
    recorder.epoch = 2

    @recorder.timed("evaluation")
    def evaluate() -> int:
        time.sleep(0.01)
        return 7

    for step, item in enumerate(recorder.wrap_iterator(iter([1, 2, 3]))):
        recorder.step = step
        with recorder.phase("compute", "train_step"):
            time.sleep(0.002 * item)
    assert evaluate() == 7
    recorder.close()
    events = RunData.load(recorder.run_path).events
    assert list(events["phase"]).count("input") == 3
    steps = events[events["name"] == "train_step"]
    assert list(steps["step"]) == [0, 1, 2]
    assert set(events["epoch"]) == {2}
    durations = (steps["end_ns"] - steps["start_ns"]).to_numpy()
    assert (durations >= [2e6, 4e6, 6e6]).all()
    evaluation = events[events["phase"] == "evaluation"].iloc[0]
    assert evaluation["name"] == "evaluate" and evaluation["end_ns"] - evaluation["start_ns"] >= 10e6


def test_user_phase_ok_typo_rejected(recorder):
    with recorder.phase("augment"):
        pass
    with pytest.raises(UnknownPhaseError, match="unknown phase 'Compute ': use one of compute"):
        recorder.phase("Compute ")


def test_spans_with_a_detail_per_step_keep_every_row_and_a_bounded_cache(recorder):
    from workbench import recorder as recorder_module

    spans = recorder_module._MAX_CACHED_HEADS + 200
    for step in range(spans):
        with recorder.phase("compute", "train_step", detail=f"batch {step}", step=step):
            pass
    # the prepared heads stop at the cap; spans past it are still recorded, each with its own detail
    assert len(recorder._heads) == recorder_module._MAX_CACHED_HEADS
    recorder.close()
    events = RunData.load(recorder.run_path).events
    assert len(events) == spans
    assert list(events["detail"][-2:]) == [f"batch {spans - 2}", f"batch {spans - 1}"]
    assert set(events["phase"]) == {"compute"} and list(events["step"][:3]) == [0, 1, 2]


def _wait_until(predicate, ceiling_s: float = 10.0):
    """Poll for what the test needs, with a generous ceiling (a busy 2-core machine), never a fixed sleep."""
    deadline = time.monotonic() + ceiling_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"not within {ceiling_s} s"
        time.sleep(0.01)
    return value


def test_memory_samples_at_call_sites_and_interval(recorder):
    recorder.start_memory_sampler(0.02)
    for i in range(5):
        recorder.sample_memory("predict", iteration=i)
    # the background thread samples every 0.02 s and flushes every 0.05 s: wait for three of its samples
    _wait_until(lambda: (RunData.load(recorder.run_path).memory["label"] == "interval").sum() >= 3)
    recorder.close()
    memory = RunData.load(recorder.run_path).memory
    calls = memory[memory["label"] == "predict"]
    assert list(calls["iteration"]) == [0, 1, 2, 3, 4]
    assert (memory["rss_bytes"] > 10_000_000).all()
    assert (memory.loc[memory["label"] == "interval", "iteration"] == -1).all()


def test_flush_is_visible_while_running(recorder):
    with recorder.phase("compute"):
        pass
    # nobody calls flush(): only the background thread can make the span visible
    _wait_until(lambda: len(RunData.load(recorder.run_path).events) == 1)
    assert recorder._thread.is_alive()


def test_a_clock_offset_is_taken_off_every_timestamp(tmp_path):
    """After ``align_clocks`` a rank's spans, samples and counters are on rank 0's clock: local time - offset."""
    offset = 3_000_000_000  # this rank's clock runs 3 s ahead of rank 0's
    run_path = create_run(tmp_path, "offset", ranks=2)
    recorder = Recorder(run_path, rank=1, flush_interval_s=3600)
    recorder.clock_offset_ns = offset
    recorder._write_rank_meta()
    before = time.time_ns()
    with recorder.phase("compute", "train_step"):
        pass
    recorder.sample_memory("predict", iteration=0)
    recorder.counter("queue_depth", 4)
    after = time.time_ns()
    recorder.record("communication", 10_000_000_000, 10_000_500_000, "local")
    recorder.record("communication", 10_000_000_000, 10_000_500_000, "already_aligned", aligned=True)
    assert before - offset <= recorder.now_ns() <= time.time_ns() - offset
    recorder.close()
    run = RunData.load(run_path)
    spans = run.events.set_index("name")
    assert before - offset <= spans.loc["train_step", "start_ns"] <= spans.loc["train_step", "end_ns"] <= after - offset
    assert (spans.loc["local", "start_ns"], spans.loc["local", "end_ns"]) == (7_000_000_000, 7_000_500_000)
    assert (spans.loc["already_aligned", "start_ns"], spans.loc["already_aligned", "end_ns"]) == (
        10_000_000_000,
        10_000_500_000,
    )
    assert before - offset <= run.memory["time_ns"].item() <= after - offset
    assert before - offset <= run.counters["time_ns"].item() <= after - offset
    assert run.rank_meta.set_index("rank").loc[1, "clock_offset_ns"] == offset


@pytest.mark.parametrize(
    ("environment", "rank"),
    [
        ({}, 0),
        ({"SLURM_PROCID": "5"}, 5),
        ({"SLURM_PROCID": "5", "HOROVOD_RANK": "4"}, 4),
        ({"SLURM_PROCID": "5", "HOROVOD_RANK": "4", "PMIX_RANK": "3"}, 3),
        ({"SLURM_PROCID": "5", "HOROVOD_RANK": "4", "PMIX_RANK": "3", "PMI_RANK": "2"}, 2),
        ({"SLURM_PROCID": "5", "PMI_RANK": "2", "OMPI_COMM_WORLD_RANK": "1"}, 1),
        ({"OMPI_COMM_WORLD_RANK": "", "PMI_RANK": "x", "SLURM_PROCID": "6"}, 6),  # unusable values are skipped
    ],
)
def test_detect_rank_prefers_the_mpi_launchers_variables(monkeypatch, environment, rank):
    """Under ``srun --mpi=pmix`` both SLURM_PROCID and PMIX_RANK are set: MPI's own numbering wins."""
    for variable in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "HOROVOD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    assert detect_rank() == rank


def test_profile_names_a_missing_script(tmp_path):
    from workbench.commands.profile import profile_command

    with pytest.raises(FileNotFoundError, match=r"script '.*nope.py' does not exist: check the path"):
        profile_command(["python", str(tmp_path / "nope.py")], ranks=2, out=tmp_path)
    with pytest.raises(ValueError, match="no command to profile"):
        profile_command([], ranks=2, out=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing was created for a command that cannot run


def test_a_large_jobs_ranks_flush_less_often_so_a_live_view_reads_512_files_a_second(tmp_path):
    assert [default_flush_interval(n) for n in (1, 64, 256, 512, 1024)] == [0.5, 0.5, 0.5, 1.0, 2.0]
    assert default_flush_interval(None) == 0.5 and default_flush_interval(True) == 0.5
    with Recorder(create_run(tmp_path, "big", ranks=1024), rank=3, heartbeat_interval_s=None) as rec:
        assert rec.flush_interval_s == 2.0
    with Recorder(create_run(tmp_path, "mine", ranks=1024), rank=3, flush_interval_s=0.1) as rec:
        assert rec.flush_interval_s == 0.1  # the user's own setting wins


def test_memory_samples_do_not_add_flushes(tmp_path):
    """Samples every 20 ms, spans flushed every 0.1 s, samples written at most every second: every flush of a
    stream is a part file, whose writing costs the rank CPU (on a node with a CPU quota, out of its steps)."""
    path = create_run(tmp_path, "cadence", ranks=1)
    rec = Recorder(path, rank=0, flush_interval_s=0.1, memory_interval_s=0.02, heartbeat_interval_s=None)
    written: dict[str, list[float]] = {"events": [], "memory": []}
    for stream, writer in (("events", rec._event_writer), ("memory", rec._memory_writer)):

        def counted(*args, _write=writer.write_rows, _times=written[stream], **kwargs):
            _times.append(time.monotonic())
            return _write(*args, **kwargs)

        writer.write_rows = counted
    started = time.monotonic()
    while time.monotonic() - started < 1.6:
        with rec.phase("compute"):
            time.sleep(0.01)
    rec.close()
    samples = int((RunData.load(path).memory["label"] == "interval").sum())
    assert samples >= 15  # the sampler kept its own interval
    # spans every 0.1 s; the samples after 1 s and at close(): a file per sample would have made dozens
    assert len(written["events"]) >= 6
    assert 1 <= len(written["memory"]) <= 3
    assert all(later - earlier >= 0.09 for earlier, later in itertools.pairwise(written["events"][:-1]))
