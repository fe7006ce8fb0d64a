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
import logging
import os
import shutil
import socket
import tempfile
import time
from dataclasses import replace
from typing import Any

import pandas as pd
import psutil
from ipyparallel._async import AsyncFirst
from ipyparallel.cluster.launcher import LauncherError

from workbench import slurm
from workbench.config import ClusterConfig, ConfigError, physical_cores

log = logging.getLogger(__name__)


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
    import os as _os
    import socket as _socket

    import tensorflow as tf

    # Open MPI's mpiexec, MPICH's Hydra, srun: each names the rank's index on its node differently
    names = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
    local_rank = next((int(_os.environ[name]) for name in names if name in _os.environ), 0)
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
            await asyncio.sleep(0.5)  # the job's last output reaches its file
            raise ClusterStartError(
                f"{state.describe()} before {self.config.ranks} engines registered; "
                f"engine output:\n{self._engine_output()}"
            )
        if state.state == "PENDING" and state != previous and state.reason not in ("", "None"):
            log.warning("%s; waiting up to start_timeout_s=%.0f s", state.describe(), self.config.start_timeout_s)

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
    """Wait up to ``grace_s`` for ``pids`` to end; terminate, then kill, what is still there."""
    processes = []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            processes.append(psutil.Process(pid))
        except psutil.Error:
            continue
    _gone, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(alive, timeout=5)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
