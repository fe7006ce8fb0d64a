"""Faults across nodes of the miniature cluster: a node lost, a node frozen, a slow node, a slow link.

Each is diagnosed from what a real cluster would show: the lost node by its ranks' launcher and
Slurm, the frozen node by its ranks' silence, the slow node and the slow link from the recorded
run's own spans.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import pandas as pd
import pytest

from workbench.experiment import Case, Experiment, Point
from workbench.faults import RankFailedError
from workbench.store import Run, read_run_meta

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # engines cannot import test modules
CEILING_S = 120.0


def train_like_steps(
    run_path: str, *, steps: int, compute_s: float, tensor_mb: float, backend: str = "mpi"
) -> dict[str, Any]:
    """Steps of busy compute (``compute_s`` of one core) then an allreduce of ``tensor_mb``: a data-parallel step."""
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
            with recorder.phase("compute", "forward_backward", step=step):
                deadline = time.thread_time() + compute_s
                while time.thread_time() < deadline:  # CPU time: a slower core share takes longer
                    pass
            with recorder.phase("communication", "allreduce", step=step, nbytes=gradient.nbytes):
                comm.Allreduce(gradient, summed, op=MPI.SUM)
    return {"rank": comm.Get_rank(), "steps": steps}


@dataclass(frozen=True)
class StepSettings:
    steps: int = 100_000
    compute_s: float = 0.02
    tensor_mb: float = 0.1


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
        return {"steps": settings.steps, "compute_s": settings.compute_s, "tensor_mb": settings.tensor_mb}

    def row(self, run: Run, point: Point, settings: StepSettings) -> dict[str, Any]:
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
    events = Run.load(run_path).events
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
