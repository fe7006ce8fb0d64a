"""Recording inside an unmodified script: a recorder per rank, memory/CPU sampling, steps, Keras.

Started by ``workbench/_profile_boot/sitecustomize.py``. Nothing is imported eagerly: post-import
hooks act when the script itself imports TensorFlow or Keras, so a script that never uses them
pays nothing.

Steps. In a Horovod TF2 script, Python runs once per step: at the call of the ``tf.function``
that holds the step (``hvd.DistributedGradientTape`` inside it). So every *top-level* call of a
``tf.function`` from the main thread becomes a ``compute`` span named ``train_step`` (its
function's name in ``detail``), numbered per rank; the time between two such calls becomes a
``host`` span (host work between steps). Calls made while another ``tf.function`` runs or traces
are nested and ignored. Inside Keras ``fit`` only Keras's ``train_function`` counts (its
evaluation batches are recorded as ``evaluation`` by the callback); inside ``evaluate`` and
``predict`` nothing does. Per step this costs two clock reads, two checks and two appends.

TF's profiler. With ``WORKBENCH_TRACE_STEPS=A:B`` the steps A..B-1 run under
``tf.profiler.experimental`` into ``<run>/tf_profile/rank-N`` (one folder per rank: the file is
named by the host, which ranks on one machine share); the start clock is written beside it
because the trace's timestamps are relative to it.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from workbench.events import COMPUTE, HOST
from workbench.recorder import Recorder

_KERAS_TRAINING_MODULES = ("keras.src.engine.training", "tf_keras.src.engine.training")
_TF_FUNCTION_MODULE = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
#: Keras's own step function: the only ``tf.function`` that is a step while ``fit`` runs.
KERAS_STEP_FUNCTION = "train_function"
#: The name every step span carries (what ``analysis.steps_per_rank`` counts).
STEP_NAME = "train_step"
#: Folder of the TF profiler traces inside a run, and the file with each rank's start clock.
TF_PROFILE_DIR = "tf_profile"
TF_PROFILE_CLOCK_FILE = "clock.json"

#: The recorder and step tracker of the profiling in progress on this rank (None: not profiling).
_recorder: Recorder | None = None
_steps: StepTracker | None = None


class StepTracker:
    """Turns top-level ``tf.function`` calls into numbered step spans and the gaps into host spans."""

    def __init__(self, recorder: Recorder, trace_steps: tuple[int, int] | None = None) -> None:
        self.recorder = recorder
        self.main_thread = threading.get_ident()
        self.busy = False
        #: None: every top-level call is a step; a set: only functions with these names (Keras fit).
        self.only: frozenset[str] | None = None
        self.step = 0
        self.previous_end = 0
        self.trace_steps = trace_steps
        self.tracing = False

    def call(self, original: Any, function: Any, args: tuple, kwargs: dict) -> Any:
        """Run ``original(function, ...)``; a top-level call from the main thread is a step."""
        if self.busy or threading.get_ident() != self.main_thread:
            return original(function, *args, **kwargs)
        name = getattr(function, "_name", "")
        if self.only is not None and name not in self.only:
            self.busy = True
            try:
                return original(function, *args, **kwargs)
            finally:
                self.busy = False
        if self.trace_steps is not None:
            self.trace_window()
        self.busy = True
        start = time.time_ns()
        try:
            return original(function, *args, **kwargs)
        finally:
            end = time.time_ns()
            self.busy = False
            self.done(name, start, end)

    def done(self, name: str, start: int, end: int) -> None:
        recorder, step = self.recorder, self.step
        if self.previous_end:
            recorder.record(HOST, self.previous_end, start, "between_steps", step=step)
        recorder.record(COMPUTE, start, end, STEP_NAME, detail=name, step=step)
        self.previous_end = end
        self.step = step + 1

    def pause(self) -> None:
        """Forget the previous step's end: the time until the next step is not host work between steps."""
        self.previous_end = 0

    def trace_window(self) -> None:
        """Start TF's profiler before step A, stop it before step B (steps A..B-1 traced)."""
        first, stop = self.trace_steps  # type: ignore[misc]
        if self.step == first and not self.tracing:
            start_tf_profiler(self.recorder)
            self.tracing = True
        elif self.step >= stop and self.tracing:
            stop_tf_profiler()
            self.tracing = False
            self.trace_steps = None

    def close(self) -> None:
        if self.tracing:
            stop_tf_profiler()
            self.tracing = False


def tf_profile_dir(run_path: str | Path, rank: int) -> Path:
    """Where rank ``rank``'s TF profiler trace goes."""
    return Path(run_path) / TF_PROFILE_DIR / f"rank-{rank:05d}"


def start_tf_profiler(recorder: Recorder) -> None:
    """Start TF's profiler into this rank's folder and note the clock at start (trace times are relative)."""
    import tensorflow as tf

    folder = tf_profile_dir(recorder.run_path, recorder.rank)
    folder.mkdir(parents=True, exist_ok=True)
    before = time.time_ns()
    tf.profiler.experimental.start(str(folder))
    after = time.time_ns()
    clock = {"rank": recorder.rank, "start_ns": before - recorder.clock_offset_ns, "start_call_ns": after - before}
    (folder / TF_PROFILE_CLOCK_FILE).write_text(json.dumps(clock))


def stop_tf_profiler() -> None:
    import tensorflow as tf

    try:
        tf.profiler.experimental.stop()
    except Exception as error:  # a profile that cannot be written must not stop training
        print(f"workbench profile: TF profiler trace not written ({error})", file=sys.stderr)


def parse_trace_steps(text: str | None) -> tuple[int, int] | None:
    """``"5:10"`` -> (5, 10); None or "" -> None; anything else: one clear error."""
    if not text:
        return None
    first, _, stop = text.partition(":")
    if not (first.isdigit() and stop.isdigit() and int(stop) > int(first)):
        raise ValueError(f"trace steps {text!r}: write A:B with whole numbers A < B, e.g. 5:10 (steps 5..9)")
    return int(first), int(stop)


def start(run_path: str) -> Recorder:
    """Create this rank's recorder and hook TensorFlow and Keras when they get imported."""
    interval = float(os.environ.get("WORKBENCH_MEMORY_INTERVAL", "0.2"))
    recorder = Recorder(run_path, memory_interval_s=interval)
    instrument(recorder, parse_trace_steps(os.environ.get("WORKBENCH_TRACE_STEPS")))
    atexit.register(close)
    return recorder


def instrument(recorder: Recorder, trace_steps: tuple[int, int] | None = None) -> None:
    """Record steps into ``recorder``: patch TF and Keras now if imported, else right after their import."""
    global _recorder, _steps
    _recorder = recorder
    _steps = StepTracker(recorder, trace_steps)
    hooks = (((_TF_FUNCTION_MODULE,), _instrument_tf_function), (_KERAS_TRAINING_MODULES, _instrument_keras))
    for names, callback in hooks:
        loaded = [sys.modules[name] for name in names if name in sys.modules]
        for module in loaded:
            callback(module)
        if not loaded:
            sys.meta_path.insert(0, _PostImportHook(names, callback))


def close() -> None:
    """Stop the profiler if it traces, write what is buffered; the patches stay and then do nothing."""
    global _recorder, _steps
    if _steps is not None:
        _steps.close()
    if _recorder is not None:
        _recorder.close()
    _recorder, _steps = None, None


def _instrument_tf_function(module: Any) -> None:
    function_class = getattr(module, "Function", None)
    if function_class is None:
        return
    if not hasattr(function_class, "_workbench_original_call"):
        function_class._workbench_original_call = function_class.__call__
        function_class.__call__ = _step_call(function_class._workbench_original_call)


def _step_call(original: Any) -> Any:
    """``Function.__call__`` that hands top-level calls to the current step tracker, if any."""

    @functools.wraps(original)
    def call(function: Any, *args: Any, **kwargs: Any) -> Any:
        tracker = _steps
        if tracker is None:
            return original(function, *args, **kwargs)
        return tracker.call(original, function, args, kwargs)

    return call


def _keras_method(method: Any, steps_inside: frozenset[str]) -> Any:
    """``fit`` / ``evaluate`` / ``predict`` with the recorder's callback, counting only Keras's step function."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _recorder is None or _steps is None:
            return method(self, *args, **kwargs)
        callbacks = list(kwargs.get("callbacks") or [])
        if not any(type(cb).__name__ == "RecorderCallback" for cb in callbacks):
            callbacks.append(_recorder.keras_callback(record_batches=False))
        kwargs["callbacks"] = callbacks
        outer, _steps.only = _steps.only, steps_inside
        try:
            return method(self, *args, **kwargs)
        finally:
            _steps.only = outer
            _steps.pause()

    return wrapper


def _instrument_keras(module: Any) -> None:
    model = getattr(module, "Model", None)
    if model is not None and not hasattr(model, "_workbench_instrumented"):
        model._workbench_instrumented = True
        model.fit = _keras_method(model.fit, frozenset({KERAS_STEP_FUNCTION}))
        model.evaluate = _keras_method(model.evaluate, frozenset())
        model.predict = _keras_method(model.predict, frozenset())


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after one of ``names`` has been imported."""

    def __init__(self, names: tuple[str, ...], callback: Any) -> None:
        self.names = set(names)
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                original = spec.loader.exec_module
                callback = self.callback

                def exec_module(module: Any, original: Any = original, callback: Any = callback) -> None:
                    original(module)
                    callback(module)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None
