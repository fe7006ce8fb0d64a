from __future__ import annotations

import json

import pytest

from workbench.events import events_frame
from workbench.formats import TimelineError, read_horovod_timeline, to_chrome_trace, write_chrome_trace

# A timeline as Horovod 0.28 writes it (structure copied from a real 2-rank file made by the MPI test).
TIMELINE = """[
{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros":1000000}},
{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},
{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_w"}},
{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 100, "pid": 1},{"ph": "X", "name": "0", "ts": 100, "pid": 1, "dur": 0},
{"ph": "X", "name": "1", "ts": 160, "pid": 1, "dur": 0},{"ph": "E", "ts": 170, "pid": 1},
{"ph": "B", "name": "ALLREDUCE", "ts": 180, "pid": 1},{"ph": "B", "name": "MPI_ALLREDUCE", "ts": 182, "pid": 1},
{"ph": "E", "ts": 190, "pid": 1},{"ph": "E", "ts": 191, "pid": 1}]"""


def test_timeline_maps_negotiation_per_rank_and_activities(tmp_path):
    path = tmp_path / "timeline.json"
    path.write_text(TIMELINE)
    events = read_horovod_timeline(path, run_id="r")
    as_tuples = set(
        zip(events["rank"], events["name"], events["start_ns"] - 1_000_000_000, events["end_ns"] - 1_000_000_000)
    )
    assert as_tuples == {
        (0, "NEGOTIATE_ALLREDUCE", 100_000, 170_000),  # rank 0 ready at 100 µs, waits until 170 µs
        (1, "NEGOTIATE_ALLREDUCE", 160_000, 170_000),
        (0, "ALLREDUCE", 180_000, 191_000),
        (0, "MPI_ALLREDUCE", 182_000, 190_000),
    }
    assert set(events["detail"]) == {"grad_w"} and set(events["phase"]) == {"communication"}
    replicated = read_horovod_timeline(path, replicate_collectives=True)
    assert set(replicated[replicated["rank"] == 1]["name"]) == {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "MPI_ALLREDUCE"}


@pytest.mark.parametrize("cut", [len(TIMELINE) - 1, len(TIMELINE) // 2, 260])
def test_cut_timeline_reads_up_to_the_last_complete_record(tmp_path, cut):
    path = tmp_path / "cut.json"
    path.write_text(TIMELINE[:cut])
    events = read_horovod_timeline(path)
    full = tmp_path / "full.json"
    full.write_text(TIMELINE)
    assert len(events) <= len(read_horovod_timeline(full))


def test_foreign_and_corrupt_files_are_one_clear_error(tmp_path):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(TimelineError, match="is not a Horovod timeline"):
        read_horovod_timeline(foreign)
    no_origin = tmp_path / "no_origin.json"
    no_origin.write_text('[{"ph": "B", "name": "X", "ts": 1, "pid": 1}]')
    with pytest.raises(TimelineError, match="no start_time_since_epoch_in_micros"):
        read_horovod_timeline(no_origin)
    with pytest.raises(TimelineError, match="does not exist"):
        read_horovod_timeline(tmp_path / "missing.json")


def test_chrome_trace_has_a_process_per_rank_and_a_track_per_phase(tmp_path):
    events = events_frame(
        [
            {"rank": 0, "phase": "compute", "name": "train_step", "step": 0, "start_ns": 1_000, "end_ns": 5_000},
            {"rank": 1, "phase": "communication", "name": "allreduce", "start_ns": 2_000, "end_ns": 3_000, "bytes": 8},
        ]
    )
    path = write_chrome_trace(tmp_path / "trace.json", events, title="t")
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for event in spans:
        assert {"ph", "name", "pid", "tid", "ts", "dur"} <= set(event)
    assert {(e["pid"], e["name"], e["ts"], e["dur"]) for e in spans} == {
        (0, "train_step", 0.0, 4.0),
        (1, "allreduce", 1.0, 1.0),
    }
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {(0, "rank 0"), (1, "rank 1")}
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"compute", "communication", "evaluation", "input"} <= tracks
    assert to_chrome_trace(events.iloc[:0])["traceEvents"] == []
