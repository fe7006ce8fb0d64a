"""Recording on 2 real ranks: clock alignment, Horovod's own timeline, profiling an unmodified script."""

from __future__ import annotations

import json
import sys
import textwrap

import cloudpickle
import pandas as pd
import pytest

from workbench.analysis import analyse_run
from workbench.commands.profile import profile_command
from workbench.formats import horovod_timeline, read_horovod_timeline
from workbench.store import RunData, list_runs
from workbench.text import format_analysis

pytestmark = pytest.mark.mpi
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules

TRAIN_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd

    hvd.init()
    x = np.random.rand(256, 784).astype("float32")
    y = np.random.randint(0, 10, 256)
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(10)])
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, validation_split=0.25,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    """
)


SKEW_NS = 7_000_000  # rank 1's clock is made to run 7 ms ahead of rank 0's


def _align_with_rank_1_skewed(skew_ns: int) -> tuple[int, int]:
    import time

    from mpi4py import MPI

    from workbench.recorder import align_clocks

    real_time_ns = time.time_ns
    if MPI.COMM_WORLD.Get_rank() == 1:
        time.time_ns = lambda: real_time_ns() + skew_ns
    try:
        return align_clocks(MPI.COMM_WORLD, rounds=32)
    finally:
        time.time_ns = real_time_ns


def test_clock_alignment_finds_a_known_skew_within_its_bound(cluster2):
    (offset0, precision0), (offset1, precision1) = cluster2.view.apply(_align_with_rank_1_skewed, SKEW_NS)
    assert (offset0, precision0) == (0, 0)
    # Both ranks read the same host clock, skewed by a known 7 ms on rank 1: the estimate must lie within
    # the bound it reports of 7 ms, and the bound (half the fastest round trip) must be under 1 ms.
    assert precision1 < 1_000_000
    assert abs(offset1 - SKEW_NS) <= precision1, (offset1, precision1)


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("profile")
    script = root / "train.py"
    script.write_text(TRAIN_SCRIPT)
    assert profile_command(["python", str(script)], ranks=2, out=root / "runs") == 0
    return RunData.load(list_runs(root / "runs")["path"].iloc[0])


def test_profile_ends_with_the_answer_and_a_report(profiled_run):
    assert (profiled_run.path / "report.html").stat().st_size > 10_000
    result = analyse_run(profiled_run.events, profiled_run.memory, profiled_run.meta)
    text = format_analysis(result)
    for heading in ("POP metrics", "Seconds per rank and phase", "Findings", "Training steps per rank"):
        assert heading in text
    assert (result.steps["steps"] == 12).all()


def test_profile_unmodified_script_records_both_ranks(profiled_run):
    events, memory = profiled_run.events, profiled_run.memory
    assert profiled_run.meta["status"] == "finished"
    assert set(events["rank"]) == {0, 1}
    for rank in (0, 1):
        mine = events[events["rank"] == rank]
        assert (mine["name"] == "train_step").sum() == 2 * 6  # each rank fits all 192 samples: 6 batches x 2 epochs
        # steps, host work between them, evaluation; Horovod's timeline as collectives in flight
        assert set(mine["phase"]) >= {"compute", "host", "in_flight", "evaluation"}
        assert sorted(mine.loc[mine["name"] == "train_step", "step"]) == list(range(12))
    assert set(memory["rank"]) == {0, 1}
    assert (memory["rss_bytes"] > 0).all()


def test_real_horovod_timeline_parses_whole_and_cut(profiled_run, tmp_path):
    path = profiled_run.path / "horovod_timeline.json"
    text = path.read_text()
    json.loads(text)  # Horovod closed the array at exit
    events = read_horovod_timeline(path)
    names = set(events["name"])
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "MPI_ALLREDUCE"} <= names
    # Horovod's own bytes take the direct parse, which reads them exactly as Arrow's JSON reader does
    raws = list(horovod_timeline._record_chunks(path, 1 << 20))
    assert all(horovod_timeline._parse_horovod_layout(*horovod_timeline._newline_delimited(*raw)) for raw in raws)
    pd.testing.assert_frame_equal(events, read_horovod_timeline(path, engine="arrow"))
    assert set(events["rank"]) == {0, 1}  # negotiation readiness gives rank 1 its own spans
    assert (events["end_ns"] >= events["start_ns"]).all()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    partial = read_horovod_timeline(cut)
    assert 0 < len(partial) < len(events)


LOOP_SCRIPT = textwrap.dedent(
    """
    import os
    import numpy as np
    import tensorflow as tf
    {horovod}

    x = tf.constant(np.random.rand(32, 64).astype("float32"))
    model = tf.keras.Sequential([tf.keras.layers.Dense(16), tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        {tape}
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for number in range(8):
        step()
        if number == 3 and os.environ.get("CRASH_RANK") == os.environ.get("OMPI_COMM_WORLD_RANK"):
            raise RuntimeError("this rank crashes on purpose")
    """
)
HOROVOD_LOOP = LOOP_SCRIPT.format(
    horovod="import horovod.tensorflow as hvd\nhvd.init()", tape="tape = hvd.DistributedGradientTape(tape)"
)


def _profile(tmp_path, script: str, capsys, **options) -> tuple[int, RunData, str]:
    path = tmp_path / "train.py"
    path.write_text(script)
    code = profile_command(["python", str(path)], ranks=2, out=tmp_path / "runs", report=False, **options)
    return code, RunData.load(list_runs(tmp_path / "runs")["path"].iloc[0]), capsys.readouterr().err


def test_trace_steps_import_each_ranks_allreduce_waits_from_tf_profiler(tmp_path, capsys):
    code, run, err = _profile(tmp_path, HOROVOD_LOOP, capsys, trace_steps="3:6")
    assert code == 0, err
    traced = run.events[run.events["name"] == "tf_horovod_wait"]
    assert set(traced["rank"]) == {0, 1}, err
    steps = run.events[(run.events["name"] == "train_step") & (run.events["rank"] == 0)]
    window = steps[steps["step"].between(3, 5)]
    # the profiled spans lie in the traced steps (TF's timestamps are relative to the session start)
    assert traced["start_ns"].min() >= window["start_ns"].min() - 5_000_000
    assert traced["end_ns"].max() <= window["end_ns"].max() + 5_000_000
    # placed by the clock marks (to microseconds), every kernel starts inside a traced step of its own
    # rank: a trace placed by the clock read before the profiler's start put a rank's kernels steps early
    # on a busy machine (that call can be preempted for longer than these 1-2 ms steps)
    for rank, spans in traced.groupby("rank"):
        own = run.events[(run.events["name"] == "train_step") & (run.events["rank"] == rank)]
        own = own[own["step"].between(3, 5)]
        inside = [((own["start_ns"] - 200_000 <= t) & (t <= own["end_ns"])).any() for t in spans["start_ns"]]
        assert all(inside), (rank, spans[["start_ns", "end_ns"]], own[["step", "start_ns", "end_ns"]])
    waits = analyse_run(run.events, run.memory, run.meta).waits
    traced_waits = waits[waits["step"].between(3, 5)]
    # the profiled steps take their waits from TF's profiler (a step at the window's edge may fall back to lateness)
    assert (traced_waits["evidence"] == "tf_profiler").mean() >= 0.5, traced_waits
    assert set(traced_waits.loc[traced_waits["evidence"] == "tf_profiler", "rank"]) == {0, 1}


def test_a_rank_that_crashes_still_gives_what_was_recorded(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CRASH_RANK", "1")
    code, run, err = _profile(tmp_path, HOROVOD_LOOP, capsys)
    assert code != 0 and run.meta["status"] == "failed"
    assert "the script failed (exit code" in err
    assert (run.events[run.events["rank"] == 1]["name"] == "train_step").sum() >= 4


def test_a_script_that_never_calls_horovod_says_so(tmp_path, capsys):
    code, run, err = _profile(tmp_path, LOOP_SCRIPT.format(horovod="", tape=""), capsys)
    assert code == 0
    assert "the script never initialised Horovod" in err
    for rank in (0, 1):
        assert (run.events[run.events["rank"] == rank]["name"] == "train_step").sum() == 8


def test_a_script_that_fails_before_recording_anything_is_one_line_not_an_empty_analysis(tmp_path, capsys):
    code, run, err = _profile(tmp_path, "def broken(:\n", capsys)
    assert code != 0 and run.meta["status"] == "failed"
    assert "nothing was recorded before the script failed" in err
    assert "POP metrics" not in capsys.readouterr().out


def test_a_hung_job_stopped_by_sigterm_is_analysed_with_the_rank_that_never_arrived(tmp_path, capsys):
    import os
    import signal
    import threading
    import time

    marker = tmp_path / "stalled"
    # rank 1 stops before its 4th step's allreduce (a read that never returns); rank 0 waits in it
    script = HOROVOD_LOOP.replace(
        "    step()\n",
        "    if number == 3 and hvd.rank() == 1:\n"
        f"        open({str(marker)!r}, 'w').close()\n"
        "        time.sleep(600)\n"
        "    step()\n",
    ).replace("import os\n", "import os, time\n")

    def stop_once_stalled() -> None:
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # rank 0 is in the allreduce rank 1 never joins
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_once_stalled, daemon=True).start()
    code, run, err = _profile(tmp_path, script, capsys)
    assert code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in err
    assert run.meta["status"] == "interrupted" and run.meta["stopped_by"] == "SIGTERM"
    found = analyse_run(run.events, run.memory, run.meta).findings.set_index("kind")
    assert "run_interrupted" in found.index
    stall = found.loc["stalled_collective"]
    assert "rank 0 submitted it" in stall["text"] and "rank 1 never did" in stall["text"]
    assert stall["seconds_lost"] >= 2  # it stood still from rank 0's submission until the stop
