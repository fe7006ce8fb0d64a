"""An ipyparallel cluster whose engines are MPI ranks, started and stopped from Python.

Follows ipyparallel's convention: ``start()`` / ``stop()`` are coroutines, ``start_sync()`` /
``stop_sync()`` block, and ``with Cluster(n=2) as cluster:`` starts and always stops.

What this adds to ``ipyparallel.Cluster(engines="mpi")``: the venv's own mpiexec, the flags that
make it work here (run as root, oversubscribe only when ranks > cores, binding), one typed
environment for every engine, a start that fails within a bounded time with the engines' own
error output, a ``stop()`` that checks every process it started is gone, and Horovod
initialisation on all engines with the engine ↔ rank map it returns. Every start checks that the
engines form one MPI world of N ranks with engine id = rank.

``launcher="slurm"`` submits the engines as one Slurm batch job instead (``workbench.slurm``): the
job's state is polled while the engines register, so a job that fails or can never start is
reported within seconds with Slurm's reason, and ``stop()`` cancels it and waits until Slurm says
its processes are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pandas as pd
import psutil

from workbench.extras import require

try:
    from ipyparallel._async import AsyncFirst
    from ipyparallel.cluster.launcher import LauncherError
except ImportError:  # the cluster extra is not installed: one line naming it
    require("cluster", for_what="Cluster (ipyparallel engines that are MPI ranks)")
    raise

from workbench import faults, slurm
from workbench.config import ClusterConfig, ConfigError, physical_cores
from workbench.recorder import HEARTBEAT, HEARTBEAT_INTERVAL_S

log = logging.getLogger(__name__)
#: The signal that makes an engine write every thread's Python stack (``faulthandler``), without stopping it.
STACK_SIGNAL = signal.SIGUSR2
#: How long a diagnosis waits for mpiexec to name the rank that died and its signal.
LAUNCHER_WAIT_S = 8.0
#: A rank on another host whose recorder has not beaten for this long is unresponsive (frozen or unreachable).
HEARTBEAT_LOST_S = 5 * HEARTBEAT_INTERVAL_S
#: A run's watch reads the ranks' network counters of this window for links down or slowed; a fault whose
#: evidence is this recent is going on.
NETWORK_WINDOW_S = 600
NETWORK_ONGOING_S = 3
#: ... and at most this many rows of them (a large job's last minute or so): the check stays a few ms
NETWORK_WINDOW_ROWS = 200_000
#: A run folder whose disk has less free than this is full: the ranks' recorders hold their records in memory.
DISK_FULL_BYTES = 1 << 20
#: How often a run's watch asks Slurm whether the engines' job still runs.
JOB_CHECK_S = 5.0
#: How long a check waits for Slurm's answer before reading it at the next check instead.
JOB_ANSWER_S = 0.5
#: Slurm not answering this long while no rank records or beats: the cluster is gone (slurmctld and the nodes
#: with it), not restarting; a run that only lost slurmctld goes on, its ranks still beating. Below the
#: controller's 30 s without engine heartbeats, after which ipyparallel says only that an engine died.
CLUSTER_LOST_S = 20.0
#: Process states that mean a rank can no longer take part.
ENDED_STATES = ("gone", "zombie", "dead")
#: The controller registers an engine at its next heartbeat ping: ipyparallel's 3 s period made every start take
#: 6-7 s on this machine, 500 ms takes 3.2 s. The period grows with the engines, keeping the controller's pings
#: under ~128 a second (3 s, ipyparallel's own, from 375 engines), and an engine is dropped after the same 30 s
#: of missed pings as ipyparallel's default (10 x 3 s).
HEARTBEAT_PERIOD_MIN_MS = 500
HEARTBEAT_PERIOD_MAX_MS = 3000
HEARTBEAT_MISSED_S = 30
#: The module an engine's nanny runs: it outlives its engine only to say goodbye to the controller (below).
NANNY_MODULE = "ipyparallel.engine.nanny"


def controller_heartbeat_args(engines: int) -> list[str]:
    """The controller's heartbeat period for ``engines`` and the misses that make ``HEARTBEAT_MISSED_S``."""
    period_ms = min(HEARTBEAT_PERIOD_MAX_MS, max(HEARTBEAT_PERIOD_MIN_MS, 8 * engines))
    misses = -(-HEARTBEAT_MISSED_S * 1000 // period_ms)
    return [f"--HeartMonitor.period={period_ms}", f"--HeartMonitor.max_heartmonitor_misses={misses}"]


class ClusterStartError(RuntimeError):
    """The cluster could not start; the message carries the engines' own output."""


def port_is_free(ip: str, port: int) -> bool:
    """True when ``port`` can be bound on ``ip`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((ip, port))
        except OSError:
            return False
    return True


def _horovod_rank_info() -> dict[str, Any]:
    """Runs on each engine: initialise Horovod and report who this engine is."""
    import os as _os
    import socket as _socket

    import horovod.tensorflow as hvd
    from mpi4py import MPI

    hvd.init()
    return {
        "mpi_rank": MPI.COMM_WORLD.Get_rank(),
        "mpi_size": MPI.COMM_WORLD.Get_size(),
        "horovod_rank": hvd.rank(),
        "horovod_size": hvd.size(),
        "local_rank": hvd.local_rank(),
        "mpi_threads_supported": bool(hvd.mpi_threads_supported()),
        "host": _socket.gethostname(),
        "pid": _os.getpid(),
    }


def _pin_gpu_to_local_rank() -> dict[str, Any]:
    """Runs on each engine, before TensorFlow touches a GPU: see only the node's GPU number local_rank."""
    import socket as _socket

    import tensorflow as tf

    from workbench.placement import local_rank as _local_rank

    local_rank = _local_rank() or 0  # Open MPI's mpiexec, MPICH's Hydra, srun: each names it differently
    gpus = tf.config.list_physical_devices("GPU")
    chosen = gpus[local_rank % len(gpus)] if gpus else None
    if chosen is not None:
        tf.config.set_visible_devices(chosen, "GPU")
        tf.config.experimental.set_memory_growth(chosen, True)
    return {
        "host": _socket.gethostname(),
        "local_rank": local_rank,
        "gpus_on_node": len(gpus),
        "gpu": chosen.name if chosen is not None else None,
    }


def _engine_identity() -> dict[str, Any]:
    """Runs on each engine: where it runs and which MPI world it belongs to."""
    import os as _os
    import socket as _socket

    from mpi4py import MPI

    return {
        "pid": _os.getpid(),
        "host": _socket.gethostname(),
        "mpi_rank": MPI.COMM_WORLD.Get_rank(),
        "mpi_size": MPI.COMM_WORLD.Get_size(),
    }


def _register_stack_dump(directory: str, signal_number: int) -> str:
    """Runs on each engine: dump every thread's Python stack to a file on ``signal_number``.

    ``faulthandler`` writes from the C signal handler, so it works while the engine runs a task or
    blocks in MPI, and the task goes on. The file stays open for the engine's life.
    """
    import faulthandler as _faulthandler
    import os as _os

    path = _os.path.join(directory, f"rank-{_os.getpid()}.stack")
    handle = open(path, "a")  # noqa: SIM115 - must outlive this call
    globals()["_workbench_stack_file"] = handle
    _faulthandler.register(signal_number, file=handle, all_threads=True, chain=False)
    return path


def check_one_world(engine_ids: list[int], identities: list[dict[str, Any]], ranks: int) -> None:
    """Raise unless the engines are ranks 0..N-1 of one MPI world of size N, engine id = rank."""
    sizes = sorted({identity["mpi_size"] for identity in identities})
    by_engine = {engine_id: identity["mpi_rank"] for engine_id, identity in zip(engine_ids, identities)}
    if sizes != [ranks] or any(engine_id != rank for engine_id, rank in by_engine.items()):
        raise ClusterStartError(
            f"the {ranks} engines did not form one MPI world (world sizes {sizes}, engine id -> rank {by_engine}): "
            "ranks started without an MPI launcher each form their own world; under Slurm use "
            "slurm_mpi='mpiexec' (default) or 'pmix'"
        )


class Cluster(AsyncFirst):
    """N engines that are MPI ranks. ``Cluster(n=2)``; any ``ClusterConfig`` field as keyword.

    Every coroutine method ``foo()`` also has a blocking ``foo_sync()`` (ipyparallel's convention).
    """

    def __init__(self, n: int | None = None, *, config: ClusterConfig | None = None, **settings: Any) -> None:
        base = config or ClusterConfig()
        if n is not None:
            settings["n"] = n
        self.config = replace(base, **settings) if settings else base
        self.client: Any = None
        self._ipp: Any = None
        self._pids: set[int] = set()
        self.rank_map: pd.DataFrame | None = None
        self._job_dir: str | None = None
        self._cluster_id: str | None = None
        #: the engines' Slurm job as last polled (launcher="slurm")
        self.slurm_state: slurm.JobState | None = None
        self._never_starts_since: float | None = None
        #: MPI rank -> engine process id, and the rank's host (filled at start)
        self.rank_pids: dict[int, int] = {}
        self.rank_hosts: dict[int, str] = {}
        #: each rank's link speed when ranks are on several hosts (``_measure_links``), else empty
        self.links: dict[int, dict[str, Any]] = {}
        self._stack_dir: str | None = None
        self._stack_files: dict[int, str] = {}

    # -- properties --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.config.ranks

    @property
    def view(self) -> Any:
        """A blocking DirectView on all engines, in rank order."""
        if self.client is None:
            raise RuntimeError("the cluster is not started: call start_sync() or use `with Cluster(...)`")
        view = self.client[sorted(self.client.ids)]
        view.block = True
        return view

    @property
    def cluster_id(self) -> str | None:
        """ipyparallel's id of this cluster (``IPP_CLUSTER_ID`` in its processes' environment), once started."""
        return self._cluster_id

    @property
    def slurm_job_id(self) -> str | None:
        """The engines' Slurm job id, once submitted (launcher="slurm")."""
        engine_set = self._ipp.engine_set if self._ipp is not None and self._ipp.engines else None
        return getattr(engine_set, "job_id", None) or None

    def __repr__(self) -> str:
        state = "running" if self.client is not None else "stopped"
        job = f", slurm job {self.slurm_job_id}" if self.slurm_job_id else ""
        return f"Cluster(n={self.n}, mpi={self.config.mpi!r}, threads_per_rank={self.config.threads}{job}, {state})"

    # -- start -------------------------------------------------------------------------------
    def _ipp_config(self) -> Any:
        from traitlets.config import Config

        config = self.config
        environment = config.engine_environment()
        ipp_config = Config()
        if config.launcher == "mpi":
            launcher = "MPIEngineSetLauncher"
            ipp_config.MPIEngineSetLauncher.mpi_cmd = config.mpiexec_command()
            ipp_config.MPIEngineSetLauncher.mpi_args = config.mpiexec_args(environment)
        else:
            launcher = slurm.WorkbenchSlurmEngineSetLauncher.__name__
            ipp_config[launcher].engine_args = ["--mpi"]  # engine id = MPI rank
            ipp_config[launcher].batch_template = slurm.batch_script(config, environment)
            # an absolute name: ipyparallel would write the script into the current directory
            ipp_config[launcher].batch_file_name = os.path.join(self._job_dir or ".", "engines.sbatch")
        ipp_config[launcher].environment = environment
        if config.controller_port is not None:
            ipp_config.IPController.ports = [config.controller_port]
        return ipp_config

    def _check_before_start(self) -> None:
        config = self.config
        if config.launcher == "mpi" or config.slurm_mpi == "mpiexec":
            config.mpiexec_command()  # ConfigError naming the fix when there is no mpiexec
        if config.launcher == "slurm":
            for command in ("sbatch", "squeue", "scancel"):
                slurm.slurm_command(command)
        if config.controller_port is not None and not port_is_free(config.controller_ip, config.controller_port):
            raise ClusterStartError(
                f"port {config.controller_port} on {config.controller_ip} is already in use: "
                "pass another controller_port, or leave it None to pick free ports"
            )
        if config.oversubscribed:
            log.warning(
                "%d ranks on %d cores: ranks will share cores (oversubscribed); expect each rank to slow down",
                config.ranks,
                physical_cores(),
            )

    async def start(self) -> Cluster:
        """Start the controller and N MPI engines; wait until all have registered."""
        import ipyparallel as ipp

        self._check_before_start()
        config = self.config
        if config.launcher == "slurm":
            self._job_dir = tempfile.mkdtemp(prefix="workbench-slurm-")
        self._ipp = ipp.Cluster(
            engines="mpi" if config.launcher == "mpi" else slurm.WorkbenchSlurmEngineSetLauncher,
            n=config.ranks,
            controller_ip=config.controller_ip,
            config=self._ipp_config(),
            # ipyparallel logs the engines' whole output when mpiexec exits non-zero, which it does
            # on every normal stop; start failures carry that output in ClusterStartError instead.
            log_level=logging.ERROR,
            delay=0.1,
            controller_args=controller_heartbeat_args(config.ranks),
        )
        self._cluster_id = self._ipp.cluster_id
        try:
            await self._ipp.start_controller()
            self._remember_launcher_pids()
            await self._ipp.start_engines(config.ranks)
            self._remember_launcher_pids()
            self.client = await self._ipp.connect_client()
            await self._wait_for_engines()
            # cloudpickle sends notebook functions and their globals by value, as users expect
            self.client[:].use_cloudpickle()
            engine_ids = sorted(self.client.ids)
            identities = self.client[engine_ids].apply_sync(_engine_identity)
            check_one_world(engine_ids, identities, config.ranks)
            here = socket.gethostname()
            self._pids |= {identity["pid"] for identity in identities if identity["host"] == here}
            self.rank_pids = {identity["mpi_rank"]: identity["pid"] for identity in identities}
            self.rank_hosts = {identity["mpi_rank"]: identity["host"] for identity in identities}
            self.links = self._measure_links()
            self._stack_dir = tempfile.mkdtemp(prefix="workbench-stacks-")
            paths = self.client[engine_ids].apply_sync(_register_stack_dump, self._stack_dir, int(STACK_SIGNAL))
            self._stack_files = dict(zip(engine_ids, paths))
        except BaseException as error:
            output = self._engine_output()
            # a controller stopped while it is still starting ignores the request: end it sooner
            await self.stop(grace_s=2.0)
            if isinstance(error, ClusterStartError | ConfigError):
                raise
            if isinstance(error, LauncherError) and config.launcher == "slurm":
                raise ClusterStartError(f"Slurm did not accept the engines' job: {error}") from None
            raise ClusterStartError(f"the cluster did not start ({error!r}); engine output:\n{output}") from error
        return self

    def _measure_links(self) -> dict[int, dict[str, Any]]:
        """Ranks on several hosts: each rank's link speed, measured once at start (``links``; see ``workbench.links``).

        Runs record it, so a slow node's link is a finding. Empty on one host, or above
        ``LINK_CHECK_MAX_RANKS`` ranks (it exchanges with two partners per rank, one pair at a time).
        """
        from workbench.links import LINK_CHECK_MAX_RANKS, link_bandwidth, rank_links

        hosts = set(self.rank_hosts.values())
        if len(hosts) < 2 or len(self.rank_hosts) > LINK_CHECK_MAX_RANKS:
            return {}
        answers = self.client[sorted(self.client.ids)].apply_sync(link_bandwidth)
        speeds = next(answer for answer in answers if answer is not None)
        return rank_links(speeds, lambda rank: self.rank_hosts.get(rank, ""))

    async def _wait_for_engines(self) -> None:
        config = self.config
        deadline = time.monotonic() + config.start_timeout_s
        next_poll = time.monotonic()
        while len(self.client.ids) < config.ranks:
            if config.launcher == "slurm" and time.monotonic() >= next_poll:
                await self._check_slurm_job()
                next_poll = time.monotonic() + 0.5
            engine_set = self._ipp.engine_set if self._ipp.engines else None
            if engine_set is not None and getattr(engine_set, "state", "") == "after":
                raise ClusterStartError(
                    f"mpiexec exited before {config.ranks} engines registered "
                    f"(exit data {engine_set.stop_data}); engine output:\n{self._engine_output()}"
                )
            if time.monotonic() > deadline:
                job = f" ({self.slurm_state.describe()})" if self.slurm_state else ""
                raise ClusterStartError(
                    f"only {len(self.client.ids)} of {config.ranks} engines registered within "
                    f"{config.start_timeout_s:.0f} s{job}; engine output:\n{self._engine_output()}"
                )
            await asyncio.sleep(0.1)

    async def _check_slurm_job(self) -> None:
        """Fail now when the engines' job ended or can never start; log why it is still pending."""
        job_id = self.slurm_job_id
        if not job_id:
            return
        state = await slurm.job_state(job_id)
        if state is None:
            return
        previous, self.slurm_state = self.slurm_state, state
        if not state.never_starts:
            self._never_starts_since = None
        elif self._never_starts_since is None:
            # Slurm refines its first reason within a few seconds (PartitionConfig -> PartitionTimeLimit)
            self._never_starts_since = time.monotonic()
        elif time.monotonic() - self._never_starts_since >= slurm.REASON_SETTLES_S:
            raise ClusterStartError(f"{state.describe()}; it was cancelled: {slurm.WHAT_TO_DO}")
        if not state.active or state.state == "COMPLETING":
            state = await self._final_slurm_state(state)
            raise ClusterStartError(
                f"{state.describe()} before {self.config.ranks} engines registered; "
                f"engine output:\n{self._engine_output()}"
            )
        if state.state == "PENDING" and state != previous and state.reason not in ("", "None"):
            log.warning("%s; waiting up to start_timeout_s=%.0f s", state.describe(), self.config.start_timeout_s)

    async def _final_slurm_state(self, state: slurm.JobState, wait_s: float = 5.0) -> slurm.JobState:
        """The state an ending job settles in (FAILED, CANCELLED...): COMPLETING only says its processes are going."""
        deadline = time.monotonic() + wait_s
        await asyncio.sleep(0.5)  # the job's last output reaches its file
        while state.state == "COMPLETING" and time.monotonic() < deadline:
            state = await slurm.job_state(state.job_id) or state
            if state.state == "COMPLETING":
                await asyncio.sleep(0.3)
        self.slurm_state = state
        return state

    def _engine_output(self, limit: int = 4000) -> str:
        try:
            engine_set = self._ipp.engine_set if self._ipp is not None and self._ipp.engines else None
            if engine_set is None:
                output = ""
            elif self.config.launcher == "slurm":
                output = slurm.engine_output(engine_set, limit)
            else:
                output = engine_set.get_output()
        except Exception:
            output = ""
        output = output or "(the engines printed nothing)"
        return output[-limit:]

    def _remember_launcher_pids(self) -> None:
        launchers = [self._ipp.controller, *self._ipp.engines.values()] if self._ipp else []
        for launcher in launchers:
            pid = getattr(launcher, "pid", None) or getattr(getattr(launcher, "process", None), "pid", None)
            if pid:
                self._pids.add(int(pid))
                try:
                    self._pids |= {child.pid for child in psutil.Process(pid).children(recursive=True)}
                except psutil.Error:
                    pass

    # -- Horovod -----------------------------------------------------------------------------
    def init_horovod_sync(self) -> pd.DataFrame:
        """``hvd.init()`` on every engine; returns the engine ↔ MPI rank ↔ Horovod rank map."""
        rows = []
        for engine_id, info in zip(sorted(self.client.ids), self.view.apply(_horovod_rank_info)):
            rows.append({"engine_id": engine_id, **info})
        self.rank_map = pd.DataFrame(rows)
        mismatched = self.rank_map[self.rank_map["engine_id"] != self.rank_map["mpi_rank"]]
        if len(mismatched):
            raise ClusterStartError(f"engine ids do not match MPI ranks:\n{mismatched.to_string(index=False)}")
        return self.rank_map

    async def init_horovod(self) -> pd.DataFrame:
        return await asyncio.get_running_loop().run_in_executor(None, self.init_horovod_sync)

    def pin_gpus_sync(self) -> pd.DataFrame:
        """One GPU per rank: each engine sees only GPU ``local_rank`` of its node (Horovod's rule).

        Call it first, before the engines run TensorFlow code; returns engine, host, local rank, GPU
        (``gpu`` is None on a node without GPUs).
        """
        rows = self.view.apply(_pin_gpu_to_local_rank)
        return pd.DataFrame([{"engine_id": engine_id, **row} for engine_id, row in zip(sorted(self.client.ids), rows)])

    # -- failures, stalls, stacks --------------------------------------------------------------
    def _local(self, rank: int) -> bool:
        return self.rank_hosts.get(rank) == socket.gethostname()

    def rank_processes(self) -> dict[int, tuple[str, float]]:
        """Each rank's process state (``running``, ``sleeping``, ``stopped``, ``zombie``, ``gone``) and CPU %.

        CPU is measured over 0.2 s, all ranks at once. Ranks on other hosts are left out.
        """
        processes: dict[int, psutil.Process] = {}
        states: dict[int, tuple[str, float]] = {}
        for rank, pid in sorted(self.rank_pids.items()):
            if not self._local(rank):
                continue
            try:
                process = psutil.Process(pid)
                process.cpu_percent(None)
                processes[rank] = process
            except psutil.Error:
                states[rank] = ("gone", 0.0)
        if processes:
            time.sleep(0.2)
        for rank, process in processes.items():
            try:
                states[rank] = (process.status(), process.cpu_percent(None))
            except psutil.Error:
                states[rank] = ("gone", 0.0)
        return dict(sorted(states.items()))

    def rank_states(self) -> dict[int, str]:
        """Each local rank's process state, without the CPU measurement (instant)."""
        states = {}
        for rank, pid in self.rank_pids.items():
            if not self._local(rank):
                continue
            try:
                states[rank] = psutil.Process(pid).status()
            except psutil.Error:
                states[rank] = "gone"
        return states

    @property
    def controller_pid(self) -> int | None:
        """The controller's process id (on this machine), once started."""
        process = getattr(self._ipp.controller, "process", None) if self._ipp is not None else None
        return getattr(process, "pid", None)

    def controller_alive(self) -> bool:
        """False once the controller's process has ended (the ranks can no longer report results)."""
        process = getattr(self._ipp.controller, "process", None) if self._ipp is not None else None
        return process is None or running(process)

    def launcher_exit(self, wait_s: float = 0.0) -> dict[str, Any] | None:
        """The launcher's exit data once it has ended (waiting up to ``wait_s``); None while it runs."""
        engine_set = self._ipp.engine_set if self._ipp is not None and self._ipp.engines else None
        if engine_set is None:
            return None
        process = getattr(engine_set, "process", None)
        deadline = time.monotonic() + wait_s
        while True:
            if getattr(engine_set, "state", "") == "after":
                return dict(engine_set.stop_data or {})
            try:
                if process is None or not running(process):
                    code = process.wait(0) if process is not None else None
                    return {"exit_code": code, "pid": getattr(engine_set, "pid", None)}
            except (psutil.Error, TypeError):
                return {"exit_code": None, "pid": getattr(engine_set, "pid", None)}
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def lost_nodes(self) -> list[str]:
        """Nodes of this cluster's ranks (other than this host) that the MPI launcher says it lost."""
        remote = {host for rank, host in self.rank_hosts.items() if not self._local(rank)}
        if not remote:
            return []
        return [node for node in faults.lost_nodes(self.launcher_output()) if node in remote]

    def launcher_output(self, limit: int = 20000) -> str:
        """The launcher's and engines' output so far (mpiexec's messages, the engines' logs)."""
        return self._engine_output(limit)

    def diagnose(
        self, error: BaseException | None = None, run_path: str | os.PathLike[str] | None = None
    ) -> faults.Failure | None:
        """Which rank failed first and how (``faults.diagnose``), from the launcher, the processes and the store.

        When a rank's process has ended, waits up to ``LAUNCHER_WAIT_S`` for mpiexec to say which rank
        died first and how (its message names the rank and the signal or exit code).
        """
        states = self.rank_states()
        ended = any(state in ENDED_STATES for state in states.values())
        seen_at = time.time()
        deadline = time.monotonic() + (LAUNCHER_WAIT_S if ended or (error is not None and "died" in str(error)) else 0)
        while True:  # mpiexec names the first rank and its signal once it has noticed; it may take seconds
            exit_data = self.launcher_exit()
            if faults.launcher_deaths(self.launcher_output(), self.rank_pids):
                break
            if exit_data is not None:
                time.sleep(0.5)  # its last words reach the output file after it exits
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        last = {}
        if run_path is not None:
            try:
                last = faults.last_events(run_path)
            except Exception:
                last = {}
        failure = faults.diagnose(
            launcher_output=self.launcher_output(),
            exit_data=exit_data,
            error=error,
            rank_states={rank: ("gone" if state in ENDED_STATES else state) for rank, state in states.items()},
            rank_pids=self.rank_pids,
            last_event_ns=last,
            rank_hosts=self.rank_hosts,
        )
        if failure is not None and failure.detected_after_s is None and ended:
            # no nanny timestamp: count from when this process saw the rank's process gone
            failure = replace(failure, detected_after_s=round(time.time() - seen_at, 2))
        return failure

    def stacks(self, timeout_s: float = 5.0) -> dict[int, str]:
        """Every rank's current Python stack (all threads), without stopping the ranks.

        Sends ``STACK_SIGNAL`` to each engine, whose ``faulthandler`` writes its stacks to a file,
        and reads what it wrote. A stopped rank (SIGSTOP) or one on another host gets a line saying so.
        """
        if self.client is None:
            raise RuntimeError("the cluster is not started: call start_sync() or use `with Cluster(...)`")
        sizes: dict[int, int] = {}
        result: dict[int, str] = {}
        for rank, pid in sorted(self.rank_pids.items()):
            path = self._stack_files.get(rank)
            if not self._local(rank) or path is None:
                result[rank] = f"(rank {rank} runs on {self.rank_hosts.get(rank)}: its stack is not readable from here)"
                continue
            try:
                status = psutil.Process(pid).status()
            except psutil.Error:
                result[rank] = f"(rank {rank}'s process {pid} has ended)"
                continue
            if status == psutil.STATUS_STOPPED:
                result[rank] = f"(rank {rank}'s process {pid} is stopped: `kill -CONT {pid}` lets it go on)"
                continue
            sizes[rank] = os.path.getsize(path) if os.path.exists(path) else 0
            try:
                os.kill(pid, STACK_SIGNAL)
            except OSError as error:
                result[rank] = f"(rank {rank}: could not signal process {pid}: {error})"
                sizes.pop(rank)
        deadline = time.monotonic() + timeout_s
        pending = dict(sizes)
        while pending and time.monotonic() < deadline:
            time.sleep(0.05)
            for rank, size in list(pending.items()):
                path = self._stack_files[rank]
                if os.path.getsize(path) > size:
                    time.sleep(0.05)  # the handler writes in several calls
                    with open(path) as handle:
                        handle.seek(size)
                        result[rank] = handle.read()
                    pending.pop(rank)
        for rank in pending:
            result[rank] = f"(rank {rank} wrote no stack within {timeout_s:.0f} s)"
        return dict(sorted(result.items()))

    def stacks_text(self, timeout_s: float = 5.0) -> str:
        """``stacks()`` as one text, rank by rank (what is saved beside a run that timed out)."""
        return "\n".join(f"=== rank {rank} ===\n{text.rstrip()}\n" for rank, text in self.stacks(timeout_s).items())

    def watch(
        self, run_path: str | os.PathLike[str], *, timeout_s: float | None = None, stall_after_s: float | None = 30.0
    ) -> RunWatch:
        """A watch on a run these ranks record: a dead rank, a stalled rank, the run's timeout."""
        return RunWatch(self, run_path, timeout_s=timeout_s, stall_after_s=stall_after_s)

    # -- stop --------------------------------------------------------------------------------
    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop engines and controller, then make sure no process they started is left.

        Processes still there ``grace_s`` after ipyparallel's stop are terminated, then killed.

        Under Slurm the job is cancelled and ``stop()`` waits until Slurm no longer lists it as
        active: its processes are Slurm's, on nodes this process may not see.
        """
        self._remember_launcher_pids()
        job_id = self.slurm_job_id
        engine_set = self._ipp.engine_set if self._ipp is not None and self._ipp.engines else None
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None
        if self._ipp is not None:
            try:
                await asyncio.wait_for(self._ipp.stop_cluster(), timeout=30)
            except Exception as error:
                log.warning("ipyparallel stop failed (%r); killing its processes", error)
            self._ipp = None
        if job_id:
            self.slurm_state = await slurm.cancel_and_wait(job_id)
            if self.slurm_state.active:
                log.warning("%s after scancel; its processes may still run", self.slurm_state.describe())
        if engine_set is not None and self.config.launcher == "slurm":
            slurm.remove_output(engine_set)
        if self._job_dir is not None:
            shutil.rmtree(self._job_dir, ignore_errors=True)
            self._job_dir = None
        if self._stack_dir is not None:
            shutil.rmtree(self._stack_dir, ignore_errors=True)
            self._stack_dir = None
        if self._cluster_id is not None:
            # also what a controller stopped half-way through its start spawned after the last look
            self._pids |= processes_of_cluster(self._cluster_id)
            self._cluster_id = None
        reap_processes(self._pids, grace_s)
        self._pids.clear()

    @property
    def pids(self) -> set[int]:
        """Processes this cluster started (controller, mpiexec, engines) that are alive."""
        return {pid for pid in self._pids if psutil.pid_exists(pid)}

    def __enter__(self) -> Cluster:
        return self.start_sync()

    def __exit__(self, *_exc: object) -> None:
        self.stop_sync()

    async def __aenter__(self) -> Cluster:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()


class RunWatch:
    """Watches one run while its ranks work; ``check()`` is called every half second by the runner.

    - a rank's process that ended is diagnosed at once (``Cluster.diagnose``), without waiting for
      ipyparallel's heartbeat, and ``check()`` raises ``RankFailedError`` naming it;
    - a rank silent for ``stall_after_s`` while another spins in an MPI wait (``faults.find_stalls``)
      is written to ``run.json`` as ``stall`` (the dashboard's banner) and logged; cleared when it moves.
      A rank whose recorder was closed finished recording: it is neither named nor counted as waiting;
    - the engines' Slurm job ended (cancelled, its time limit, a node failure), or Slurm stopped answering
      for ``CLUSTER_LOST_S`` while no rank recorded or beat: ``check()`` raises, naming the job's state;
    - a node's link down or slowed (``analysis.network``, from the ranks' network counters) is written to
      ``run.json`` as ``network`` while it lasts and logged once;
    - after ``timeout_s`` every rank's stack is saved to ``stacks.txt`` in the run, the ranks are
      stopped (the cluster is stopped: a rank stuck in MPI cannot be stopped alone) and ``check()`` raises.
    """

    def __init__(
        self,
        cluster: Cluster,
        run_path: str | os.PathLike[str],
        *,
        timeout_s: float | None = None,
        stall_after_s: float | None = 30.0,
        stall_every_s: float = 2.0,
    ) -> None:
        from workbench.store import RunTail

        self.cluster = cluster
        self.run_path = os.fspath(run_path)
        self.timeout_s = timeout_s
        self.stall_after_s = stall_after_s
        self.stall_every_s = stall_every_s
        self.started = time.time()
        self.failure: faults.Failure | None = None
        self.stalls: list[faults.Stall] = []
        self._tail = RunTail(self.run_path)
        self._last_event_ns: dict[int, int] = {}
        self._next_stall_check = time.monotonic() + stall_every_s
        self._error: faults.RankFailedError | None = None
        self._flagged: dict[int, float] = {}  # rank -> when it was first seen stalled
        self._next_node_check = time.monotonic()
        self._heartbeats: dict[int, tuple[float, float]] = {}  # rank -> (when its last heartbeat was read, CPU %)
        self._next_job_check = time.monotonic() + JOB_CHECK_S
        self._slurm_silent_since: float | None = None
        self._job_asked: Future[slurm.JobState | None] | None = None
        #: the ranks' network counters of the last ``NETWORK_WINDOW_S`` (``analysis.network`` rows), the
        #: addresses of each rank read so far, and the link faults already logged
        self._network_rows: list[pd.DataFrame] = []
        self._addresses: dict[int, list[str]] = {}
        self._network_said: set[tuple[str, str]] = set()
        self._network_alerts: list[str] = []
        self._next_network_check = time.monotonic() + stall_every_s
        self._disk_full_since: float | None = None

    def diagnose(self, error: BaseException | None = None) -> faults.Failure | None:
        """The failure behind ``error`` (or behind a rank that ended), once; later calls return the same."""
        if self.failure is None:
            self.failure = self.cluster.diagnose(error, self.run_path)
        return self.failure

    def check(self) -> None:
        """Raise ``RankFailedError`` when a rank died or the run timed out; record stalls."""
        if self._error is not None:
            raise self._error
        if not self.cluster.controller_alive():
            self.failure = faults.Failure(
                rank=None,
                cause="the controller (ipcontroller) ended: the ranks cannot report any more; stop and restart "
                "the cluster",
                source="controller",
            )
            self._error = faults.RankFailedError(self.failure, self.run_path)
            raise self._error
        ended = any(state in ENDED_STATES for state in self.cluster.rank_states().values())
        if not ended and time.monotonic() >= self._next_node_check:  # ranks on other nodes: the launcher's words
            self._next_node_check = time.monotonic() + 1.0
            ended = bool(self.cluster.lost_nodes())
        if ended:
            failure = self.diagnose()
            if failure is not None:
                self._error = faults.RankFailedError(failure, self.run_path)
                raise self._error
        if time.monotonic() >= self._next_job_check:
            self._check_job()
            self._next_job_check = time.monotonic() + JOB_CHECK_S
        if self.timeout_s is not None and time.time() - self.started > self.timeout_s:
            self._time_out()
        if time.monotonic() >= self._next_network_check:
            self._next_network_check = time.monotonic() + self.stall_every_s
            self._check_disk()
            self._check_network()
        # a full run folder silences every rank (they hold their records): that is no stall
        if self.stall_after_s is not None and time.monotonic() >= self._next_stall_check:
            self._next_stall_check = time.monotonic() + self.stall_every_s
            if self._disk_full_since is None:
                self._check_stalls()

    def _check_job(self) -> None:
        """Raise when the engines' Slurm job is over, or Slurm and every rank went quiet together.

        Slurm is asked in the background (a stopped slurmctld holds squeue for its whole timeout): an answer
        within ``JOB_ANSWER_S`` is read at once, a later one at the next check; until then Slurm counts as
        not answering.
        """
        job_id = getattr(self.cluster, "slurm_job_id", None)
        if not job_id:
            return
        asked = self._job_asked
        if asked is None or asked.done():
            asked = self._job_asked = _slurm_queries().submit(slurm.job_state_now, job_id)
            with contextlib.suppress(TimeoutError):
                asked.result(timeout=JOB_ANSWER_S)
        state = asked.result() if asked.done() else None
        if state is not None:
            self._slurm_silent_since = None
            if state.active:
                return
            cause = (
                f"the ranks' {state.describe()}: its engines are gone (cancelled, past its time limit, or a node"
                " failed); start the cluster again"
            )
        else:
            now = time.monotonic()
            self._slurm_silent_since = self._slurm_silent_since or now
            heard = [*self.silent_s().values(), *(time.time() - seen for seen, _ in self._heartbeats.values())]
            quiet_s = min(heard, default=float("inf"))
            if now - self._slurm_silent_since < CLUSTER_LOST_S or quiet_s < CLUSTER_LOST_S:
                return
            cause = (
                f"Slurm has not answered for {now - self._slurm_silent_since:.0f} s and no rank has recorded or beaten"
                f" for {quiet_s:.0f} s: the cluster is gone (slurmctld and its nodes down, or unreachable); start"
                " it again"
            )
        self.failure = faults.Failure(rank=None, cause=cause, source="slurm")
        self._error = faults.RankFailedError(self.failure, self.run_path)
        raise self._error

    def silent_s(self) -> dict[int, float]:
        """Seconds since each rank's last recorded event (since the run started for a rank with none)."""
        events, _memory = self._tail.poll()
        counters = self._tail.poll_counters()
        if len(counters):
            self._keep_network_rows(counters)
            beats = counters[counters["name"] == HEARTBEAT].sort_values("time_ns")
            for rank, cpu in beats.groupby("rank")["value"].last().items():
                self._heartbeats[int(rank)] = (time.time(), float(cpu))
        if len(events):
            for rank, end in events.groupby("rank")["end_ns"].max().items():
                self._last_event_ns[int(rank)] = max(int(end), self._last_event_ns.get(int(rank), 0))
        now_ns = time.time_ns()
        started_ns = int(self.started * 1e9)
        return {
            rank: (now_ns - max(self._last_event_ns.get(rank, started_ns), started_ns)) / 1e9
            for rank in sorted(self.cluster.rank_pids)
        }

    def _keep_network_rows(self, counters: pd.DataFrame) -> None:
        from workbench.analysis.network import network_rows

        rows, _addresses = network_rows(counters, None)
        if len(rows):
            self._network_rows.append(rows)
        if len(self._network_rows) > 64:  # one frame, the last NETWORK_WINDOW_S of rows
            self._trim_network_rows()

    def _trim_network_rows(self) -> None:
        merged = pd.concat(self._network_rows, ignore_index=True)
        merged = merged[merged["time_ns"] >= merged["time_ns"].max() - NETWORK_WINDOW_S * 10**9]
        self._network_rows = [merged.iloc[-NETWORK_WINDOW_ROWS:]]

    def network_faults(self) -> list[dict[str, Any]]:
        """The links down or slowed right now (``analysis.network.network_episodes`` still going on)."""
        from workbench.analysis.network import network_episodes, no_communication
        from workbench.store import read_rank_meta

        self.silent_s()  # reads the counters written since the last look
        if not self._network_rows:
            return []
        self._trim_network_rows()
        rows = self._network_rows[0]
        for rank in set(self.cluster.rank_pids) - set(self._addresses):
            listed = read_rank_meta(self.run_path, rank).get("addresses")
            if isinstance(listed, list):
                self._addresses[rank] = listed
        firsts = rows.drop_duplicates("rank")
        hosts = {int(rank): str(host) for rank, host in zip(firsts["rank"], firsts["host"])}
        hosts.update(getattr(self.cluster, "rank_hosts", None) or {})
        addresses = {str(address): hosts[rank] for rank, listed in self._addresses.items() if rank in hosts
                     for address in listed}  # fmt: skip
        part = {
            "rows": rows,
            "addresses": addresses,
            "hosts": hosts,
            "start_ns": int(self.started * 1e9),
            "communication": no_communication(),  # the watch reads no spans: a fault's cost is the analysis'
        }
        latest = int(rows["time_ns"].max())
        return [
            episode for episode in network_episodes([part]) if episode["ended_ns"] >= latest - NETWORK_ONGOING_S * 10**9
        ]

    def _check_network(self) -> None:
        from workbench.store import update_run_meta

        ongoing = self.network_faults()
        alerts = [episode["text"] for episode in ongoing]
        going = {(episode["kind"], episode["host"]) for episode in ongoing}
        for episode in ongoing:
            if (episode["kind"], episode["host"]) not in self._network_said:
                log.warning("%s", episode["text"])
        self._network_said = going  # once per fault while it lasts; a later one is said again
        if alerts == self._network_alerts:
            return
        self._network_alerts = alerts
        try:
            update_run_meta(self.run_path, network={"alerts": alerts, "seen": time.time()} if alerts else None)
        except OSError as error:  # the run folder's disk full: said in the log, the watch goes on
            log.warning("could not write the network alert to run.json: %s", error)

    def _check_disk(self) -> None:
        """Said once when the run folder's disk fills (the ranks then hold their records), and when it has room."""
        try:
            free = shutil.disk_usage(self.run_path).free
        except OSError:
            return
        full = free < DISK_FULL_BYTES
        if full == (self._disk_full_since is not None):
            return
        from workbench.store import update_run_meta

        if full:
            self._disk_full_since = time.time()
            text = (
                f"the run folder's disk is full ({free / 2**20:.2g} MiB free at {self.run_path}): each rank holds its"
                " records in memory and writes them when there is room; free space on that disk"
            )
            log.warning("%s", text)
        else:
            lasted = time.time() - (self._disk_full_since or time.time())
            self._disk_full_since = None
            log.warning("the run folder's disk has room again after %.0f s: the ranks write what they held", lasted)
        with contextlib.suppress(OSError):  # a full disk may refuse run.json too: the log said it
            update_run_meta(self.run_path, disk={"alert": text, "seen": time.time()} if full else None)

    def _rank_processes(self) -> dict[int, tuple[str, float]]:
        """Local ranks from their processes; ranks on other hosts from their recorders' heartbeats.

        A remote rank whose heartbeat stopped for ``HEARTBEAT_LOST_S`` while others still beat is
        ``unresponsive``: its process is frozen, or its node cannot be reached. A rank that never
        beat (a recorder without heartbeats) is left out, as before.
        """
        processes = self.cluster.rank_processes()
        now = time.time()
        for rank, (seen, cpu) in self._heartbeats.items():
            if rank in processes:
                continue
            processes[rank] = ("unresponsive", 0.0) if now - seen > HEARTBEAT_LOST_S else ("running", cpu)
        return processes

    def _still_recording(self, silent: dict[int, float], after_s: float) -> dict[int, float]:
        """``silent`` less the ranks silent for ``after_s`` whose recorder was closed: they finished recording
        (and may go on unrecorded: evaluating, freeing a model, Horovod's shutdown); they are not stuck."""
        from workbench.store import read_rank_meta

        return {
            rank: value
            for rank, value in silent.items()
            if value < after_s or "recording_ended_ns" not in read_rank_meta(self.run_path, rank)
        }

    def _check_stalls(self) -> None:
        from workbench.store import update_run_meta

        assert self.stall_after_s is not None
        silent = self._still_recording(self.silent_s(), self.stall_after_s)
        stalls: list[faults.Stall] = []
        if any(value >= self.stall_after_s for value in silent.values()):
            processes = {rank: state for rank, state in self._rank_processes().items() if rank in silent}
            stalls = faults.find_stalls(
                silent, processes, self.stall_after_s, getattr(self.cluster, "rank_hosts", None)
            )
            # a rank once seen waiting for a stalled one is waiting, not stuck (a CPU reading can mislead)
            waiting = {rank for stall in self.stalls for rank in stall.waiting}
            stalls = [stall for stall in stalls if stall.rank not in waiting or stall.state == "process stopped"]
            # a stalled rank stays stalled until it records again (one CPU reading may miss the waiting rank)
            named = {stall.rank for stall in stalls}
            stalls += [
                replace(stall, silent_s=silent[stall.rank])
                for stall in self.stalls
                if stall.rank not in named and silent.get(stall.rank, 0.0) >= self.stall_after_s
            ]
            stalls.sort(key=lambda stall: (self._flagged.get(stall.rank, time.time()), stall.rank))
        for stall in stalls:
            self._flagged.setdefault(stall.rank, time.time())
        warnings = faults.horovod_stall_warnings(self.cluster.launcher_output()) if stalls else []
        if [s.rank for s in stalls] == [s.rank for s in self.stalls] and not stalls:
            return
        self.stalls = stalls
        payload = (
            {"ranks": [s.as_dict() for s in stalls], "horovod": warnings[-3:], "seen": time.time()} if stalls else None
        )
        try:
            update_run_meta(self.run_path, stall=payload)
        except OSError as error:  # the run folder refuses writes: the log below still says it
            log.warning("could not write the stall to run.json: %s", error)
        for stall in stalls:
            log.warning("%s (Cluster.stacks() shows where each rank is)", stall.message())

    def _time_out(self) -> None:
        from workbench.store import update_run_meta

        stacks = self.cluster.stacks_text()
        stacks_path = os.path.join(self.run_path, "stacks.txt")
        with open(stacks_path, "w") as handle:
            handle.write(stacks)
        silent = self.silent_s()
        silent = self._still_recording(silent, 0.0) or silent  # a rank still recording is the likelier culprit
        stuck = [s.rank for s in self.stalls] or ([max(silent, key=lambda rank: silent[rank])] if silent else [])
        self.failure = faults.Failure(
            rank=stuck[0] if stuck else None,
            cause=f"did not finish within the run's timeout of {self.timeout_s:g} s; stacks saved in stacks.txt",
            detected_after_s=round(time.time() - self.started - float(self.timeout_s or 0), 2),
            last_event_ns=self._last_event_ns.get(stuck[0]) if stuck else None,
            source="timeout",
            details=tuple(s.message() for s in self.stalls),
        )
        update_run_meta(self.run_path, stacks="stacks.txt")
        self.cluster.stop_sync(grace_s=2.0)
        self._error = faults.RankFailedError(self.failure, self.run_path)
        raise self._error


_SLURM_QUERIES: ThreadPoolExecutor | None = None


def _slurm_queries() -> ThreadPoolExecutor:
    """One small pool for every run's questions to Slurm (a sweep watches one run after another)."""
    global _SLURM_QUERIES
    if _SLURM_QUERIES is None:
        _SLURM_QUERIES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="workbench-slurm")
    return _SLURM_QUERIES


def processes_of_cluster(cluster_id: str) -> set[int]:
    """Processes on this machine that ipyparallel started for ``cluster_id`` (IPP_CLUSTER_ID in their environment)."""
    found = set()
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get("IPP_CLUSTER_ID") == cluster_id:
                found.add(process.pid)
        except psutil.Error:
            continue
    return found


def reap_processes(pids: set[int], grace_s: float = 10.0) -> None:
    """Wait up to ``grace_s`` for ``pids`` to end; terminate, then kill, what is still there.

    Engines' nannies are killed once the rest has gone, without waiting: a nanny whose engine has exited only
    sends the controller its goodbye, which lingers 3 s (ZMQ) when the controller has stopped first; it holds
    nothing to save.
    """
    processes, nannies = [], []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            process = psutil.Process(pid)
            (nannies if NANNY_MODULE in process.cmdline() else processes).append(process)
        except psutil.Error:
            continue
    alive = wait_ended(processes, grace_s)
    send_to(alive, "terminate")
    send_to(nannies, "kill")
    alive = send_to(wait_ended(alive + nannies, 5), "kill")
    wait_ended(alive, 5)


def send_to(processes: list[psutil.Process], action: str) -> list[psutil.Process]:
    """``process.terminate()`` or ``.kill()`` on each (one already gone is skipped); returns ``processes``."""
    for process in processes:
        try:
            getattr(process, action)()
        except psutil.Error:
            pass
    return processes


def running(process: psutil.Process) -> bool:
    """Still running: neither gone nor a zombie (one that has ended, its parent yet to reap it)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_ended(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``processes`` to end; return those still running.

    A zombie has ended: its parent (here often init, once mpiexec has gone) reaps it when it will, which
    ``psutil.wait_procs`` waits for (1-2 s on this machine's init) where nothing is left to stop.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [process for process in processes if running(process)]
        if not alive or time.monotonic() >= deadline:
            return alive
        processes = alive
        time.sleep(0.02)
