"""Faults across nodes of the miniature cluster: a node lost, a node frozen, a slow node, a slow link.

Each is diagnosed from what a real cluster would show: the lost node by its ranks' launcher and
Slurm, the frozen node by its ranks' silence, the slow node and the slow link from the recorded
run's own spans.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import pandas as pd
import pytest
from small_disk import fill, mounted_tmpfs

from workbench.experiment import Case, Experiment, Point
from workbench.faults import RankFailedError
from workbench.store import RunData, read_run_meta

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules
CEILING_S = 120.0


def train_like_steps(
    run_path: str, *, steps: int, compute_s: float, tensor_mb: float, backend: str = "mpi", unrecorded_s: float = 0.0
) -> dict[str, Any]:
    """Steps of busy compute (``compute_s`` of one core) then an allreduce of ``tensor_mb``: a data-parallel step.

    ``unrecorded_s``: time asleep after the recorder closed (its heartbeat stopped), as while a model is freed."""
    import numpy as np
    from mpi4py import MPI

    from workbench.recorder import Recorder

    comm = MPI.COMM_WORLD
    gradient = np.ones(max(1, int(tensor_mb * 2**20 / 4)), dtype=np.float32)
    summed = np.empty_like(gradient)
    with Recorder(run_path, flush_interval_s=0.1) as recorder:
        recorder.align_clocks(comm)
        for step in range(steps):
            recorder.step = step
            with recorder.phase("compute", "train_step", step=step):
                with recorder.phase("compute", "forward_backward", step=step):
                    deadline = time.thread_time() + compute_s
                    while time.thread_time() < deadline:  # CPU time: a slower core share takes longer
                        pass
                with recorder.phase("communication", "allreduce", step=step, nbytes=gradient.nbytes):
                    comm.Allreduce(gradient, summed, op=MPI.SUM)
    time.sleep(unrecorded_s)
    return {"rank": comm.Get_rank(), "steps": steps}


@dataclass(frozen=True)
class StepSettings:
    steps: int = 100_000
    compute_s: float = 0.02
    tensor_mb: float = 0.1
    unrecorded_s: float = 0.0


class StepCase(Case):
    name = "node-faults"
    title = "Node faults"
    about = "compute then allreduce steps across nodes"
    presets: Mapping[str, StepSettings] = {"ci": StepSettings()}
    default_preset = "ci"
    workload = staticmethod(train_like_steps)

    def points(self, settings: StepSettings, max_ranks: int) -> list[Point]:
        return [Point.of(max_ranks, {"steps": settings.steps})]

    def workload_kwargs(self, settings: StepSettings, point: Point) -> dict[str, Any]:
        return {
            "steps": settings.steps,
            "compute_s": settings.compute_s,
            "tensor_mb": settings.tensor_mb,
            "unrecorded_s": settings.unrecorded_s,
        }

    def row(self, run: RunData, point: Point, settings: StepSettings) -> dict[str, Any]:
        return {"events": len(run.events)}

    def summary(self, rows: pd.DataFrame, tables: Any, settings: StepSettings) -> dict[str, Any]:
        return {}

    def text(self, summary: Mapping[str, Any]) -> str:
        return ""


def _wait_for(predicate: Any, what: str, ceiling_s: float = CEILING_S) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < ceiling_s, f"{what} not seen within {ceiling_s:.0f} s"
        time.sleep(0.05)
    return time.monotonic() - started


def _events_per_rank(run_path: Any) -> dict[int, int]:
    events = RunData.load(run_path).events
    return {int(rank): int(count) for rank, count in events.groupby("rank").size().items()}


def test_node_lost_is_one_error_naming_the_node_and_its_ranks(restored, tmp_path):
    mini = restored
    with mini.cluster(4) as cluster:
        experiment = Experiment(StepCase(), ranks=4, out=tmp_path)
        live = experiment.start(cluster, experiment.plan()[0])
        _wait_for(lambda: min(_events_per_rank(live.run_path).values() or [0]) >= 20, "20 events per rank")
        _wait_for(lambda: len(_events_per_rank(live.run_path)) == 4, "events of 4 ranks")
        before = _events_per_rank(live.run_path)
        lost_at = time.monotonic()
        mini.kill_node("node3")
        with pytest.raises(RankFailedError) as raised:
            live.wait()
        detected_s = time.monotonic() - lost_at
    message = str(raised.value)
    print(f"\nnode3 lost: after {detected_s:.1f} s: {message}")
    assert "node3" in message and "rank 2" in message, message
    assert detected_s < 10
    meta = read_run_meta(live.run_path)
    assert meta["status"] == "failed" and meta["failure"]["rank"] == 2
    after = _events_per_rank(live.run_path)
    assert all(after[rank] >= before[rank] for rank in before)


def test_engines_job_cancelled_is_one_error_naming_the_jobs_state(restored, tmp_path):
    """The ranks' Slurm job ends under a run (scancel, a time limit): one error saying so, not a run that waits on.

    Found when the whole cluster was taken down under a sweep: its point waited on, with no word, until
    pytest's timeout 15 minutes later. Slurm's own word on the job is what says the engines are gone."""
    import subprocess

    with restored.cluster(2) as cluster:
        experiment = Experiment(StepCase(), ranks=2, out=tmp_path)
        live = experiment.start(cluster, experiment.plan()[0])
        _wait_for(lambda: len(_events_per_rank(live.run_path)) == 2, "events of 2 ranks")
        job_id = cluster.slurm_job_id
        cancelled_at = time.monotonic()
        subprocess.run(["scancel", str(job_id)], check=True)
        with pytest.raises(RankFailedError) as raised:
            live.wait()
        detected_s = time.monotonic() - cancelled_at
    message = str(raised.value)
    print(f"\nthe engines' job cancelled: after {detected_s:.1f} s: {message}")
    assert f"Slurm job {job_id} is CANCELLED" in message, message
    assert detected_s < 30  # the watch asks Slurm every 5 s
    assert read_run_meta(live.run_path)["status"] == "failed"


def test_slurm_silent_fails_the_run_only_once_its_ranks_are_silent_too(restored, tmp_path):
    """slurmctld not answering while the ranks work is no fault; with every node silent too, the cluster is gone."""
    import os
    import signal

    from workbench.cluster import CLUSTER_LOST_S

    controller = restored.pids["slurmctld"]
    with restored.cluster(2) as cluster:
        experiment = Experiment(StepCase(), ranks=2, out=tmp_path)
        live = experiment.start(cluster, experiment.plan()[0])
        outcome: dict[str, Any] = {}

        def wait() -> None:
            try:
                live.wait()
            except RankFailedError as error:
                outcome["error"] = error

        waiter = threading.Thread(target=wait)
        _wait_for(lambda: len(_events_per_rank(live.run_path)) == 2, "events of 2 ranks")
        waiter.start()
        os.kill(controller, signal.SIGSTOP)
        try:
            time.sleep(CLUSTER_LOST_S + 5)  # Slurm silent past the limit, the ranks beating: the run goes on
            assert waiter.is_alive() and "error" not in outcome, outcome
            assert read_run_meta(live.run_path)["status"] == "running"
            for node in restored.node_names[:2]:
                restored.freeze(node)
            waiter.join(CEILING_S)
        finally:
            for node in restored.node_names[:2]:
                restored.thaw(node)
            os.kill(controller, signal.SIGCONT)
    message = str(outcome.get("error"))
    print(f"\nslurmctld stopped, then both nodes frozen: {message}")
    assert "Slurm has not answered" in message and "the cluster is gone" in message, message
    assert read_run_meta(live.run_path)["status"] == "failed"


def test_frozen_node_is_a_stall_naming_its_ranks_not_the_ranks_waiting_for_them(restored, tmp_path):
    mini = restored
    with mini.cluster(4) as cluster:
        experiment = Experiment(StepCase(), ranks=4, out=tmp_path, steps=300, compute_s=0.005)
        live = experiment.start(cluster, experiment.plan()[0], stall_after_s=3)
        outcome: dict[str, Any] = {}
        waiter = threading.Thread(target=lambda: outcome.setdefault("results", live.wait()))
        waiter.start()
        _wait_for(lambda: len(_events_per_rank(live.run_path)) == 4, "events of 4 ranks")
        mini.freeze("node3")
        try:
            stall_s = _wait_for(lambda: bool(read_run_meta(live.run_path).get("stall")), "a stall in run.json", 60)
            stall = read_run_meta(live.run_path)["stall"]["ranks"]
        finally:
            mini.thaw("node3")
        waiter.join(CEILING_S)
    print(f"\nnode3 frozen: stall in run.json after {stall_s:.1f} s: {[entry['message'] for entry in stall]}")
    assert [(entry["rank"], entry["host"]) for entry in stall] == [(2, "node3")]
    assert "no heartbeat" in stall[0]["state"]
    assert [result["rank"] for result in outcome["results"]] == [0, 1, 2, 3]  # thawed, it went on
    assert read_run_meta(live.run_path)["status"] == "finished"


def test_nodes_whose_recorders_closed_are_not_frozen_ones(restored, tmp_path):
    """Their heartbeats stop with their recorders: a node asleep after recording is not frozen or unreachable."""
    with restored.cluster(2) as cluster:
        experiment = Experiment(StepCase(), ranks=2, out=tmp_path, steps=20, unrecorded_s=10.0)
        live = experiment.start(cluster, experiment.plan()[0], stall_after_s=3)
        results = live.wait()
    assert [result["rank"] for result in results] == [0, 1]
    meta = read_run_meta(live.run_path)
    assert meta["status"] == "finished" and meta.get("stall") is None, meta.get("stall")


def _finding(run_path: Any, kind: str) -> dict[str, Any]:
    from workbench.api import Run as AnalysedRun

    findings = AnalysedRun.load(run_path).analyse().findings
    chosen = findings[findings["kind"] == kind]
    assert not chosen.empty, f"no {kind} finding in:\n" + "\n".join(findings["text"])
    return chosen.iloc[0].to_dict()


def _steps_s(run_path: Any, rank: int) -> float:
    """Seconds of ``rank``'s steps after the first (the step the analysis leaves out as warm-up)."""
    events = RunData.load(run_path).events
    steps = events[(events["name"] == "train_step") & (events["rank"] == rank) & (events["step"] >= 1)]
    return float((steps["end_ns"] - steps["start_ns"]).sum() / 1e9)


def test_slow_node_is_the_straggler_with_the_time_lost(restored, tmp_path):
    """node2 at half the others' core share: named, and the time the others lose within 10 % of the truth.

    The truth is what the fault adds: node2's compute spans beyond the others' (the same work at
    half the share), which the straggler analysis does not read: it times the ranks' arrivals at
    the allreduce. (The others' step times are no truth here: a rank waiting in MPI polls and spends
    its node's quota, so even ranks already wait on one another's throttling.)
    """
    mini = restored
    mini.set_cpus("node2", 0.2)
    with mini.cluster(4) as cluster:
        experiment = Experiment(StepCase(), ranks=4, out=tmp_path, steps=40, compute_s=0.01)
        live = experiment.start(cluster, experiment.plan()[0])
        live.wait()
    events = RunData.load(live.run_path).events
    work = events[(events["name"] == "forward_backward") & (events["step"] >= 1)]  # step 0 is warm-up
    compute_s = (work["end_ns"] - work["start_ns"]).groupby(work["rank"]).sum() / 1e9
    truth = float(compute_s[1] - compute_s[[0, 2, 3]].mean())
    finding = _finding(live.run_path, "straggler")
    print(f"\nnode2 at half speed: {finding['text']}; truth {truth:.3g} s each")
    assert finding["ranks"] == "1" and "rank 1 (node2)" in finding["text"]
    assert finding["seconds_lost"] == pytest.approx(truth, rel=0.10)


def test_slow_link_is_named_with_its_bandwidth(restored, tmp_path):
    """node3's link at 100 Mbit/s, the others' at 1 Gbit/s: the finding names node3's link and its speed."""
    mini = restored
    mini.shape("node3", "100mbit")
    with mini.cluster(4) as cluster:
        assert cluster.links[2]["host"] == "node3"
        experiment = Experiment(StepCase(), ranks=4, out=tmp_path, steps=20, compute_s=0.005, tensor_mb=2.0)
        live = experiment.start(cluster, experiment.plan()[0])
        live.wait()
    links = read_run_meta(live.run_path)["links"]
    speeds = {int(rank): link["bytes_per_s"] / 1e6 for rank, link in links.items()}
    finding = _finding(live.run_path, "slow_link")
    print(f"\nnode3 at 100 Mbit/s: links {speeds} MB/s: {finding['text']}")
    assert finding["ranks"] == "2" and "node3's link" in finding["text"]
    assert 0.8 * 12.5 < speeds[2] < 1.05 * 12.5  # 100 Mbit/s = 12.5 MB/s of packets
    assert all(speeds[rank] > 3 * speeds[2] for rank in (0, 1, 3))
    assert finding["seconds_lost"] > 0


def _network_alerts(run_path: Any) -> list[str]:
    return (read_run_meta(run_path).get("network") or {}).get("alerts", [])


def _train_steps(run_path: Any) -> dict[int, list[int]]:
    events = RunData.load(run_path).events
    steps = events[events["name"] == "train_step"]
    return {int(rank): sorted(int(s) for s in group["step"]) for rank, group in steps.groupby("rank")}


def _with_fault(
    mini: Any, tmp_path: Any, fault: Any, restore: Any, *, steps: int, hold_s: float, named: str
) -> dict[str, Any]:
    """A run of 4 ranks over the 4 nodes; once every rank records, ``fault()``, then after ``hold_s`` ``restore()``.

    Returns when the run ended: how soon run.json had a network alert starting with ``named``, the alerts then,
    the run."""
    seen: dict[str, Any] = {}
    with mini.cluster(4) as cluster:
        experiment = Experiment(StepCase(), ranks=4, out=tmp_path, steps=steps, compute_s=0.005, tensor_mb=1.0)
        live = experiment.start(cluster, experiment.plan()[0], stall_after_s=3)
        outcome: dict[str, Any] = {}
        waiter = threading.Thread(target=lambda: outcome.setdefault("results", live.wait()), daemon=True)
        waiter.start()
        _wait_for(lambda: len(_events_per_rank(live.run_path)) == 4, "events of 4 ranks")
        time.sleep(4)  # a few beats of the links at their usual speed
        fault_at = time.time()
        fault()
        try:
            seen["detected_s"] = _wait_for(
                lambda: any(alert.startswith(named) for alert in _network_alerts(live.run_path)),
                f"a network alert '{named} ...'",
                hold_s,
            )
            seen["alerts"] = _network_alerts(live.run_path)
            time.sleep(max(0.0, hold_s - (time.time() - fault_at)))
        finally:
            restore()
            restored_at = time.time()
        waiter.join(CEILING_S * 2)
    seen.update(outcome=outcome, run_path=live.run_path, fault_at=fault_at, restored_at=restored_at)
    return seen


def test_a_link_down_mid_run_is_named_while_it_lasts_and_nothing_recorded_is_lost(restored, tmp_path):
    """node3's link down for 12 s, then up: run.json names node3's link while it is down; the run goes on to
    its end with every step of every rank recorded, and the analysis says how long the link carried nothing."""
    mini = restored
    seen = _with_fault(
        mini, tmp_path, lambda: mini.set_link("node3", up=False), lambda: mini.set_link("node3", up=True),
        steps=300, hold_s=12.0, named="node3's link",
    )  # fmt: skip
    print(f"\nnode3's link down: named after {seen['detected_s']:.1f} s: {seen['alerts']}")
    assert any(alert.startswith("node3's link") for alert in seen["alerts"]), seen["alerts"]
    assert [result["rank"] for result in seen["outcome"]["results"]] == [0, 1, 2, 3]
    assert read_run_meta(seen["run_path"])["status"] == "finished"
    assert _train_steps(seen["run_path"]) == {rank: list(range(300)) for rank in range(4)}
    finding = _finding(seen["run_path"], "link_down")
    print(f"finding: {finding['text']}")
    assert finding["ranks"] == "2" and finding["text"].startswith("node3's link")
    assert 6 <= finding["seconds_lost"] <= 12 + 15  # what the connections saw: at most the outage plus TCP's backoff


def test_a_link_slowed_mid_run_is_named_with_when(restored, tmp_path):
    """node3's link at 100 Mbit/s for 15 s of a run at 1 Gbit/s: named while slowed, then a finding with the
    stretch; the timeline's allreduces in the stretch are the slow ones."""
    mini = restored
    seen = _with_fault(
        mini, tmp_path, lambda: mini.shape("node3", "100mbit"), lambda: mini.shape("node3", "1gbit"),
        steps=500, hold_s=15.0, named="node3's link slowed",
    )  # fmt: skip
    print(f"\nnode3's link slowed: named after {seen['detected_s']:.1f} s: {seen['alerts']}")
    assert any(alert.startswith("node3's link slowed") for alert in seen["alerts"]), seen["alerts"]
    assert read_run_meta(seen["run_path"])["status"] == "finished"
    finding = _finding(seen["run_path"], "slowed_link")
    print(f"finding: {finding['text']}")
    from workbench.api import Run as AnalysedRun

    kinds = AnalysedRun.load(seen["run_path"]).analyse().findings["kind"].to_list()
    assert "link_down" not in kinds  # the slowed link's retransmission waits are no link down
    assert finding["ranks"] == "2" and finding["text"].startswith("node3's link slowed from")
    events = RunData.load(seen["run_path"]).events
    allreduce = events[events["name"] == "allreduce"]
    middle = (allreduce["start_ns"] + allreduce["end_ns"]) / 2e9
    during = (middle > seen["fault_at"] + 2) & (middle < seen["restored_at"] - 1)
    seconds = (allreduce["end_ns"] - allreduce["start_ns"]) / 1e9
    print(f"allreduce median: {seconds[during].median() * 1e3:.3g} ms slowed, {seconds[~during].median() * 1e3:.3g} ms")
    assert seconds[during].median() > 3 * seconds[~during].median()


def test_the_run_folder_filling_mid_run_is_said_once_and_nothing_recorded_is_lost(restored, tmp_path, caplog):
    """The run folder on a 64 MB disk that a file fills for 8 s mid-run: the watch says so as it happens, each
    rank's recorder says so once and holds its records, and once there is room every step of every rank is in
    the run, with a note of when the folder refused the writes."""
    STEPS = 1200  # about 30 s: the run goes on well past the 8 s the folder is full
    with mounted_tmpfs(tmp_path / "disk", "64m") as disk:
        with restored.cluster(4) as cluster, caplog.at_level("WARNING", logger="workbench.cluster"):
            experiment = Experiment(StepCase(), ranks=4, out=disk, steps=STEPS, compute_s=0.005, tensor_mb=0.1)
            live = experiment.start(cluster, experiment.plan()[0], stall_after_s=3)
            outcome: dict[str, Any] = {}

            def wait() -> None:
                try:
                    outcome["results"] = live.wait()
                except Exception:  # said by the assertion below
                    outcome["error"] = traceback.format_exc()

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            _wait_for(lambda: len(_events_per_rank(live.run_path)) == 4, "events of 4 ranks")
            filler = fill(disk)
            filled = time.monotonic()
            detected_s = _wait_for(lambda: "disk is full" in caplog.text, "the watch saying the disk is full", 10)
            time.sleep(max(0.0, 8 - (time.monotonic() - filled)))
            filler.unlink()
            waiter.join(CEILING_S)
        said = "".join(live.pending.stderr)
        print(f"\nrun folder full for 8 s: the watch said so after {detected_s:.1f} s")
        assert "error" not in outcome, outcome.get("error")
        assert [result["rank"] for result in outcome["results"]] == [0, 1, 2, 3]
        for rank in range(4):
            assert said.count(f"workbench recorder, rank {rank}: cannot write to") == 1, said
        assert _train_steps(live.run_path) == {rank: list(range(STEPS)) for rank in range(4)}
        note = _finding(live.run_path, "records_held")
        print(f"finding: {note['text']}")
        assert "nothing was lost" in note["text"] and "No space left on device" in note["text"]
