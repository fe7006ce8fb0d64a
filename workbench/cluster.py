"""An ipyparallel cluster whose engines are MPI ranks, started and stopped from Python.

Follows ipyparallel's convention: ``start()`` / ``stop()`` are coroutines, ``start_sync()`` /
``stop_sync()`` block, and ``with Cluster(n=2) as cluster:`` starts and always stops.

What this adds to ``ipyparallel.Cluster(engines="mpi")``: the venv's own mpiexec, the flags that
make it work here (run as root, oversubscribe only when ranks > cores, binding), one typed
environment for every engine, a start that fails within a bounded time with the engines' own
error output, a ``stop()`` that checks every process it started is gone, and Horovod
initialisation on all engines with the engine ↔ rank map it returns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import replace
from typing import Any

import pandas as pd
import psutil
from ipyparallel._async import AsyncFirst

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


def _engine_pid() -> int:
    import os as _os

    return _os.getpid()


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

    def __repr__(self) -> str:
        state = "running" if self.client is not None else "stopped"
        return f"Cluster(n={self.n}, mpi={self.config.mpi!r}, threads_per_rank={self.config.threads}, {state})"

    # -- start -------------------------------------------------------------------------------
    def _ipp_config(self) -> Any:
        from traitlets.config import Config

        config = self.config
        environment = config.engine_environment()
        ipp_config = Config()
        launcher = "MPIEngineSetLauncher" if config.launcher == "mpi" else "SlurmEngineSetLauncher"
        if config.launcher == "mpi":
            ipp_config.MPIEngineSetLauncher.mpi_cmd = config.mpiexec_command()
            ipp_config.MPIEngineSetLauncher.mpi_args = config.mpiexec_args(environment)
        else:
            ipp_config.SlurmEngineSetLauncher.engine_args = ["--mpi"]
        ipp_config[launcher].environment = environment
        if config.controller_port is not None:
            ipp_config.IPController.ports = [config.controller_port]
        return ipp_config

    def _check_before_start(self) -> None:
        config = self.config
        if config.launcher == "mpi":
            config.mpiexec_command()  # ConfigError naming the fix when there is no mpiexec
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
        self._ipp = ipp.Cluster(
            engines=config.launcher,
            n=config.ranks,
            controller_ip=config.controller_ip,
            config=self._ipp_config(),
            # ipyparallel logs the engines' whole output when mpiexec exits non-zero, which it does
            # on every normal stop; start failures carry that output in ClusterStartError instead.
            log_level=logging.ERROR,
            delay=0.1,
        )
        try:
            await self._ipp.start_controller()
            self._remember_launcher_pids()
            await self._ipp.start_engines(config.ranks)
            self._remember_launcher_pids()
            self.client = await self._ipp.connect_client()
            await self._wait_for_engines()
            # cloudpickle sends notebook functions and their globals by value, as users expect
            self.client[:].use_cloudpickle()
            self._pids |= set(self.client[:].apply_sync(_engine_pid))
        except BaseException as error:
            output = self._engine_output()
            await self.stop()
            if isinstance(error, ClusterStartError | ConfigError):
                raise
            raise ClusterStartError(f"the cluster did not start ({error!r}); engine output:\n{output}") from error
        return self

    async def _wait_for_engines(self) -> None:
        config = self.config
        deadline = time.monotonic() + config.start_timeout_s
        while len(self.client.ids) < config.ranks:
            engine_set = self._ipp.engine_set if self._ipp.engines else None
            if engine_set is not None and getattr(engine_set, "state", "") == "after":
                raise ClusterStartError(
                    f"mpiexec exited before {config.ranks} engines registered "
                    f"(exit data {engine_set.stop_data}); engine output:\n{self._engine_output()}"
                )
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"only {len(self.client.ids)} of {config.ranks} engines registered within "
                    f"{config.start_timeout_s:.0f} s; engine output:\n{self._engine_output()}"
                )
            await asyncio.sleep(0.1)

    def _engine_output(self, limit: int = 4000) -> str:
        try:
            output = self._ipp.engine_set.get_output() if self._ipp is not None and self._ipp.engines else ""
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

    # -- stop --------------------------------------------------------------------------------
    async def stop(self) -> None:
        """Stop engines and controller, then make sure no process they started is left."""
        self._remember_launcher_pids()
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
        reap_processes(self._pids)
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
