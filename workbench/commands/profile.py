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

Where the ranks run is decided by ``workbench.placement``: this machine, the Slurm allocation the command
runs in (``salloc``, an ``sbatch`` script), a hostfile, or the miniature cluster.

Whatever happens to the script (a rank crashes, it never calls Horovod, the timeline is not
Horovod's), the run keeps what was recorded and the output says in one line what happened; a launcher
that never started a rank is named as the one that failed, in its own words.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from workbench.config import ClusterConfig, mpich_horovod_prefix
from workbench.extras import keras_3_line
from workbench.faults import launcher_refusal
from workbench.formatting import format_seconds
from workbench.placement import PIN_GPUS, Placement, place, script_pins_gpus
from workbench.profile import BOOT_DIR, RESPONSE_CACHE, TIMELINE_FILE, import_tf_profiles, import_timeline
from workbench.store import create_run, ranks_with_meta, update_run_meta

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
    ranks: int | None = None,
    out: str | Path | None = None,
    name: str | None = None,
    timeline: bool = True,
    trace_steps: str | None = None,
    report: bool = True,
    config: ClusterConfig | None = None,
    placement: Placement | None = None,
    pin_gpus: str = "auto",
) -> int:
    """Run ``command`` on MPI ranks, record it as a run, print its analysis; returns its exit code.

    Where the ranks run is ``placement`` (``workbench.placement.place``: this machine, a hostfile, the Slurm
    allocation this runs in, the miniature cluster); ``config`` alone runs them as it says; neither: ``place()``
    with ``ranks`` decides (inside ``salloc``/``sbatch``, the allocation's tasks).
    """
    from workbench.autorecord import parse_trace_steps

    if ranks is not None and ranks < 1:
        raise ValueError(f"--ranks {ranks}: profile on at least 1 rank")
    if pin_gpus not in PIN_GPUS:
        raise ValueError(f"--pin-gpus {pin_gpus!r}: use one of {', '.join(PIN_GPUS)}")
    check_command(command)
    parse_trace_steps(trace_steps)  # one clear error before anything starts
    if placement is None:
        placement = Placement("local", config) if config is not None else place(ranks=ranks)
    config = placement.config
    keras_3 = keras_3_line({**os.environ, **config.env})
    if keras_3:
        print(f"workbench: note: {keras_3}", file=sys.stderr)
    label = name or run_label(command)
    run_path = create_run(
        out,
        f"profile-{label}",
        ranks=config.ranks,
        config={
            "command": command,
            "cluster": config.as_dict(),
            "placement": placement.as_dict(),
            "trace_steps": trace_steps,
        },
    )
    environment = ranks_environment(config, run_path, gpu_pinning(pin_gpus, command), timeline, trace_steps)
    full = placement.command(command, environment)
    print(f"workbench profile: run {run_path}", file=sys.stderr)
    print(f"workbench profile: {placement.describe()}", file=sys.stderr)
    started = time.monotonic()
    launcher_output = OutputTail()
    returncode, stopped_by = run_until_done_or_stopped(
        full, {**os.environ, **environment, **placement.environment}, stderr=launcher_output
    )
    refusal = None
    ran = ranks_with_meta(run_path)
    if returncode != 0 and stopped_by is None and len(ran) < config.ranks:
        # the ranks' recorders start before the script's first line: a rank without one never ran the script
        launcher = config.mpiexec_command()[0]
        refusal = launcher_failure_line(launcher, launcher_output.text(), returncode, config.ranks, ran)
    refused = refusal is not None
    ending = refusal or ending_line(returncode, stopped_by, time.monotonic() - started)
    lines = [ending] if ending else []
    imported = traced = 0
    if not refused:  # the script ran: what its timeline and traces hold (or why they hold nothing) is news
        imported, line = import_timeline(run_path, enabled=timeline)
        lines.append(line)
        if trace_steps:
            traced, line = import_tf_profiles(run_path)
            lines.append(line)
    status = "interrupted" if stopped_by else "finished" if returncode == 0 else "failed"
    update_run_meta(
        run_path,
        status=status,
        exit_code=returncode,
        stopped_by=stopped_by,
        launcher_refused=refused,
        timeline_events=imported,
        tf_profile_events=traced,
    )
    if not launcher_output.ended_line:
        print(file=sys.stderr)  # the launcher's last words had no newline: ours start a line of their own
    for line in lines:
        print(f"workbench profile: {line}", file=sys.stderr)
    if status == "failed" and not any((run_path / "events").rglob("*.parquet")):
        # nothing to analyse: the ranks never started, or the script failed before its first recorded call
        when = "" if refused else " before the script failed"
        print(f"workbench profile: nothing was recorded{when}; run: {run_path}", file=sys.stderr)
        return returncode
    print_answer(run_path, report=report)
    return 128 + signal.Signals[stopped_by].value if stopped_by else returncode


def ranks_environment(
    config: ClusterConfig, run_path: Path, pin_gpus: str, timeline: bool, trace_steps: str | None
) -> dict[str, str]:
    """What every rank's environment adds: the cluster's settings, the run it records into, the boot module that
    starts its recorder (and MPICH's Horovod where that is the MPI), Horovod's timeline, steps to trace."""
    environment = config.engine_environment()
    environment["WORKBENCH_PROFILE_RUN"] = str(run_path.resolve())
    environment["WORKBENCH_PIN_GPUS"] = pin_gpus
    python_path = [str(BOOT_DIR), os.environ.get("PYTHONPATH")]
    if config.mpi == "mpich" and mpich_horovod_prefix().is_dir():
        python_path.insert(1, str(mpich_horovod_prefix()))  # Horovod compiled against MPICH (make horovod-mpich)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, python_path))
    if timeline:
        environment["HOROVOD_TIMELINE"] = str((run_path / TIMELINE_FILE).resolve())
        if RESPONSE_CACHE not in environment and RESPONSE_CACHE not in os.environ:
            # A cached response skips the negotiation, and with it the ranks' readiness marks.
            environment[RESPONSE_CACHE] = "0"
    if trace_steps:
        environment["WORKBENCH_TRACE_STEPS"] = trace_steps
    return environment


def ending_line(returncode: int, stopped_by: str | None, seconds: float) -> str | None:
    """How the ranks ended when the launcher did start them: stopped by a signal, the script failed, or None."""
    if stopped_by is not None:
        return (
            f"stopped by {stopped_by} after {format_seconds(seconds)}: the ranks were ended;"
            " below is what they recorded until then"
        )
    if returncode != 0:
        return (
            f"the script failed (exit code {returncode} on at least one rank): below is what the ranks"
            " recorded until then; the script's own output is above"
        )
    return None


def gpu_pinning(choice: str, command: list[str]) -> str:
    """``--pin-gpus`` as the ranks' boot reads it: ``workbench`` (narrow CUDA_VISIBLE_DEVICES), ``script``, ``off``.

    ``auto`` reads the script: one that picks its GPU by its local rank (Horovod's examples: ``gpus[hvd.local_rank()]``)
    would fail to index a list narrowed to one GPU, so it keeps every GPU of its node.
    """
    if choice == "no":
        return "off"
    if choice == "yes":
        return "workbench"
    script = command[1] if len(command) > 1 and Path(command[0]).name.startswith("python") else None
    return "script" if script_pins_gpus(script) else "workbench"


def launcher_failure_line(launcher: str, output: str, returncode: int, ranks: int, ran: list[int]) -> str | None:
    """One line for ranks that never started: what the launcher said (its own words) and what to change.

    None where some ranks ran and the launcher said nothing known: a rank's script that failed first can end the
    job before a slower rank's start, which is the script's failure, not the launcher's.
    """
    launcher = Path(launcher).name
    missing = sorted(set(range(ranks)) - set(ran))
    plural = "s" * (len(missing) > 1)
    which = f"rank{plural} {', '.join(map(str, missing))} never started" if ran else "no rank started"
    refusal = launcher_refusal(output)
    if refusal is not None:
        said = refusal.message(launcher)
    elif ran:
        return None
    else:
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
        said = f"{launcher} ended with exit code {returncode}" + (f"; its last line: {last[:300]!r}" if last else "")
    return f"{which} the script: {said}"


class OutputTail:
    """A launcher's stderr passed through to ours as it comes, its first and last ``keep`` bytes kept to read.

    Why both ends: Open MPI prints its refusal first and the ranks' own errors after; a long job's tail holds
    the last words. Bounded, so a chatty job does not grow the profiler's memory.
    """

    def __init__(self, keep: int = 256 * 1024) -> None:
        self.keep = keep
        self._head = bytearray()
        self._tail = bytearray()
        self._thread: threading.Thread | None = None
        #: whether what was passed on ended a line (or nothing was)
        self.ended_line = True

    def follow(self, stream: IO[bytes]) -> None:
        """Copy ``stream`` to this process's stderr on a thread until it closes."""
        self._thread = threading.Thread(target=self._copy, args=(stream,), name="launcher-stderr", daemon=True)
        self._thread.start()

    def _copy(self, stream: IO[bytes]) -> None:
        target = getattr(sys.stderr, "buffer", None)
        for chunk in iter(lambda: stream.read1(65536), b""):
            # kept before it is passed on: a slow reader of our stderr must not keep the launcher's words from us
            room = max(0, self.keep - len(self._head))
            self._head += chunk[:room]
            self._tail += chunk[room:]
            del self._tail[: max(0, len(self._tail) - self.keep)]
            self.ended_line = chunk.endswith(b"\n")
            if target is not None:
                target.write(chunk)
                target.flush()
            else:
                sys.stderr.write(chunk.decode(errors="replace"))

    def join(self, timeout_s: float = 15.0) -> None:
        """Wait for the launcher's last words: a loaded machine relays remote daemons' lines after mpiexec ends."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def text(self) -> str:
        return (bytes(self._head) + bytes(self._tail)).decode(errors="replace")


#: Seconds mpiexec gets to end the ranks after SIGTERM before it is killed.
STOP_GRACE_S = 10.0


def run_until_done_or_stopped(
    command: list[str], environment: dict[str, str], *, stderr: OutputTail | None = None
) -> tuple[int, str | None]:
    """Run ``command`` to its end: ``(exit code, None)``; or, when this process gets SIGINT (Ctrl-C) or SIGTERM
    (``timeout``, a batch system's time limit), end it and return ``(its exit code, the signal's name)``.

    Why: a hung job is what a profiler is most needed for, and it usually ends by a signal. The run must
    still be marked and analysed: its spans, memory samples and Horovod's timeline say where it stalled.
    mpiexec gets SIGTERM (it passes it on to the ranks and reaps them), then SIGKILL after ``STOP_GRACE_S``.
    With ``stderr`` the command's standard error goes through it (passed on, and kept to read).
    """
    received: list[str] = []

    def stop(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    process = subprocess.Popen(command, env=environment, stderr=subprocess.PIPE if stderr is not None else None)
    if stderr is not None and process.stderr is not None:
        stderr.follow(process.stderr)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        returncode = process.wait()
        if stderr is not None:
            stderr.join()
        return returncode, None
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
    from workbench.store import RunData
    from workbench.text import format_analysis

    run = RunData.load(run_path)
    result = analysis.analyse_run(run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters)
    print(format_analysis(result))
    if report:
        path = write_analysis_report(run_path / REPORT_FILE, result, run)
        print(f"\nreport: {path}")
    print(f"run: {run_path}  (workbench analyse {run_path}; workbench.Run.load({str(run_path)!r}))")
