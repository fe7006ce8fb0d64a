"""Damaged traces of every format ``workbench import`` reads (``bench.fuzz``): a few seeded cases of each seed
here, thousands in ``workbench bench fuzz``. Every case must import and analyse (damage said) or be refused in
one line naming the file; never another exception, a hang, or the input folder written."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from docsbench import fuzz
from workbench.importer import import_traces

#: Cases per seed in the test suite (6 seeds; about 0.1 s a case).
CASES = 25


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> list[fuzz.Seed]:
    return fuzz.make_seeds(tmp_path_factory.mktemp("seeds"))


def test_every_seed_imports_as_it_is(seeds, tmp_path):
    assert {seed.format for seed in seeds} == set(fuzz.FORMATS)
    for seed in seeds:
        data = gzip.compress(seed.data) if seed.gzipped else seed.data
        outcome = fuzz.try_case(fuzz.Case(seed, -1, data, "none"), tmp_path)
        assert outcome.kind == "imported", (seed.name, outcome.text)


def test_cases_are_made_again_from_their_number(seeds):
    for seed in seeds:
        assert fuzz.make_case(seed, 7).data == fuzz.make_case(seed, 7).data
        assert fuzz.make_case(seed, 7).data != seed.data or fuzz.make_case(seed, 8).data != seed.data


@pytest.mark.parametrize("format_name", fuzz.FORMATS)
def test_damaged_files_import_or_are_refused_in_one_line(seeds, tmp_path, format_name):
    outcomes: Counter[str] = Counter()
    for seed in (s for s in seeds if s.format == format_name):
        for number in range(CASES):
            case = fuzz.make_case(seed, number)
            outcome = fuzz.try_case(case, tmp_path, seconds=60)
            assert outcome.kind != "bad", f"{seed.name} case {number} ({case.damage}): {outcome.text}"
            outcomes[outcome.kind] += 1
    assert outcomes["imported"] > 0  # the damage leaves some files readable, the rest is refused
    assert sum(outcomes.values()) >= CASES


def _tensor_record(pid: int, name: str) -> str:
    return json.dumps({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})


def test_a_control_character_in_a_timeline_name_imports(tmp_path):
    """Issue 66's first input: a raw control character inside an activity's name (JSON forbids it raw)."""
    records = [
        '{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad\x01dense"}}',
        '{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1}',
        '{"ph": "X", "name": "0", "ts": 12, "pid": 1, "dur": 0}',
        '{"ph": "E", "ts": 20, "pid": 1}',
        '{"ph": "B", "name": "ALLREDUCE", "ts": 20, "pid": 1}',
        '{"ph": "E", "ts": 30, "pid": 1}',
    ]
    timeline = tmp_path / "in" / "timeline.json"
    timeline.parent.mkdir()
    timeline.write_text("[\n" + ",\n".join(records) + "\n]\n")
    result = import_traces([timeline], out=tmp_path / "runs")
    line = next(line for line in result.lines if "Horovod timeline" in line)
    assert line.startswith("timeline.json:") and result.events > 0


def test_a_number_among_kineto_events_is_said_and_left_out(tmp_path):
    """Issue 66's second input: ``traceEvents`` holding a number where an event should be."""
    from workbench.datasets.made_traces.kineto import MadeKinetoStep, write_made_kineto

    made = write_made_kineto(tmp_path / "made", ranks=1, steps=2, step=MadeKinetoStep(kernels=2))[0]
    document = json.loads(made.read_text())
    document["traceEvents"].insert(0, 17)
    trace = tmp_path / "in" / made.name
    trace.parent.mkdir()
    trace.write_text(json.dumps(document))
    result = import_traces([trace], out=tmp_path / "runs")
    assert f"{made.name}: 1 records of traceEvents are not objects: left out" in result.lines
    assert result.device_activities > 0


def test_times_that_make_no_sense_are_left_out_and_counted(tmp_path):
    from workbench.datasets.made_traces.kineto import MadeKinetoStep, write_made_kineto

    made = write_made_kineto(tmp_path / "made", ranks=1, steps=2, step=MadeKinetoStep(kernels=2))[0]
    document = json.loads(made.read_text())
    kernels = [e for e in document["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["ts"], kernels[1]["dur"], kernels[2]["dur"] = -5, 1e308, -1
    trace = tmp_path / "in" / made.name
    trace.parent.mkdir()
    trace.write_text(json.dumps(document))
    result = import_traces([trace], out=tmp_path / "runs")
    note = next(line for line in result.lines if "left out: a start or duration" in line)
    assert note.startswith(f"{made.name}: 3 of ")


def test_a_gzip_stream_damaged_part_way_keeps_what_comes_before(tmp_path):
    trace = tmp_path / "in" / "gpu1.trace.json.gz"
    trace.parent.mkdir()
    seed = next(s for s in fuzz.make_seeds(tmp_path / "seeds") if s.name == "gpu1.trace.json.gz")
    packed = bytearray(gzip.compress(seed.data))
    packed[-6] ^= 0xFF  # the CRC: every byte of the data is there, the check fails
    trace.write_bytes(bytes(packed))
    result = import_traces([trace], out=tmp_path / "runs")
    assert any("the gzip stream is damaged" in line and line.startswith("gpu1.trace.json.gz:") for line in result.lines)
    assert result.device_activities > 0


def test_the_fuzz_benchmark_counts_outcomes():
    result = fuzz.run(per_seed=2)
    assert result["cases"] == 2 * len(result["seeds"])
    assert not result["bad"]
    assert sum(sum(c.values()) for c in result["outcomes"].values()) == result["cases"]
    assert "damaged files" in fuzz.format_result(result)
    assert Path(fuzz.TRACES).is_dir()
