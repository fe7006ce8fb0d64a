from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench.datasets.made_traces.horovod_timeline import write_made_timeline
from workbench.formats import (
    TimelineError,
    horovod_timeline,
    iter_horovod_timeline,
    read_horovod_timeline,
)
from workbench.formats.horovod_timeline import timeline_tensor_bytes
from workbench.formats.tf_profile import TfProfileError, horovod_waits, read_tf_profiles, xplane_to_trace

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
    # Horovod's activities run on its background thread while the ranks compute: in flight, not compute time
    assert set(events["detail"]) == {"grad_w"} and set(events["phase"]) == {"in_flight"}


NEGOTIATIONS = {(0, "NEGOTIATE_ALLREDUCE", 100_000, 170_000), (1, "NEGOTIATE_ALLREDUCE", 160_000, 170_000)}
MPI_SPAN = (0, "MPI_ALLREDUCE", 182_000, 190_000)
END_OF_NEGOTIATION = TIMELINE.index('{"ph": "E", "ts": 170, "pid": 1}') + len('{"ph": "E", "ts": 170, "pid": 1}')
END_OF_MPI = TIMELINE.index('{"ph": "E", "ts": 190, "pid": 1}') + len('{"ph": "E", "ts": 190, "pid": 1}')


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        (260, set()),  # inside the metadata: nothing has ended yet
        (END_OF_NEGOTIATION - 5, set()),  # inside the record that ends the negotiation
        (END_OF_NEGOTIATION, NEGOTIATIONS),
        (END_OF_NEGOTIATION + 12, NEGOTIATIONS),  # half of the next record
        (END_OF_MPI - 5, NEGOTIATIONS),
        (END_OF_MPI, NEGOTIATIONS | {MPI_SPAN}),  # ALLREDUCE began but never ended: left out
        (len(TIMELINE) - 1, NEGOTIATIONS | {MPI_SPAN, (0, "ALLREDUCE", 180_000, 191_000)}),  # only "]" missing
    ],
)
def test_cut_timeline_reads_exactly_the_spans_that_ended(tmp_path, cut, expected):
    path = tmp_path / "cut.json"
    path.write_text(TIMELINE[:cut])
    events = read_horovod_timeline(path)
    spans = zip(events["rank"], events["name"], events["start_ns"] - 1_000_000_000, events["end_ns"] - 1_000_000_000)
    assert set(spans) == expected
    assert len(events) == len(expected)


def test_foreign_and_corrupt_files_are_one_clear_error(tmp_path):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(TimelineError, match="is not a Horovod timeline"):
        read_horovod_timeline(foreign)
    # no start record (as Horovod before 0.20 wrote) and none of Horovod's activities: another JSON array
    no_origin = tmp_path / "no_origin.json"
    no_origin.write_text('[{"ph": "B", "name": "X", "ts": 1, "pid": 1}]')
    with pytest.raises(TimelineError, match="none of its 1 records is a Horovod activity"):
        read_horovod_timeline(no_origin)
    # the same record named as Horovod names it is a timeline of that era, read with its own clock
    old = tmp_path / "old.json"
    old.write_text('[{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 1, "pid": 1}, {"ph": "E", "ts": 5, "pid": 1}')
    assert read_horovod_timeline(old)[["start_ns", "end_ns"]].values.tolist() == [[1000, 5000]]
    with pytest.raises(TimelineError, match="does not exist"):
        read_horovod_timeline(tmp_path / "missing.json")


@pytest.mark.parametrize("chunk_bytes", [64, 100, 333])
def test_a_negotiation_open_at_the_end_names_the_ranks_that_submitted_it(tmp_path, chunk_bytes):
    # cut after rank 0's readiness mark: rank 1 never submitted grad_w, as when it stalls before the allreduce
    mark = '{"ph": "X", "name": "0", "ts": 100, "pid": 1, "dur": 0}'
    path = tmp_path / "stalled.json"
    path.write_text(TIMELINE[: TIMELINE.index(mark) + len(mark)])
    unfinished: list[dict] = []
    events = list(iter_horovod_timeline(path, chunk_mb=chunk_bytes / 2**20, unfinished=unfinished))
    assert sum(len(batch) for batch in events) == 0  # nothing ended
    assert unfinished == [
        {
            "tensor": "grad_w",
            "operation": "ALLREDUCE",
            "since_ns": 1_000_100_000,  # 1 s origin + 100 µs
            "ready_ranks": [0],
            "file_end_ns": 1_000_100_000,
        }
    ]
    whole: list[dict] = []
    path.write_text(TIMELINE)
    list(iter_horovod_timeline(path, chunk_mb=chunk_bytes / 2**20, unfinished=whole))
    assert whole == []  # every negotiation closed


def test_the_bytes_each_step_allreduces_come_from_the_shapes_on_the_timeline(tmp_path):
    records = [
        '{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros":1000000}}',
        '{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "HorovodBroadcast_w_0"}}',
        '{"ph": "B", "name": "NEGOTIATE_BROADCAST", "ts": 1, "pid": 1},{"ph": "E", "ts": 2, "pid": 1}',
        '{"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "grad_kernel"}}',
        '{"name": "process_name", "ph": "M", "pid": 3, "args": {"name": "grad_bias"}}',
    ]
    for step in range(2):  # each tensor twice: counted once
        for pid, shape, dtype in ((2, "[3, 3, 1, 8]", "float32"), (3, "[8]", "float16")):
            records.append(
                f'{{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": {10 + step}, "pid": {pid}}},{{"ph": "E", "ts": 12,'
                f' "pid": {pid}}},{{"ph": "B", "name": "ALLREDUCE", "ts": 13, "pid": {pid}}},{{"ph": "E", "ts": 14,'
                f' "pid": {pid}, "args": {{"dtype": "{dtype}", "shape": "{shape}"}}}}'
            )
    path = tmp_path / "timeline.json"
    path.write_text("[\n" + ",\n".join(records) + "]")
    # 3·3·1·8 float32 = 288 bytes, 8 float16 = 16 bytes; the broadcast is not a gradient
    assert timeline_tensor_bytes(path) == {"grad_kernel": 288, "grad_bias": 16}
    assert timeline_tensor_bytes(path, scan_bytes=200) == {}  # only the start read: no allreduce in it yet


@pytest.mark.parametrize("chunk_bytes", [64, 100, 333])
def test_chunked_import_gives_the_same_events_as_one_read(tmp_path, chunk_bytes):
    path = tmp_path / "timeline.json"
    path.write_text(TIMELINE)
    whole = read_horovod_timeline(path)
    chunked = read_horovod_timeline(path, chunk_mb=chunk_bytes / 2**20)  # records split across chunks
    pd.testing.assert_frame_equal(whole, chunked)


def test_open_activity_at_the_end_of_a_file_still_being_written_is_left_out(tmp_path):
    path = tmp_path / "running.json"
    path.write_text(TIMELINE[: TIMELINE.index('{"ph": "E", "ts": 191')].rstrip().rstrip(","))
    names = set(read_horovod_timeline(path)["name"])
    assert names == {"NEGOTIATE_ALLREDUCE", "MPI_ALLREDUCE"}  # ALLREDUCE never closed


def test_synthetic_timeline_of_the_bench_round_trips(tmp_path):
    path = write_made_timeline(tmp_path / "t.json", 0.2, ranks=3, tensors=2)
    events = read_horovod_timeline(path)
    negotiations = int((events["rank"] == 2).sum())
    assert negotiations > 0 and (events["rank"] == 1).sum() == negotiations
    assert (events["rank"] == 0).sum() == 5 * negotiations  # its readiness + ALLREDUCE + 3 activities
    assert (events["end_ns"] >= events["start_ns"]).all()


def test_the_timeline_in_batches_holds_exactly_the_events_of_one_read(tmp_path):
    path = write_made_timeline(tmp_path / "t.json", 0.5, ranks=3, tensors=2)
    whole = read_horovod_timeline(path, run_id="r", chunk_mb=0.05)
    batches = list(iter_horovod_timeline(path, run_id="r", chunk_mb=0.05, batch_events=2_000))
    assert len(batches) >= 3 and all(len(batch) >= 2_000 for batch in batches[:-1])
    joined = pd.concat(batches, ignore_index=True).sort_values(["rank", "start_ns", "end_ns"], kind="stable")
    columns = ["rank", "name", "detail", "start_ns", "end_ns"]
    expected = whole.sort_values(["rank", "start_ns", "end_ns"], kind="stable")[columns].astype(str)
    pd.testing.assert_frame_equal(joined[columns].astype(str).reset_index(drop=True), expected.reset_index(drop=True))
    with pytest.raises(ValueError, match="batch_events"):
        next(iter_horovod_timeline(path, batch_events=0))


# Records as Horovod's writer lays them out beyond TIMELINE's: an instant marker (no pid), a name with a JSON
# escape, an End with args, a phase the import ignores, a tensor named only later, timestamps of 11 digits.
UNUSUAL = TIMELINE[:-1] + "".join(
    [
        ',{"ph": "i", "name": "CYCLE_START", "ts": 195, "s": "g"},\n',
        '{"name": "process_name", "ph": "M", "pid": 12, "args": {"name": "grad\\u00e9"}},\n',
        '{"name": "process_sort_index", "ph": "M", "pid": 12, "args": {"sort_index": 12}},',
        '{"ph": "B", "name": "WAIT_FOR_OTHER_TENSOR_DATA", "ts": 12345678901, "pid": 12},',
        '{"ph": "C", "name": "Q", "ts": 12345678902, "pid": 12},',
        '{"ph": "B", "name": "q\\u00e9", "ts": 12345678903, "pid": 12},{"ph": "E", "ts": 12345678904, "pid": 12},',
        '{"ph": "E", "ts": 12345678999, "pid": 12, "args": {"dtype": "float32", "shape": "[3, 3]"}}]',
    ]
)


def _chunks_read_directly(path, chunk_mb=8.0):
    raws = list(horovod_timeline._record_chunks(path, int(chunk_mb * 2**20)))
    return [horovod_timeline._parse_horovod_layout(*horovod_timeline._newline_delimited(*raw)) for raw in raws]


@pytest.mark.parametrize("text", [TIMELINE, UNUSUAL], ids=["two-ranks", "unusual-records"])
def test_direct_parse_reads_horovod_layout_exactly_as_arrow_does(tmp_path, text):
    path = tmp_path / "timeline.json"
    path.write_text(text)
    assert all(chunk is not None for chunk in _chunks_read_directly(path))  # no chunk fell back to Arrow
    direct = read_horovod_timeline(path, run_id="r")
    pd.testing.assert_frame_equal(direct, read_horovod_timeline(path, run_id="r", engine="arrow"))
    if text is UNUSUAL:
        late = direct[direct["detail"] == "grad\u00e9"]
        assert set(zip(late["name"], late["start_ns"] - 1_000_000_000, late["end_ns"] - 1_000_000_000)) == {
            ("WAIT_FOR_OTHER_TENSOR_DATA", 12_345_678_901_000, 12_345_678_999_000),
            ("q\u00e9", 12_345_678_903_000, 12_345_678_904_000),
        }


def test_other_layouts_fall_back_to_arrow_with_the_same_events(tmp_path):
    compact = tmp_path / "compact.json"
    compact.write_text(TIMELINE)
    spaced = tmp_path / "spaced.json"  # the same records as another writer might lay them out
    spaced.write_text(json.dumps(json.loads(TIMELINE), indent=1))
    reordered = tmp_path / "reordered.json"
    reordered.write_text(TIMELINE.replace('{"ph": "E", "ts": 170, "pid": 1}', '{"ts": 170, "ph": "E", "pid": 1}'))
    metadata_first = tmp_path / "metadata-first.json"  # "ph" before "name" in a metadata record
    swapped = ('{"name": "process_name", "ph": "M", "pid": 1,', '{"ph": "M", "name": "process_name", "pid": 1,')
    metadata_first.write_text(TIMELINE.replace(*swapped))
    quoted = tmp_path / "quoted.json"  # an escaped quote inside a name
    quoted.write_text(TIMELINE.replace('"name": "MPI_ALLREDUCE"', '"name": "MPI_\\"ALLREDUCE"'))
    for path in (spaced, reordered, quoted, metadata_first):
        assert any(chunk is None for chunk in _chunks_read_directly(path)), path.name
    expected = read_horovod_timeline(compact)
    pd.testing.assert_frame_equal(read_horovod_timeline(spaced), expected)
    pd.testing.assert_frame_equal(read_horovod_timeline(reordered), expected)
    pd.testing.assert_frame_equal(read_horovod_timeline(metadata_first), expected)  # "grad_w" kept
    assert 'MPI_"ALLREDUCE' in set(read_horovod_timeline(quoted)["name"])


def test_large_synthetic_timeline_reads_the_same_both_ways_across_chunks(tmp_path):
    path = write_made_timeline(tmp_path / "t.json", 2.0, ranks=4, tensors=5)
    direct = read_horovod_timeline(path, chunk_mb=0.25)
    assert all(chunk is not None for chunk in _chunks_read_directly(path, 0.25))
    pd.testing.assert_frame_equal(direct, read_horovod_timeline(path, engine="arrow"))
    with pytest.raises(ValueError, match="engine 'polars' is not known"):
        read_horovod_timeline(path, engine="polars")


def test_tf_profiler_kernels_pair_start_and_done_per_tensor_and_step():
    trace = {
        "traceEvents": [
            {"name": "ExecutorState::ProcessAsync::Done", "ts": 30.0, "dur": 2.0, "ph": "X",
             "args": {"name": "grad_a", "kernel_type": "HorovodAllreduce", "step_id": "7"}},
            {"name": "ExecutorState::ProcessAsync::Start", "ts": 10.0, "dur": 1.0, "ph": "X",
             "args": {"name": "grad_a", "kernel_type": "HorovodAllreduce", "step_id": "7"}},
            {"name": "ExecutorState::ProcessAsync::Start", "ts": 12.0, "dur": 1.0, "ph": "X",
             "args": {"name": "grad_b", "kernel_type": "HorovodAllreduce", "step_id": "7"}},
            {"name": "MatMul", "ts": 11.0, "dur": 5.0, "ph": "X", "args": {}},
        ]
    }
    spans = horovod_waits(trace, start_ns=1_000_000, rank=1)
    assert len(spans) == 1  # grad_b never finished inside the trace
    span = spans.iloc[0]
    assert (span["rank"], span["phase"], span["start_ns"], span["end_ns"]) == (1, "in_flight", 1_010_000, 1_032_000)
    assert "grad_a" in span["detail"]


def test_tf_profiler_trace_is_placed_by_its_tightest_clock_mark():
    from workbench.formats.tf_profile import CLOCK_MARK, trace_origin_ns

    def mark(ts: float) -> dict:
        return {"name": CLOCK_MARK, "ts": ts, "dur": 1.0, "ph": "X", "args": {}}

    # the profiler's clock started 3 ms after the read before its start call (a preempted call); the
    # second mark, 2 µs wide, began at 10 µs on the trace's clock
    start_ns, origin = 1_000_000_000, 1_003_000_000
    marks = [[origin + 5_000, origin + 25_000], [origin + 9_000, origin + 11_000], [origin + 20_000, origin + 40_000]]
    trace = {"traceEvents": [mark(30.0), mark(10.0), mark(6.0), {"name": "MatMul", "ts": 1.0, "dur": 5.0}]}
    clock = {"rank": 0, "start_ns": start_ns, "marks": marks}
    assert trace_origin_ns(trace, clock) == origin
    # no marks, or not as many in the trace as written: the read before the start
    assert trace_origin_ns(trace, {"rank": 0, "start_ns": start_ns}) == start_ns
    assert trace_origin_ns({"traceEvents": [mark(10.0)]}, clock) == start_ns


def test_tensorflows_own_converter_turns_an_xplane_into_trace_events(tmp_path):
    tf = pytest.importorskip("tensorflow")
    weights = tf.Variable(tf.ones((8, 8)))

    @tf.function
    def step():
        return tf.reduce_sum(tf.matmul(weights, weights))

    step()
    tf.profiler.experimental.start(str(tmp_path))
    step()
    tf.profiler.experimental.stop()
    (xplane,) = tmp_path.glob("plugins/profile/*/*.xplane.pb")
    trace = xplane_to_trace(xplane)
    names = {event.get("name") for event in trace["traceEvents"]}
    assert any("MatMul" in str(name) for name in names)
    with pytest.raises(TfProfileError, match="no traces"):
        read_tf_profiles(tmp_path)


def test_an_event_with_its_keys_in_another_order_is_read_not_taken_for_metadata(tmp_path):
    # Horovod's writer puts "ph" first; a record that starts with "name" like a process_name record but
    # is a B event (another writer, a hand edit) must still be paired, as Arrow's reader pairs it
    timeline = write_made_timeline(tmp_path / "t.json", 1.0)
    lines = timeline.read_text().splitlines(keepends=True)
    middle = len(lines) // 2
    assert lines[middle].startswith('{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", ')
    horovod_order = '{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", '
    other_order = '{"name": "NEGOTIATE_ALLREDUCE", "ph": "B", '
    lines[middle] = lines[middle].replace(horovod_order, other_order, 1)
    timeline.write_text("".join(lines))
    direct = read_horovod_timeline(timeline)
    general = read_horovod_timeline(timeline, engine="arrow")
    pd.testing.assert_frame_equal(direct, general)
    assert len(direct) == len(read_horovod_timeline(write_made_timeline(tmp_path / "u.json", 1.0)))


def test_a_timeline_damaged_midway_keeps_every_batch_and_reads_past_the_damage(tmp_path, monkeypatch):
    """Batches are written as they are paired; a damaged record is left out and said, the records after it read."""
    import functools

    from workbench import profile
    from workbench.formats import horovod_timeline
    from workbench.store import RunData, create_run

    run = create_run(tmp_path, "t", ranks=2)
    timeline = write_made_timeline(run / profile.TIMELINE_FILE, 3.0)
    whole = len(horovod_timeline.read_horovod_timeline(timeline))
    lines = timeline.read_text().splitlines(keepends=True)
    lines[len(lines) * 2 // 3] = '{"name": "MPI_ALLREDUCE", "ph": "B", "ts": 12,, "pid": 1},\n'
    timeline.write_text("".join(lines))
    small = functools.partial(horovod_timeline.iter_horovod_timeline, batch_events=5_000, chunk_mb=0.5)
    monkeypatch.setattr(profile, "iter_horovod_timeline", small)
    count, line = profile.import_timeline(run, enabled=True)
    said = f"Horovod timeline: {count} spans of collectives in flight; 1 damaged records left out, the rest read"
    assert line == said
    # the records after the damage are read: only spans the lost begin record leaves unpaired on its tensor go
    assert 0.99 * whole <= count < whole
    assert len(RunData.load(run).events) == count  # every batch counted was written, none twice


def test_profile_says_in_one_line_what_happened_to_the_timeline(tmp_path):
    from workbench.profile import TIMELINE_FILE, import_timeline
    from workbench.store import create_run

    run = create_run(tmp_path, "t", ranks=2)
    count, line = import_timeline(run, enabled=True)  # no file: the script never started Horovod
    assert count == 0 and "never initialised Horovod" in line
    (run / TIMELINE_FILE).write_text(json.dumps({"traceEvents": []}))
    count, line = import_timeline(run, enabled=True)
    assert count == 0 and line.startswith("Horovod timeline: not imported (") and "\n" not in line
    (run / TIMELINE_FILE).write_text(TIMELINE)
    count, line = import_timeline(run, enabled=True)
    assert count == 4 and "in flight" in line


@pytest.mark.parametrize(
    ("text", "value", "width"),
    [
        (b"7,", 7, 1),
        (b"0}", 0, 1),
        (b"1234567,", 1234567, 7),
        (b"12345678,", 12345678, 8),  # one whole word of digits
        (b"99999999 ", 99999999, 8),
        (b"100000000}", 100000000, 9),  # the second word's first digit
        (b"1764115200123456,", None, None),  # 16 digits: beyond what the parse takes, so Arrow reads the chunk
        (b"176411520012345,", 176411520012345, 15),
        (b'", "ts"', None, None),  # no digit where a number belongs
    ],
)
def test_integers_read_eight_digits_at_a_time_as_written(text, value, width):
    """The word-at-a-time parse: values and widths across the 8-digit boundary, and what it refuses."""
    import numpy as np

    data = np.frombuffer(b"ab" + text + bytes(48), np.uint8)
    parsed = horovod_timeline._integers(horovod_timeline._windows(data), np.array([2]))
    if value is None:
        assert parsed is None
    else:
        assert parsed[0].tolist() == [value] and parsed[1].tolist() == [2 + width]


def test_imported_batches_are_written_as_dictionaries_and_read_back_as_strings(tmp_path):
    """An import writes its categoricals as Parquet dictionaries: loads and merges read them as every other part."""
    import pyarrow.parquet as pq

    from workbench.events import EVENT_SCHEMA, events_frame
    from workbench.profile import write_events
    from workbench.store import RunData, compact, create_run

    run = create_run(tmp_path, "t", ranks=3)
    timeline = write_made_timeline(tmp_path / "t.json", 0.2)
    imported = read_horovod_timeline(timeline, run_id=run.name, host="h0")
    assert isinstance(imported["name"].dtype, pd.CategoricalDtype)
    shuffled = imported.sample(frac=1.0, random_state=0)  # not sorted by rank: written all the same
    plain = events_frame(
        [{"run_id": run.name, "rank": 2, "host": "h1", "phase": "compute", "name": "step", "start_ns": 5, "end_ns": 9}]
    )
    assert write_events(run, shuffled) == len(imported)
    write_events(run, plain)  # object strings: a part with the Arrow schema, as before
    part = next((run / "events" / "rank-00000").glob("*.parquet"))
    assert pq.read_table(part).schema.field("name").type == EVENT_SCHEMA.field("name").type
    loaded = RunData.load(run).events
    expected = pd.concat([imported.astype({c: object for c in ("run_id", "host", "phase", "name", "detail")}), plain])
    key = ["rank", "start_ns", "end_ns", "name", "detail"]
    pd.testing.assert_frame_equal(
        loaded.sort_values(key, ignore_index=True)[list(EVENT_SCHEMA.names)],
        expected.sort_values(key, ignore_index=True)[list(EVENT_SCHEMA.names)],
        check_dtype=False,
    )
    compact(run)  # a merge reads both kinds of part as the store's schema
    assert len(RunData.load(run).events) == len(expected)


def test_an_import_of_many_ranks_holds_small_parts_back_and_loses_nothing(tmp_path):
    """Rows of many ranks are held until a part is worth a file; every row lands once, in its rank's stream."""
    from workbench.events import events_frame
    from workbench.profile import ImportWriter
    from workbench.store import RunData, create_run

    run = create_run(tmp_path, "t", ranks=16)

    def batch(first_ns: int, categorical: bool) -> pd.DataFrame:
        rows = [
            {"rank": rank, "phase": "x", "name": name, "start_ns": first_ns + i, "end_ns": 0}
            for rank in range(16)
            for i, name in enumerate(("NEGOTIATE_ALLREDUCE", f"tensor-{first_ns}"))
        ]
        frame = events_frame(rows).assign(run_id=run.name, end_ns=lambda f: f["start_ns"] + 1)  # 1 ns each
        return frame.astype({c: "category" for c in ("run_id", "host", "phase", "name")}) if categorical else frame

    writer = ImportWriter(run, part_rows=1_000, held_rows=100)  # 32 rows a batch: written every 4th batch
    batches = [batch(1_000 * k, categorical=k != 2) for k in range(6)]  # one batch of plain strings among them
    for frame in batches:
        writer.add(frame.sample(frac=1.0, random_state=1))  # in any order
    assert len(list((run / "events").rglob("*.parquet"))) == 16  # one part per rank so far, not one per batch
    writer.flush()
    assert writer.written == 6 * 32
    assert len(list((run / "events").rglob("*.parquet"))) == 32
    loaded = RunData.load(run).events
    expected = pd.concat([frame.astype({c: object for c in ("run_id", "host", "phase", "name")}) for frame in batches])
    key = ["rank", "start_ns"]
    pd.testing.assert_frame_equal(
        loaded.sort_values(key, ignore_index=True), expected.sort_values(key, ignore_index=True), check_dtype=False
    )


def test_the_stream_bench_finds_the_late_ranks_of_a_many_rank_timeline():
    """``benchmarks/timeline_stream.py --ranks``: imported, then the late ranks named latest by their readiness."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "timeline_stream.py"
    spec = importlib.util.spec_from_file_location("timeline_stream", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.measure(1.0, ranks=64, late_ranks=(5, 42))
    late = result["lateness"]
    assert result["events"] > 0 and late["ranks_with_lateness"] == 64 and late["steps"] > 10
    assert late["latest_found"] and sorted(late["latest_ranks"]) == [5, 42]
    # a late rank is 30 µs late plus its 0-9 µs place in the negotiation (rank % 4 * 3): 33 and 36 µs
    assert late["latest_median_lateness_us"] == [36.0, 33.0]


def test_a_batch_of_one_event_is_written(tmp_path):
    """Every column of a one-row batch holds one value: the row is still written, once."""
    from workbench.events import events_frame
    from workbench.profile import write_events
    from workbench.store import RunData, create_run

    run = create_run(tmp_path, "t", ranks=1)
    one = events_frame([{"rank": 0, "phase": "in_flight", "name": "ALLREDUCE", "start_ns": 5, "end_ns": 9}])
    one = one.assign(run_id=run.name).astype({c: "category" for c in ("run_id", "host", "phase", "name", "detail")})
    assert write_events(run, one) == 1
    loaded = RunData.load(run).events
    assert loaded[["rank", "name", "start_ns", "end_ns"]].values.tolist() == [[0, "ALLREDUCE", 5, 9]]
