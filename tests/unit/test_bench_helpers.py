"""The helpers behind the README's benchmark figures, on values known by hand or by counting what they did."""

from __future__ import annotations

import pytest

from workbench.allreduce import bus_bandwidth_factor, measure
from workbench.bench.overhead import background_cost_share, hot_path_ns
from workbench.recorder import Recorder
from workbench.store import RunData, create_run


@pytest.mark.parametrize(("ranks", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (64, 126 / 64)])
def test_bus_bandwidth_factor_is_the_ring_allreduces_2_n_minus_1_over_n(ranks, factor):
    assert bus_bandwidth_factor(ranks) == pytest.approx(factor)


def test_allreduce_rows_on_one_rank_are_consistent():
    rows = measure(sizes=(1024, 4096), min_seconds=0.01, with_horovod=False)
    assert [row["bytes"] for row in rows] == [1024, 4096]
    for row in rows:
        assert row["ranks"] == 1 and row["mpi_seconds"] > 0
        assert row["mpi_algbw_gbps"] == pytest.approx(row["bytes"] / row["mpi_seconds"] / 1e9)
        assert row["mpi_busbw_gbps"] == 0.0  # one rank: nothing crosses a link


@pytest.fixture
def recorder(tmp_path):
    rec = Recorder(create_run(tmp_path, "bench", ranks=1), rank=0, flush_interval_s=3600)
    yield rec
    rec.close()


def test_hot_path_times_one_span_and_one_input_wait_per_step(recorder):
    cost = hot_path_ns(recorder, calls=500)
    assert 0 < cost < 1e9
    recorder.flush()
    events = RunData.load(recorder.run_path).events
    # exactly what a recorded training step adds: an input wait, then the step's compute span
    assert list(events["phase"]) == ["input", "compute"] * 500
    assert list(events.loc[events["phase"] == "compute", "step"]) == list(range(500))


def test_background_cost_flushes_one_intervals_rows_per_trial(recorder):
    recorder.flush_interval_s = 0.5
    share = background_cost_share(recorder, steps_per_s=40.0, trials=3)
    assert 0 < share < 1
    recorder.flush()
    events = RunData.load(recorder.run_path).events
    assert len(events) == 3 * 2 * 20  # trials x (span + input wait) x (40 steps/s x 0.5 s)
    assert len(RunData.load(recorder.run_path).memory) == 100  # the memory samples it timed


def test_allreduce_rows_are_read_plain_or_as_saved_and_bad_files_are_one_error(tmp_path):
    import json

    from workbench.commands.project import read_allreduce_rows as read_rows

    rows = [{"bytes": 1024, "ranks": 2, "mpi_seconds": 1e-5, "horovod_seconds": 2e-5}]
    plain, saved = tmp_path / "plain.json", tmp_path / "saved.json"
    plain.write_text(json.dumps(rows))
    saved.write_text(json.dumps({"name": "allreduce", "command": "workbench bench allreduce --json", "result": rows}))
    assert read_rows(plain) == read_rows(saved) == rows
    (tmp_path / "other.json").write_text(json.dumps({"events": 3}))
    with pytest.raises(ValueError, match="holds no allreduce rows"):
        read_rows(tmp_path / "other.json")
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        read_rows(tmp_path / "missing.json")


def test_every_benchmark_is_registered_once_and_each_is_a_command():
    """``workbench bench NAME`` for the package's benchmarks (``bench.BENCHMARKS``: what measures the user's machine)
    and the docs' (``docsbench.registry.BENCHMARKS``, through the ``workbench.benchmarks`` entry point); no module
    with a ``command`` left out of either: each registry is its folder's one list."""
    import importlib
    from pathlib import Path

    from docsbench import registry
    from workbench.bench import BENCHMARKS, all_benchmarks, benchmark
    from workbench.cli import build_parser

    names = [entry.name for entry in all_benchmarks()]
    assert len(names) == len(set(names)) == len(BENCHMARKS) + len(registry.BENCHMARKS)
    for package, entries in (("workbench.bench", BENCHMARKS), ("docsbench", registry.BENCHMARKS)):
        folder = Path(importlib.import_module(package).__file__).parent
        with_command = {f"{package}.{p.stem}" for p in folder.glob("*.py") if "\ndef command(" in p.read_text()}
        assert with_command == {entry.module for entry in entries}, package
    assert all(entry.module.startswith("workbench.") for entry in BENCHMARKS), "the product's measure this machine"
    parser = build_parser()
    for entry in all_benchmarks():
        assert callable(importlib.import_module(entry.module).command)
        parsed = parser.parse_args(["bench", entry.name, "--json"])
        assert parsed.json and parsed.handler.__self__ is benchmark(entry.name)
