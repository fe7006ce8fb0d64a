"""A TensorFlow parameter-server job: servers and a chief, each a process of its own, on the ranks' hosts.

``run_job`` runs on every rank (collectively, over MPI). Each rank starts the servers placed on it as
processes of its own: worker ``i`` on rank ``i``, PS task ``j`` on rank ``j % ranks``; rank 0 also runs
the chief. So on one machine everything listens on 127.0.0.1, and on a cluster's nodes (the miniature
cluster's included) each worker runs on its own node and the PS tasks are spread over them, their
traffic crossing the links. The ranks pick free ports on their own addresses and exchange them
(``allgather``); each waits until its servers listen (a chief started before its servers blocks
silently), rank 0 runs the chief, and every rank stops its servers by PID when the chief ends
(servers never return from ``join()``; SIGTERM stops them cleanly). Each process logs to
``<run>/ps_job/<role>.log``; a failure names the process, its host and quotes the end of its log.

The chief (``python -m workbench.workloads.ps_job chief SPEC``) builds InceptionV3 under
``ParameterServerStrategy`` and schedules steps with a ``ClusterCoordinator``. Each step takes
``tf.timestamp`` on the worker before the batch, after it, after forward/backward and after the
update; the chief writes those as the worker's spans, in the lane of the worker's rank and with its
host. Workers are told apart by a file each reads from its working folder (``identity``: its task)
when its dataset is made: the coordinator does not say which worker ran a step.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from workbench.workloads.inception import InceptionSettings

LOOPBACK = "127.0.0.1"
SERVER_START_TIMEOUT_S = 120.0
#: Names the network interface whose address the ranks' servers use (e.g. ``ib0``) where the route
#: to rank 0's host is not the one to use.
INTERFACE_VARIABLE = "WORKBENCH_PS_INTERFACE"
#: Read by each worker's dataset from its working folder: its task number.
IDENTITY_FILE = "identity"
#: How often a rank waiting for the chief looks whether it has ended (a blocking MPI wait would spin).
WAIT_POLL_S = 0.2


#: The lowest port the job's servers listen on (they are picked below the kernel's ephemeral range).
LOWEST_PORT = 10_000


def _ephemeral_ports_start() -> int:
    """The first port the kernel hands to outgoing connections (ip_local_port_range; 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` TCP ports free on ``host`` now, held open together so they differ.

    Picked below the kernel's ephemeral range where there is room: a port from that range, free when picked,
    was taken by an outgoing connection (the job's own gRPC channels) before its server bound it, and the
    server could not start (seen once in `make test`)."""
    below = list(range(LOWEST_PORT, _ephemeral_ports_start()))
    random.shuffle(below)
    sockets: list[socket.socket] = []
    try:
        for port in [*below[: 50 * count], *[0] * count]:  # bounded tries, then any port the kernel gives
            if len(sockets) == count:
                break
            sock = socket.socket()
            try:
                sock.bind((host, port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def roles_of_rank(rank: int, ranks: int, ps: int) -> list[tuple[str, int]]:
    """The servers a rank starts: its worker, then the PS tasks dealt to it round-robin."""
    return [("worker", rank), *(("ps", task) for task in range(ps) if task % ranks == rank)]


def cluster_spec(placed: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The job's addresses from what each rank gathered: its address, its roles and a port for each
    (rank 0's last port is the chief's)."""
    cluster: dict[str, dict[int, str]] = {"worker": {}, "ps": {}}
    for rank in placed:
        for (job, task), port in zip(rank["roles"], rank["ports"]):
            cluster[job][task] = f"{rank['address']}:{port}"
    first = placed[0]
    return {
        "chief": [f"{first['address']}:{first['ports'][-1]}"],
        **{job: [tasks[task] for task in sorted(tasks)] for job, tasks in cluster.items()},
    }


def _interface_address(name: str) -> str:
    import psutil

    for family_address in psutil.net_if_addrs().get(name, []):
        if family_address.family == socket.AF_INET:
            return family_address.address
    known = ", ".join(sorted(psutil.net_if_addrs()))
    raise RuntimeError(f"{INTERFACE_VARIABLE}={name}: no IPv4 address on it here; name one of {known}")


def _route_to(peer: str) -> str:
    """This host's address on the route to ``peer`` (a UDP socket's connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((peer, 9))
        return probe.getsockname()[0]


def _outward_address() -> str:
    import psutil

    up = {name for name, stats in psutil.net_if_stats().items() if stats.isup}
    for name, addresses in psutil.net_if_addrs().items():
        for address in addresses:
            if name in up and address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return LOOPBACK


def job_addresses(comm: Any, hosts: list[str]) -> list[str]:
    """Each rank's address for its servers (``hosts``: each rank's host name): 127.0.0.1 when every rank
    shares one host; otherwise the address of the interface ``WORKBENCH_PS_INTERFACE`` names, else the one
    routing to rank 0's host."""
    if len(set(hosts)) == 1:
        return [LOOPBACK] * len(hosts)
    interface = os.environ.get(INTERFACE_VARIABLE)
    if interface:
        return comm.allgather(_interface_address(interface))
    candidates = comm.allgather(_outward_address())
    rank = comm.Get_rank()
    first = candidates[0] if rank != 0 else next((c for c in candidates[1:] if c != LOOPBACK), candidates[0])
    return comm.allgather(_route_to(first) if first != LOOPBACK else candidates[rank])


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=0.5):
        return True
    return False


def _log_tail(path: Path, lines: int = 8) -> str:
    if not path.exists():
        return "(no log)"
    text = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return "\n".join(text[-lines:])


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _environment() -> dict[str, str]:
    """The job's processes: no GPU, quiet TensorFlow, and ``workbench`` importable from any folder."""
    package_root = str(Path(__file__).resolve().parents[2])
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    environment.pop("TF_CONFIG", None)
    return environment


def _start_servers(
    folder: Path, spec_path: Path, roles: list[tuple[str, int]], cluster: dict[str, list[str]]
) -> dict[str, subprocess.Popen]:
    """Start this rank's servers and wait until each listens; a server that exits first is named."""
    servers: dict[str, subprocess.Popen] = {}
    command = [sys.executable, "-m", "workbench.workloads.ps_job", "server", str(spec_path)]
    for job, task in roles:
        role = f"{job}{task}"
        home = folder / role  # a worker's dataset reads its identity from here (see run_chief)
        home.mkdir(exist_ok=True)
        (home / IDENTITY_FILE).write_text(str(task))
        with open(folder / f"{role}.log", "wb") as log:
            servers[role] = subprocess.Popen(
                [*command, job, str(task)], stdout=log, stderr=subprocess.STDOUT, env=_environment(), cwd=home
            )
    waiting = {f"{job}{task}": cluster[job][task] for job, task in roles}
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while waiting:
        for role in list(waiting):
            if servers[role].poll() is not None:
                raise RuntimeError(
                    f"PS job: server {role} on {socket.gethostname()} exited with code {servers[role].returncode} "
                    f"before listening; its log ends:\n{_log_tail(folder / f'{role}.log')}"
                )
            if _listening(waiting[role]):
                del waiting[role]
        if waiting and time.monotonic() > deadline:
            raise RuntimeError(
                f"PS job: servers {', '.join(waiting)} on {socket.gethostname()} not listening at "
                f"{', '.join(waiting.values())} after {SERVER_START_TIMEOUT_S:.0f} s"
            )
        time.sleep(0.2)
    return servers


def _run_chief(folder: Path, spec_path: Path, settings: InceptionSettings) -> dict[str, Any]:
    started = time.perf_counter()
    with open(folder / "chief.log", "wb") as log:
        chief = subprocess.Popen(
            [sys.executable, "-m", "workbench.workloads.ps_job", "chief", str(spec_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_environment(),
        )
        try:
            code = chief.wait(settings.timeout_s)
        except subprocess.TimeoutExpired:
            _stop(chief)
            raise RuntimeError(
                f"PS job: the chief did not finish in {settings.timeout_s:.0f} s (timeout_s); "
                f"its log ends:\n{_log_tail(folder / 'chief.log')}"
            ) from None
    if code != 0:
        raise RuntimeError(f"PS job: the chief failed (exit {code}); its log ends:\n{_log_tail(folder / 'chief.log')}")
    result = json.loads((folder / "result.json").read_text())
    result["job_wall_s"] = time.perf_counter() - started
    return result


def _wait_for(comm: Any) -> None:
    """Barrier without spinning: a rank waiting here leaves its host's cores to the job's processes."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(WAIT_POLL_S)


def run_job(run_path: str, settings: InceptionSettings, comm: Any = None) -> dict[str, Any]:
    """One point, on every rank of ``comm`` (one worker per rank; default: this process alone).

    Returns rank 0's chief result (see ``run_chief``) on rank 0, on every rank what it placed where.
    Every rank raises when any rank's servers did not start; rank 0 raises when the chief failed.
    """
    from workbench.config import physical_cores
    from workbench.workloads.inception import threads_for_workers

    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_SELF
    rank, ranks = comm.Get_rank(), comm.Get_size()
    if settings.images:  # the workers read the files from folders of their own
        settings = replace(settings, images=str(Path(settings.images).resolve()))
    folder = Path(run_path) / "ps_job"
    folder.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    hosts = comm.allgather(host)
    address = job_addresses(comm, hosts)[rank]
    roles = roles_of_rank(rank, ranks, settings.ps)
    threads = threads_for_workers(settings, hosts.count(host))  # this host's cores shared by its workers
    while True:  # ranks on one address pick their ports apart: two could pick the same one
        ports = free_ports(len(roles) + (rank == 0), address)
        placed = comm.allgather(
            {"rank": rank, "host": host, "address": address, "roles": roles, "ports": ports, "threads": threads}
        )
        taken = [(rank_placed["address"], port) for rank_placed in placed for port in rank_placed["ports"]]
        if len(set(taken)) == len(taken):  # every rank sees the same list, so all pick again or none
            break
    cluster = cluster_spec(placed)
    spec = {
        "run_path": str(run_path),
        "settings": asdict(settings),
        "cluster": cluster,
        "worker_threads": [rank_placed["threads"] for rank_placed in placed],
        "worker_hosts": [rank_placed["host"] for rank_placed in placed],
    }
    spec_path = folder / f"spec-rank{rank}.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    servers: dict[str, subprocess.Popen] = {}
    mine = {
        "rank": rank,
        "host": host,
        "cores": physical_cores(),
        "servers": [f"{job}{task}" for job, task in roles] + (["chief"] if rank == 0 else []),
        # a worker's intra-op threads, one per PS task and the chief's
        "threads_here": threads + len(roles) - 1 + (1 if rank == 0 else 0),
    }
    try:
        error = ""
        try:
            servers = _start_servers(folder, spec_path, roles, cluster)
        except RuntimeError as failed:
            error = str(failed)
        errors = [e for e in comm.allgather(error) if e]
        if errors:
            raise RuntimeError(errors[0])
        if rank != 0:
            _wait_for(comm)  # until the chief has ended
            return {**mine, "role": "servers", "placement_of_job": placed}
        try:
            result = _run_chief(folder, spec_path, settings)
        finally:
            _wait_for(comm)
        return {**result, **mine, "role": "chief", "placement_of_job": placed}
    finally:
        for process in servers.values():
            _stop(process)


# -- the processes -------------------------------------------------------------------------------------------
def _set_threads(intra: int, inter: int = 1) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)


def run_server(spec: dict[str, Any], job: str, task: int) -> None:
    """A PS task or a worker: serve until stopped."""
    import tensorflow as tf

    threads = spec["worker_threads"][task] if job == "worker" else 1
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=2)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(spec["cluster"]), job_name=job, task_index=task, protocol="grpc", config=config, start=True
    )
    server.join()


def variable_placement(variables: Any) -> list[dict[str, Any]]:
    """Which PS task holds each variable (each shard of a sharded one) and its bytes."""
    rows = []
    for variable in variables:
        shards = getattr(variable, "variables", None) or [variable]
        for index, shard in enumerate(shards):
            device = shard.device or ""
            task = int(device.split("task:")[1].split("/")[0]) if "task:" in device else -1
            rows.append(
                {
                    "variable": variable.name,
                    "shard": index,
                    "shards": len(shards),
                    "ps": task,
                    "bytes": int(shard.shape.num_elements() * shard.dtype.size),
                    "trainable": bool(variable.trainable),
                }
            )
    return rows


def run_chief(spec: dict[str, Any]) -> dict[str, Any]:
    """Train under ``ParameterServerStrategy``; record each worker's spans; return the measurements."""
    import numpy as np
    import tensorflow as tf

    from workbench.recorder import Recorder
    from workbench.workloads.inception import build_model, make_dataset

    settings = InceptionSettings(**spec["settings"])
    cluster = spec["cluster"]
    workers, ps = len(cluster["worker"]), len(cluster["ps"])
    _set_threads(1, 2)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    partitioner = None
    if settings.placement == "sharded":
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=ps
        )
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)

    def dataset_fn() -> Any:
        # read once by each worker's dataset, in the worker's process: the file in its working folder
        # says which worker task it is (a relative path, resolved where the op runs)
        task = tf.strings.to_number(tf.io.read_file(IDENTITY_FILE), tf.int64)
        return make_dataset(settings, None).map(  # None: each worker its own shuffle
            lambda x, y: (x, y, task)
        )

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    tf.random.set_seed(settings.seed)
    with strategy.scope():
        model = build_model(settings)
        optimizer = tf.keras.optimizers.SGD(settings.learning_rate, momentum=0.9)
        optimizer.build(model.trainable_variables)
    variables = model.trainable_variables
    gradient_bytes = int(sum(v.shape.num_elements() * 4 for v in variables))

    def train(x: Any, y: Any, started: Any) -> Any:
        """One replica's step (``strategy.run``): forward, backward, then the update on the PS tasks."""
        with tf.control_dependencies([started]), tf.GradientTape() as tape:
            predictions = model(x, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, predictions))
        grads = tape.gradient(loss, variables)
        with tf.control_dependencies(grads):
            computed = tf.timestamp()
        with tf.control_dependencies([computed]):
            update = optimizer.apply_gradients(zip(grads, variables))
        with tf.control_dependencies([update]):
            applied = tf.timestamp()
        return computed, applied, loss

    @tf.function
    def step(iterator: Any) -> Any:
        before_input = tf.timestamp()
        with tf.control_dependencies([before_input]):
            x, y, tag = next(iterator)
        with tf.control_dependencies([x, y]):
            started = tf.timestamp()
        computed, applied, loss = strategy.run(train, args=(x, y, started))
        return tag, before_input, started, computed, applied, loss

    hosts = spec.get("worker_hosts") or []
    recorders: dict[int, Recorder] = {}
    steps_done: dict[int, int] = {}
    rates, losses = [], []
    run_path = spec["run_path"]

    def record(values: Any, repetition: int) -> None:
        task, before_input, started, computed, applied, loss = (np.asarray(v).item() for v in values)
        lane = int(task)  # worker i runs on rank i: its lane
        if lane not in recorders:
            host = hosts[lane] if lane < len(hosts) else None
            recorders[lane] = Recorder(run_path, rank=lane, flush_interval_s=1.0, host=host)
        recorder, index = recorders[lane], steps_done.get(lane, 0)
        steps_done[lane] = index + 1
        ns = [int(t * 1e9) for t in (before_input, started, computed, applied)]
        recorder.record("input", ns[0], ns[1], "next_batch", step=index, epoch=repetition)
        recorder.record(
            "compute",
            ns[1],
            ns[2],
            "train_step",
            step=index,
            epoch=repetition,
            detail="forward and backward, reading the variables from the PS tasks",
        )
        recorder.record(
            "communication",
            ns[2],
            ns[3],
            "push_gradients",
            step=index,
            epoch=repetition,
            nbytes=gradient_bytes,
            detail="gradients sent to the PS tasks and applied there",
        )
        losses.append(loss)

    for repetition in range(settings.repetitions):
        warm = [coordinator.schedule(step, args=(iterator,)) for _ in range(settings.warmup_steps * workers)]
        coordinator.join()
        started = time.perf_counter()
        measured = [coordinator.schedule(step, args=(iterator,)) for _ in range(settings.measured_steps * workers)]
        coordinator.join()
        seconds = time.perf_counter() - started
        rates.append(settings.measured_steps * workers * settings.batch / seconds)
        for remote in [*warm, *measured]:
            record(remote.fetch(), repetition)
    for recorder in recorders.values():
        recorder.close()
    placement = variable_placement(model.variables)
    return {
        "workers": workers,
        "ps": ps,
        "images_per_s": rates,
        "steps": int(sum(steps_done.values())),
        "steps_per_worker": [steps_done[lane] for lane in sorted(steps_done)],
        "gradient_bytes": gradient_bytes,
        "parameters": int(model.count_params()),
        "threads": spec["worker_threads"][0],
        "worker_threads": spec["worker_threads"],
        "placement": placement,
        "final_loss": float(np.mean(losses[-workers:])) if losses else float("nan"),
        "settings": asdict(settings),
    }


def main(argv: list[str]) -> int:
    role, spec_path = argv[0], Path(argv[1])
    spec = json.loads(spec_path.read_text())
    if role == "server":
        run_server(spec, argv[2], int(argv[3]))
        return 0
    if role == "chief":
        result = run_chief(spec)
        tmp = spec_path.with_name("result.json.tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(spec_path.with_name("result.json"))
        # the coordinator's remote functions can hold the exit for seconds: the result is safe, leave now
        sys.stdout.flush()
        os._exit(0)
    raise SystemExit(f"ps_job: unknown role {role!r}: use server or chief")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
