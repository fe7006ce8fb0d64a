"""The store survives a process killed at the worst moments: mid-write of a part, mid-compaction."""

from __future__ import annotations

import subprocess
import sys

from workbench.store import RunData, RunTail, StreamWriter, create_run

ROWS = {
    "run_id": ["r"] * 3,
    "rank": [0] * 3,
    "host": ["h"] * 3,
    "phase": ["compute"] * 3,
    "name": ["s"] * 3,
    "detail": [""] * 3,
    "epoch": [0] * 3,
    "end_ns": [10, 20, 30],
    "bytes": [-1] * 3,
}


def _write(path, steps):
    StreamWriter(path, "events", 0).write({**ROWS, "step": steps, "start_ns": [10 * s for s in steps]})


def _killed_at(code: str, path) -> None:
    """Run ``code`` in a child whose chosen call kills it with SIGKILL; the child must die by that signal."""
    script = "\n".join(
        [
            "import os, signal, pathlib",
            "from workbench import store",
            f"path = pathlib.Path({str(path)!r})",
            "def die(*args, **kwargs):",
            "    os.kill(os.getpid(), signal.SIGKILL)",
            code,
        ]
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert completed.returncode == -9, completed.stderr[-2000:]


def test_a_write_killed_before_its_rename_leaves_no_rows_and_blocks_nothing(tmp_path):
    path = create_run(tmp_path, "crash", ranks=1)
    _write(path, [0, 1, 2])
    tail = RunTail(path)
    assert len(tail.poll()[0]) == 3
    # the second part's bytes reach the disk under a temporary name, then the process dies before os.replace
    rows = {**ROWS, "step": [3, 4, 5], "start_ns": [30, 40, 50]}
    _killed_at(f"store.os.replace = die\nstore.StreamWriter(path, 'events', 0).write({rows!r})", path)
    assert list((path / "events" / "rank-00000").glob(".*.tmp"))  # the torn write really happened
    assert list(RunData.load(path).events["step"]) == [0, 1, 2]  # nothing half-written is read
    assert tail.poll()[0].empty
    _write(path, [6, 7, 8])  # a restarted writer goes on; its rows arrive exactly once
    assert list(tail.poll()[0]["step"]) == [6, 7, 8]
    assert list(RunData.load(path).events["step"]) == [0, 1, 2, 6, 7, 8]


def test_compaction_killed_before_removing_the_parts_duplicates_nothing(tmp_path):
    path = create_run(tmp_path, "crash", ranks=1)
    for first in (0, 3, 6):
        _write(path, [first, first + 1, first + 2])
    tail = RunTail(path)
    assert len(tail.poll()[0]) == 9
    # the merged file is renamed into place, then the process dies before deleting the parts it merged
    _killed_at("pathlib.Path.unlink = die\nstore.compact(path)", path)
    parts = sorted(p.name for p in (path / "events" / "rank-00000").glob("*.parquet"))
    assert parts == [
        "00000001-00000001.parquet",
        "00000001-00000003.parquet",
        "00000002-00000002.parquet",
        "00000003-00000003.parquet",
    ]
    assert list(RunData.load(path).events["step"]) == list(range(9))  # each row once
    assert tail.poll()[0].empty
    _write(path, [9, 10, 11])
    assert list(tail.poll()[0]["step"]) == [9, 10, 11]
