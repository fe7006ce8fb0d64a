"""``workbench profile --ranks N -- python train.py ARGS``: profile a script without changing it.

The script runs under mpiexec with the cluster's environment, Horovod's timeline switched on
through HOROVOD_TIMELINE, and a start-up hook on every rank that samples the process (CPU, RSS)
and records Keras batches if the script uses Keras. Afterwards the timeline is imported into the
same run, so the run holds every rank's samples and spans.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workbench.config import ClusterConfig
from workbench.formats.horovod_timeline import TimelineError, read_horovod_timeline
from workbench.store import Run, StreamWriter, create_run, update_run_meta

BOOT_DIR = Path(__file__).parent / "_profile_boot"


def _check_command(command: list[str]) -> None:
    if not command:
        raise ValueError("no command to profile: pass it after --, e.g. workbench profile -- python train.py")
    program = Path(command[0]).name
    if program.startswith("python"):
        script = next((arg for arg in command[1:] if not arg.startswith("-")), None)
        if "-m" in command[1:2] or "-c" in command[1:2]:
            return
        if script is None or not Path(script).is_file():
            raise FileNotFoundError(f"script {script!r} does not exist: check the path (relative to {Path.cwd()})")


def profile_command(
    command: list[str],
    *,
    ranks: int = 2,
    out: str | Path | None = None,
    name: str | None = None,
    timeline: bool = True,
    config: ClusterConfig | None = None,
) -> int:
    """Run ``command`` on ``ranks`` MPI ranks and record it as a run; returns its exit code."""
    _check_command(command)
    config = config or ClusterConfig(n=ranks)
    label = name or (Path(command[1]).stem if len(command) > 1 else Path(command[0]).name)
    run_path = create_run(
        out, f"profile-{label}", ranks=ranks, config={"command": command, "cluster": config.as_dict()}
    )
    environment = config.engine_environment()
    environment["WORKBENCH_PROFILE_RUN"] = str(run_path.resolve())
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOT_DIR), os.environ.get("PYTHONPATH")]))
    timeline_path = run_path / "horovod_timeline.json"
    if timeline:
        environment["HOROVOD_TIMELINE"] = str(timeline_path.resolve())
    full = config.launch_command(command, environment)
    print(f"workbench profile: run {run_path}", file=sys.stderr)
    completed = subprocess.run(full, env={**os.environ, **environment}, check=False)
    imported = 0
    if timeline and timeline_path.exists():
        try:
            events = read_horovod_timeline(timeline_path, run_id=run_path.name, ranks=ranks)
        except TimelineError as error:
            print(f"workbench profile: Horovod timeline not imported ({error})", file=sys.stderr)
        else:
            for rank, rows in events.groupby("rank"):
                StreamWriter(run_path, "events", int(rank)).write(rows.to_dict(orient="list"))
            imported = len(events)
    status = "finished" if completed.returncode == 0 else "failed"
    update_run_meta(run_path, status=status, exit_code=completed.returncode, timeline_events=imported)
    run = Run.load(run_path)
    per_rank = run.events.groupby("rank").size().to_dict() if len(run.events) else {}
    samples = run.memory.groupby("rank").size().to_dict() if len(run.memory) else {}
    print(
        f"workbench profile: {status}; events per rank {per_rank}; memory samples per rank {samples}; "
        f"load with workbench.Run.load({str(run_path)!r})",
        file=sys.stderr,
    )
    return completed.returncode
