"""Why GPUs sat idle and what launching cost (``analysis.launches``): hand-computed made traces, and HTA's numbers on
HTA's own samples (HTA 0.5.0's ``get_idle_time_breakdown`` and ``get_cuda_kernel_launch_stats``, measured in its
own environment by ``benchmarks/peers.py``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from workbench import Run
from workbench.analysis.devices import without_last_step
from workbench.analysis.launches import idle_by_cause, kernel_launches, launch_findings, launch_summary
from workbench.datasets.made_traces.kineto import MadeKinetoStep, write_made_kineto
from workbench.formats import kineto
from workbench.formats.gpu_trace import concat_activity
from workbench.importer import import_traces

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "traces" / "hta_trace_filter"
#: HTA's idle time per rank and cause (µs, its streams summed) and launch statistics on its samples.
HTA_IDLE_US = {
    0: {"host_wait": 958796.0, "kernel_wait": 2070.0, "other": 309639.0},
    1: {"host_wait": 1005000.0, "kernel_wait": 2025.0, "other": 357339.0},
}
HTA_LAUNCHES = {
    0: {"launches": 602, "cpu_mean_us": 8.486711, "launch_delay_mean_us": 16412.162791, "short_kernels": 140},
    1: {"launches": 577, "cpu_mean_us": 8.644714, "launch_delay_mean_us": 16917.958406, "short_kernels": 140},
}


def _activity(paths: list[Path]) -> pd.DataFrame:
    parts = []
    for path in paths:
        trace = kineto.read_kineto_activity(path)
        parts.append(trace.activity.assign(rank=trace.rank))
    return concat_activity(parts)


def _by_stream(causes: pd.DataFrame) -> dict[tuple[str, str], float]:
    """{(stream, cause): µs}."""
    return {(str(r.stream), r.cause): round(r.idle_s * 1e6, 3) for r in causes.itertuples()}


@pytest.mark.parametrize(
    ("gap_us", "per_step"),
    [
        # stream 7 per step: copy | k0 (late) | k1 (early) | k2 (late) | k3 (early), gaps of gap_us between kernels:
        # a late launch (10 µs ahead) after the previous kernel's end is the host's wait; an early one is not, and
        # its gap is launch overhead under 30 µs, else "other"
        (50, {"host_wait": 50, "kernel_wait": 0, "other": 100}),
        (20, {"host_wait": 20, "kernel_wait": 40, "other": 0}),
    ],
)
def test_idle_by_cause_on_a_made_trace(tmp_path, gap_us, per_step):
    step = MadeKinetoStep(kernels=4, kernel_us=100, kernel_gap_us=gap_us, launch_lead_us=10, overlap_us=50)
    activity = _activity(write_made_kineto(tmp_path, ranks=1, steps=3, step=step))
    found = _by_stream(idle_by_cause(activity))
    compute_end = step.copy_us + 4 * step.kernel_us + 3 * gap_us
    # between steps the next step's copy is launched at its step's start, after the last kernel ended: the host's
    between_steps = step.step_us - compute_end
    assert found[("stream 7", "host_wait")] == 3 * per_step["host_wait"] + 2 * between_steps
    assert found[("stream 7", "kernel_wait")] == 3 * per_step["kernel_wait"]
    assert found[("stream 7", "other")] == 3 * per_step["other"]
    # the allreduce (launched late) waits for the host from one step's allreduce end to the next one's start
    assert found[("stream 20", "host_wait")] == 2 * (step.step_us - step.allreduce_us)
    assert found[("stream 20", "other")] == 0


def test_kernel_launches_on_a_made_trace(tmp_path):
    step = MadeKinetoStep(kernels=4, kernel_us=100, kernel_gap_us=50, launch_lead_us=10, overlap_us=50)
    activity = _activity(write_made_kineto(tmp_path, ranks=1, steps=3, step=step))
    launches = kernel_launches(activity)
    assert len(launches) == 3 * 6 and (launches["cpu_s"] == 1e-6).all()
    # per step: the late launches wait 9 µs (10 ahead, 1 long); the early ones (at the step's start + 1 + index)
    # wait until the copy (0: it starts at the step's start), k1 (350 - 4) and k3 (650 - 6)
    summary = launch_summary(launches).iloc[0]
    assert summary["launch_delay_mean_us"] == pytest.approx((0 + 9 + 346 + 9 + 644 + 9) / 6)
    assert summary["launch_delay_outliers"] == 3 * 2
    assert summary["runtime_outliers"] == 0 and summary["short_kernels"] == 0


def test_htas_samples_give_htas_idle_split_and_launch_statistics():
    activity = without_last_step(_activity(sorted(SAMPLES.glob("*.json.gz"))))  # HTA leaves the last step out
    causes = idle_by_cause(activity)
    for rank, expected in HTA_IDLE_US.items():
        mine = causes[causes["rank"] == rank].groupby("cause")["idle_s"].sum() * 1e6
        total, theirs = float(mine.sum()), sum(expected.values())
        for cause, value in expected.items():
            # HTA keeps whole µs where the trace has fractions: within 0.01 points of the rank's idle time
            assert 100 * mine[cause] / total == pytest.approx(100 * value / theirs, abs=0.01), (rank, cause)
    summary = launch_summary(kernel_launches(activity)).set_index("rank")
    for rank, expected in HTA_LAUNCHES.items():
        for column, value in expected.items():
            assert summary.loc[rank, column] == pytest.approx(value, rel=1e-6), (rank, column)


def test_host_bound_gpus_are_a_finding_and_traces_without_launches_are_not(tmp_path):
    # kernels launched only just ahead of each, with gaps: the GPU waits for the host most of its idle time
    step = MadeKinetoStep(kernels=40, kernel_us=100, kernel_gap_us=200, launch_lead_us=10, step_us=14_000)
    result = import_traces(write_made_kineto(tmp_path / "made", ranks=2, steps=4, step=step), out=tmp_path / "runs")
    found = Run.load(result.run_path).analyse().findings.set_index("kind")
    assert "host_bound_gpu" in found.index
    text = found.loc["host_bound_gpu", "text"]
    assert "waited for their hosts" in text and "launches" in text
    without = Run.load(result.run_path).devices.assign(correlation=-1)
    assert idle_by_cause(without).empty and kernel_launches(without).empty
    assert launch_findings(idle_by_cause(without), launch_summary(kernel_launches(without)), wall_s=1.0) == []
