"""The docs' part of the case study ``predict-leak``: what is measured for it, its tables, its README clause."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docsbench.cases import CaseDocs
from docsbench.markdown import Measurement, SavedResults, number, small, source_line, table

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "predict-leak-reduced",
        "workbench run predict-leak --preset reduced --ranks 2 --out artifacts/predict-leak-reduced --json",
        "the case study's table on this machine's cores",
    ),
)


def render_predict_leak(saved: Mapping[str, Any], results: SavedResults) -> str:
    """Memory growth per call of every method, with its interval over the ranks, and the verdict."""
    result = saved["result"]
    names = {
        "predict": "`predict`",
        "predict_on_batch": "`predict_on_batch`",
        "call": "`model(x, training=False)`",
        "tf_function": "`tf.function` forward",
        "kept_outputs": "control: keeps each output",
    }
    rows = []
    for method, slope in result["slope_mb_per_call"].items():
        low, high = result["ci_mb_per_call"][method]
        verdict = result["verdict"][method]
        rows.append(
            [
                names.get(method, method),
                f"{small(slope)} [{small(low)}, {small(high)}]",
                number(result["ms_per_call"].get(method)),
                f"**{verdict}**" if verdict == "leak" else verdict,
            ]
        )
    header = [f"method ({result['ranks']} ranks, {result['iterations']} calls)", "MB per call [95 % interval]",
              "ms per call", "verdict"]  # fmt: skip
    return table(header, ["l", "l", "r", "l"], rows) + "\n\n" + source_line(saved)


DOCS = CaseDocs(
    "predict-leak",
    measurements=MEASUREMENTS,
    tables={"predict-leak-reduced": render_predict_leak},
)
