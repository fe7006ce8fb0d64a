"""``workbench profile --ranks N -- python train.py ARGS``: profile a script without changing it.

The script runs under mpiexec with the cluster's environment, Horovod's timeline switched on
through HOROVOD_TIMELINE (its response cache off, so that every negotiation marks every rank's
readiness; set HOROVOD_CACHE_CAPACITY yourself to keep it), and a start-up hook on every rank
(``workbench/autorecord.py``) that samples the process (CPU, RSS), records every training step
(Keras batches, top-level calls of a ``tf.function``) and the host work between them, and, with
``--trace-steps A:B``, runs steps A..B-1 under TensorFlow's profiler. Afterwards the timeline and
the profiler traces are imported into the same run, and the command ends with the answer: steps/s
per rank, where the time went, the top findings and an HTML report (what ``workbench analyse``
prints).

Whatever happens to the script (a rank crashes, it never calls Horovod, the timeline is not
Horovod's), the run keeps what was recorded and the output says in one line what happened.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.config import ClusterConfig
from workbench.events import EVENT_COLUMNS
from workbench.formats.horovod_timeline import TimelineError, read_horovod_timeline
from workbench.store import Run, StreamWriter, create_run, update_run_meta

BOOT_DIR = Path(__file__).parent / "_profile_boot"
TIMELINE_FILE = "horovod_timeline.json"
REPORT_FILE = "report.html"
#: What ranks started by a notebook need for ``profiled_call``: a timeline that can be switched on
#: at run time, and the response cache off (see ``RESPONSE_CACHE``). ``Cluster(n, env=PROFILE_ENVIRONMENT)``.
PROFILE_ENVIRONMENT: dict[str, str] = {"HOROVOD_TIMELINE": "DYNAMIC", "HOROVOD_CACHE_CAPACITY": "0"}
#: Horovod's response cache: off while profiling (unless set), so that every step's negotiation
#: marks every rank's readiness in the timeline, which per-step lateness is read from.
RESPONSE_CACHE = "HOROVOD_CACHE_CAPACITY"


def check_command(command: list[str]) -> None:
    """One clear error for a command that cannot run: nothing given, or a script that does not exist."""
    if not command:
        raise ValueError("no command to profile: pass it after --, e.g. workbench profile -- python train.py")
    program = Path(command[0]).name
    if program.startswith("python"):
        script = next((arg for arg in command[1:] if not arg.startswith("-")), None)
        if "-m" in command[1:2] or "-c" in command[1:2]:
            return
        if script is None or not Path(script).is_file():
            raise FileNotFoundError(f"script {script!r} does not exist: check the path (relative to {Path.cwd()})")


def write_events(run_path: Path, events: pd.DataFrame) -> int:
    """Append imported events to the run, one part per rank; returns how many."""
    for rank, rows in events.groupby("rank", sort=True):
        StreamWriter(run_path, "events", int(rank)).write({c: rows[c].to_numpy() for c in EVENT_COLUMNS})
    return len(events)


def import_timeline(run_path: Path, *, enabled: bool) -> tuple[int, str]:
    """Horovod's timeline into the run: (events imported, one line saying what happened)."""
    path = run_path / TIMELINE_FILE
    if not enabled:
        return 0, "Horovod timeline: switched off (--no-timeline)"
    if not path.exists() or path.stat().st_size == 0:
        return 0, (
            "Horovod timeline: none written — the script never initialised Horovod (hvd.init()) or ran no"
            " collective; steps and host work are still recorded per rank"
        )
    try:
        events = read_horovod_timeline(path, run_id=run_path.name)
    except TimelineError as error:
        return 0, f"Horovod timeline: not imported ({error})"
    return write_events(run_path, events), f"Horovod timeline: {len(events)} spans of collectives in flight"


def import_tf_profiles(run_path: Path) -> tuple[int, str]:
    """TF profiler traces of every rank into the run: (events imported, one line)."""
    from workbench.formats.tf_profile import TfProfileError, read_tf_profiles

    try:
        events = read_tf_profiles(run_path)
    except TfProfileError as error:
        return 0, f"TF profiler: not imported ({error})"
    ranks = sorted(int(r) for r in events["rank"].unique())
    return write_events(run_path, events), f"TF profiler: {len(events)} allreduce waits from ranks {ranks}"


def profile_command(
    command: list[str],
    *,
    ranks: int = 2,
    out: str | Path | None = None,
    name: str | None = None,
    timeline: bool = True,
    trace_steps: str | None = None,
    report: bool = True,
    config: ClusterConfig | None = None,
) -> int:
    """Run ``command`` on ``ranks`` MPI ranks, record it as a run, print its analysis; returns its exit code."""
    from workbench.autorecord import parse_trace_steps

    check_command(command)
    parse_trace_steps(trace_steps)  # one clear error before anything starts
    config = config or ClusterConfig(n=ranks)
    label = name or (Path(command[1]).stem if len(command) > 1 else Path(command[0]).name)
    run_path = create_run(
        out,
        f"profile-{label}",
        ranks=ranks,
        config={"command": command, "cluster": config.as_dict(), "trace_steps": trace_steps},
    )
    environment = config.engine_environment()
    environment["WORKBENCH_PROFILE_RUN"] = str(run_path.resolve())
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOT_DIR), os.environ.get("PYTHONPATH")]))
    if timeline:
        environment["HOROVOD_TIMELINE"] = str((run_path / TIMELINE_FILE).resolve())
        if RESPONSE_CACHE not in environment and RESPONSE_CACHE not in os.environ:
            # A cached response skips the negotiation, and with it the ranks' readiness marks.
            environment[RESPONSE_CACHE] = "0"
    if trace_steps:
        environment["WORKBENCH_TRACE_STEPS"] = trace_steps
    full = config.launch_command(command, environment)
    print(f"workbench profile: run {run_path}", file=sys.stderr)
    completed = subprocess.run(full, env={**os.environ, **environment}, check=False)
    lines = []
    if completed.returncode != 0:
        lines.append(
            f"the script failed (exit code {completed.returncode} on at least one rank): below is what the ranks"
            " recorded until then; the script's own error is above"
        )
    imported, line = import_timeline(run_path, enabled=timeline)
    lines.append(line)
    traced = 0
    if trace_steps:
        traced, line = import_tf_profiles(run_path)
        lines.append(line)
    status = "finished" if completed.returncode == 0 else "failed"
    update_run_meta(
        run_path, status=status, exit_code=completed.returncode, timeline_events=imported, tf_profile_events=traced
    )
    for line in lines:
        print(f"workbench profile: {line}", file=sys.stderr)
    print_answer(run_path, report=report)
    return completed.returncode


def print_answer(run_path: Path, *, report: bool = True) -> None:
    """What ``workbench analyse`` prints, plus the HTML report's path."""
    from workbench import analysis
    from workbench.inspection import format_analysis, write_analysis_report

    run = Run.load(run_path)
    result = analysis.analyse_run(run.events, run.memory, run.meta)
    print(format_analysis(result))
    if report:
        path = write_analysis_report(run_path / REPORT_FILE, result, run)
        print(f"\nreport: {path}")
    print(f"run: {run_path}  (workbench analyse {run_path}; workbench.Run.load({str(run_path)!r}))")


def profiled_call(run_path: str | Path, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """On a rank (an ipyparallel engine): run ``function`` recorded as ``workbench profile`` records a script.

    Steps (top-level ``tf.function`` calls, Keras batches), host work between them and memory go
    into this rank's part of ``run_path``; if Horovod is initialised, its timeline too (rank 0
    writes it). The recording stops when the function returns or raises.
    """
    from workbench import autorecord
    from workbench.recorder import Recorder

    recorder = Recorder(run_path, memory_interval_s=0.2)
    autorecord.instrument(recorder)
    horovod = _initialised_horovod()
    if horovod is not None:
        try:
            horovod.start_timeline(str(Path(run_path).resolve() / TIMELINE_FILE))
        except ValueError as error:  # no timeline must never stop the training
            print(f"workbench: no Horovod timeline ({error}): start the ranks with env=PROFILE_ENVIRONMENT")
            horovod = None
    try:
        return function(*args, **kwargs)
    finally:
        if horovod is not None:
            horovod.stop_timeline()
        autorecord.close()


def _initialised_horovod() -> Any:
    """``horovod.tensorflow`` if this process imported and initialised it, else None."""
    module = sys.modules.get("horovod.tensorflow")
    try:
        return module if module is not None and module.is_initialized() else None
    except Exception:
        return None


def finish_run(run_path: str | Path, *, failed: bool = False) -> list[str]:
    """In the kernel, after ``profiled_call`` ran on every rank: import the timeline, mark the run ended."""
    run_path = Path(run_path)
    imported, line = import_timeline(run_path, enabled=True)
    update_run_meta(run_path, status="failed" if failed else "finished", timeline_events=imported)
    return [line]
