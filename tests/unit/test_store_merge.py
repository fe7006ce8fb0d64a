"""A writer merges its own part files while the run goes on: few files, every row once, crash-safe."""

from __future__ import annotations

import threading

import pytest
from test_store_crash import ROWS, _killed_at

from workbench.store import RunData, RunTail, StreamWriter, _parts, create_run


def _rows(step: int) -> dict:
    return {**ROWS, "step": [step] * 3, "start_ns": [3 * step, 3 * step + 1, 3 * step + 2]}


def _files(path) -> list[str]:
    return sorted(entry.name for entry in (path / "events" / "rank-00000").iterdir())


def test_files_merge_by_size_class_and_every_row_stays_in_order(tmp_path):
    path = create_run(tmp_path, "merge", ranks=1)
    writer = StreamWriter(path, "events", 0, merge_fanout=4)
    for step in range(100):
        writer.write(_rows(step))
    # 100 batches in base 4 is 1210: one file of 64 batches, two of 16, one of 4, none single
    assert _files(path) == [
        "00000001-00000064.parquet",
        "00000065-00000080.parquet",
        "00000081-00000096.parquet",
        "00000097-00000100.parquet",
    ]
    steps = RunData.load(path).events["step"].tolist()
    assert steps == [step for step in range(100) for _ in range(3)]


def test_no_merging_when_asked_and_a_new_writer_goes_on_merging_the_old_files(tmp_path):
    path = create_run(tmp_path, "merge", ranks=1)
    for step in range(5):
        StreamWriter(path, "events", 0, merge_fanout=0).write(_rows(step))
    assert len(_files(path)) == 5
    writer = StreamWriter(path, "events", 0, merge_fanout=4)
    for step in range(5, 8):
        writer.write(_rows(step))
    assert _files(path) == ["00000001-00000004.parquet", "00000005-00000008.parquet"]


def test_a_tail_reading_while_the_writer_merges_gets_every_row_exactly_once(tmp_path):
    path = create_run(tmp_path, "merge", ranks=1)
    batches = 600
    tail = RunTail(path)
    received: list[int] = []
    done = threading.Event()

    def write() -> None:
        writer = StreamWriter(path, "events", 0, merge_fanout=2)  # a merge after every other write
        for step in range(batches):
            writer.write(_rows(step))
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    while not done.is_set():
        received += tail.poll()[0]["step"].tolist()
    thread.join()
    received += tail.poll()[0]["step"].tolist()
    assert received == [step for step in range(batches) for _ in range(3)]
    assert len(_parts(path / "events" / "rank-00000")) <= 10  # 600 in base 2 has 4 ones


@pytest.mark.parametrize(
    "kill",
    ["store.os.replace = die", "store.Path.unlink = die"],
    ids=["before the merged file is renamed into place", "after it, before the parts are removed"],
)
def test_a_merge_killed_at_any_point_loses_and_doubles_nothing(tmp_path, kill):
    path = create_run(tmp_path, "merge", ranks=1)
    writer = StreamWriter(path, "events", 0, merge_fanout=4)
    for step in range(3):
        writer.write(_rows(step))
    tail = RunTail(path)
    assert tail.poll()[0]["step"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # the 4th write completes its own part (os.replace / no unlink yet), then its merge is killed
    code = f"w = store.StreamWriter(path, 'events', 0, merge_fanout=4)\n{kill}\nw.write({_rows(3)!r})"
    if kill.startswith("store.os.replace"):  # the part itself must land: kill the merge's rename, not the write's
        code = (
            "w = store.StreamWriter(path, 'events', 0, merge_fanout=4)\n"
            "real = store.os.replace\n"
            "calls = []\n"
            "def replace(*a):\n"
            "    calls.append(a)\n"
            "    return real(*a) if len(calls) == 1 else die()\n"
            "store.os.replace = replace\n"
            f"w.write({_rows(3)!r})"
        )
    _killed_at(code, path)
    expected = [step for step in range(4) for _ in range(3)]
    assert RunData.load(path).events["step"].tolist() == expected
    assert tail.poll()[0]["step"].tolist() == [3, 3, 3]
    writer = StreamWriter(path, "events", 0, merge_fanout=4)  # a restarted writer goes on
    for step in range(4, 9):
        writer.write(_rows(step))
    assert tail.poll()[0]["step"].tolist() == [step for step in range(4, 9) for _ in range(3)]
    assert RunData.load(path).events["step"].tolist() == [step for step in range(9) for _ in range(3)]


def test_a_writer_merges_its_own_parts_from_memory_and_the_files_read_as_from_disk(tmp_path, monkeypatch):
    """The parts a writer flushed are merged from the tables it still holds (reading them back cost twice the
    write); what lands on disk is what a merge from disk makes, and nothing stays held after its merge."""
    import pyarrow.parquet as pq

    reads: list[str] = []
    read_table = pq.read_table

    def counted(source, *args, **kwargs):
        reads.append(str(source))
        return read_table(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", counted)
    held = create_run(tmp_path, "held", ranks=1)
    writer = StreamWriter(held, "events", 0, merge_fanout=4)
    for step in range(20):
        writer.write(_rows(step))
    # 20 batches in base 4: a merge of 16 (from the four merged files of 4, on disk) and one of 4 left
    assert len(reads) == 4
    assert not writer._unmerged
    from_disk = create_run(tmp_path, "from-disk", ranks=1)
    for step in range(20):  # a new writer each batch holds nothing: every merge reads its parts from disk
        StreamWriter(from_disk, "events", 0, merge_fanout=4).write(_rows(step))
    assert _files(held) == _files(from_disk) == ["00000001-00000016.parquet", "00000017-00000020.parquet"]
    held_events = RunData.load(held).events.drop(columns="run_id")
    assert held_events.equals(RunData.load(from_disk).events.drop(columns="run_id"))
