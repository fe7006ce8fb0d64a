"""The recorder's Keras callback on a real ``fit``/``evaluate``/``predict``: steps, epochs, evaluation spans."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.recorder import Recorder
from workbench.store import RunData, create_run

tf = pytest.importorskip("tensorflow")


def _model() -> tf.keras.Model:
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((48, 4), dtype=np.float32), rng.integers(0, 3, 48)


def test_fit_batches_are_numbered_compute_spans_and_validation_is_evaluation(tmp_path):
    run_path = create_run(tmp_path, "keras", ranks=1)
    recorder = Recorder(run_path, rank=0, flush_interval_s=3600)
    x, y = _data()
    model = _model()
    # 32 training samples in batches of 8: 4 steps per epoch; validation on 16 samples after each epoch
    model.fit(x, y, batch_size=8, epochs=3, validation_split=1 / 3, verbose=0, callbacks=[recorder.keras_callback()])
    model.predict(x[:8], verbose=0, callbacks=[recorder.keras_callback()])
    recorder.close()
    events = RunData.load(run_path).events
    steps = events[events["name"] == "train_step"]
    assert (steps["phase"] == "compute").all()
    assert list(steps["step"]) == list(range(12))  # numbered across epochs, not per epoch
    assert list(steps["epoch"]) == [0] * 4 + [1] * 4 + [2] * 4
    validation = events[events["name"] == "evaluate"]
    assert list(validation["phase"]) == ["evaluation"] * 3 and list(validation["epoch"]) == [0, 1, 2]
    # each validation pass starts after its epoch's last step ended
    last_steps = steps.groupby("epoch")["end_ns"].max().to_numpy()
    assert (validation["start_ns"].to_numpy() >= last_steps).all()
    (predict,) = events.loc[events["name"] == "predict", "phase"]
    assert predict == "evaluation"
    assert (events["end_ns"] >= events["start_ns"]).all()


def test_record_batches_off_keeps_epochs_and_evaluation_only(tmp_path):
    run_path = create_run(tmp_path, "keras-epochs", ranks=1)
    recorder = Recorder(run_path, rank=0, flush_interval_s=3600)
    x, y = _data()
    callback = recorder.keras_callback(record_batches=False)
    _model().fit(x, y, batch_size=8, epochs=2, validation_split=1 / 3, verbose=0, callbacks=[callback])
    assert recorder.epoch == 1 and recorder.step == 7  # the recorder still knows where training is
    recorder.close()
    events = RunData.load(run_path).events
    assert list(events["name"]) == ["evaluate", "evaluate"]
