"""Import TensorFlow profiler traces (one per rank) as per-rank allreduce waits.

``workbench profile --trace-steps A:B`` runs steps A..B-1 of every rank under
``tf.profiler.experimental`` into ``<run>/tf_profile/rank-N/`` (one folder per rank: TF names
the file by the host, which ranks on one machine share). TF 2.15 converts its ``.xplane.pb`` into
Chrome-trace JSON itself, through a private module: ``xspace_to_tools_data`` is wrapped here and
nowhere else (``xplane_to_trace``), so a TF upgrade that moves it breaks one tested function.

In that trace each Horovod collective is an asynchronous kernel: ``ExecutorState::ProcessAsync``
events with ``args.kernel_type`` ``HorovodAllreduce`` (or another ``Horovod*`` kernel), a start
and a done. Between them the rank's executor waits for Horovod: that gap is this rank's wait for
the collective, measured on the rank itself. Timestamps are µs after the profiler session's
start, an instant inside ``tf.profiler.experimental.start`` that no one sees: on a busy machine that
call lasts milliseconds, longer than a small step, so the clock read before it (``start_ns`` in
``clock.json``) can put every kernel a step early. The recorder therefore writes clock marks into
the trace right after the start (``workbench_clock_mark`` events, each between two reads of the
run's clock, ``marks`` in ``clock.json``); ``trace_origin_ns`` places the trace with the tightest
one, to within half its width (microseconds), and falls back to ``start_ns`` without marks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.autorecord import TF_PROFILE_CLOCK_MARK
from workbench.events import IN_FLIGHT, events_frame

TF_PROFILE_DIR = "tf_profile"
CLOCK_FILE = "clock.json"
#: Name of the imported spans (``analysis.straggler`` reads them); ``detail``: the kernel and the tensor.
SPAN_NAME = ev.TF_PROFILER_SPAN
#: The clock marks the recorder writes into the trace.
CLOCK_MARK = TF_PROFILE_CLOCK_MARK


class TfProfileError(ValueError):
    """No usable TF profiler trace."""


def xplane_to_trace(path: str | Path) -> dict[str, Any]:
    """The Chrome-trace JSON TensorFlow's own converter makes of one ``.xplane.pb`` file."""
    # TF's C++ converter logs each table it writes (I0000 ... trace_events.cc) unless told not to
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        from tensorflow.python.profiler.internal import _pywrap_profiler as converter
    except ImportError as error:
        raise TfProfileError(f"this TensorFlow cannot convert its profiles ({error}): pin tensorflow 2.15") from None
    data, ok = converter.xspace_to_tools_data([str(path)], "trace_viewer@", {})
    if not ok:
        raise TfProfileError(f"TensorFlow could not convert {path}: re-run the profile")
    return json.loads(data)


def trace_origin_ns(trace: dict[str, Any], clock: dict[str, Any]) -> int:
    """The instant the trace's timestamps count from, on the run's clock.

    The ``k``-th clock mark of the trace began between ``clock["marks"][k]`` (two reads of the run's
    clock); the narrowest pair gives ``its middle - its timestamp``. Without marks (or not as many in
    the trace as in ``clock.json``): ``clock["start_ns"]``, read just before the profiler started.
    """
    marks = clock.get("marks") or []
    stamps = sorted(float(e["ts"]) for e in trace.get("traceEvents", []) if e.get("name") == CLOCK_MARK and "ts" in e)
    if not marks or len(stamps) != len(marks):
        return int(clock["start_ns"])
    low, high, stamp = min(((int(a), int(b), ts) for (a, b), ts in zip(marks, stamps)), key=lambda m: m[1] - m[0])
    return (low + high) // 2 - round(stamp * 1000)


def horovod_waits(trace: dict[str, Any], *, start_ns: int, rank: int, run_id: str = "") -> pd.DataFrame:
    """Per-rank spans (phase ``in_flight``) from the start to the done of every Horovod kernel.

    ``ExecutorState::ProcessAsync::Start`` and ``::Done`` of one kernel share its ``name`` and
    ``step_id``; a start without its done (the trace ended) is left out.
    """
    started: dict[tuple[str, str], float] = {}
    rows = []
    kernels = [
        event
        for event in trace.get("traceEvents", [])
        if str((event.get("args") or {}).get("kernel_type", "")).startswith("Horovod") and "ts" in event
    ]
    kernels.sort(key=lambda event: float(event["ts"]))  # the converter does not order them by time
    for event in kernels:
        args = event["args"]
        kernel = str(args["kernel_type"])
        key = (str(args.get("name", "")), str(args.get("step_id", "")))
        name = str(event.get("name", ""))
        if name.endswith("::Start"):
            started[key] = float(event["ts"])
        elif name.endswith("::Done") and key in started:
            begin = started.pop(key)
            rows.append(
                {
                    "run_id": run_id,
                    "rank": rank,
                    "phase": IN_FLIGHT,
                    "name": SPAN_NAME,
                    "detail": f"{kernel} {key[0]}",
                    "start_ns": start_ns + round(begin * 1000),
                    "end_ns": start_ns + round((float(event["ts"]) + float(event.get("dur", 0))) * 1000),
                }
            )
    if not rows:
        return events_frame(pd.DataFrame(columns=["rank", "phase", "start_ns", "end_ns"]))
    return events_frame(rows)


def read_tf_profiles(run_path: str | Path) -> pd.DataFrame:
    """Every rank's traced Horovod waits, on the run's clock; one clear error when there are none."""
    run_path = Path(run_path)
    folders = sorted((run_path / TF_PROFILE_DIR).glob("rank-*"))
    if not folders:
        raise TfProfileError(
            f"no traces in {run_path / TF_PROFILE_DIR}: the script ran fewer steps than --trace-steps asks"
            " for, or its steps are not tf.function calls"
        )
    frames = []
    for folder in folders:
        clock_file = folder / CLOCK_FILE
        files = sorted(folder.glob("plugins/profile/*/*.xplane.pb"))
        if not clock_file.is_file() or not files:
            continue
        clock = json.loads(clock_file.read_text())
        trace = xplane_to_trace(files[-1])
        frames.append(horovod_waits(trace, start_ns=trace_origin_ns(trace, clock), rank=int(clock["rank"])))
    frames = [f for f in frames if len(f)]
    if not frames:
        raise TfProfileError("the traces hold no Horovod kernel: the traced steps ran no Horovod collective")
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["rank", "start_ns"], kind="stable", ignore_index=True).astype({"start_ns": np.int64})
