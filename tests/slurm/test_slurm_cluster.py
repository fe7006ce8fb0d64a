"""Engines launched by a real Slurm (a private one-node cluster): one MPI world, failures within seconds, stop.

Every test here submits real batch jobs to the Slurm started by tests/slurm/conftest.py; the
engines are that job's tasks, started by the venv's mpiexec inside the allocation (the default) or
by ``srun --mpi=pmix``, while the test cluster's MpiDefault is Slurm's own ``none``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import psutil
import pytest

from workbench.cluster import Cluster, ClusterStartError
from workbench.config import ClusterConfig

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules
SCRIPT = Path(__file__).with_name("slurm-local.sh")


def _rank_and_job() -> dict:
    import os as _os

    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    return {
        "job": _os.environ.get("SLURM_JOB_ID"),
        "mpi_sum": MPI.COMM_WORLD.allreduce(float(rank + 1), op=MPI.SUM),
        "horovod_sum": float(hvd.allreduce(tf.constant(np.float32(rank + 1)), op=hvd.Sum).numpy()),
    }


def _processes_of(cluster_id: str, job_id: str) -> list[psutil.Process]:
    """Every live process here of this cluster: controller (cluster id), the job's step daemons and tasks."""
    found = []
    for process in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            in_job = (process.info["environ"] or {}).get("SLURM_JOB_ID") == job_id or f"[{job_id}." in cmdline
            if (cluster_id in cmdline or in_job) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _left_by_this_test() -> list[str]:
    """Live processes started during this test (controller, mpiexec, engines, step daemons' tasks).

    They carry this test's PYTEST_CURRENT_TEST in their environment (sbatch --export=ALL passes it on),
    so processes of other test runs on the machine are not counted.
    """
    test = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    left = []
    for process in psutil.process_iter(["cmdline", "environ"]):
        try:
            mine = (process.info["environ"] or {}).get("PYTEST_CURRENT_TEST", "").startswith(test)
            if mine and process.pid != os.getpid() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(process.info["cmdline"] or []))
        except psutil.Error:
            continue
    return left


def _job_state(job_id: str) -> str:
    line = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return line.stdout.strip()


@pytest.mark.parametrize("slurm_mpi", ["mpiexec", "pmix"])
def test_slurm_engines_are_one_world_and_stop_leaves_nothing(slurm_conf, slurm_mpi, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written into the user's working directory
    cluster = Cluster(n=2, launcher="slurm", slurm_mpi=slurm_mpi, time_limit="10", start_timeout_s=120)
    started = time.monotonic()
    cluster.start_sync()
    try:
        start_s = time.monotonic() - started
        job_id = cluster.slurm_job_id
        assert job_id and _job_state(job_id) == "RUNNING"
        pinned = cluster.pin_gpus_sync()  # no GPU here: each rank learns its local rank, sees no GPU
        assert list(pinned["local_rank"]) == [0, 1] and set(pinned["gpus_on_node"]) == {0}
        rank_map = cluster.init_horovod_sync()
        assert list(rank_map["mpi_rank"]) == [0, 1] and set(rank_map["mpi_size"]) == {2}
        assert list(rank_map["horovod_rank"]) == [0, 1] and set(rank_map["horovod_size"]) == {2}
        results = cluster.view.apply(_rank_and_job)
        assert [r["job"] for r in results] == [job_id, job_id]  # the engines are this job's tasks
        assert [(r["mpi_sum"], r["horovod_sum"]) for r in results] == [(3.0, 3.0), (3.0, 3.0)]
        cluster_id = cluster._ipp.cluster_id
        written = [Path(cluster._ipp.engine_set.batch_file), Path(cluster._ipp.engine_set.output_file)]
        assert all(path.exists() and not path.is_relative_to(tmp_path) for path in written)
        engine_pids = set(rank_map["pid"])
        running = _processes_of(cluster_id, job_id)
        assert {p.pid for p in running} >= engine_pids
        assert any("slurmstepd" in p.name() for p in running)  # the check below can see Slurm's processes
    finally:
        cluster.stop_sync()
    print(f"\n{slurm_mpi}: 2 Slurm engines started in {start_s:.1f} s")
    assert _job_state(job_id) == "CANCELLED"
    assert _processes_of(cluster_id, job_id) == []
    assert _left_by_this_test() == []
    # ended: gone, or a zombie that init has yet to reap (its parent, mpiexec, has gone)
    assert [pid for pid in engine_pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"] == []
    assert list(tmp_path.iterdir()) == []
    assert [path for path in written if path.exists()] == []  # the batch script and the job's output


def _mpi_library() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().split()[0]


def test_mpich_ranks_under_slurm_are_one_world(slurm_conf):
    with Cluster(n=2, launcher="slurm", mpi="mpich", start_timeout_s=120) as cluster:  # start checks one world
        assert cluster.view.apply(_mpi_library) == ["MPICH", "MPICH"]
    assert _left_by_this_test() == []


def test_failing_job_is_reported_within_seconds_with_its_output(slurm_conf):
    cluster = Cluster(n=2, launcher="slurm", mpi_args=("--no-such-mpiexec-flag",), start_timeout_s=120)
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as raised:
        cluster.start_sync()
    elapsed = time.monotonic() - started
    print(f"\nfailing job reported in {elapsed:.1f} s: {str(raised.value).splitlines()[0]}")
    assert elapsed < 30
    message = str(raised.value)
    assert f"Slurm job {cluster.slurm_state.job_id} is FAILED" in message
    assert "no-such-mpiexec-flag" in message  # mpiexec's own complaint, from the job's output file
    assert not cluster.slurm_state.active
    assert _left_by_this_test() == []


@pytest.mark.parametrize(
    ("settings", "reason"),
    [({"n": 3}, "PartitionConfig"), ({"n": 1, "time_limit": "2:00:00"}, "PartitionTimeLimit")],
)
def test_job_that_can_never_start_is_reported_with_slurms_reason(slurm_conf, settings, reason):
    cluster = Cluster(launcher="slurm", start_timeout_s=120, **settings)
    started = time.monotonic()
    with pytest.raises(ClusterStartError, match=rf"is PENDING \({reason}\).*cancelled: ask for fewer ranks") as raised:
        cluster.start_sync()
    elapsed = time.monotonic() - started
    print(f"\npending job ({reason}) reported in {elapsed:.1f} s")
    assert elapsed < 20
    assert _job_state(cluster.slurm_state.job_id) == "CANCELLED"
    assert "\n" not in str(raised.value)
    assert _left_by_this_test() == []


def test_job_waiting_for_a_busy_node_times_out_with_slurms_reason(slurm_conf, caplog):
    busy = subprocess.run(
        ["sbatch", "--parsable", "-n", "2", "--output=/dev/null", "--wrap", "sleep 120"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    try:
        cluster = Cluster(n=2, launcher="slurm", start_timeout_s=6)
        with pytest.raises(ClusterStartError, match=r"within 6 s \(Slurm job \d+ is PENDING \(Resources\)\)"):
            cluster.start_sync()
        assert "is PENDING (Resources); waiting up to start_timeout_s=6 s" in caplog.text  # said at once, too
        assert _job_state(cluster.slurm_state.job_id) == "CANCELLED"
    finally:
        subprocess.run(["scancel", busy], check=False)
        for _ in range(100):
            if _job_state(busy) not in ("RUNNING", "COMPLETING"):
                break
            time.sleep(0.1)
    assert _left_by_this_test() == []


def test_overcommit_runs_more_ranks_than_cores(slurm_conf):
    with Cluster(n=3, launcher="slurm", slurm_args=("--overcommit",), start_timeout_s=120) as cluster:
        assert len(set(cluster.view.apply(os.getpid))) == 3
    assert _left_by_this_test() == []


def test_sbatch_refusal_is_one_line_with_sbatchs_message(slurm_conf):
    with pytest.raises(ClusterStartError) as raised:
        Cluster(n=1, launcher="slurm", slurm_args=("--no-such-sbatch-option",)).start_sync()
    message = str(raised.value)
    assert message.startswith("Slurm did not accept the engines' job: `sbatch` failed")
    assert "no-such-sbatch-option" in message and "\n" not in message
    assert _left_by_this_test() == []


def test_eval_frequency_ci_sweep_on_slurm_engines(slurm_conf, tmp_path):
    from workbench.experiment import Experiment

    config = ClusterConfig(launcher="slurm", time_limit="15", start_timeout_s=180)
    experiment = Experiment(
        "eval-frequency", preset="ci", ranks=2, out=tmp_path / "ef", backends=("mpi4py",), cluster_config=config
    )
    result = experiment.run()
    runs = result.tables["runs"]
    assert len(runs) == 4 and set(runs["ranks"]) == {1, 2}  # ranks 1..2 x intervals {1, 20}
    assert (runs["test_accuracy"] > 0.1).all()
    assert result.summary["speedup_eval_fix"] > 1.0
    metas = [json.loads(path.read_text()) for path in tmp_path.rglob("run.json")]
    assert len(metas) == 4
    assert {meta["config"]["cluster"]["launcher"] for meta in metas} == {"slurm"}  # every point on Slurm engines
    assert {meta["config"]["cluster"]["ranks"] for meta in metas} == {1, 2}
    assert _left_by_this_test() == []


def test_stop_script_stops_every_daemon_it_started(slurm_conf, tmp_path):
    # a second private Slurm beside the session's (its own ports, key and state)
    state = tmp_path / "slurm"
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    subprocess.run([str(SCRIPT), "start", str(state)], check=True, capture_output=True, timeout=120, env=env)
    try:
        pids = {name: int((state / "run" / f"{name}.pid").read_text()) for name in ("munged", "slurmctld", "slurmd")}
        assert all(psutil.pid_exists(pid) for pid in pids.values())
        job = subprocess.run(["srun", "-n", "2", "hostname"], capture_output=True, text=True, timeout=60, env=env)
        assert job.returncode == 0 and len(job.stdout.split()) == 2
        # the worst case: a job running and slurmd killed, so Slurm itself cannot end the job's processes
        sleeper = ["sbatch", "--output=/dev/null", "--wrap", "sleep 300"]
        subprocess.run(sleeper, check=True, capture_output=True, env=env)
        for _ in range(100):
            if any(process.name() == "slurmstepd" for process in _processes_of_slurm(state)):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the sleep job did not start")
        psutil.Process(pids["slurmd"]).kill()
    finally:
        started = time.monotonic()
        subprocess.run([str(SCRIPT), "stop", str(state)], check=True, capture_output=True, timeout=120, env=env)
    print(f"\nprivate Slurm stopped in {time.monotonic() - started:.1f} s (slurmd killed, a job running)")
    alive = [pid for pid in pids.values() if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert alive == []
    assert [process.cmdline() for process in _processes_of_slurm(state)] == []


def _processes_of_slurm(state: Path) -> list[psutil.Process]:
    """Live processes of the Slurm under ``state``: daemons, step daemons, the jobs' tasks (not this test).

    Read from /proc/PID/environ itself: slurmstepd writes its title over the start of that area,
    where psutil's parser stops.
    """
    marker = f"SLURM_CONF={state / 'slurm.conf'}".encode() + b"\0"
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            environ = Path(f"/proc/{process.pid}/environ").read_bytes()
            if str(state) in " ".join(process.cmdline()) or marker in environ:
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found
