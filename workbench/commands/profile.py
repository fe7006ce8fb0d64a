"""``workbench profile --ranks N -- python train.py ARGS``: profile a script without changing it.

The script runs under mpiexec with the cluster's environment, Horovod's timeline switched on
through HOROVOD_TIMELINE (its response cache off, so that every negotiation marks every rank's
readiness; set HOROVOD_CACHE_CAPACITY yourself to keep it), and a start-up hook on every rank
(``workbench/autorecord.py``) that samples the process (CPU, RSS), records every training step
(a top-level ``tf.function`` call that trains: Keras batches, a Horovod step), every Keras call
around its model runs, and the time between calls (host work, or off the CPU), and, with
``--trace-steps A:B``, runs steps A..B-1 under TensorFlow's profiler. Afterwards the timeline and
the profiler traces are imported into the same run, and the command ends with the answer: steps/s
per rank, where the time went, the top findings and an HTML report (what ``workbench analyse``
prints).

Whatever happens to the script (a rank crashes, it never calls Horovod, the timeline is not
Horovod's), the run keeps what was recorded and the output says in one line what happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from workbench.config import ClusterConfig
from workbench.profile import BOOT_DIR, RESPONSE_CACHE, TIMELINE_FILE, import_tf_profiles, import_timeline
from workbench.store import create_run, update_run_meta
from workbench.text import format_seconds

REPORT_FILE = "report.html"


def check_command(command: list[str]) -> None:
    """One clear error for a command that cannot run: nothing given, or a script that does not exist."""
    if not command:
        raise ValueError("no command to profile: pass it after --, e.g. workbench profile -- python train.py")
    program = Path(command[0]).name
    if not program.startswith("python") and shutil.which(command[0]) is None:
        if command[0].endswith(".py") and Path(command[0]).is_file():
            raise ValueError(f"{command[0]} is not a command: did you mean workbench profile -- python {command[0]}?")
        raise FileNotFoundError(f"command {command[0]!r} not found: check its name, or its path and that it runs")
    if program.startswith("python"):
        script = next((arg for arg in command[1:] if not arg.startswith("-")), None)
        if "-m" in command[1:2] or "-c" in command[1:2]:
            return
        if script is None or not Path(script).is_file():
            raise FileNotFoundError(f"script {script!r} does not exist: check the path (relative to {Path.cwd()})")


def run_label(command: list[str]) -> str:
    """The run's name after ``profile-``: the script's stem, the module of ``-m``, ``inline`` for ``-c``."""
    if Path(command[0]).name.startswith("python") and len(command) > 2 and command[1] in ("-m", "-c"):
        return command[2].rsplit(".", 1)[-1] if command[1] == "-m" else "inline"
    return Path(command[1]).stem if len(command) > 1 else Path(command[0]).name


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

    if ranks < 1:
        raise ValueError(f"--ranks {ranks}: profile on at least 1 rank")
    check_command(command)
    parse_trace_steps(trace_steps)  # one clear error before anything starts
    config = config or ClusterConfig(n=ranks)
    label = name or run_label(command)
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
    started = time.monotonic()
    returncode, stopped_by = run_until_done_or_stopped(full, {**os.environ, **environment})
    lines = []
    if stopped_by is not None:
        lines.append(
            f"stopped by {stopped_by} after {format_seconds(time.monotonic() - started)}: the ranks were ended;"
            " below is what they recorded until then"
        )
    elif returncode != 0:
        lines.append(
            f"the script failed (exit code {returncode} on at least one rank): below is what the ranks"
            " recorded until then; the script's own output is above"
        )
    imported, line = import_timeline(run_path, enabled=timeline)
    lines.append(line)
    traced = 0
    if trace_steps:
        traced, line = import_tf_profiles(run_path)
        lines.append(line)
    status = "interrupted" if stopped_by else "finished" if returncode == 0 else "failed"
    update_run_meta(
        run_path,
        status=status,
        exit_code=returncode,
        stopped_by=stopped_by,
        timeline_events=imported,
        tf_profile_events=traced,
    )
    for line in lines:
        print(f"workbench profile: {line}", file=sys.stderr)
    if status == "failed" and not any((run_path / "events").rglob("*.parquet")):
        # nothing to analyse: the script failed before its first recorded call (a syntax error, an import)
        print(f"workbench profile: nothing was recorded before the script failed; run: {run_path}", file=sys.stderr)
        return returncode
    print_answer(run_path, report=report)
    return 128 + signal.Signals[stopped_by].value if stopped_by else returncode


#: Seconds mpiexec gets to end the ranks after SIGTERM before it is killed.
STOP_GRACE_S = 10.0


def run_until_done_or_stopped(command: list[str], environment: dict[str, str]) -> tuple[int, str | None]:
    """Run ``command`` to its end: ``(exit code, None)``; or, when this process gets SIGINT (Ctrl-C) or SIGTERM
    (``timeout``, a batch system's time limit), end it and return ``(its exit code, the signal's name)``.

    Why: a hung job is what a profiler is most needed for, and it usually ends by a signal. The run must
    still be marked and analysed: its spans, memory samples and Horovod's timeline say where it stalled.
    mpiexec gets SIGTERM (it passes it on to the ranks and reaps them), then SIGKILL after ``STOP_GRACE_S``.
    """
    received: list[str] = []

    def stop(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    process = subprocess.Popen(command, env=environment)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return process.wait(), None
    except KeyboardInterrupt:
        name = received[0] if received else "SIGINT"
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the clean-up short
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return process.returncode, name
    finally:
        signal.signal(signal.SIGTERM, previous)


def print_answer(run_path: Path, *, report: bool = True) -> None:
    """What ``workbench analyse`` prints, plus the HTML report's path."""
    from workbench import analysis
    from workbench.commands.analyse import write_analysis_report
    from workbench.store import Run
    from workbench.text import format_analysis

    run = Run.load(run_path)
    result = analysis.analyse_run(run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters)
    print(format_analysis(result))
    if report:
        path = write_analysis_report(run_path / REPORT_FILE, result, run)
        print(f"\nreport: {path}")
    print(f"run: {run_path}  (workbench analyse {run_path}; workbench.Run.load({str(run_path)!r}))")
