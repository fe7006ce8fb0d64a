"""Recording on 2 real ranks: clock alignment, Horovod's own timeline, profiling an unmodified script."""

from __future__ import annotations

import json
import sys
import textwrap

import cloudpickle
import pytest

from workbench.formats import read_horovod_timeline
from workbench.profile import profile_command
from workbench.store import Run, list_runs

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


def _align() -> tuple[int, int]:
    from mpi4py import MPI

    from workbench.recorder import align_clocks

    return align_clocks(MPI.COMM_WORLD, rounds=32)


def test_clock_alignment_within_its_bound(cluster2):
    (offset0, precision0), (offset1, precision1) = cluster2.view.apply(_align)
    assert (offset0, precision0) == (0, 0)
    # Both ranks read the same host clock, so the true offset is 0: the estimate must lie within
    # the bound it reports, and the bound (half the fastest round trip) must be under 1 ms.
    assert 0 < precision1 < 1_000_000
    assert abs(offset1) <= precision1


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("profile")
    script = root / "train.py"
    script.write_text(TRAIN_SCRIPT)
    assert profile_command(["python", str(script)], ranks=2, out=root / "runs") == 0
    return Run.load(list_runs(root / "runs")["path"].iloc[0])


def test_profile_unmodified_script_records_both_ranks(profiled_run):
    events, memory = profiled_run.events, profiled_run.memory
    assert profiled_run.meta["status"] == "finished"
    assert set(events["rank"]) == {0, 1}
    for rank in (0, 1):
        mine = events[events["rank"] == rank]
        assert (mine["name"] == "train_step").sum() == 2 * 6  # each rank fits all 192 samples: 6 batches x 2 epochs
        assert set(mine["phase"]) >= {"compute", "communication", "evaluation"}
    assert set(memory["rank"]) == {0, 1}
    assert (memory["rss_bytes"] > 0).all()


def test_real_horovod_timeline_parses_whole_and_cut(profiled_run, tmp_path):
    path = profiled_run.path / "horovod_timeline.json"
    text = path.read_text()
    json.loads(text)  # Horovod closed the array at exit
    events = read_horovod_timeline(path)
    names = set(events["name"])
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "MPI_ALLREDUCE"} <= names
    assert set(events["rank"]) == {0, 1}  # negotiation readiness gives rank 1 its own spans
    assert (events["end_ns"] >= events["start_ns"]).all()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    partial = read_horovod_timeline(cut)
    assert 0 < len(partial) < len(events)
