"""Inference in a loop, several ways, with one RSS sample after every call: does ``predict`` leak?

The published study's S-GAN training called ``Model.predict`` on the discriminator in a loop and one rank grew
past 129 GB (TF issue 33009, Keras issue 13118); ``predict_on_batch`` fixed it. This workload
repeats that pattern on a small S-GAN-shaped discriminator so the leak detector
(``workbench.analysis.memory.memory_growth``) can judge each way of calling the model:

- ``predict``          ``model.predict(x, verbose=0)``: builds a data adapter and iterator per call
- ``predict_on_batch`` ``model.predict_on_batch(x)``: the published study's fix
- ``call``             ``model(x, training=False)``: the plain eager forward pass (output turned to
                       numpy, as every other method returns numpy)
- ``tf_function``      the same forward pass compiled once with ``tf.function``: what TF advises for
                       repeated small inferences
- ``kept_outputs``     a CONTROL with a real leak: ``predict_on_batch`` of the discriminator's first
                       feature map (about 0.8 MB at batch 32) appended to a list that is never
                       emptied. The detector must call this one a leak and stay quiet on the others.

Order matters: all methods run one after another in the same process, so memory one method
allocates (TF caches, the allocator's free lists) can be reused by the next and hide or shift
growth, and a young process still settles (memory pools, caches) for a few hundred calls. So:
first every method gets ``warmup`` unsampled calls (graph tracing, first allocations: growth but
not a leak), then the measured loops run, each after ``gc.collect()``; the non-control methods are
rotated by rank (rank r starts r places further along), and the control always runs last, so its
kept arrays never sit under another method.

Runs on every rank (an ipyparallel engine, imported there: ``view.apply(run_on_rank, ...)``) or in
a single process. TensorFlow is imported inside the functions so that importing this module is cheap.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: The ways of calling the model, in the default order; the last one is the leaking control.
METHODS: tuple[str, ...] = ("predict", "predict_on_batch", "call", "tf_function", "kept_outputs")
CONTROL = "kept_outputs"
#: Span phase of every inference call: inference is the evaluation phase of the taxonomy.
PHASE = "evaluation"
INPUT_SHAPE = (28, 28, 1)
NUM_CLASSES = 10


def build_discriminator(
    input_shape: tuple[int, int, int] = INPUT_SHAPE, num_classes: int = NUM_CLASSES, width: int = 32, seed: int = 0
) -> tuple[Any, Any]:
    """The S-GAN discriminator, shrunk for a CPU: (classifier, first feature map model), shared weights.

    S-GAN discriminators are strided convolutions with LeakyReLU, dropout and a class head; the
    supervised classifier is what the published study's training loop called ``predict`` on.
    """
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    layers = tf.keras.layers
    inputs = tf.keras.Input(shape=input_shape, name="image")
    features = layers.LeakyReLU(0.2, name="features")(
        layers.Conv2D(width, 3, strides=2, padding="same", name="conv1")(inputs)
    )
    x = layers.LeakyReLU(0.2)(layers.Conv2D(2 * width, 3, strides=2, padding="same", name="conv2")(features))
    x = layers.LeakyReLU(0.2)(layers.Conv2D(2 * width, 3, strides=2, padding="same", name="conv3")(x))
    x = layers.Dropout(0.4)(layers.Flatten()(x))
    outputs = layers.Dense(num_classes, activation="softmax", name="classes")(x)
    classifier = tf.keras.Model(inputs, outputs, name="sgan_discriminator")
    classifier.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    feature_model = tf.keras.Model(inputs, features, name="sgan_features")
    return classifier, feature_model


def kept_mb_per_call(batch: int, width: int = 32) -> float:
    """MB the control keeps per call: the first feature map, ``batch x 14 x 14 x width`` float32."""
    return batch * (INPUT_SHAPE[0] // 2) * (INPUT_SHAPE[1] // 2) * width * 4 / 1e6


def method_order(methods: tuple[str, ...] | list[str], rank: int) -> list[str]:
    """The order a rank runs ``methods``: non-control methods rotated by ``rank``, the control last."""
    plain = [m for m in methods if m != CONTROL]
    if plain:
        shift = rank % len(plain)
        plain = plain[shift:] + plain[:shift]
    return plain + ([CONTROL] if CONTROL in methods else [])


def make_caller(method: str, classifier: Any, feature_model: Any) -> tuple[Any, list[np.ndarray]]:
    """A one-argument function doing one inference the ``method`` way, and the list it keeps (control)."""
    kept: list[np.ndarray] = []
    if method == "predict":
        return (lambda x: classifier.predict(x, verbose=0)), kept
    if method == "predict_on_batch":
        return classifier.predict_on_batch, kept
    if method == "call":
        return (lambda x: np.asarray(classifier(x, training=False))), kept
    if method == "tf_function":
        import tensorflow as tf

        forward = tf.function(lambda x: classifier(x, training=False))
        return (lambda x: forward(tf.convert_to_tensor(x)).numpy()), kept
    if method == CONTROL:

        def keep(x: np.ndarray) -> np.ndarray:
            out = feature_model.predict_on_batch(x)
            kept.append(out)  # the leak: every call's output stays reachable
            return out

        return keep, kept
    raise ValueError(f"unknown method {method!r}: choose from {', '.join(METHODS)}")


def input_batches(batch: int, seed: int, count: int = 4) -> list[np.ndarray]:
    """A few fixed MNIST-shaped batches cycled through (new data per call, no allocation per call)."""
    rng = np.random.default_rng(seed)
    return [rng.random((batch, *INPUT_SHAPE), dtype=np.float32) for _ in range(count)]


def run_methods(
    recorder: Any,
    *,
    methods: tuple[str, ...] | list[str] = METHODS,
    iterations: int = 150,
    warmup: int = 20,
    batch: int = 32,
    seed: int = 0,
    width: int = 32,
) -> dict[str, Any]:
    """Run every method on ``recorder``'s rank; one RSS sample (label = method) after each measured call.

    Returns per-method timing (ms per call, measured calls only) and the order the methods ran in.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}: choose from {', '.join(METHODS)}")
    if iterations < 1 or warmup < 0 or batch < 1:
        raise ValueError(f"iterations={iterations}, warmup={warmup}, batch={batch}: need iterations, batch >= 1")
    classifier, feature_model = build_discriminator(width=width, seed=seed)
    batches = input_batches(batch, seed + recorder.rank)
    order = method_order(list(methods), recorder.rank)
    callers = {method: make_caller(method, classifier, feature_model) for method in order}
    for method, (call, kept) in callers.items():  # warm every method up before measuring any
        for i in range(warmup):
            with recorder.phase(PHASE, method, detail="warmup", step=i):
                call(batches[i % len(batches)])
            # the control keeps nothing while warming up: freed kept arrays would leave holes the
            # allocator refills during the measured calls, hiding part of the growth
            kept.clear()
    timing: dict[str, dict[str, float]] = {}
    for method in order:
        call, kept = callers.pop(method)
        gc.collect()
        durations = np.empty(iterations, dtype=np.float64)
        rss = np.empty(iterations, dtype=np.int64)
        for i in range(iterations):
            started = time.perf_counter()
            with recorder.phase(PHASE, method, step=i):
                call(batches[i % len(batches)])
            durations[i] = time.perf_counter() - started
            rss[i] = recorder.sample_memory(method, i)
        timing[method] = {
            "calls": float(iterations),
            "ms_per_call": float(durations.mean() * 1e3),
            "ms_median": float(np.median(durations) * 1e3),
            "rss_start_mb": float(rss[0]) / 1e6,
            "rss_end_mb": float(rss[-1]) / 1e6,
            "kept_mb": sum(a.nbytes for a in kept) / 1e6,
        }
        kept.clear()
        del call, kept
    gc.collect()
    return {"order": order, "timing": timing}


def run_on_rank(
    run_path: str | Path,
    *,
    methods: tuple[str, ...] | list[str] = METHODS,
    iterations: int = 150,
    warmup: int = 20,
    batch: int = 32,
    seed: int = 0,
    width: int = 32,
    rank: int | None = None,
) -> dict[str, Any]:
    """Engine entry point: own Recorder (rank from MPI), run every method, close; return timing.

    Clocks are aligned to rank 0 over MPI when this process is an MPI rank of a larger world.
    """
    from workbench.recorder import Recorder

    started = time.perf_counter()
    recorder = Recorder(run_path, rank=rank)
    try:
        comm = _mpi_world()
        if comm is not None:
            recorder.align_clocks(comm)
        result = run_methods(
            recorder, methods=methods, iterations=iterations, warmup=warmup, batch=batch, seed=seed, width=width
        )
    finally:
        recorder.close()
    return {
        "rank": recorder.rank,
        "host": recorder.host,
        "pid": os.getpid(),
        "seconds": time.perf_counter() - started,
        **result,
    }


def _mpi_world() -> Any:
    """COMM_WORLD when mpi4py is already initialised with more than one rank (an engine), else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    comm = mpi.COMM_WORLD
    return comm if comm.Get_size() > 1 else None
