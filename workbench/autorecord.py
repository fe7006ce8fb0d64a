"""Recording inside an unmodified script: a recorder per rank, memory/CPU sampling, steps, Keras.

Started by ``workbench/_profile_boot/sitecustomize.py``. Nothing is imported eagerly: post-import
hooks act when the script itself imports TensorFlow or Keras, so a script that never uses them
pays nothing.

What is recorded, on every rank, from the main thread (``StepTracker``):

- **Steps.** A top-level call of a ``tf.function`` (none other running or tracing) is a training
  step, a ``compute`` span named ``train_step`` numbered per rank, only when the function trains:
  its traced graph computes gradients (ops in a gradient tape's name scope, ``*Grad`` kernels) or
  applies them (``ResourceApply*``). That is decided once per function, from its graph, after its first
  call (``trains``). Any other top-level ``tf.function`` (Keras's ``predict_function``, a user's
  ``@tf.function`` generator) is ``compute`` under its own name, not a step.
- **Keras calls** (``KERAS_METHODS``): ``fit``, ``evaluate``, ``predict``, ``train_on_batch``,
  ``test_on_batch``, ``predict_on_batch`` and the model's ``__call__`` made outside any
  ``tf.function``, each a span named ``keras.<method>`` (detail: the model's name) around the whole
  call. The ``tf.function`` calls inside it are spans of their own (the model running), so the
  Keras call's own time, its setup per call, is what is left: ``host`` for the training and
  prediction methods, ``evaluation`` for ``evaluate`` and ``test_on_batch`` (their model runs are
  ``evaluation`` too). An eager ``__call__`` is ``compute`` as a whole. After each call one memory
  sample is taken, labelled ``keras.<method>`` with the call's number, for growth per call.
- **Waiting for a Python input source inside ``fit``.** When ``fit`` reads a generator, an iterator
  or a ``keras.utils.Sequence`` (Keras feeds it to ``tf.data`` from a thread, ``InputTimer``), each
  batch's time of being ready is noted as the thread gets it. A step whose batch was not ready when
  it began waited for it: that part of the step is an ``input`` span (``next_batch``), the rest the
  step. CPU samples cannot tell this wait from compute (TF's threads keep the process busy).
- **A Python generator behind ``tf.data.Dataset.from_generator``** (the script's own pipeline, or
  Keras's for a generator): how long its ``next`` took in all, outside evaluation (``ProducerClock``),
  as counters (``PYTHON_INPUT_BUSY``) after each ``fit`` and at the end. ``from_generator`` runs it
  on one thread, one element at a time: busy for nearly all of the training, it sets the steps' pace.
- **Time between** two recorded calls: ``host`` (``between_calls``) when the main thread was on a
  CPU for at least half of it (Python, callbacks, NumPy), else ``idle`` (``off_cpu``: sleeping,
  reading, waiting for a lock or a collective outside Horovod). The same rule whatever was called.
  Inside ``fit`` the time between batches is classified alike; Keras's validation is ``evaluation``
  (the recorder's callback).

Per call this costs a few clock reads (one of them the thread's CPU clock) and appends.

TF's profiler. With ``WORKBENCH_TRACE_STEPS=A:B`` the steps A..B-1 run under
``tf.profiler.experimental`` into ``<run>/tf_profile/rank-N`` (one folder per rank: the file is
named by the host, which ranks on one machine share); the start clock is written beside it
because the trace's timestamps are relative to it.
"""

from __future__ import annotations

import atexit
import collections
import functools
import importlib.abc
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from workbench.events import (
    BETWEEN_CALLS,
    COMPUTE,
    EVALUATION,
    HOST,
    IDLE,
    INPUT,
    KERAS_PREFIX,
    NS_PER_S,
    OFF_CPU,
    PYTHON_INPUT_BUSY,
    PYTHON_INPUT_ELEMENTS,
)
from workbench.recorder import Recorder

_KERAS_TRAINING_MODULES = ("keras.src.engine.training", "tf_keras.src.engine.training")
_TF_FUNCTION_MODULE = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
_TF_DATASET_MODULE = "tensorflow.python.data.ops.dataset_ops"
#: Keras's own step function: the only ``tf.function`` that can be a step while ``fit`` runs.
KERAS_STEP_FUNCTION = "train_function"
#: The name every step span carries (what ``analysis.steps_per_rank`` counts).
STEP_NAME = "train_step"
#: Keras methods recorded as calls, with the phase of their own time: setup around the model's
#: runs is host work, except for evaluation, where all of it is evaluation.
KERAS_METHODS: dict[str, str] = {
    "fit": HOST,
    "evaluate": EVALUATION,
    "predict": HOST,
    "train_on_batch": HOST,
    "test_on_batch": EVALUATION,
    "predict_on_batch": HOST,
    "__call__": COMPUTE,
}
#: The input span of a step that waited for its batch from a Python source (``analysis.input`` counts it).
NEXT_BATCH = "next_batch"
#: The share of a gap the main thread must spend on a CPU for the gap to be host work.
BUSY_SHARE = 0.5
#: Folder of the TF profiler traces inside a run, and the file with each rank's start clock.
TF_PROFILE_DIR = "tf_profile"
TF_PROFILE_CLOCK_FILE = "clock.json"
#: Name of the clock marks written into each TF profiler trace (``formats.tf_profile`` reads them), and
#: how many: each is a trace event that TF timestamps on its own clock, with our clock read just
#: before and just after; the tightest pair places the trace on the run's clock.
TF_PROFILE_CLOCK_MARK = "workbench_clock_mark"
TF_PROFILE_CLOCK_MARKS = 8

#: The recorder and step tracker of the profiling in progress on this rank (None: not profiling).
_recorder: Recorder | None = None
_steps: StepTracker | None = None

#: What ``trains`` looks for in a traced graph. Op types alone mislead: a transposed convolution's
#: forward pass is ``Conv2DBackpropInput``. Gradient ops are named in a gradient tape's (or
#: ``tf.gradients``') name scope; ``*Grad`` kernels and optimizers' ``ResourceApply*`` only appear in training.
_GRADIENT_SCOPES = ("gradient_tape/", "gradients/")
_GRADIENT_OP_SUFFIXES = ("Grad", "GradV2")
_APPLY_OP_PREFIXES = ("ResourceApply", "ResourceSparseApply")


def trains(function: Any) -> bool:
    """Does this ``tf.function`` train? Its traced graphs (and the functions they call) compute or apply gradients.

    Decided once per function and kept on it. A function whose graph cannot be read (another TF
    version, a function never traced) counts as a step, as every top-level call did before.
    """
    known = getattr(function, "_workbench_trains", None)
    if known is not None:
        return bool(known)
    try:
        decision = any(_graph_trains(concrete.graph) for concrete in function._list_all_concrete_functions())
    except Exception:
        decision = True
    try:
        function._workbench_trains = decision
    except Exception:
        pass
    return decision


def _graph_trains(graph: Any) -> bool:
    definition = graph.as_graph_def()
    nodes = [*definition.node, *(node for library in definition.library.function for node in library.node_def)]
    for node in nodes:
        if node.op.endswith(_GRADIENT_OP_SUFFIXES) or node.op.startswith(_APPLY_OP_PREFIXES):
            return True
        name = node.name
        if name.startswith(_GRADIENT_SCOPES) or "/gradient_tape/" in name or "/gradients/" in name:
            return True
    return False


def _timed_items(source: Any, note: Any) -> Any:
    """Iterate ``source``, calling ``note(asked_ns, ready_ns)`` for each item as it comes (any thread)."""
    items = iter(source)
    while True:
        asked = time.time_ns()
        try:
            item = next(items)
        except StopIteration:
            return
        note(asked, time.time_ns())
        yield item


class ProducerClock:
    """Seconds the Python generators behind ``tf.data.Dataset.from_generator`` spent producing, from their threads.

    Each element is timed around the generator's ``next`` (its time waiting for the GIL included);
    elements made while the tracker says evaluation runs are left out, since only the training steps'
    pace is in question. ``take`` hands over what was added since the last ``take``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy_ns = 0
        self.elements = 0
        #: Whether any generator was wrapped: until then a step has nothing here to look at.
        self.used = False

    def wrap(self, make_iterator: Any, evaluating: Any) -> Any:
        """``make_iterator`` (from_generator's callable) whose elements are timed unless ``evaluating()``."""
        self.used = True

        def note(asked: int, ready: int) -> None:
            if not evaluating():
                with self.lock:
                    self.busy_ns += ready - asked
                    self.elements += 1

        return lambda *args: _timed_items(make_iterator(*args), note)

    def mark(self) -> tuple[int, int]:
        """The totals now, to ``forget_since`` them later."""
        with self.lock:
            return self.busy_ns, self.elements

    def forget_since(self, mark: tuple[int, int]) -> None:
        """Leave out what was added since ``mark`` (elements made while a step traced: warm-up, not pace)."""
        with self.lock:
            if self.busy_ns >= mark[0] and self.elements >= mark[1]:  # else taken since: nothing to leave out
                self.busy_ns, self.elements = mark

    def take(self) -> tuple[float, int]:
        with self.lock:
            busy, elements = self.busy_ns, self.elements
            self.busy_ns = self.elements = 0
        return busy / NS_PER_S, elements


class _Pass:
    """One pass of ``fit`` over a Python source: when it began, and when each batch not yet consumed was ready.

    Only the batches from the next one the steps take on are kept (``offset`` counts those let go), so a
    long ``fit`` holds a few numbers, not one per batch.
    """

    def __init__(self) -> None:
        self.began = time.time_ns()
        self.ready: collections.deque[int] = collections.deque()  # append / popleft: safe across threads
        self.offset = 0

    @property
    def batches(self) -> int:
        return self.offset + len(self.ready)

    def ready_ns(self, index: int) -> int | None:
        """When batch ``index`` was ready; the batches before it are let go (the steps took them)."""
        while self.offset < index and self.ready:
            self.ready.popleft()
            self.offset += 1
        position = index - self.offset
        return self.ready[position] if 0 <= position < len(self.ready) else None


class InputTimer:
    """When each batch of a Python input source became ready, as ``fit``'s ``tf.data`` pipeline pulled it.

    Keras gives ``tf.data.Dataset.from_generator`` a callable that makes a fresh pass over the source
    (once per ``fit`` for a generator, once per epoch for a ``Sequence``); this wraps that callable,
    so each pass notes when each batch was ready, in the order the steps consume them. Its thread runs
    ahead of the steps (Keras prefetches), so a batch ready before its step began cost the step nothing.
    """

    def __init__(self, recreated_each_epoch: bool) -> None:
        self.recreated_each_epoch = recreated_each_epoch
        self.passes: list[_Pass] = []

    def wrap(self, make_pass: Any) -> Any:
        """``make_pass`` (Keras's generator callable) timed: each call is a new pass, each batch noted."""

        def timed_pass() -> Any:
            made = _Pass()
            self.passes.append(made)
            if len(self.passes) > 2:  # a pass before the one before is over: its steps are done
                del self.passes[0]
            return _timed_items(make_pass(), lambda _asked, ready: made.ready.append(ready))

        return timed_pass

    def ready_ns(self, index: int, since_ns: int) -> int | None:
        """When batch ``index`` of the pass the steps read now was ready (None: not known).

        That pass is one begun since ``since_ns`` (the epoch's or the fit's start). Keras makes and drops
        an extra pass at a ``Sequence``'s first epoch; of the passes begun since then, the one furthest
        along is the one the steps read.
        """
        passes = list(self.passes)
        candidates = [made for made in passes if made.began >= since_ns] or passes[-1:]
        if not candidates:
            return None
        return max(candidates, key=lambda made: made.batches).ready_ns(index)


class StepTracker:
    """Turns the main thread's top-level calls into spans: steps, other functions, Keras calls, the time between."""

    def __init__(self, recorder: Recorder, trace_steps: tuple[int, int] | None = None) -> None:
        self.recorder = recorder
        self.main_thread = threading.get_ident()
        #: True while a call is being recorded: calls it makes are its own business.
        self.busy = False
        #: None: every top-level function may be a step; a set: only functions with these names (Keras fit).
        self.only: frozenset[str] | None = None
        #: The phase of ``tf.function`` runs inside the Keras call in progress (None: compute or a step).
        self.inner_phase: str | None = None
        self.step = 0
        #: End (ns) and the main thread's CPU clock at the end of the last recorded call; 0: do not
        #: record the time until the next one (inside a Keras call, whose own span covers it).
        self.previous_end = 0
        self.previous_cpu = 0
        self.keras_depth = 0
        self.keras_calls: dict[str, int] = {}
        self.trace_steps = trace_steps
        self.tracing = False
        #: Inside ``fit`` on a Python source: its timer (None otherwise), whether the next data adapter made
        #: is the training one to time, the batches each step takes (``steps_per_execution``), and when the
        #: pass the steps read began (the fit's start, or the epoch's for a ``Sequence``) and the batches taken
        #: from it so far.
        self.input_timer: InputTimer | None = None
        self.wants_input_timer = False
        self.batches_per_step = 1
        self.pass_start = 0
        self.pass_batches = 0
        #: The Python generators behind tf.data, and whether an evaluation runs (their elements then do not count).
        self.producers = ProducerClock()
        self.evaluating = False

    # -- tf.function calls -----------------------------------------------------------------------
    def call(self, original: Any, function: Any, args: tuple, kwargs: dict) -> Any:
        """Run ``original(function, ...)``; a top-level call from the main thread is recorded."""
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
        watched = self.input_timer is not None or self.producers.used  # else nothing below needs the tracing
        traces = _tracing_count(function) if watched else None
        produced = self.producers.mark() if watched else None
        start = time.time_ns()
        self.between(start)
        try:
            return original(function, *args, **kwargs)
        finally:
            end = time.time_ns()
            self.busy = False
            traced = watched and _tracing_count(function) != traces
            if traced and produced is not None:
                self.producers.forget_since(produced)
            self.done(function, name, start, end, traced=traced)

    def done(self, function: Any, name: str, start: int, end: int, *, traced: bool = False) -> None:
        recorder, step = self.recorder, self.step
        if self.inner_phase is not None:
            recorder.record(self.inner_phase, start, end, name, step=step)
        elif trains(function):
            start = self.input_wait(start, end, step, traced=traced)
            recorder.record(COMPUTE, start, end, STEP_NAME, detail=name, step=step)
            self.step = step + 1
        else:
            recorder.record(COMPUTE, start, end, name, detail="no gradients: not a training step", step=step)
        if not self.keras_depth or self.only is not None:  # inside predict & co. the call's own span covers it
            self.resume(end)

    def input_wait(self, start: int, end: int, step: int, *, traced: bool = False) -> int:
        """Record a ``fit`` step's wait for its batch from a Python source as ``input``; returns the compute's start.

        A step that traced its function is left whole: the batch waits for the tracing thread's GIL, so
        its late readiness is the tracing's, not the source's.
        """
        self.wants_input_timer = False  # the training data adapter exists by the first step
        timer = self.input_timer
        if timer is None or self.only is None:
            return start
        ready = timer.ready_ns(self.pass_batches, self.pass_start)
        self.pass_batches += self.batches_per_step
        if ready is None or ready <= start or traced:
            return start
        ready = min(ready, end)
        detail = "the step's batch from the Python input source was not ready"
        self.recorder.record(INPUT, start, ready, NEXT_BATCH, detail=detail, step=step)
        return ready

    def epoch_ended(self) -> None:
        """``fit``'s epoch is over: a ``Sequence``'s next pass starts counting its batches from here."""
        if self.input_timer is not None and self.input_timer.recreated_each_epoch:
            self.pass_start, self.pass_batches = time.time_ns(), 0

    def timed_input(self, adapter: Any, make_pass: Any) -> Any:
        """The training data adapter's pass maker, timed while ``fit`` asks for it (else as it is)."""
        if not self.wants_input_timer:
            return make_pass
        self.wants_input_timer = False
        try:
            recreated = bool(adapter.should_recreate_iterator())
        except Exception:
            recreated = False
        self.input_timer = InputTimer(recreated)
        return self.input_timer.wrap(make_pass)

    # -- the time between calls ------------------------------------------------------------------
    def between(self, start: int) -> None:
        """Record the time since the last recorded call: host work if the main thread was busy, else off CPU."""
        if self.previous_end and start > self.previous_end:
            cpu_ns = time.thread_time_ns() - self.previous_cpu
            busy = cpu_ns >= BUSY_SHARE * (start - self.previous_end)
            phase, name = (HOST, BETWEEN_CALLS) if busy else (IDLE, OFF_CPU)
            self.recorder.record(phase, self.previous_end, start, name, step=self.step)
        self.previous_end = 0

    def resume(self, end: int) -> None:
        """A recorded call ended at ``end``: the time from here to the next one is classified."""
        self.previous_end = end
        self.previous_cpu = time.thread_time_ns()

    # -- Keras calls -----------------------------------------------------------------------------
    def keras_call(self, method: str, call: Any, model: Any, args: tuple, kwargs: dict) -> Any:
        """Run one of ``KERAS_METHODS`` as a recorded span around its model runs (top level only)."""
        if self.busy or self.keras_depth or threading.get_ident() != self.main_thread:
            return call(model, *args, **kwargs)
        phase = KERAS_METHODS[method]
        inner = EVALUATION if phase == EVALUATION else None
        start = time.time_ns()
        self.between(start)
        outer_phase, outer_only = self.inner_phase, self.only
        self.inner_phase = inner
        outer_evaluating = self.evaluating
        self.evaluating = outer_evaluating or phase == EVALUATION
        if method == "fit":
            self.resume(start)  # the time between batches inside fit is classified too
            self.only = frozenset({KERAS_STEP_FUNCTION})
            self.start_fit_input(model, args, kwargs, start)
        self.keras_depth += 1
        try:
            return call(model, *args, **kwargs)
        finally:
            end = time.time_ns()
            self.keras_depth -= 1
            self.inner_phase, self.only = outer_phase, outer_only
            self.evaluating = outer_evaluating
            if method == "fit":
                self.input_timer, self.wants_input_timer = None, False
                self.producers_done()
            label = KERAS_PREFIX + method.strip("_")
            self.recorder.record(phase, start, end, label, detail=str(getattr(model, "name", "")))
            number = self.keras_calls.get(method, 0)
            self.keras_calls[method] = number + 1
            self.recorder.sample_memory(label, number)
            self.resume(time.time_ns())

    def start_fit_input(self, model: Any, args: tuple, kwargs: dict, start: int) -> None:
        """Before ``fit`` runs: time its input if it is a Python source (a generator, an iterator, a ``Sequence``)."""
        source = args[0] if args else kwargs.get("x")
        python_source = hasattr(source, "__next__") or any(
            cls.__name__ == "Sequence" for cls in type(source).__mro__[1:]
        )
        self.input_timer, self.wants_input_timer = None, python_source
        self.pass_start, self.pass_batches = start, 0
        try:
            self.batches_per_step = max(1, int(model._steps_per_execution.numpy()))
        except Exception:
            self.batches_per_step = 1

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

    def producers_done(self) -> None:
        """Record what the Python generators behind tf.data spent since the last time (nothing: no counter)."""
        busy_s, elements = self.producers.take()
        if elements:
            self.recorder.counter(PYTHON_INPUT_BUSY, busy_s)
            self.recorder.counter(PYTHON_INPUT_ELEMENTS, elements)

    def timed_generator(self, make_iterator: Any) -> Any:
        return self.producers.wrap(make_iterator, lambda: self.evaluating)

    def close(self) -> None:
        self.producers_done()
        if self.tracing:
            stop_tf_profiler()
            self.tracing = False


def _tracing_count(function: Any) -> int | None:
    """How often a ``tf.function`` has traced (None where this TF cannot say)."""
    try:
        return int(function.experimental_get_tracing_count())
    except Exception:
        return None


def tf_profile_dir(run_path: str | Path, rank: int) -> Path:
    """Where rank ``rank``'s TF profiler trace goes."""
    return Path(run_path) / TF_PROFILE_DIR / f"rank-{rank:05d}"


def start_tf_profiler(recorder: Recorder) -> None:
    """Start TF's profiler into this rank's folder and note its clock (trace times are relative).

    TF's trace counts from an instant somewhere inside ``start``, which on a busy machine can last
    milliseconds (longer than a small step): ``start_ns`` (before the call) is only a bound. So
    right after it a few clock marks go into the trace, each between two reads of our clock
    (``marks``: ``[before, after]`` on the run's clock); ``formats.tf_profile`` places the trace with
    the tightest one.
    """
    import tensorflow as tf

    folder = tf_profile_dir(recorder.run_path, recorder.rank)
    folder.mkdir(parents=True, exist_ok=True)
    offset = recorder.clock_offset_ns
    before = time.time_ns()
    tf.profiler.experimental.start(str(folder))
    after = time.time_ns()
    marks = []
    for _ in range(TF_PROFILE_CLOCK_MARKS):
        low = time.time_ns()
        with tf.profiler.experimental.Trace(TF_PROFILE_CLOCK_MARK):  # TF takes its timestamp on creation
            high = time.time_ns()
        marks.append([low - offset, high - offset])
    clock = {"rank": recorder.rank, "start_ns": before - offset, "start_call_ns": after - before, "marks": marks}
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
    """Create this rank's recorder and hook TensorFlow and Keras when they get imported.

    Before the script's first line: this rank's GPU chosen (``WORKBENCH_PIN_GPUS``, ``placement.gpu_for_rank``),
    and a hook on Horovod's ``init`` that, across hosts, aligns this rank's clock to rank 0's and measures the
    ranks' links (``_after_horovod_init``).
    """
    from workbench.placement import gpu_for_rank

    interval = float(os.environ.get("WORKBENCH_MEMORY_INTERVAL", "0.2"))
    gpu = gpu_for_rank(os.environ, os.environ.get("WORKBENCH_PIN_GPUS", "off"))
    if gpu["cuda_visible_devices"] is not None and gpu["pinned_by"] == "workbench":
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu["cuda_visible_devices"]  # before CUDA starts: the script's first line
    recorder = Recorder(run_path, memory_interval_s=interval)
    recorder.note_facts(**gpu)
    instrument(recorder, parse_trace_steps(os.environ.get("WORKBENCH_TRACE_STEPS")))
    _hook_module(_HOROVOD_BASICS_MODULES, _instrument_horovod_init)
    atexit.register(close)
    return recorder


#: Horovod's common module, whose ``HorovodBasics.init`` every framework's ``hvd.init`` is.
_HOROVOD_BASICS_MODULES = ("horovod.common.basics",)


def _instrument_horovod_init(module: Any) -> None:
    """``HorovodBasics.init`` followed by ``_after_horovod_init`` (before ``horovod.tensorflow`` binds ``init``)."""
    basics = getattr(module, "HorovodBasics", None)
    original = getattr(basics, "init", None)
    if original is None or hasattr(original, "_workbench_original"):
        return

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = original(self, *args, **kwargs)
        _after_horovod_init(self)
        return answer

    init._workbench_original = original  # type: ignore[attr-defined]
    basics.init = init


def _after_horovod_init(horovod: Any) -> None:
    """Ranks on several hosts: align this rank's clock to rank 0's, and measure each rank's link (rank 0 keeps it).

    Why here: every rank calls ``hvd.init`` once, so a few collectives of our own line up on every rank; before
    it there is no MPI, after it the steps run. It uses mpi4py on Horovod's MPI world (MPI already initialised,
    with threads: Horovod's own thread uses MPI beside ours). Skipped on one host (one clock, one machine's
    memory), under Gloo, or where MPI gives no threads; any failure is one line and the script goes on.
    """
    recorder = _recorder
    if recorder is None:
        return
    try:
        if horovod.size() < 2 or not horovod.mpi_enabled() or not horovod.mpi_threads_supported():
            return
        from mpi4py import MPI

        from workbench.links import LINK_CHECK_MAX_RANKS, link_bandwidth, rank_links

        world = MPI.COMM_WORLD
        if world.Get_size() != horovod.size():
            return  # Horovod on a communicator of its own: not every rank of the world is here
        hosts = world.allgather(recorder.host)
        if len(set(hosts)) < 2:
            return
        recorder.align_clocks(world)
        speeds = link_bandwidth() if world.Get_size() <= LINK_CHECK_MAX_RANKS else None
        if world.Get_rank() == 0 and speeds:
            from workbench.store import update_run_meta

            update_run_meta(recorder.run_path, links=rank_links(speeds, hosts.__getitem__))
    except Exception as error:  # profiling must never stop the script
        print(f"workbench profile: clocks not aligned across hosts on this rank ({error})", file=sys.stderr)


def instrument(recorder: Recorder, trace_steps: tuple[int, int] | None = None) -> None:
    """Record steps into ``recorder``: patch TF and Keras now if imported, else right after their import."""
    global _recorder, _steps
    _recorder = recorder
    _steps = StepTracker(recorder, trace_steps)
    hooks = (
        ((_TF_FUNCTION_MODULE,), _instrument_tf_function),
        ((_TF_DATASET_MODULE,), _instrument_from_generator),
        (_KERAS_TRAINING_MODULES, _instrument_keras),
    )
    for names, callback in hooks:
        _hook_module(names, callback)


def _hook_module(names: tuple[str, ...], callback: Any) -> None:
    """``callback(module)`` on each of ``names`` now if imported, else right after its import."""
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


def _instrument_from_generator(module: Any) -> None:
    """``tf.data.Dataset.from_generator`` with its generator's elements timed (``ProducerClock``)."""
    dataset = getattr(module, "DatasetV2", None)
    found = dataset.__dict__.get("from_generator") if dataset is not None else None
    if not isinstance(found, staticmethod) or hasattr(found.__func__, "_workbench_original"):
        return
    original = found.__func__

    @functools.wraps(original)
    def from_generator(generator: Any, *args: Any, **kwargs: Any) -> Any:
        tracker = _steps
        if tracker is not None and callable(generator):
            generator = tracker.timed_generator(generator)
        return original(generator, *args, **kwargs)

    from_generator._workbench_original = original  # type: ignore[attr-defined]
    dataset.from_generator = staticmethod(from_generator)


def _step_call(original: Any) -> Any:
    """``Function.__call__`` that hands top-level calls to the current step tracker, if any."""

    @functools.wraps(original)
    def call(function: Any, *args: Any, **kwargs: Any) -> Any:
        tracker = _steps
        if tracker is None:
            return original(function, *args, **kwargs)
        return tracker.call(original, function, args, kwargs)

    return call


def _keras_method(method_name: str, method: Any) -> Any:
    """One of ``KERAS_METHODS`` recorded by the step tracker; ``fit`` also gets the recorder's callback."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        tracker = _steps
        if _recorder is None or tracker is None:
            return method(self, *args, **kwargs)
        if method_name == "fit" and not (tracker.busy or tracker.keras_depth):
            callbacks = list(kwargs.get("callbacks") or [])
            if not any(type(cb).__name__ in ("RecorderCallback", "FitCallback") for cb in callbacks):
                callbacks.append(_fit_callback(_recorder, tracker))
            kwargs["callbacks"] = callbacks
        return tracker.keras_call(method_name, method, self, args, kwargs)

    return wrapper


def _fit_callback(recorder: Recorder, tracker: StepTracker) -> Any:
    """The recorder's Keras callback (epochs, validation as ``evaluation``), telling the tracker of validation."""
    from workbench._keras import RecorderCallback

    class FitCallback(RecorderCallback):
        def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
            super().on_test_begin(logs)
            tracker.between(self._test_start)
            tracker.evaluating = True

        def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
            super().on_test_end(logs)
            tracker.evaluating = False
            tracker.resume(time.time_ns())

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            super().on_epoch_end(epoch, logs)
            tracker.epoch_ended()

    return FitCallback(recorder, record_batches=False)


def _instrument_keras(module: Any) -> None:
    model = getattr(module, "Model", None)
    if model is not None and not hasattr(model, "_workbench_instrumented"):
        model._workbench_instrumented = True
        for name in KERAS_METHODS:
            original = getattr(model, name, None)
            if original is not None:
                setattr(model, name, _keras_method(name, original))
    adapters = getattr(module, "data_adapter", None)  # the training module imports Keras's data adapters
    for name in ("GeneratorDataAdapter", "KerasSequenceAdapter"):
        adapter = getattr(adapters, name, None)
        method = adapter.__dict__.get("_handle_multiprocessing") if adapter is not None else None
        if method is not None and not hasattr(method, "_workbench_original"):
            adapter._handle_multiprocessing = _timed_input(method)


def _timed_input(original: Any) -> Any:
    """A data adapter's ``_handle_multiprocessing`` (it returns the callable ``tf.data`` makes passes with), timed."""

    @functools.wraps(original)
    def handle(adapter: Any, *args: Any, **kwargs: Any) -> Any:
        make_pass = original(adapter, *args, **kwargs)
        tracker = _steps
        return make_pass if tracker is None else tracker.timed_input(adapter, make_pass)

    handle._workbench_original = original  # type: ignore[attr-defined]
    return handle


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
