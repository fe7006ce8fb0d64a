"""One analysis at any size: runs made to exercise every piece of the analysis, and the comparison of a run
analysed whole (``analyse_run``) with the same run analysed in rank groups (``analyse_split``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from workbench import events as ev
from workbench.analysis import analyse_run
from workbench.analysis.pieces import PIECES, TABLES
from workbench.net_probe import LINK_RATE, LINK_UNANSWERED
from workbench.store import RunData, StreamWriter, create_run, update_run_meta, write_rank_meta

MS = 1_000_000
S = 1_000 * MS
#: Where the made CPU run starts (ns since the epoch, as a recorder writes).
T0 = 1_700_000_000 * S
HOSTS = {0: "node0", 1: "node0", 2: "node0", 3: "node1", 4: "node1"}
#: The ranks the made runs declare: the last one never recorded anything.
DECLARED = 6
STEPS = 12
#: Rank 4 computes twice as long as the others each step: the others wait for it in the allreduce.
COMPUTE_MS = {0: 40, 1: 40, 2: 40, 3: 40, 4: 80}
#: In step 6 rank 2 traces its step function again.
RETRACE_STEP, RETRACE_MS = 6, 1_200
PREDICT_CALLS = 30


def _step_starts() -> list[int]:
    starts, t = [], T0
    for step in range(STEPS):
        starts.append(t)
        t += (RETRACE_MS + 50 if step == RETRACE_STEP else 100) * MS
    return starts


def made_cpu_events() -> pd.DataFrame:
    """Five ranks on two hosts training in lock step with Horovod: a straggler (rank 4), a retrace (rank 2),
    evaluation on rank 0 alone, Keras predict calls, time off the CPU and one span that ends before it starts."""
    rows: list[dict[str, Any]] = []
    starts = _step_starts()
    for rank, host in HOSTS.items():

        def add(phase: str, name: str, start: int, end: int, step: int = -1, nbytes: int = 0, detail: str = "",
                rank: int = rank, host: str = host) -> None:  # fmt: skip
            rows.append(dict(rank=rank, host=host, phase=phase, name=name, step=step, start_ns=start, end_ns=end,
                             bytes=nbytes, detail=detail, epoch=0))  # fmt: skip

        for step, t in enumerate(starts):
            compute = (RETRACE_MS if step == RETRACE_STEP and rank == 2 else COMPUTE_MS[rank]) * MS
            slowest = max(COMPUTE_MS.values()) * MS if step != RETRACE_STEP else RETRACE_MS * MS
            end = t + slowest + 10 * MS
            # rank 3 reads its batches from a Python generator: no per-step input wait of Keras's own
            add(ev.INPUT, "next_batch" if rank != 3 else "read_records", t, t + 2 * MS, step)
            add(ev.COMPUTE, "train_step", t + 2 * MS, end, step)
            add(ev.COMMUNICATION, "allreduce", t + 2 * MS + compute, end, step, nbytes=4_000_000)
            # Horovod's timeline: the rank's readiness (its negotiation starts when it submits its tensor)
            add(ev.IN_FLIGHT, "NEGOTIATE_ALLREDUCE", t + 2 * MS + compute, t + 2 * MS + slowest + MS, step)
        last = starts[-1] + 100 * MS
        if rank == 0:
            add(ev.EVALUATION, "evaluate", last, last + 400 * MS)
        for call in range(PREDICT_CALLS):
            at = last + 500 * MS + call * 20 * MS
            add(ev.EVALUATION, "keras.predict", at, at + 15 * MS, detail="model")
            add(ev.EVALUATION, "predict_step", at + 10 * MS, at + 14 * MS)
        add(ev.IDLE, ev.OFF_CPU, last + 1_200 * MS, last + (1_210 + rank) * MS)
    rows.append(dict(rank=1, host="node0", phase=ev.COMPUTE, name="broken", step=-1, start_ns=T0 + 50 * MS,
                     end_ns=T0 + 40 * MS, bytes=0, detail="", epoch=0))  # fmt: skip
    frame = ev.events_frame(pd.DataFrame(rows))
    return frame.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def _write_events(path: Path, events: pd.DataFrame) -> None:
    for rank, rows in events.groupby("rank"):
        writer = StreamWriter(path, "events", int(rank), merge_fanout=0)
        writer.write({c: rows[c].tolist() for c in ev.EVENT_COLUMNS})


def _write_memory(path: Path, events: pd.DataFrame) -> None:
    """Samples every 0.2 s from 3 s before each rank's first span (set-up) to 2 s after its last (a tail), and one
    after every predict call: growing by 1 MB a call on rank 1."""
    for rank, rows in events.groupby("rank"):
        first, last = int(rows["start_ns"].min()), int(rows["end_ns"].max())
        times = list(range(first - 3 * S, last + 2 * S, 200 * MS))
        calls = rows[rows["name"] == "keras.predict"].sort_values("start_ns")
        growth = 1_000_000 if rank == 1 else 0
        columns: dict[str, list] = {c: [] for c in ev.MEMORY_COLUMNS}

        def sample(time_ns: int, rss: int, label: str = "", iteration: int = -1, rank: int = int(rank),
                   columns: dict[str, list] = columns) -> None:  # fmt: skip
            values = ("", rank, HOSTS[rank], time_ns, rss, -1, 10.0, label, iteration)
            for column, value in zip(ev.MEMORY_COLUMNS, values):
                columns[column].append(value)

        for time_ns in times:
            sample(time_ns, 500_000_000)
        for call, end in enumerate(calls["end_ns"]):
            sample(int(end), 500_000_000 + growth * call + (call % 3) * 1_000, "keras.predict", call)
        order = np.argsort(columns["time_ns"], kind="stable")
        writer = StreamWriter(path, "memory", int(rank), merge_fanout=0)
        writer.write({c: [v[i] for i in order] for c, v in columns.items()})


def _write_counters(path: Path, events: pd.DataFrame) -> None:
    """Rank 3's Python generator behind tf.data was busy nearly all of its training; rank 2's threads waited for
    a core 60 % of the time they used one (its heartbeat, once a second)."""
    first, last = int(events["start_ns"].min()), int(events["end_ns"].max())
    beats = list(range(first, last, S))
    writer = StreamWriter(path, "counters", 2, merge_fanout=0)
    writer.write(
        {
            "run_id": [""] * 2 * len(beats),
            "rank": [2] * 2 * len(beats),
            "host": ["node0"] * 2 * len(beats),
            "name": [ev.CPU_PERCENT, ev.CPU_WAIT_PERCENT] * len(beats),
            "time_ns": [t for t in beats for _ in range(2)],
            "value": [100.0, 60.0] * len(beats),
        }
    )
    _write_network_counters(path, beats)
    rows = events[events["rank"] == 3]
    steps = rows[rows["name"] == "train_step"]
    training_s = (int(steps["end_ns"].max()) - int(steps["end_ns"].min())) / S
    writer = StreamWriter(path, "counters", 3, merge_fanout=0)
    end = int(steps["end_ns"].max())
    writer.write(
        {
            "run_id": ["", ""],
            "rank": [3, 3],
            "host": ["node1", "node1"],
            "name": [ev.PYTHON_INPUT_BUSY, ev.PYTHON_INPUT_ELEMENTS],
            "time_ns": [end, end],
            "value": [0.95 * training_s, 1_000.0],
        }
    )


#: Each host's address, in its ranks' files: the network counters name peers by address.
ADDRESSES = {"node0": "10.0.0.1", "node1": "10.0.0.2"}


def _write_network_counters(path: Path, beats: list[int]) -> None:
    """node0's and node1's link at 100 MB/s, a tenth of it in the run's second and third seconds (both ends see
    it), and rank 1's connection to node1 unanswered for the last two beats (a link down at the end)."""
    for rank, peer in ((0, "node1"), (3, "node0")):
        rates = [1e7 if 1 <= i < 3 else 1e8 for i in range(len(beats))]
        writer = StreamWriter(path, "counters", rank, merge_fanout=0)
        writer.write(
            {
                "run_id": [""] * len(beats),
                "rank": [rank] * len(beats),
                "host": [HOSTS[rank]] * len(beats),
                "name": [f"{LINK_RATE}@{ADDRESSES[peer]}"] * len(beats),
                "time_ns": beats,
                "value": rates,
            }
        )
    writer = StreamWriter(path, "counters", 1, merge_fanout=0)
    writer.write(
        {
            "run_id": ["", ""],
            "rank": [1, 1],
            "host": ["node0", "node0"],
            "name": [f"{LINK_UNANSWERED}@{ADDRESSES['node1']}"] * 2,
            "time_ns": beats[-2:],
            "value": [5.0, 6.0],
        }
    )


def write_made_cpu_run(root: Path, *, collectives: bool = True) -> Path:
    """The made CPU run in the store, with what its metadata says: six ranks declared (rank 5 never recorded),
    a run that failed in a collective some ranks never submitted, and a slow link on node1. Without
    ``collectives``: the same ranks never exchanging anything, a run stopped by a signal."""
    events = made_cpu_events()
    if not collectives:
        events = events[~events["phase"].isin([ev.COMMUNICATION, ev.IN_FLIGHT])].reset_index(drop=True)
    # without collectives: six ranks of four threads each were given two cores (oversubscribed)
    config = None if collectives else {"cluster": {"ranks": DECLARED, "threads": 4, "cores": 2}}
    path = create_run(root, "made-cpu", ranks=DECLARED, config=config)
    _write_events(path, events)
    _write_memory(path, events[events["end_ns"] >= events["start_ns"]])
    _write_counters(path, events)
    first = int(events["start_ns"].min())
    for rank, host in HOSTS.items():
        # rank 4's run folder refused its writes for 2 s; 10 rows past what it could hold were dropped
        stalls = [{"from_ns": first + S, "to_ns": first + 3 * S, "error": "No space left on device", "dropped": 10}]
        write_rank_meta(
            path, rank, host=host, addresses=[ADDRESSES[host]], **({"write_stalls": stalls} if rank == 4 else {})
        )
    end = int(events["end_ns"].max())
    if not collectives:
        update_run_meta(path, status="interrupted", stopped_by="SIGTERM")
        return path
    update_run_meta(
        path,
        status="failed",
        exit_code=1,
        timeline_unfinished=[
            {
                "since_ns": end - S,
                "ready_ranks": [0, 1, 2],
                "tensor": "grad_0",
                "operation": "ALLREDUCE",
                "file_end_ns": end,
            },
        ],
        links={rank: {"host": host, "bytes_per_s": 1e9 if host == "node0" else 1e8} for rank, host in HOSTS.items()},
    )
    return path


def write_made_gpu_run(root: Path) -> Path:
    """Three ranks' Kineto traces (PyTorch's profiler, as HTA reads them) imported: GPUs mostly idle and waiting for
    their hosts, rank 1's GPU three times slower, collectives barely hidden; four ranks declared; one GPU unused."""
    from workbench.datasets.made_traces.kineto import MadeKinetoStep, write_made_kineto
    from workbench.importer import import_traces

    step = MadeKinetoStep(kernels=8, kernel_us=100, kernel_gap_us=200, launch_lead_us=10, step_us=14_000,
                          overlap_us=200)  # fmt: skip
    traces = write_made_kineto(root / "traces", ranks=3, steps=6, step=step, slow_ranks={1: 3.0})
    path = Path(import_traces(traces, out=root / "runs").run_path)
    host = str(RunData.load(path).devices["host"].iloc[0])
    update_run_meta(path, ranks=4, devices_idle={host: ["GPU:7"]})
    return path


def assert_same_analysis(split: Any, whole: Any, *, context: str = "") -> None:
    """Every table and finding of the rank groups' analysis equals the whole run's (sums in another order: 1e-9)."""
    assert split.pieces == whole.pieces == tuple(p.name for p in PIECES), context
    for name in TABLES:
        mine, theirs = getattr(split, name), getattr(whole, name)
        assert list(mine.columns) == list(theirs.columns), (context, name)
        pd.testing.assert_frame_equal(
            mine.reset_index(drop=True), theirs.reset_index(drop=True), check_dtype=False, rtol=1e-9, obj=name
        )
    for key, value in whole.pop.items():
        if isinstance(value, float):
            assert split.pop[key] == pytest.approx(value, rel=1e-9, nan_ok=True), (context, key)
        else:
            assert split.pop[key] == value, (context, key)
    assert split.header == whole.header, context
    pd.testing.assert_frame_equal(split.findings, whole.findings, check_dtype=False, rtol=1e-9, obj="findings")


def whole_analysis(path: Path) -> Any:
    """The run loaded at once and analysed as ``workbench analyse`` does when it fits."""
    run = RunData.load(path)
    return analyse_run(
        run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters, devices=run.devices
    )
