"""predict-leak case: the workload in one process, and the case's analysis on hand-made runs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from workbench.cases import predict_leak as case
from workbench.experiment import Experiment, Point, build_result, write_outputs
from workbench.recorder import Recorder
from workbench.store import RunData, StreamWriter, create_run
from workbench.workloads.predict_leak import CONTROL, METHODS, kept_mb_per_call, method_order, run_methods

RUN_ID = "synthetic"


# -- pure parts --------------------------------------------------------------------------------------
def test_method_order_rotates_by_rank_and_keeps_the_control_last():
    assert method_order(METHODS, 0) == list(METHODS)
    assert method_order(METHODS, 1) == ["predict_on_batch", "call", "tf_function", "predict", CONTROL]
    assert method_order(METHODS, 4) == list(METHODS)  # 4 plain methods: rank 4 wraps round
    assert method_order(["call", "predict"], 1) == ["predict", "call"]


def test_kept_mb_per_call_is_the_first_feature_map():
    assert kept_mb_per_call(32) == pytest.approx(32 * 14 * 14 * 32 * 4 / 1e6)


def test_worst_verdict_over_ranks():
    assert case.worst_verdict(["no leak", "leak"]) == "leak"
    assert case.worst_verdict(["no leak", "inconclusive"]) == "inconclusive"
    assert case.worst_verdict(["no leak", "too few samples (n=2, need 3): slope not estimated"]).startswith("too few")
    assert case.worst_verdict(["no leak", "no leak"]) == "no leak"


def _write_synthetic_run(root, slopes: dict[str, float], *, ranks: int = 2, calls: int = 30) -> RunData:
    """A run whose RSS grows exactly ``slope`` MB per call per method (plus 1 kB noise), 10 ms spans."""
    path = create_run(
        root,
        "predict-leak",
        config={"preset": "ci", "iterations": calls, "warmup": 0, "batch": 32, "methods": list(slopes)},
        ranks=ranks,
        run_id=RUN_ID,
    )
    rng = np.random.default_rng(0)
    t = 1_000_000_000
    for rank in range(ranks):
        memory: dict[str, list] = {
            k: [] for k in ("time_ns", "rss_bytes", "gpu_bytes", "cpu_percent", "label", "iteration")
        }
        events: dict[str, list] = {
            k: [] for k in ("phase", "name", "detail", "step", "epoch", "start_ns", "end_ns", "bytes")
        }
        for method, slope in slopes.items():
            for i in range(calls):
                start, t = t, t + 10_000_000 * (2 if method == "predict" else 1)
                for key, value in zip(events, ("evaluation", method, "", i, -1, start, t, -1)):
                    events[key].append(value)
                rss = 500e6 + slope * 1e6 * i + rng.normal(0, 1e3)
                for key, value in zip(memory, (t, int(rss), -1, 0.0, method, i)):
                    memory[key].append(value)
        for stream, columns in (("memory", memory), ("events", events)):
            n = len(columns["label" if stream == "memory" else "phase"])
            StreamWriter(path, stream, rank).write(
                {"run_id": [RUN_ID] * n, "rank": [rank] * n, "host": ["h"] * n, **columns}
            )
    return RunData.load(path)


def _result(run: RunData, out, methods, calls: int = 30):
    """The case's result from one recorded run, through the same code the runner uses, written to ``out``."""
    settings = case.CASE.settings("ci", {"methods": tuple(methods), "iterations": calls, "warmup": 0})
    result = build_result(case.CASE, "ci", settings, {"n2": (Point.of(2), run)}, out=out)
    write_outputs(result)
    return result


def test_summarise_a_synthetic_run(tmp_path):
    slopes = {"predict": 0.05, "predict_on_batch": 0.0, "call": 0.001, CONTROL: 0.8}
    run = _write_synthetic_run(tmp_path / "runs", slopes)
    result = _result(run, tmp_path / "out", slopes)
    growth = result.tables["growth"]
    verdicts = result.summary["verdict"]
    assert len(growth) == 2 * len(slopes)
    assert set(growth["rank"]) == {0, 1}
    assert verdicts == {"predict": "leak", "predict_on_batch": "no leak", "call": "no leak", CONTROL: "leak"}
    for method, slope in slopes.items():
        assert result.summary["slope_mb_per_call"][method] == pytest.approx(slope, abs=1e-3)
    assert result.summary["ms_per_call"]["predict"] == pytest.approx(20.0)
    assert result.summary["ms_per_call"]["call"] == pytest.approx(10.0)
    assert result.summary["control_caught"] is True
    assert result.summary["order"] == {"0": list(slopes), "1": list(slopes)}
    for name in ("growth.parquet", "timing.parquet", "samples.parquet", "runs.parquet", "report.html", "summary.json"):
        assert (tmp_path / "out" / name).is_file()
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Memory: predict" in html and "no leak" in html
    # headed by its metadata; plotly.js once (compressed), the figures as data blocks
    assert html.index('class="metadata"') < html.index("<h2>Verdicts</h2>")
    assert "<th>case</th><td>predict-leak</td>" in html and "<th>host</th>" in html
    assert html.count('id="plotlyjs-gz"') == 1 and html.count('class="figure-data"') == len(slopes)
    text = result.text()
    assert "`predict` still grows here" in text and "detector calls it a leak" in text
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["verdict"] == verdicts
    assert case.CASE.healthy(result.summary)


def test_missed_control_is_a_warning(tmp_path):
    run = _write_synthetic_run(tmp_path / "runs", {"predict": 0.0, CONTROL: 0.0})
    result = _result(run, tmp_path / "out", ["predict", CONTROL])
    assert result.summary["control_caught"] is False
    assert not case.CASE.healthy(result.summary)  # `workbench run predict-leak` exits 1
    assert "WARNING" in result.text()
    assert "no longer leaks" in result.text()


def test_timing_table_ignores_warmup_spans():
    events = pd.DataFrame(
        {
            "rank": [0, 0, 0],
            "phase": ["evaluation"] * 3,
            "name": ["call"] * 3,
            "detail": ["warmup", "", ""],
            "start_ns": [0, 0, 0],
            "end_ns": [9e9, 2e6, 4e6],
        }
    )
    table = case.timing_table(events)
    assert table.loc[0, "calls"] == 2
    assert table.loc[0, "ms_per_call"] == pytest.approx(3.0)


def test_one_point_at_the_largest_rank_count():
    experiment = Experiment("predict-leak", preset="ci", ranks=3)
    assert [p.key for p in experiment.plan()] == ["n3"]
    assert case.CASE.workload_kwargs(experiment.settings, experiment.plan()[0]) == {
        "methods": list(METHODS),
        "iterations": 40,
        "warmup": 10,
        "batch": 32,
        "seed": 0,
    }
    assert case.CASE.progress_units(experiment.settings, experiment.plan()[0]) == (3 * len(METHODS) * 40, "calls")


def test_unknown_preset_and_method_are_one_clear_error():
    with pytest.raises(ValueError, match="unknown preset 'huge' for case predict-leak: choose one of ci, reduced"):
        Experiment("predict-leak", preset="huge")
    with pytest.raises(ValueError, match="method 'predikt' is unknown"):
        case.parse_methods("predict,predikt")


# -- the workload in this process (TensorFlow, a few seconds) ---------------------------------------
def test_workload_in_one_process_lands_every_call_in_the_store(tmp_path):
    path = create_run(tmp_path, "predict-leak")
    iterations = 5
    with Recorder(path, rank=0) as recorder:
        result = run_methods(recorder, iterations=iterations, warmup=2)
    assert result["order"] == list(METHODS)
    assert set(result["timing"]) == set(METHODS)
    assert result["timing"][CONTROL]["kept_mb"] == pytest.approx(iterations * kept_mb_per_call(32))
    run = RunData.load(path)
    calls = run.memory[run.memory["iteration"] >= 0]
    counts = calls.groupby("label")["iteration"].agg(["count", "min", "max"])
    assert set(counts.index) == set(METHODS)
    assert (counts["count"] == iterations).all() and (counts["min"] == 0).all()
    assert (counts["max"] == iterations - 1).all()
    spans = run.events[run.events["phase"] == "evaluation"]
    assert spans[spans["detail"] == ""].groupby("name").size().to_dict() == dict.fromkeys(METHODS, iterations)
    assert spans[spans["detail"] == "warmup"].groupby("name").size().to_dict() == dict.fromkeys(METHODS, 2)


def test_detector_catches_the_control_and_stays_quiet_on_flat_methods(tmp_path):
    """The control keeps 0.8 MB per call; the flat methods move by a few kB per call at most.

    A young process still settles by up to ~10 kB per eager call over its first few hundred calls,
    so the separation is checked at 0.05 MB/call (16x below the control) for every flat method, and
    at the case's own threshold for the compiled forward pass, which is flat from the first call.
    """
    from workbench.analysis.memory import memory_growth

    path = create_run(tmp_path, "predict-leak")
    methods = ("predict_on_batch", "call", "tf_function", CONTROL)
    # in a fresh process, as on an engine: a process that freed memory before (this test session) reuses
    # it, and its RSS then grows by less than the control keeps
    script = (
        "import sys\n"
        "from workbench.recorder import Recorder\n"
        "from workbench.workloads.predict_leak import run_methods\n"
        "with Recorder(sys.argv[1], rank=0) as recorder:\n"
        f"    run_methods(recorder, methods={methods!r}, iterations=80, warmup=40)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=600)
    samples = RunData.load(path).memory
    growth = memory_growth(samples, leak_threshold_mb=0.05).set_index("label")
    assert growth.loc[CONTROL, "verdict"] == "leak"
    # what the control keeps, plus the allocator's own per-call growth (1.10x the kept bytes was seen)
    kept = kept_mb_per_call(32)
    assert 0.95 * kept <= growth.loc[CONTROL, "slope_mb_per_x"] <= 1.25 * kept
    for method in ("predict_on_batch", "call", "tf_function"):
        assert growth.loc[method, "verdict"] == "no leak", growth.loc[method].to_dict()
    at_case_threshold = case.live_growth(samples).set_index("label")
    assert at_case_threshold.loc[CONTROL, "verdict"] == "leak"
    assert at_case_threshold.loc["tf_function", "verdict"] != "leak"
