from __future__ import annotations

import time

import pytest

from workbench.events import UnknownPhaseError
from workbench.recorder import Recorder
from workbench.store import Run, create_run


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
    events = Run.load(recorder.run_path).events
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


def test_memory_samples_at_call_sites_and_interval(recorder):
    recorder.start_memory_sampler(0.02)
    for i in range(5):
        recorder.sample_memory("predict", iteration=i)
    time.sleep(0.2)
    recorder.close()
    memory = Run.load(recorder.run_path).memory
    calls = memory[memory["label"] == "predict"]
    assert list(calls["iteration"]) == [0, 1, 2, 3, 4]
    assert (memory["rss_bytes"] > 10_000_000).all()
    assert (memory["label"] == "interval").sum() >= 3


def test_flush_is_visible_while_running(recorder):
    with recorder.phase("compute"):
        pass
    time.sleep(0.3)
    assert len(Run.load(recorder.run_path).events) == 1  # flushed by the background thread


def test_profile_names_a_missing_script(tmp_path):
    from workbench.profile import profile_command

    with pytest.raises(FileNotFoundError, match=r"script '.*nope.py' does not exist: check the path"):
        profile_command(["python", str(tmp_path / "nope.py")], ranks=2, out=tmp_path)
    with pytest.raises(ValueError, match="no command to profile"):
        profile_command([], ranks=2, out=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing was created for a command that cannot run
