"""Engines as one Slurm batch job whose tasks form one MPI world; the job's state read back from Slurm.

Why this module: ipyparallel's own Slurm launcher runs ``srun ipengine`` and leaves the MPI wiring to
the site's ``MpiDefault`` (with Slurm's default ``none`` every engine is its own world of size 1),
writes its batch script into the current directory, and cannot tell a job that failed or can never
start from one that is slow to start. Here the workbench writes the script (in a temporary folder),
chooses how ranks start, and polls ``squeue`` so a failing or impossible job is reported at once with
Slurm's own state and reason.

Two ways to start the ranks inside the allocation (``ClusterConfig.slurm_mpi``):

- ``"mpiexec"`` (default): the venv's ``mpiexec -n N ... ipengine --mpi`` runs in the batch script;
  Open MPI reads the allocation and starts its daemons on the other nodes with ``srun``. It depends
  only on the MPI the ranks already use (also MPICH), not on how the site built Slurm.
- ``"pmix"``: ``srun --mpi=pmix ipengine --mpi``; needs Slurm built with PMIx and a PMIx that the
  venv's Open MPI can talk to.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from workbench.extras import require

try:
    from ipyparallel.cluster.launcher import LauncherError, SlurmEngineSetLauncher
except ImportError:  # the cluster extra is not installed: one line naming it
    require("cluster", for_what="engines launched by Slurm (Cluster(launcher='slurm'))")
    raise

from workbench.config import ClusterConfig, ConfigError

#: How long one squeue or sacct call may take before Slurm counts as not answering.
QUERY_TIMEOUT_S = 10.0
#: Job states in which the job's processes may still exist.
ACTIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "REQUEUED", "SIGNALING"}
)
#: Pending reasons that waiting cannot fix: the job as submitted never fits (Slurm's reason codes).
NEVER_STARTS = {
    "PartitionConfig": "the partition's nodes cannot hold this many ranks × CPUs per rank (or GPUs)",
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionTimeLimit": "time_limit is above the partition's MaxTime",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "BadConstraints": "the constraints cannot be met",
    "InvalidAccount": "the account is not valid",
    "InvalidQOS": "the QOS is not valid",
    "AccountNotAllowed": "the account may not use this partition",
    "QOSNotAllowed": "the QOS may not use this partition",
    "DependencyNeverSatisfied": "a dependency can never be satisfied",
    "JobHeldAdmin": "an administrator holds the job",
}
#: How long a "never starts" reason must stay before the job is given up (Slurm refines its first reason).
REASON_SETTLES_S = 2.5
WHAT_TO_DO = (
    "ask for fewer ranks or threads_per_rank, more nodes, another partition or a shorter time_limit "
    "(or pass slurm_args=('--overcommit',) to let ranks share cores)"
)


def slurm_command(name: str) -> str:
    """Path of a Slurm client command, or a ConfigError saying where to run."""
    path = shutil.which(name)
    if path is None:
        raise ConfigError(
            f"launcher='slurm' needs Slurm's `{name}` on PATH: run on a Slurm login node "
            "(or `make slurm` and tests/slurm/slurm-local.sh for a local test cluster)"
        )
    return path


def _template_text(text: str) -> str:
    """Text that ipyparallel's template formatter leaves as it is (braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


def batch_script(config: ClusterConfig, environment: dict[str, str]) -> str:
    """The sbatch script: resources from ``config``, then the ranks started one way or the other.

    ``{n}``, ``{output_file}``, ``{cluster_id}`` and ``{program_and_args}`` are filled in by
    ipyparallel when it submits (``program_and_args`` is ``ipengine ... --mpi``).
    """
    # ipyparallel's fields stay as they are; every value from the config is escaped
    fields = ["--job-name=ipengine-{cluster_id}", "--ntasks={n}", "--output={output_file}"]
    options = [f"--cpus-per-task={config.threads}", "--export=ALL"]
    if config.nodes is not None:
        options.append(f"--nodes={min(config.nodes, config.ranks)}")
    if config.partition:
        options.append(f"--partition={config.partition}")
    if config.account:
        options.append(f"--account={config.account}")
    if config.time_limit:
        options.append(f"--time={config.time_limit}")
    if config.gpus_per_node:
        options.append(f"--gpus-per-node={config.gpus_per_node}")
    options += config.slurm_args
    lines = ["#!/bin/sh", "# written by workbench.slurm for one Cluster; the engines are this job's tasks"]
    lines += [f"#SBATCH {field}" for field in fields]
    lines += [f"#SBATCH {_template_text(option)}" for option in options]
    if config.slurm_mpi == "mpiexec":
        mpiexec = _template_text(shlex.join(config.mpiexec_command()))
        # ipyparallel hands the engines the controller's address in IPP_CONNECTION_INFO: forward it
        # to ranks on other nodes too, so no connection file has to be on a shared file system
        forwarded = {**environment, "IPP_CONNECTION_INFO": ""}
        args = _template_text(shlex.join(config.mpiexec_args(forwarded)))
        lines.append(f"exec {mpiexec} -n {{n}} {args} {{program_and_args}}")
    else:
        # srun does not inherit --cpus-per-task from sbatch since Slurm 22.05: say it again
        srun = ["srun", "--mpi=pmix", f"--cpus-per-task={config.threads}", "--kill-on-bad-exit=1"]
        lines.append(f"exec {_template_text(shlex.join(srun))} {{program_and_args}}")
    return "\n".join(lines) + "\n"


class WorkbenchSlurmEngineSetLauncher(SlurmEngineSetLauncher):
    """ipyparallel's Slurm engine launcher whose sbatch / scancel errors carry Slurm's own message."""

    def _run_command(self, command: list[str], **kwargs: Any) -> str:
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kwargs)
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip().replace("\n", " ")
            raise LauncherError(f"`{shlex.join(command[:1])}` failed (exit {result.returncode}): {message}")
        return result.stdout

    def stop(self) -> str:
        """scancel when a job was submitted; a job sbatch refused, or one that ended, has nothing to cancel."""
        output = ""
        if self.job_id:
            try:
                output = self._run_command([*self.delete_command, self.job_id])
            except LauncherError as error:  # already ended: Cluster.stop() checks the state with squeue
                output = str(error)
        self.notify_stop({"job_id": self.job_id, "output": output})
        return output


@dataclass(frozen=True)
class JobState:
    """A Slurm job's state and reason as squeue (or sacct, once squeue forgot it) reports them."""

    job_id: str
    state: str
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def never_starts(self) -> bool:
        return self.state == "PENDING" and self.reason.split(",")[0] in NEVER_STARTS

    def describe(self) -> str:
        reason = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        why = NEVER_STARTS.get(self.reason.split(",")[0], "") if self.state == "PENDING" else ""
        if self.state == "COMPLETING" and self.reason.startswith("NonZeroExitCode"):
            # the state the job ends in, said now: its processes are still being cleaned up
            return f"Slurm job {self.job_id} is FAILED{reason}, still COMPLETING"
        return f"Slurm job {self.job_id} is {self.state}{reason}" + (f": {why}" if why else "")


async def _run(*command: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
    )
    stdout, stderr = await process.communicate()
    return process.returncode or 0, stdout.decode(errors="replace").strip(), stderr.decode(errors="replace").strip()


async def _output(*command: str) -> str:
    code, stdout, _ = await _run(*command)
    return stdout if code == 0 else ""


async def job_state(job_id: str) -> JobState | None:
    """The job's state now; ``UNKNOWN`` once Slurm forgot it; None when Slurm could not be asked."""
    return await asyncio.to_thread(job_state_now, job_id)


def job_state_now(job_id: str, timeout_s: float = QUERY_TIMEOUT_S) -> JobState | None:
    """``job_state`` without an event loop: a run's watch asks between its checks, in a notebook's loop too."""

    def run(*command: str) -> tuple[int, str, str]:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return 1, "", str(error)
        return done.returncode, done.stdout.strip(), done.stderr.strip()

    code, line, error = run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%r")
    if code != 0 and "invalid job id" not in error.lower():
        return None  # a busy or restarting slurmctld: ask again at the next poll
    if not line and shutil.which("sacct"):
        code, line, _ = run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,Reason")
        line = line if code == 0 else ""
    if not line:
        return JobState(job_id, "UNKNOWN", "no longer known to squeue or sacct")
    state, _, reason = line.splitlines()[0].partition("|")
    return JobState(job_id, state.split()[0] if state else "UNKNOWN", reason.strip())


async def cancel_and_wait(job_id: str, timeout_s: float = 30.0) -> JobState:
    """Cancel the job (again, harmless when ended) and wait until Slurm says its processes are gone."""
    await _output("scancel", job_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    state = await job_state(job_id)
    while (state is None or state.active) and loop.time() < deadline:
        if loop.time() > deadline - timeout_s / 2:
            await _output("scancel", "--signal=KILL", "--full", job_id)
        await asyncio.sleep(0.2)
        state = await job_state(job_id)
    return state or JobState(job_id, "UNKNOWN", "squeue did not answer")


def engine_output(launcher: Any, limit: int = 4000) -> str:
    """The job's output file (both ranks' stdout and stderr), read without removing it."""
    path = getattr(launcher, "output_file", "")
    try:
        with open(path, errors="replace") as handle:
            text = handle.read()
    except OSError:
        return ""
    return text[-limit:]


def remove_output(launcher: Any) -> None:
    """The job's output file lives in the ipyparallel profile's log folder: remove it with the job."""
    path = getattr(launcher, "output_file", "")
    if path and os.path.exists(path):
        os.remove(path)
