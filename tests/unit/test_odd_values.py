"""Values of a run that make no sense are said, not analysed as truth: steps that go back, ranks past the
world size the run declares (times that make no sense: ``test_fuzz_readers``; spans that end before they
start: ``backwards_spans`` in the analysis' tests)."""

from __future__ import annotations

import pandas as pd

from workbench import events as ev
from workbench.analysis import analyse_run

NS = 1_000_000_000
HOSTS = {0: "node1", 1: "node2", 2: "node3", 3: "node4"}


def _steps(rank: int, steps: list[int], epoch: int = -1, start_s: float = 0.0) -> list[tuple]:
    starts = [int((start_s + i) * NS) for i in range(len(steps))]
    return [
        (rank, HOSTS[rank], ev.COMPUTE, "train_step", start, start + NS // 2, step, epoch)
        for start, step in zip(starts, steps)
    ]


def _frame(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["rank", "host", "phase", "name", "start_ns", "end_ns", "step", "epoch"])
    return frame.assign(run_id="made", nbytes=0)


def test_steps_that_go_back_are_said_with_where():
    """Rank 1 counts 0-9 then 0-4 again (a second fit without an epoch): it goes back once, to step 0 after 9.
    Rank 0 counts 0-4 in epoch 0 then 0-4 in epoch 1: numbered by epoch, it never goes back."""
    events = _frame(
        _steps(0, list(range(5)), epoch=0) + _steps(0, list(range(5)), epoch=1, start_s=5)
        + _steps(1, list(range(10))) + _steps(1, list(range(5)), start_s=10)
    )  # fmt: skip
    findings = analyse_run(events).findings
    said = findings[findings["kind"] == "steps_backwards"]
    assert len(said) == 1 and said["ranks"].iloc[0] == "1"
    assert "go back 1 time (first to step 0 after step 9)" in said["text"].iloc[0]


def test_ranks_past_the_declared_world_are_said():
    events = _frame(_steps(0, [0, 1]) + _steps(1, [0, 1]) + _steps(3, [0, 1]))
    findings = analyse_run(events, meta={"ranks": 2}).findings
    said = findings[findings["kind"] == "ranks_beyond_world"]
    assert len(said) == 1 and said["ranks"].iloc[0] == "3"
    assert "but the run declares 2 ranks (0–1)" in said["text"].iloc[0]
    assert not analyse_run(events, meta={"ranks": 4}).findings["kind"].eq("ranks_beyond_world").any()
