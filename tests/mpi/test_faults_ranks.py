"""Faults injected into 2 real ranks: a rank killed, a rank that hangs, a rank that raises.

Each test starts its own cluster (a killed rank ends the MPI job), waits on the event it needs with
a generous ceiling, and checks that no process it started is left.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import pandas as pd
import psutil
import pytest

from workbench.api import Run
from workbench.cluster import Cluster, processes_of_cluster
from workbench.experiment import Case, Experiment, Point, RunFolderError
from workbench.faults import RankFailedError
from workbench.store import RunData, read_run_meta

pytestmark = pytest.mark.mpi
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules
CEILING_S = 120.0


def allreduce_steps(
    run_path: str,
    *,
    steps: int,
    sleep_rank: int = -1,
    sleep_s: float = 0.0,
    backend: str = "mpi",
    unrecorded_s: float = 0.0,
) -> dict[str, Any]:
    """Recorded steps of one small allreduce each (MPI or Horovod); ``sleep_rank`` sleeps ``sleep_s`` before step 5.

    After the recorder closes, ``unrecorded_s`` of work nobody records: rank 0 sleeps, the others spin (a model
    freed, an evaluation on some ranks)."""
    from mpi4py import MPI

    from workbench.recorder import Recorder

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if backend == "horovod":
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init()

        def reduce(value: int) -> Any:
            return hvd.allreduce(tf.constant(float(value)), op=hvd.Sum, name="step")

    else:
        reduce = comm.allreduce
    with Recorder(run_path, flush_interval_s=0.1) as recorder:
        for step in range(steps):
            recorder.step = step
            if step == 5 and rank == sleep_rank:
                time.sleep(sleep_s)
            with recorder.phase("communication", "allreduce"):
                reduce(step)
            time.sleep(0.02)
    deadline = time.monotonic() + unrecorded_s
    while time.monotonic() < deadline:
        if rank == 0:
            time.sleep(0.1)
    return {"rank": rank, "steps": steps}


@dataclass(frozen=True)
class FaultSettings:
    steps: int = 100_000
    sleep_rank: int = -1
    sleep_s: float = 0.0
    backend: str = "mpi"
    unrecorded_s: float = 0.0


class FaultCase(Case):
    name = "faults"
    title = "Faults"
    about = "allreduce steps, one rank may sleep"
    presets: Mapping[str, FaultSettings] = {"ci": FaultSettings()}
    default_preset = "ci"
    workload = staticmethod(allreduce_steps)

    def points(self, settings: FaultSettings, max_ranks: int) -> list[Point]:
        return [Point.of(max_ranks, {"steps": settings.steps})]

    def workload_kwargs(self, settings: FaultSettings, point: Point) -> dict[str, Any]:
        return {
            "steps": settings.steps,
            "sleep_rank": settings.sleep_rank,
            "sleep_s": settings.sleep_s,
            "backend": settings.backend,
            "unrecorded_s": settings.unrecorded_s,
        }

    def row(self, run: RunData, point: Point, settings: FaultSettings) -> dict[str, Any]:
        return {"events": len(run.events)}

    def summary(self, rows: pd.DataFrame, tables: Any, settings: FaultSettings) -> dict[str, Any]:
        return {}

    def text(self, summary: Mapping[str, Any]) -> str:
        return ""


def _wait_for(predicate: Any, what: str, ceiling_s: float = CEILING_S) -> float:
    """Poll ``predicate`` until true; the seconds it took. Fails after ``ceiling_s``."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < ceiling_s, f"{what} not seen within {ceiling_s:.0f} s"
        time.sleep(0.05)
    return time.monotonic() - started


def _events_per_rank(run_path: Path) -> dict[int, int]:
    events = RunData.load(run_path).events
    return {int(rank): int(count) for rank, count in events.groupby("rank").size().items()}


def _assert_nothing_left(cluster: Cluster, started_pids: set[int], cluster_id: str) -> None:
    time.sleep(0.5)
    left = [
        pid
        for pid in started_pids | processes_of_cluster(cluster_id)
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    assert left == [], f"processes left: {left}"


@pytest.fixture
def own_cluster():
    """A 2-rank cluster of this test alone (a fault may end it); stopped and checked empty after."""
    cluster = Cluster(n=2, start_timeout_s=180)
    cluster.start_sync()
    cluster_id = cluster.cluster_id
    pids = set(cluster.pids)
    try:
        yield cluster
    finally:
        for pid in cluster.rank_pids.values():  # a stopped rank cannot end until it is continued
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGCONT)
        cluster.stop_sync()
        _assert_nothing_left(cluster, pids, cluster_id)


@pytest.mark.parametrize("backend", ["mpi", "horovod"])
def test_killed_rank_is_named_within_seconds_and_its_events_are_kept(own_cluster, tmp_path, backend):
    experiment = Experiment(FaultCase(), ranks=2, out=tmp_path, backend=backend)
    live = experiment.start(own_cluster, experiment.plan()[0])
    _wait_for(
        lambda: (
            min(_events_per_rank(live.run_path).values() or [0]) >= 20 and len(_events_per_rank(live.run_path)) == 2
        ),
        "20 flushed events per rank",
    )
    before = _events_per_rank(live.run_path)
    killed_at = time.monotonic()
    os.kill(own_cluster.rank_pids[1], signal.SIGKILL)
    with pytest.raises(RankFailedError, match=r"rank 1 was killed by signal 9 \(SIGKILL\)") as raised:
        live.wait()
    detected_s = time.monotonic() - killed_at
    assert detected_s < 10, detected_s
    meta = read_run_meta(live.run_path)
    assert meta["status"] == "failed"
    failure = meta["failure"]
    # mpiexec's line when it reached its output in time, else its exit code 137 = 128 + SIGKILL
    assert (
        failure["rank"] == 1 and failure["source"] in ("launcher", "nanny", "process") and "SIGKILL" in failure["cause"]
    )
    assert failure["last_event_ns"] is not None and failure["last_event_ns"] <= time.time_ns()
    assert failure["detected_after_s"] is not None and 0 <= failure["detected_after_s"] < 10
    assert raised.value.failure.rank == 1
    manifest = json.loads((tmp_path / "sweep.json").read_text())
    assert manifest["points"][experiment.plan()[0].key]["failure"]["rank"] == 1
    after = _events_per_rank(live.run_path)
    assert all(after[rank] >= before[rank] for rank in before)  # every flushed event stays readable
    print(f"\n{backend}: kill -9 rank 1: RankFailedError after {detected_s:.2f} s ({failure})")


@pytest.mark.parametrize("backend", ["mpi", "horovod"])
def test_hung_rank_is_a_stall_with_stacks_then_a_timeout(own_cluster, tmp_path, backend):
    settings = {"steps": 40, "sleep_rank": 1, "sleep_s": 3600.0, "backend": backend}
    experiment = Experiment(FaultCase(), ranks=2, out=tmp_path, **settings)
    live = experiment.start(own_cluster, experiment.plan()[0], timeout_s=24, stall_after_s=3)
    outcome: dict[str, BaseException] = {}

    def wait() -> None:
        try:
            live.wait()
        except BaseException as error:
            outcome["error"] = error

    waiter = threading.Thread(target=wait)
    started = time.monotonic()
    waiter.start()
    stall_s = _wait_for(lambda: bool(read_run_meta(live.run_path).get("stall")), "a stall in run.json", 60)
    stall = read_run_meta(live.run_path)["stall"]
    if backend == "mpi":
        assert [entry["rank"] for entry in stall["ranks"]] == [1], stall
        assert stall["ranks"][0]["waiting"] == [0]
    else:  # under Horovod both ranks sit near 0 % CPU, so the CPU reading alone cannot say which one hangs
        named = {e["rank"] for e in stall["ranks"]} | {r for e in stall["ranks"] for r in e.get("waiting", [])}
        assert named == {0, 1}, stall
    stacks = own_cluster.stacks()
    assert ("allreduce_steps" in stacks[1] and "time.sleep" not in stacks[1]) or "allreduce_steps" in stacks[1]
    assert "allreduce_steps" in stacks[0]
    assert own_cluster.rank_processes()[0][0] != "stopped"  # the ranks went on: stacks do not stop them
    waiter.join(CEILING_S)
    assert not waiter.is_alive()
    timeout_s = time.monotonic() - started
    error = outcome["error"]
    # the timeout names the rank the stall named: rank 1 under MPI; under Horovod either may be named (see above)
    hung = 1 if backend == "mpi" else int(str(error).split()[1])
    assert isinstance(error, RankFailedError) and f"rank {hung} did not finish within the run's timeout" in str(error)
    assert backend == "horovod" or hung == 1
    meta = read_run_meta(live.run_path)
    assert meta["status"] == "failed" and meta["failure"]["rank"] == hung and meta["failure"]["source"] == "timeout"
    saved = (live.run_path / "stacks.txt").read_text()
    assert "=== rank 0 ===" in saved and "=== rank 1 ===" in saved and "allreduce_steps" in saved
    assert own_cluster.client is None  # the ranks were stopped
    print(
        f"\n{backend}: rank 1 asleep: stall in run.json after {stall_s:.1f} s (stall_after_s=3); "
        f"timeout at {timeout_s:.1f} s"
    )


def test_stopped_rank_is_a_stall_and_goes_on_when_continued(own_cluster, tmp_path):
    experiment = Experiment(FaultCase(), ranks=2, out=tmp_path, steps=150)
    live = experiment.start(own_cluster, experiment.plan()[0], stall_after_s=3)
    outcome: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: outcome.setdefault("results", live.wait()))
    waiter.start()
    _wait_for(lambda: len(_events_per_rank(live.run_path)) == 2, "events from both ranks")
    os.kill(own_cluster.rank_pids[1], signal.SIGSTOP)
    stall_s = _wait_for(lambda: bool(read_run_meta(live.run_path).get("stall")), "a stall in run.json", 60)
    stall = read_run_meta(live.run_path)["stall"]["ranks"]
    assert [entry["rank"] for entry in stall] == [1] and stall[0]["state"] == "process stopped"
    assert "is stopped" in own_cluster.stacks()[1]
    os.kill(own_cluster.rank_pids[1], signal.SIGCONT)
    waiter.join(CEILING_S)
    assert [r["rank"] for r in outcome["results"]] == [0, 1]
    assert read_run_meta(live.run_path)["status"] == "finished"
    print(f"\nSIGSTOP rank 1: stall in run.json after {stall_s:.1f} s (stall_after_s=3); continued, finished")


def test_ranks_working_after_their_recorders_closed_are_not_stalled(own_cluster, tmp_path):
    """A rank whose recorder was closed finished recording: silent and idle while another rank spins, unrecorded,
    it is not stuck (seen as a false stall on slow nodes between the last InceptionV3 step and the point's end)."""
    experiment = Experiment(FaultCase(), ranks=2, out=tmp_path, steps=10, unrecorded_s=7.0)
    live = experiment.start(own_cluster, experiment.plan()[0], stall_after_s=2)
    results = live.wait()
    assert [result["rank"] for result in results] == [0, 1]
    meta = read_run_meta(live.run_path)
    assert meta["status"] == "finished" and meta.get("stall") is None, meta.get("stall")
    ended = [json.loads(path.read_text()) for path in sorted((live.run_path / "ranks").glob("rank-*.json"))]
    assert [facts["rank"] for facts in ended] == [0, 1]
    last_events = RunData.load(live.run_path).events.groupby("rank")["end_ns"].max()
    assert all(facts["recording_ended_ns"] >= last_events[facts["rank"]] for facts in ended)


def raise_on_rank(run_path: str, *, rank_to_fail: int) -> dict[str, Any]:
    """A few recorded steps, then ``rank_to_fail`` raises (the other returns)."""
    from mpi4py import MPI

    from workbench.recorder import Recorder

    rank = MPI.COMM_WORLD.Get_rank()
    with Recorder(run_path, flush_interval_s=0.05) as recorder:
        for step in range(5):
            with recorder.phase("compute", "step", step=step):
                time.sleep(0.01)
    if rank == rank_to_fail:
        raise ValueError(f"bad batch on rank {rank}")
    return {"rank": rank}


def record_into(run_path: str, *, rows: int) -> dict[str, Any]:
    """Record ``rows`` spans as fast as possible (fills a small disk)."""
    from mpi4py import MPI

    from workbench.recorder import Recorder

    rank = MPI.COMM_WORLD.Get_rank()
    with Recorder(run_path, flush_interval_s=0.05) as recorder:
        for step in range(rows):
            recorder.record("compute", time.time_ns(), time.time_ns(), "step", step=step, detail="x" * 200)
            if step % 1000 == 0:
                time.sleep(0.01)
    return {"rank": rank}


class RaiseCase(FaultCase):
    name = "raise"
    workload = staticmethod(raise_on_rank)

    def workload_kwargs(self, settings: FaultSettings, point: Point) -> dict[str, Any]:
        return {"rank_to_fail": 1}


class FillCase(FaultCase):
    name = "fill"
    workload = staticmethod(record_into)

    def workload_kwargs(self, settings: FaultSettings, point: Point) -> dict[str, Any]:
        return {"rows": 200_000}


def test_rank_that_raises_is_named_with_its_exception(own_cluster, tmp_path):
    experiment = Experiment(RaiseCase(), ranks=2, out=tmp_path)
    live = experiment.start(own_cluster, experiment.plan()[0])
    started = time.monotonic()
    with pytest.raises(RankFailedError, match=r"^rank 1 raised ValueError: bad batch on rank 1"):
        live.wait()
    meta = read_run_meta(live.run_path)
    assert meta["failure"]["rank"] == 1 and meta["failure"]["source"] == "exception"
    assert _events_per_rank(live.run_path) == {0: 5, 1: 5}
    print(f"\nrank 1 raises: RankFailedError {time.monotonic() - started:.2f} s after the start (5 steps of 10 ms)")


def test_controller_killed_is_one_error(own_cluster, tmp_path):
    experiment = Experiment(FaultCase(), ranks=2, out=tmp_path)
    live = experiment.start(own_cluster, experiment.plan()[0])
    _wait_for(lambda: len(_events_per_rank(live.run_path)) == 2, "events from both ranks")
    controller = own_cluster.controller_pid
    assert controller is not None
    killed_at = time.monotonic()
    os.kill(controller, signal.SIGKILL)
    with pytest.raises(RankFailedError, match=r"^the controller \(ipcontroller\) ended"):
        live.wait()
    detected_s = time.monotonic() - killed_at
    assert detected_s < 10
    assert read_run_meta(live.run_path)["failure"]["source"] == "controller"
    assert len(RunData.load(live.run_path).events) > 0
    print(f"\ncontroller killed: RankFailedError after {detected_s:.2f} s")


def test_disk_full_while_recording(own_cluster, tmp_path):
    """The run store on a 2 MB tmpfs made here, filled by the ranks' own records: each rank's recorder says so
    once and its training ends well; the point is one line naming the folder; what fit stays readable."""
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = os.system(f"mount -t tmpfs -o size=2m tmpfs {disk} 2>/dev/null") == 0
    if not mounted:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        experiment = Experiment(FillCase(), ranks=2, out=disk)
        live = experiment.start(own_cluster, experiment.plan()[0], stall_after_s=None)
        started = time.monotonic()
        try:  # run.json is small: whether the last few KB take it depends on what the ranks left
            outcome = f"finished: {[result['rank'] for result in live.wait()]}"
        except RunFolderError as error:
            outcome = str(error)
            assert "the ranks finished but the run folder's disk refused run.json" in outcome
            assert "free space on that disk" in outcome and "\n" not in outcome
        elapsed = time.monotonic() - started
        said = "".join(live.pending.stderr)  # each engine's stderr, as a notebook shows it under the cell
        for rank in (0, 1):
            assert said.count(f"workbench recorder, rank {rank}: cannot write to") == 1, said[-3000:]
        kept = RunData.load(live.run_path)
        assert len(kept.events) > 0
        assert said.count("records could not be written to") == 2  # each rank, when it closed on a full disk
        Run.load(live.run_path).analyse()  # the analysis reads what was written
        print(f"\ndisk full: {outcome} {elapsed:.2f} s after the start; {len(kept.events)} events readable")
    finally:
        os.system(f"umount -l {disk}")


def test_sweep_timeout_stops_the_point_and_keeps_it_as_failed(own_cluster, tmp_path):
    """``Experiment.run(timeout_s=...)`` (``workbench run --timeout``) ends a hung point; the sweep can resume."""
    experiment = Experiment(FaultCase(), ranks=2, out=tmp_path, steps=40, sleep_rank=1, sleep_s=3600.0)
    started = time.monotonic()
    with pytest.raises(RankFailedError, match="did not finish within the run's timeout"):
        experiment.run(cluster=own_cluster, timeout_s=6)
    elapsed = time.monotonic() - started
    assert 6 <= elapsed < CEILING_S, elapsed
    entry = json.loads((tmp_path / "sweep.json").read_text())["points"][experiment.plan()[0].key]
    assert entry["status"] == "failed" and entry["failure"]["source"] == "timeout"
    run_path = tmp_path / entry["run"]
    assert read_run_meta(run_path)["status"] == "failed"
    assert "=== rank 1 ===" in (run_path / "stacks.txt").read_text()
    with pytest.raises(ValueError, match="timeout_s=0"):
        experiment.run(timeout_s=0)
