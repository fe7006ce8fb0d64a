"""The Keras callback of the recorder; apart so that importing the recorder never imports TF."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from workbench.extras import require_module

try:
    import tensorflow as tf
except ImportError:  # TensorFlow is the user's own build: one line saying so
    require_module("tensorflow", "tensorflow", "", for_what="the recorder's Keras callback")
    raise

if TYPE_CHECKING:
    from workbench.recorder import Recorder


class RecorderCallback(tf.keras.callbacks.Callback):
    """Train batches become ``compute`` spans, test batches ``evaluation``, epochs set the epoch."""

    def __init__(self, recorder: Recorder, *, record_batches: bool = True) -> None:
        super().__init__()
        self.recorder = recorder
        self.record_batches = record_batches
        self._batch_start = 0
        self._test_start = 0
        self._global_step = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.recorder.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.recorder.step = self._global_step
        self._batch_start = time.time_ns()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.record_batches:
            self.recorder.record("compute", self._batch_start, time.time_ns(), "train_step")
        self._global_step += 1

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._test_start = time.time_ns()

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        self.recorder.record("evaluation", self._test_start, time.time_ns(), "evaluate")

    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._test_start = time.time_ns()

    def on_predict_end(self, logs: dict[str, Any] | None = None) -> None:
        self.recorder.record("evaluation", self._test_start, time.time_ns(), "predict")
