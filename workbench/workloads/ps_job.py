"""A TensorFlow parameter-server job on this machine: servers and a chief, each a process of its own.

``run_job`` (called by rank 0's engine) picks free ports, writes the job's spec, starts one
``tf.distribute.Server`` per PS task and per worker, waits until each listens (a chief started
before its servers blocks silently), runs the chief, and stops the servers by PID when it ends
(servers never return from ``join()``; SIGTERM stops them cleanly). Each process logs to
``<run>/ps_job/<role>.log``; a failure names the process and quotes the end of its log.

The chief (``python -m workbench.workloads.ps_job chief SPEC``) builds InceptionV3 under
``ParameterServerStrategy`` and schedules steps with a ``ClusterCoordinator``. Each step takes
``tf.timestamp`` on the worker before the batch, after it, after forward/backward and after the
update; the chief writes those as the worker's spans. Workers are told apart by a random tag drawn
once by each worker's dataset (the coordinator does not say which worker ran a step).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from workbench.workloads.inception import InceptionSettings

HOST = "127.0.0.1"
SERVER_START_TIMEOUT_S = 120.0


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on this machine now (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cluster_spec(workers: int, ps: int) -> dict[str, list[str]]:
    ports = free_ports(1 + workers + ps)
    return {
        "chief": [f"{HOST}:{ports[0]}"],
        "worker": [f"{HOST}:{p}" for p in ports[1 : 1 + workers]],
        "ps": [f"{HOST}:{p}" for p in ports[1 + workers :]],
    }


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


def run_job(run_path: str, settings: InceptionSettings, *, workers: int) -> dict[str, Any]:
    """Start the servers and the chief for one point; return the chief's result (see ``run_chief``)."""
    from workbench.workloads.inception import threads_for_workers

    folder = Path(run_path) / "ps_job"
    folder.mkdir(parents=True, exist_ok=True)
    cluster = cluster_spec(workers, settings.ps)
    threads = threads_for_workers(settings, workers)
    spec = {"run_path": str(run_path), "settings": asdict(settings), "cluster": cluster, "worker_threads": threads}
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    environment.pop("TF_CONFIG", None)
    servers: dict[str, subprocess.Popen] = {}
    command = [sys.executable, "-m", "workbench.workloads.ps_job"]
    try:
        for job in ("ps", "worker"):
            for task, _address in enumerate(cluster[job]):
                role = f"{job}{task}"
                with open(folder / f"{role}.log", "wb") as log:
                    servers[role] = subprocess.Popen(
                        [*command, "server", str(spec_path), job, str(task)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=environment,
                    )
        addresses = {f"{job}{task}": a for job in ("ps", "worker") for task, a in enumerate(cluster[job])}
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        waiting = dict(addresses)
        while waiting:
            for role in list(waiting):
                if servers[role].poll() is not None:
                    raise RuntimeError(
                        f"PS job: server {role} exited with code {servers[role].returncode} before listening; "
                        f"its log ends:\n{_log_tail(folder / f'{role}.log')}"
                    )
                if _listening(waiting[role]):
                    del waiting[role]
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(
                    f"PS job: servers {', '.join(waiting)} not listening after {SERVER_START_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.2)
        started = time.perf_counter()
        with open(folder / "chief.log", "wb") as log:
            chief = subprocess.Popen(
                [*command, "chief", str(spec_path)], stdout=log, stderr=subprocess.STDOUT, env=environment
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
            raise RuntimeError(
                f"PS job: the chief failed (exit {code}); its log ends:\n{_log_tail(folder / 'chief.log')}"
            )
        result = json.loads((folder / "result.json").read_text())
        result["job_wall_s"] = time.perf_counter() - started
        return result
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

    threads = spec["worker_threads"] if job == "worker" else 1
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
        # drawn once by each worker's dataset: its identity. No seed may be set before this is traced,
        # or every worker would draw the same number.
        tag = tf.random.uniform([], maxval=2**62, dtype=tf.int64)
        return make_dataset(settings, None).map(  # None: each worker its own shuffle
            lambda x, y: (x, y, tag)
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

    lanes: dict[int, int] = {}
    recorders: dict[int, Recorder] = {}
    steps_done: dict[int, int] = {}
    rates, losses = [], []
    run_path = spec["run_path"]

    def record(values: Any, repetition: int) -> None:
        tag, before_input, started, computed, applied, loss = (np.asarray(v).item() for v in values)
        lane = lanes.setdefault(int(tag), len(lanes))
        if lane not in recorders:
            recorders[lane] = Recorder(run_path, rank=lane, flush_interval_s=1.0)
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
        "threads": spec["worker_threads"],
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
