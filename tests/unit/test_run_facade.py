"""``workbench.Run`` as the facade: each analysis a notebook calls is a method given the run's own frames.

A method must give what its ``workbench.analysis`` function gives on those frames (it forwards, it does not
compute), never raise where a run lacks the data (no memory samples, no GPU activity, no steps), and say in
its docstring what it answers and returns.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from analysis_parity import write_made_cpu_run, write_made_gpu_run
from pandas.testing import assert_frame_equal

from workbench import analysis
from workbench.analysis import activity, kernels, network
from workbench.api import Run
from workbench.events import events_frame
from workbench.store import StreamWriter, create_run, update_run_meta

S = 1_000_000_000
#: What needs another run or a path, not the run alone.
NOT_ANALYSES = {"analyse", "report", "summary", "compare", "load"}


def _public_methods() -> list[str]:
    return sorted(n for n, f in inspect.getmembers(Run, inspect.isfunction) if not n.startswith("_"))


def _analyses() -> list[str]:
    return [n for n in _public_methods() if n not in NOT_ANALYSES]


def write_bare_run(root: Path) -> Path:
    """Two ranks, three 2 s steps each, then rank 0 evaluates 4 s while rank 1 waits: events only (no memory,
    counters or GPU activity, no Horovod timeline)."""
    rows = [
        {"rank": r, "phase": "compute", "name": "train_step", "start_ns": 2 * i * S, "end_ns": (2 * i + 2) * S}
        for r in (0, 1)
        for i in range(3)
    ]
    rows += [
        {"rank": 0, "phase": "evaluation", "name": "evaluate", "start_ns": 6 * S, "end_ns": 10 * S},
        {"rank": 1, "phase": "communication", "name": "NEGOTIATE_ALLREDUCE", "start_ns": 6 * S, "end_ns": 10 * S},
    ]
    path = create_run(root, "bare", ranks=2)
    events = events_frame(pd.DataFrame(rows).assign(run_id=path.name))
    for rank, part in events.groupby("rank"):
        StreamWriter(path, "events", int(rank)).write(part.to_dict(orient="list"))
    update_run_meta(path, status="finished")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("facade")
    empty = create_run(root / "empty", "empty", ranks=2)
    update_run_meta(empty, status="finished")
    return {
        "cpu": Run.load(write_made_cpu_run(root / "cpu")),
        "gpu": Run.load(write_made_gpu_run(root / "gpu")),
        "bare": Run.load(write_bare_run(root / "bare")),
        "empty": Run.load(empty),
    }


def test_the_breakdown_is_the_run_s_seconds(runs):
    """Hand-picked: rank 0 computed 6 s and evaluated 4 s while rank 1 computed 6 s and waited 4 s in its allreduce."""
    table = runs["bare"].phase_breakdown().set_index(["rank", "phase"])["seconds"]
    assert table[(0, "compute")] == pytest.approx(6.0)
    assert table[(0, "evaluation")] == pytest.approx(4.0)
    assert table[(1, "communication_wait")] == pytest.approx(4.0)  # its allreduce: waiting for rank 0
    assert runs["bare"].pop_metrics()["runtime_s"].iloc[0] == pytest.approx(10.0)


def _direct(run: Run) -> dict[str, tuple[Any, Any]]:
    """Each method's result beside its function's, called on the run's frames (spans that end before they start
    left out, as ``analyse_run`` leaves them out: the made CPU run has one)."""
    events = run.events[run.events["end_ns"] >= run.events["start_ns"]]
    ranks = run.ranks
    intervals = analysis.collective_intervals(events)
    return {
        "phase_breakdown": (run.phase_breakdown(), analysis.phase_breakdown(events, ranks=ranks)),
        "pop_metrics": (
            run.pop_metrics(input_is_useful=False),
            analysis.pop_metrics(events, input_is_useful=False, ranks=ranks),
        ),
        "findings": (run.findings(), analysis.findings(events, ranks=ranks, hosts=run.hosts)),
        "steps_per_rank": (run.steps_per_rank(), analysis.steps_per_rank(events, ranks=ranks)),
        "step_throughput": (run.step_throughput(warmup_steps=2), analysis.step_throughput(events, warmup_steps=2)),
        "step_waits": (run.step_waits(), analysis.step_waits(events)),
        "allreduce_lateness": (run.allreduce_lateness(), analysis.allreduce_lateness(events)),
        "lateness_summary": (
            run.lateness_summary(),
            analysis.lateness_summary(analysis.allreduce_lateness(events), run.hosts),
        ),
        "communication_overlap": (run.communication_overlap(), analysis.communication_overlap(events)),
        "collective_split": (run.collective_split(), analysis.collective_split(intervals)),
        "rank_activity": (
            run.rank_activity(),
            activity.rank_activity(activity.rank_time_grid(events), hosts=run.hosts),
        ),
        "input_share": (run.input_share(), analysis.input_share(events)),
        "step_times": (run.step_times(), analysis.step_times(events)),
        "queue_exhaustion": (run.queue_exhaustion(), analysis.queue_exhaustion(run.counters)),
        "input_findings": (run.input_findings(), analysis.input_findings(events, run.counters)),
        "memory_summary": (run.memory_summary(), analysis.memory_summary(run.memory)),
        "memory_growth": (run.memory_growth(), analysis.memory_growth(run.memory)),
        "memory_skew": (run.memory_skew(), analysis.memory_skew(run.memory)),
        "keras_calls": (run.keras_calls(), analysis.keras_call_table(events)),
        "cpu_wait": (run.cpu_wait(), analysis.cpu_wait_table(run.counters, run.rank_meta)),
        "network_episodes": (
            run.network_episodes(),
            pd.DataFrame(network.network_episodes([network.reduce_network(run.counters, run.rank_meta, events)])),
        ),
    }


#: What the made CPU run has no data for: no input queue counters, no rank waiting long for its input.
NOT_ON_THE_CPU_RUN = {"queue_exhaustion", "input_findings"}


def test_each_method_gives_what_its_function_gives(runs):
    run = runs["cpu"]
    for name, (mine, theirs) in _direct(run).items():
        assert_frame_equal(mine.reset_index(drop=True), theirs.reset_index(drop=True), obj=name, check_like=True)
        assert len(mine) or name in NOT_ON_THE_CPU_RUN, f"the made CPU run exercises {name}"
    assert run.collective_summary() == analysis.collective_summary(analysis.collective_intervals(run.measured_events))
    assert set(run.network_episodes()["kind"]) == {"link_down", "slowed_link"}


def test_with_waits_the_methods_agree_with_analyse(runs):
    """``waits=True`` counts each rank's wait for the last one as ``workbench analyse`` does; the stragglers are
    ``analyse()``'s straggler findings."""
    run = runs["cpu"]
    result = run.analyse()
    keys = ["rank", "phase"]
    mine = run.phase_breakdown(waits=True).sort_values(keys, ignore_index=True)
    theirs = result.breakdown.drop(columns="host").sort_values(keys, ignore_index=True)
    assert_frame_equal(mine, theirs, check_dtype=False)
    assert run.pop_metrics(waits=True)["parallel_efficiency"].iloc[0] == pytest.approx(
        result.pop["parallel_efficiency"]
    )
    stragglers = result.findings[result.findings["kind"] == "straggler"]
    assert len(stragglers) == 1
    assert list(run.stragglers()["text"]) == list(stragglers["text"])
    assert_frame_equal(run.communication_overlap(), result.in_flight.drop(columns="host"), check_dtype=False)


def test_compare_is_workbench_compare_s_table(runs):
    a, b = runs["bare"], runs["cpu"]
    mine = a.compare(b, waits=True)
    theirs = analysis.compare_runs(
        analysis.with_step_waits(a.events, a.ranks),
        analysis.with_step_waits(b.events, b.ranks),
        ranks_a=a.ranks,
        ranks_b=b.ranks,
    )
    assert_frame_equal(mine, theirs)
    wall = mine[mine["scope"] == "wall"].iloc[0]
    assert wall["seconds_a"] == pytest.approx(10.0)


def test_the_gpu_methods_on_an_imported_profile(runs):
    run = runs["gpu"]
    devices = run.devices
    pairs = {
        "device_step_table": (run.device_step_table(), analysis.device_step_table(devices)),
        "device_summary": (run.device_summary(), run.analyse().devices),
        "gpu_time": (run.gpu_time(), run.analyse().gpu_time),
        "idle_by_cause": (run.idle_by_cause(), analysis.idle_by_cause(devices)),
        "launch_summary": (run.launch_summary(), analysis.launch_summary(analysis.kernel_launches(devices))),
        "kernel_type_breakdown": (run.kernel_type_breakdown(), kernels.kernel_type_breakdown(devices)),
        "top_kernels": (run.top_kernels(count=3), kernels.top_kernels(devices, count=3)),
    }
    for name, (mine, theirs) in pairs.items():
        assert len(mine), f"the made GPU run exercises {name}"
        assert_frame_equal(mine, theirs, obj=name)
    assert run.device_summary()["rank"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("name", ["bare", "empty"])
def test_a_run_without_the_data_gives_empty_tables(runs, name):
    """No GPU activity, memory samples or counters (and, for ``empty``, no events): every method answers, with
    an empty table where the run lacks what it reads."""
    run = runs[name]
    results = {method: getattr(run, method)() for method in _analyses()}
    for method, result in results.items():
        assert result is None or isinstance(result, pd.DataFrame), method
    lacking = [m for m in results if m.startswith(("device_", "gpu_", "kernel_", "memory_", "idle_", "launch_"))]
    lacking += ["top_kernels", "queue_exhaustion", "cpu_wait", "network_episodes", "keras_calls", "stragglers"]
    for method in lacking:
        assert results[method].empty, method
        assert len(results[method].columns), f"{method}: an empty table keeps its columns"
    assert results["collective_summary"] is None
    assert isinstance(run.compare(runs["cpu"]), pd.DataFrame)


def test_a_run_too_short_to_measure_says_why(runs):
    table = runs["bare"].step_throughput()  # 3 steps, not more than the 10 of warm-up
    assert table.empty and list(table.columns)[:3] == ["run_id", "ranks", "warmup_steps"]
    assert "warmup_steps=10" in table.attrs["note"]
    assert len(runs["bare"].step_throughput(warmup_steps=1)) == 1
    with pytest.raises(ValueError, match="warmup_steps"):
        runs["bare"].step_throughput(warmup_steps=-1)  # the arguments, not the run: still an error


def test_every_public_method_says_what_it_answers():
    missing = [name for name in _public_methods() if not (getattr(Run, name).__doc__ or "").strip()]
    assert not missing, f"Run methods without a docstring: {missing}"
    assert len(_analyses()) >= 30


#: Method -> the function it forwards its keywords to, where the names are the same.
FORWARDED = {
    "phase_breakdown": analysis.phase_breakdown,
    "pop_metrics": analysis.pop_metrics,
    "findings": analysis.findings,
    "steps_per_rank": analysis.steps_per_rank,
    "step_throughput": analysis.step_throughput,
    "step_waits": analysis.step_waits,
    "allreduce_lateness": analysis.allreduce_lateness,
    "collective_split": analysis.collective_intervals,
    "input_share": analysis.input_share,
    "step_times": analysis.step_times,
    "queue_exhaustion": analysis.queue_exhaustion,
    "memory_growth": analysis.memory_growth,
    "memory_skew": analysis.memory_skew,
    "device_step_table": analysis.device_step_table,
    "idle_by_cause": analysis.idle_by_cause,
    "top_kernels": kernels.top_kernels,
    "stragglers": analysis.straggler_rows,
}


@pytest.mark.parametrize("method", sorted([*FORWARDED, "rank_activity"]))
def test_a_method_s_defaults_are_its_function_s(method):
    """The methods spell out their functions' keywords (for help() and completion): the defaults must not drift."""
    functions = [activity.rank_activity, activity.rank_time_grid] if method == "rank_activity" else [FORWARDED[method]]
    mine = inspect.signature(getattr(Run, method)).parameters
    checked = 0
    for function in functions:
        for name, parameter in inspect.signature(function).parameters.items():
            if name in mine and parameter.default is not inspect.Parameter.empty:
                assert mine[name].default == parameter.default, (method, name)
                checked += 1
    assert checked, method
