"""The docs' part of the case study ``input-pipeline``: what is measured for it, its tables, its README clause."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docsbench.cases import CaseDocs
from docsbench.cases.common import case_text, node_sweep_runs
from docsbench.markdown import (
    Measurement,
    SavedResults,
    fixed,
    number,
    share,
    source_line,
    table,
    times,
    varied,
)

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "input-pipeline-reduced",
        "workbench run input-pipeline --preset reduced --ranks 2 --out artifacts/input-pipeline-reduced --json",
        "the case study's table on this machine's cores",
    ),
    *varied(
        Measurement(
            "projection-sweeps",
            "workbench run input-pipeline --preset reduced --ranks 2 --threads-per-rank 1"
            " --out artifacts/input-pipeline-reduced-1thread{repetition} --json",
            "the projection checked on this machine: one core per rank at every rank count",
            sweep=True,
        ),
        repetition=("", "-r2", "-r3"),
    ),
    *node_sweep_runs(
        "projection-nodes-sweeps",
        "input-pipeline --preset reduced --threads 1 --intervals 1,8 --seconds 5",
        "nodes-input-pipeline-{link}-r{repetition}",
        "1,2,4,8",
        0.2,
        ("1gbit", "50mbit"),
        "contested storage shared by every node, a link each",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "input-pipeline --preset reduced --threads 1 --intervals 1,8 --seconds 5",
        "sleepbatch/nodes-input-pipeline-{link}-r{repetition}",
        "1,2,4,8",
        0.2,
        ("1gbit",),
        "ranks waiting in MPI asleep",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "input-pipeline --preset reduced --threads 1 --intervals 1,8 --seconds 5",
        "lightrec/nodes-input-pipeline-{link}-r{repetition}",
        "1,2,4,8",
        0.2,
        ("1gbit",),
        "the lighter recorder",
    ),
)

#: its sweeps the projection is checked on (`workbench run CASE --preset reduced [--threads-per-rank 1]
#: --out DIR`, three times: -1thread, -1thread-r2, -1thread-r3), and on a miniature cluster's nodes
PROJECTION_SWEEPS = ("artifacts/input-pipeline-reduced-1thread*", "artifacts/input-pipeline-reduced")

NODE_SWEEPS = ("artifacts/nodes-input-pipeline-*",)


def render_input_pipeline(saved: Mapping[str, Any], results: SavedResults) -> str:
    """Every point: step time, slowdown against data in memory, input share, the queue running dry."""
    result = saved["result"]
    order = {"contested": 0, "memory": 1, "tf.data": 2}
    rows = [
        [
            str(r["ranks"]),
            {"contested": "queue, contested", "memory": "in memory", "tf.data": "tf.data, contested"}.get(
                r["source"], r["source"]
            ),
            "–" if r["source"] == "memory" else str(r["threads"]),
            str(r["interval"]),
            number(r["step_ms"]),
            times(r.get("slowdown_vs_memory")),
            share(r.get("input_share")),
            share(r.get("queue_empty_fraction")),
            fixed(r.get("accuracy_at_time"), 2),
        ]
        for r in sorted(
            result["headline"], key=lambda r: (r["ranks"], order.get(r["source"], 3), r["threads"], r["interval"])
        )
    ]
    header = ["ranks", "source", "enqueue threads", "k", "ms / step", "vs in memory", "input share",
              "queue empty at dequeue", "test accuracy after the run"]  # fmt: skip
    return (
        table(header, ["r", "l", "r", "r", "r", "r", "r", "r", "r"], rows)
        + "\n\n"
        + case_text(saved)
        + "\n\n"
        + source_line(saved)
    )


DOCS = CaseDocs(
    "input-pipeline",
    measurements=MEASUREMENTS,
    tables={"input-pipeline-reduced": render_input_pipeline},
    projection_sweeps=PROJECTION_SWEEPS,
    node_sweeps=NODE_SWEEPS,
)
