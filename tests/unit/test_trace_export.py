"""``workbench export``: a run as one Trace Event Format file, read back by a strict JSON parser (Python's own).

The parser is not ours: ``json`` with constants (NaN, Infinity) refused and duplicate keys refused,
so the file is standard JSON; then every span must be where the Trace Event Format puts it (a
complete event with pid, tid, ts, dur on its rank's thread of its host's process).
"""

from __future__ import annotations

import gzip
import json
import math

import pandas as pd
import pytest

from workbench.cli import main
from workbench.events import events_frame
from workbench.formats import export_trace, write_chrome_trace
from workbench.store import StreamWriter, create_run, write_rank_meta

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000


def _strict(text: str) -> dict:
    def refuse_constant(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    def no_duplicates(pairs: list) -> dict:
        keys = [key for key, _value in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError(f"duplicate keys {keys}")
        return dict(pairs)

    return json.loads(text, parse_constant=refuse_constant, object_pairs_hook=no_duplicates)


def _spans(rank: int, host: str, count: int) -> pd.DataFrame:
    """``count`` steps, each holding an allreduce, 10 ms apart; ``host`` "" as Horovod's import leaves it."""
    rows = []
    for step in range(count):
        start = T0 + (10 * step + rank) * MS
        rows.append(
            {
                "rank": rank,
                "host": host,
                "phase": "compute",
                "name": "train_step",
                "step": step,
                "start_ns": start,
                "end_ns": start + 8 * MS,
            }
        )
        rows.append(
            {
                "rank": rank,
                "host": host,
                "phase": "communication",
                "name": 'allreduce "grads"',
                "step": step,
                "start_ns": start + 5 * MS,
                "end_ns": start + 7 * MS,
                "bytes": 4096,
            }
        )
    return events_frame(rows)  # fmt: skip


@pytest.fixture
def run_path(tmp_path):
    """3 ranks on 2 hosts, each rank's spans in two part files; Horovod's activity for rank 0 with no host."""
    path = create_run(tmp_path, "export", ranks=3)
    for rank, host in ((0, "node1"), (1, "node1"), (2, "node2")):
        write_rank_meta(path, rank, host=host)
        spans = _spans(rank, host, 6)
        writer = StreamWriter(path, "events", rank)
        writer.write({c: spans[c].to_numpy() for c in spans.columns})
        later = _spans(rank, host, 10).iloc[12:]  # steps 6..9: a second part file
        writer.write({c: later[c].to_numpy() for c in later.columns})
        samples = {
            "run_id": [""] * 5, "rank": [rank] * 5, "host": [host] * 5,
            "time_ns": [T0 + k * 20 * MS for k in range(5)], "rss_bytes": [(300 + k) * 1_000_000 for k in range(5)],
            "gpu_bytes": [-1] * 5, "cpu_percent": [math.nan] * 5, "label": ["interval"] * 5, "iteration": [-1] * 5,
        }  # fmt: skip
        StreamWriter(path, "memory", rank).write(samples)
    in_flight = events_frame(
        [
            {
                "rank": 0,
                "host": "",
                "phase": "in_flight",
                "name": "MPI_ALLREDUCE",
                "start_ns": T0 + 5 * MS,
                "end_ns": T0 + 9 * MS,
            }
        ]
    )
    StreamWriter(path, "events", 0).write({c: in_flight[c].to_numpy() for c in in_flight.columns})
    return path


def test_every_rank_spans_land_on_its_thread_in_its_hosts_process(run_path, tmp_path):
    result = export_trace(run_path, tmp_path / "trace.json")
    trace = _strict((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    names = {
        (e["pid"], e.get("tid"), e["name"]): e["args"]["name"] for e in events if e["ph"] == "M" and "name" in e["args"]
    }
    processes = {pid: label for (pid, tid, kind), label in names.items() if kind == "process_name"}
    threads = {(pid, tid): label for (pid, tid, kind), label in names.items() if kind == "thread_name"}
    assert sorted(processes.values()) == ["node1 (ranks 0–1)", "node2 (ranks 2)"]
    pid_of = {label.split(" ")[0]: pid for pid, label in processes.items()}
    assert threads == {
        (pid_of["node1"], 0): "rank 0",
        (pid_of["node1"], 1): "rank 0 · Horovod in flight",
        (pid_of["node1"], 2): "rank 1",
        (pid_of["node2"], 4): "rank 2",
    }
    spans = pd.DataFrame([e for e in events if e["ph"] == "X"])
    assert spans.groupby("tid").size().to_dict() == {0: 20, 1: 1, 2: 20, 4: 20}  # 10 steps + 10 allreduces each
    assert result.spans_per_rank == {0: 21, 1: 20, 2: 20} and result.spans == 61
    first = spans[(spans["tid"] == 2) & (spans["name"] == "train_step")].sort_values("ts").iloc[0]
    assert first["pid"] == pid_of["node1"]
    assert first["ts"] == pytest.approx(1000.0) and first["dur"] == pytest.approx(8000.0)  # µs after rank 0's start
    allreduce = spans[spans["cat"] == "communication"].iloc[0]
    assert allreduce["name"] == 'allreduce "grads"' and allreduce["args"]["bytes"] == 4096
    counters = [e for e in events if e["ph"] == "C"]
    assert len(counters) == 15 and {e["name"] for e in counters} == {f"rank {r} memory (MB)" for r in range(3)}
    assert all(math.isfinite(e["args"]["rss_mb"]) for e in counters)
    assert trace["otherData"]["run_id"] == run_path.name and trace["displayTimeUnit"] == "ms"
    assert (result.ranks, result.hosts) == (3, 2)


def test_gzip_and_the_frames_in_memory_give_the_same_trace(run_path, tmp_path):
    export_trace(run_path, tmp_path / "trace.json")
    export_trace(run_path, tmp_path / "trace.json.gz")
    plain = _strict((tmp_path / "trace.json").read_text())
    assert _strict(gzip.decompress((tmp_path / "trace.json.gz").read_bytes()).decode()) == plain
    spans = _spans(1, "node1", 3)
    write_chrome_trace(tmp_path / "frames.json", spans)
    frames = _strict((tmp_path / "frames.json").read_text())
    assert [e["ts"] for e in frames["traceEvents"] if e["ph"] == "X"] == [
        0.0,
        5000.0,
        10000.0,
        15000.0,
        20000.0,
        25000.0,
    ]


def test_the_command_writes_beside_the_run_and_a_non_run_is_one_line(run_path, tmp_path, capsys):
    assert main(["export", str(run_path)]) == 0
    assert "open it at https://ui.perfetto.dev" in capsys.readouterr().out
    assert _strict(gzip.decompress((run_path / "trace.json.gz").read_bytes()).decode())["traceEvents"]
    assert main(["export", str(tmp_path / "nothing"), "--perfetto", str(tmp_path / "x.json")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pass a run directory" in error


def test_a_folder_given_as_the_trace_gets_the_trace_inside_and_nothing_beside_it(run_path, tmp_path, capsys):
    folder = tmp_path / "traces"
    folder.mkdir()
    assert main(["export", str(run_path), "--trace", str(folder)]) == 0
    assert [p.name for p in folder.iterdir()] == ["trace.json.gz"]
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left next to it
    assert str(folder / "trace.json.gz") in capsys.readouterr().out
