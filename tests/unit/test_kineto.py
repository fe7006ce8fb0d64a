"""PyTorch profiler (Kineto) traces: read as HTA reads them, numbers checked against hand-computed truth and HTA's.

HTA's own numbers for its two-rank samples (``data/traces/hta_trace_filter``, measured with HTA 0.5.0 in its
own environment by ``benchmarks/peers.py``; the issue that asked for this quotes rank 0's) are the reference.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from workbench import Run
from workbench.analysis.devices import temporal_breakdown
from workbench.datasets.made_traces.kineto import MadeKinetoStep, write_made_kineto
from workbench.formats import kineto
from workbench.formats.gpu_trace import TraceFormatError, concat_activity
from workbench.importer import import_traces

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "traces" / "hta_trace_filter"
#: HTA 0.5.0's get_temporal_breakdown and get_comm_comp_overlap on its samples (percent).
HTA_SAMPLES = {
    0: {"idle": 53.56, "compute": 17.71, "non_compute": 28.74, "overlap": 11.81},
    1: {"idle": 54.72, "compute": 22.57, "non_compute": 22.72, "overlap": 20.05},
}


def _breakdown(paths: list[Path]):
    parts = []
    for path in paths:
        trace = kineto.read_kineto_activity(path)
        parts.append(trace.activity.assign(rank=trace.rank))
    return temporal_breakdown(concat_activity(parts)).set_index("rank")


def test_htas_samples_give_htas_numbers():
    table = _breakdown(sorted(SAMPLES.glob("*.json.gz")))
    for rank, expected in HTA_SAMPLES.items():
        row = table.loc[rank]
        assert 100 * row["idle_share"] == pytest.approx(expected["idle"], abs=0.01)
        assert 100 * row["compute_share"] == pytest.approx(expected["compute"], abs=0.01)
        assert 100 * row["non_compute_share"] == pytest.approx(expected["non_compute"], abs=0.01)
        assert 100 * row["overlap_share"] == pytest.approx(expected["overlap"], abs=0.01)


def test_made_traces_give_the_chosen_shares(tmp_path):
    step = MadeKinetoStep(step_us=16_000)  # the slow rank's 12.2 ms of copy and kernels fit a step
    paths = write_made_kineto(tmp_path, ranks=2, steps=6, step=step, slow_ranks={1: 1.5}, compress=True)
    table = _breakdown(paths)
    # five steps counted (the last is left out, as HTA does): each step's GPU time from its copy to its allreduce's
    # end, then idle until the next step's copy
    for rank, slow in ((0, 1.0), (1, 1.5)):
        busy = step.busy_us(slow)
        compute = step.kernels * step.kernel_us * slow
        span = 4 * step.step_us + busy  # first activity of step 0 to the last of step 4
        row = table.loc[rank]
        # µs since the epoch as JSON floats hold a quarter of a µs: each boundary is that close
        near = {"abs": 1e-4}
        assert row["kernel_time_s"] == pytest.approx(span / 1e6, abs=1e-6)
        assert row["compute_share"] == pytest.approx(5 * compute / span, **near)
        assert row["idle_share"] == pytest.approx((span - 5 * busy) / span, **near)
        assert row["overlap_share"] == pytest.approx(step.overlap_us / step.allreduce_us, **near)


@pytest.mark.parametrize("layout", ["line", "libkineto"])
def test_both_readers_agree(tmp_path, monkeypatch, layout):
    """Arrow's reader, streamed in parts much smaller than the file, gives Python's ``json`` columns on both
    layouts (libkineto writes each event over several lines)."""
    (path,) = write_made_kineto(tmp_path, ranks=1, steps=30, layout=layout)
    monkeypatch.setattr(kineto, "PART_BYTES", 4096)
    assert path.stat().st_size > 20 * kineto.PART_BYTES
    header, arrow = kineto._arrow_columns(path)
    python = kineto._python_columns(json.loads(path.read_bytes())["traceEvents"])
    assert header["distributedInfo"]["rank"] == 0
    for column in ("ts", "dur", "device", "stream", "correlation"):
        assert np.array_equal(arrow[column], python[column]), column
    for column in ("name", "cat"):
        labels = [arrow[column][1][i] for i in arrow[column][0]]
        assert labels == [python[column][1][i] for i in python[column][0]], column
    trace = kineto.read_kineto_activity(path)
    runtime = trace.activity[trace.activity["kind"] == "runtime"]
    # µs since the epoch to the ns: the second call of step 0 starts 1 µs after the step (float µs * 1000 would
    # be off by up to 128 ns there)
    assert int(runtime["start_ns"].iloc[1] - trace.activity["start_ns"].iloc[0]) == 2000


def test_a_kineto_folder_imports_as_one_run_of_its_ranks(tmp_path):
    result = import_traces([SAMPLES], out=tmp_path)
    assert result.ranks == 2
    assert any("2 of a job of 128 ranks" in line for line in result.lines)
    run = Run.load(result.run_path)
    analysed = run.analyse()
    gpus = analysed.devices.set_index("rank")
    assert gpus.loc[0, "device"] == "GPU:0" and gpus.loc[1, "device"] == "GPU:1"
    kinds = run.devices.groupby(["rank", "kind"], observed=True).size()
    assert kinds.loc[(0, "collective")] == 10 and kinds.loc[(0, "kernel")] == 1144
    assert kinds.loc[(0, "runtime")] > 0 and kinds.loc[(0, "step")] == 2
    assert run.meta["import"]["clocks"] == "aligned"  # Kineto's timestamps are since the epoch


def test_a_damaged_kineto_file_is_one_line(tmp_path):
    (path,) = write_made_kineto(tmp_path, ranks=1, steps=2)
    broken = tmp_path / "broken.pt.trace.json.gz"
    broken.write_bytes(gzip.compress(path.read_bytes())[:-40])
    with pytest.raises(TraceFormatError, match=r"broken\.pt\.trace\.json\.gz"):
        kineto.read_kineto_activity(broken)


def test_sampled_ranks_of_a_larger_job_keep_their_numbers(tmp_path):
    made = write_made_kineto(tmp_path / "made", ranks=2, steps=3)
    for path, rank in zip(made, (5, 77)):
        document = json.loads(path.read_text())
        document["distributedInfo"].update(rank=rank, world_size=128)
        (tmp_path / f"rank{rank}.pt.trace.json").write_text(json.dumps(document))
        path.unlink()
    result = import_traces([tmp_path / f"rank{r}.pt.trace.json" for r in (5, 77)], out=tmp_path / "runs")
    run = Run.load(result.run_path)
    assert run.meta["ranks"] is None and run.ranks == [5, 77]
    assert any("2 of a job of 128 ranks (ranks 5, 77)" in line for line in result.lines)
    assert run.analyse().devices["rank"].tolist() == [5, 77]


def test_a_run_imported_before_correlation_was_kept_still_loads(tmp_path):
    """Files of the devices stream written without a column the schema has since gained read it as unknown."""
    import pyarrow.parquet as pq

    result = import_traces(write_made_kineto(tmp_path / "made", ranks=2, steps=3), out=tmp_path / "runs")
    parts = sorted((result.run_path / "devices").rglob("*.parquet"))
    assert parts
    for part in parts:
        pq.write_table(pq.read_table(part).drop(["correlation"]), part)
    run = Run.load(result.run_path)
    assert len(run.devices) and (run.devices["correlation"] == -1).all()
    assert "exposed_communication" in set(run.analyse().findings["kind"])


def test_the_analysis_gives_htas_numbers_in_rank_groups(tmp_path):
    """``RunAnalysis.gpu_time``, on the path large runs take (a rank a group): HTA's numbers for its samples."""
    from workbench.rank_groups import analyse_split

    path = import_traces(sorted(SAMPLES.glob("*.json.gz")), out=tmp_path).run_path
    table = analyse_split(path, group_ranks=1).gpu_time.set_index("rank")
    for rank, expected in HTA_SAMPLES.items():
        row = table.loc[rank]
        for name in ("idle", "compute", "non_compute", "overlap"):
            assert 100 * row[f"{name}_share"] == pytest.approx(expected[name], abs=0.01), (rank, name)
