"""Keras calls' cost and memory per call, on hand-made spans and samples whose answers are worked out here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from workbench.analysis import analyse_run
from workbench.analysis.keras_calls import call_memory_findings, keras_call_findings, keras_call_table
from workbench.events import EVENT_COLUMNS

MS = 1_000_000


def _span(rank: int, phase: str, name: str, start_ms: float, end_ms: float, detail: str = "", step: int = -1) -> dict:
    return {
        "run_id": "r",
        "rank": rank,
        "host": "h",
        "phase": phase,
        "name": name,
        "detail": detail,
        "step": step,
        "epoch": -1,
        "start_ns": int(start_ms * MS),
        "end_ns": int(end_ms * MS),
        "bytes": -1,
    }


def gan_loop(iterations: int = 10, *, predict_ms: float = 60, model_ms: float = 5, pob_ms: float = 0) -> pd.DataFrame:
    """Per iteration on 2 ranks: predict (60 ms, 5 of them its model run), 2 ms between, a 20 ms train step.

    With ``pob_ms``, a predict_on_batch of that length (its model run 5 ms) follows each predict.
    """
    rows = []
    for rank in (0, 1):
        t = 0.0
        for k in range(iterations):
            rows.append(_span(rank, "host", "keras.predict", t, t + predict_ms, "generator", k))
            rows.append(_span(rank, "compute", "predict_function", t + 40, t + 40 + model_ms, step=k))
            t += predict_ms
            if pob_ms:
                rows.append(_span(rank, "host", "keras.predict_on_batch", t, t + pob_ms, "generator", k))
                rows.append(_span(rank, "compute", "predict_function", t + 1, t + 1 + model_ms, step=k))
                t += pob_ms
            rows.append(_span(rank, "host", "between_calls", t, t + 2, step=k))
            t += 2
            rows.append(_span(rank, "host", "keras.train_on_batch", t, t + 20, "discriminator", k))
            rows.append(_span(rank, "compute", "train_step", t + 1, t + 19, "train_function", k))
            t += 20
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS))


def test_the_table_splits_each_call_into_its_model_runs_and_its_own_work():
    table = keras_call_table(gan_loop(10)).set_index(["rank", "method"])
    predict = table.loc[(0, "predict")]
    assert predict["calls"] == 10 and predict["model"] == "generator"
    assert predict["seconds"] == pytest.approx(0.6)  # 10 x 60 ms
    assert predict["model_s"] == pytest.approx(0.05)  # 10 x 5 ms
    assert predict["own_s"] == pytest.approx(0.55)
    assert predict["ms_per_call"] == pytest.approx(60) and predict["model_ms_per_call"] == pytest.approx(5)
    train = table.loc[(1, "train_on_batch")]
    assert train["model_s"] == pytest.approx(0.18) and train["own_s"] == pytest.approx(0.02)


def test_an_eager_model_call_is_all_model_and_no_keras_call_is_an_empty_table():
    events = pd.DataFrame([_span(0, "compute", "keras.call", 0, 3, "generator")], columns=list(EVENT_COLUMNS))
    (row,) = keras_call_table(events).to_dict("records")
    assert row["method"] == "call" and row["model_s"] == pytest.approx(0.003) and row["own_s"] == 0
    assert keras_call_table(gan_loop(2).query("not name.str.startswith('keras.')")).empty


def test_predict_is_named_with_its_cost_per_call_and_what_to_call_instead():
    events = gan_loop(10)
    wall = 10 * 82 / 1e3  # 60 + 2 + 20 ms per iteration
    (found,) = keras_call_findings(events, wall)
    assert found["kind"] == "keras_call" and found["ranks"] == "0–1"
    assert found["seconds_lost"] == pytest.approx(0.55)  # all of predict's own work: the alternative not measured
    text = found["text"]
    for part in (
        "Keras predict of generator: 10 calls take 0.6 s per rank (73% of wall)",
        "60 ms per call",
        "5 ms runs the model",
        "55 ms per call is predict's own work",
        "predict_on_batch(x)",
        "Up to 0.55 s",
    ):
        assert part in text, (part, text)


def test_the_saving_uses_the_alternatives_own_work_where_the_run_measured_it():
    events = gan_loop(10, pob_ms=8)  # predict_on_batch: 8 ms, 5 of them its model run: 3 ms its own
    wall = 10 * 90 / 1e3
    found = {row["text"].split(":")[0]: row for row in keras_call_findings(events, wall)}
    predict = found["Keras predict of generator"]
    assert predict["seconds_lost"] == pytest.approx(0.55 - 10 * 0.003)
    assert "predict_on_batch spends 3 ms per call of its own" in predict["text"]
    assert "Keras predict_on_batch of generator" not in found  # its own work is under half its time


def test_small_own_work_is_not_a_finding():
    assert keras_call_findings(gan_loop(10, predict_ms=46, model_ms=5), wall_s=1000.0) == []
    assert keras_call_findings(gan_loop(10), wall_s=None) == []


def test_analyse_run_puts_the_keras_finding_among_the_others():
    result = analyse_run(gan_loop(10), meta={"run_id": "r", "ranks": 2})
    kinds = list(result.findings["kind"])
    assert "keras_call" in kinds
    assert result.findings.set_index("kind").loc["keras_call", "seconds_lost"] == pytest.approx(0.55)


def _samples(
    calls: dict[str, int], mb_per_call: dict[str, float], *, ranks=(0, 1), warmup_mb: float = 0.0
) -> pd.DataFrame:
    """RSS after each call: 300 MB, + ``warmup_mb`` spread over the first 5 calls, + a growth per call, + noise."""
    rng = np.random.default_rng(3)
    rows = []
    for rank in ranks:
        for label, n in calls.items():
            for k in range(n):
                mb = 300 + warmup_mb * min(k, 5) / 5 + mb_per_call.get(label, 0.0) * k + rng.normal(0, 0.002)
                rows.append(
                    {
                        "run_id": "r",
                        "rank": rank,
                        "host": "h",
                        "time_ns": k,
                        "rss_bytes": int(mb * 1e6),
                        "gpu_bytes": -1,
                        "cpu_percent": math.nan,
                        "label": f"keras.{label}",
                        "iteration": k,
                    }
                )
    return pd.DataFrame(rows)


def test_memory_growth_per_call_is_found_with_its_interval_and_the_interleaved_call_named():
    (found,) = call_memory_findings(
        _samples({"predict": 100, "train_on_batch": 100}, {"predict": 0.1, "train_on_batch": 0.1})
    )
    assert found["kind"] == "memory_growth" and math.isnan(found["seconds_lost"])
    text = found["text"]
    assert text.startswith("memory grows with the calls: 0.1 MB per predict call on rank")
    assert "90 calls after 10 warm-up" in text and "train_on_batch is called as often (100 times)" in text
    low, high = (float(v) for v in text.split("95 % interval ")[1].split(" MB")[0].split(" to "))
    assert low < 0.1 < high and high - low < 0.01
    assert "TensorFlow issue 33009" in text


def test_no_growth_after_warm_up_is_said_with_the_warm_up_rise():
    (found,) = call_memory_findings(_samples({"predict_on_batch": 60}, {}, warmup_mb=200))
    assert found["text"].startswith("memory does not grow per call:")
    assert "from 300 MB at the first call to 500 MB by the end of warm-up" in found["text"]


def test_too_few_calls_and_growth_that_stops_get_the_reason_instead_of_a_verdict():
    (few,) = call_memory_findings(_samples({"predict": 12}, {"predict": 1.0}))
    assert "12 calls of Keras predict, too few for a verdict" in few["text"]
    settling = _samples({"predict": 100}, {})
    growth = np.where(settling["iteration"] < 50, settling["iteration"] * 0.2, 10.0)  # 0.2 MB per call, then flat
    settling["rss_bytes"] += (growth * 1e6).astype(np.int64)
    (found,) = call_memory_findings(settling)
    assert found["text"].startswith("memory still settling:"), found["text"]
    assert call_memory_findings(None) == [] and call_memory_findings(_samples({}, {})) == []


def test_the_text_report_lists_keras_calls_per_rank_and_summarises_a_thousand_ranks():
    from workbench.text import format_analysis

    text = format_analysis(analyse_run(gan_loop(3), meta={"run_id": "r", "ranks": 2}))
    table = text.split("Keras calls (own: Keras's work per call outside the model's runs)")[1].split("\n\n")[0]
    assert len(table.strip().splitlines()) == 1 + 2 * 2  # header, 2 ranks x 2 calls
    rows = [
        {"rank": r, "method": "predict", "model": "g", "calls": 100, "seconds": 6.0, "model_s": 0.5,
         "own_s": 5.5 + (r == 700), "ms_per_call": 60.0, "model_ms_per_call": 5.0}
        for r in range(1024)
    ]  # fmt: skip
    from workbench.text import _keras_call_lines, _RankColumns

    lines = _keras_call_lines(pd.DataFrame(rows), 100, _RankColumns({}))
    assert len(lines) == 2 and "1024" in lines[1] and "rank 700, 6.50 s" in lines[1]
