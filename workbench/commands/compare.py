"""``workbench compare RUN_A RUN_B``: where two recorded runs spent their time differently, per rank and phase.

The numbers come from ``analysis.compare_runs``, the text from ``workbench.text``; this module
only loads the runs, lays the result out as text, JSON or an HTML report, and prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from workbench import analysis
from workbench.analysis import json_ready, json_records
from workbench.analysis.compare import SCOPE_RANK, SCOPE_TOTAL, SCOPE_WALL
from workbench.store import RunData
from workbench.text import format_comparison, format_header


def compare_command(
    run_a: str | Path, run_b: str | Path, *, as_json: bool = False, html: str | Path | None = None
) -> int:
    """Compare two recorded runs per rank and phase: print text (or JSON), optionally the HTML report."""
    first, second = RunData.load(run_a), RunData.load(run_b)
    ranks_a, ranks_b = analysis.declared_ranks(first.meta), analysis.declared_ranks(second.meta)
    comparison = analysis.compare_runs(
        analysis.with_step_waits(first.events, ranks_a),  # waits derived as workbench analyse derives them
        analysis.with_step_waits(second.events, ranks_b),
        ranks_a=ranks_a,
        ranks_b=ranks_b,
    )
    header_a, header_b = analysis.run_header(first.meta), analysis.run_header(second.meta)
    if html is not None:
        path = write_comparison_report(html, comparison, header_a, header_b, run_paths=(first.path, second.path))
        if not as_json:
            print(f"report: {path}")
    if as_json:
        print(json.dumps(comparison_dict(comparison, header_a, header_b), indent=2, allow_nan=False))
    else:
        print(format_comparison(comparison, header_a, header_b))
    return 0


def comparison_dict(
    comparison: pd.DataFrame, header_a: Mapping[str, Any], header_b: Mapping[str, Any]
) -> dict[str, Any]:
    """JSON-ready: both runs' headers, the wall times, per-phase totals and per-rank rows."""
    columns = ["phase", "seconds_a", "seconds_b", "delta_s", "ratio", "present"]
    wall = comparison[comparison["scope"] == SCOPE_WALL]
    return {
        "a": json_ready(dict(header_a)),
        "b": json_ready(dict(header_b)),
        "wall": json_records(wall[columns[1:]])[0] if len(wall) else None,
        "totals": json_records(comparison.loc[comparison["scope"] == SCOPE_TOTAL, columns]),
        "per_rank": json_records(comparison.loc[comparison["scope"] == SCOPE_RANK, ["rank", *columns]]),
    }



def write_comparison_report(
    path: str | Path,
    comparison: pd.DataFrame,
    header_a: Mapping[str, Any],
    header_b: Mapping[str, Any],
    *,
    run_paths: Sequence[str | Path] = (),
) -> Path:
    """The comparison as one self-contained HTML file: both headers, the diverging bars, the tables.

    ``run_paths`` (A, B) head the report with the runs' metadata (host, cores, versions, ranks).
    """
    from workbench import figures
    from workbench.report import run_metadata, write_report

    runs = "\n".join(
        f"- {line.strip()}" for line in [*format_header(header_a, label="A"), *format_header(header_b, label="B")]
    )
    names = (str(header_a.get("name") or "A"), str(header_b.get("name") or "B"))
    if names[0] == names[1]:
        names = (f"A: {names[0]}", f"B: {names[1]}")
    totals = comparison[comparison["scope"] != SCOPE_RANK].drop(columns="scope")
    return write_report(
        path,
        metadata=run_metadata(run_paths) if run_paths else None,
        title=f"workbench compare: {header_a.get('run_id')} vs {header_b.get('run_id')}",
        sections=[
            ("Runs", runs),
            ("Where the time went differently", figures.comparison_figure(comparison, names=names)),
            ("Per phase, all ranks (rank-seconds), and wall time", totals),
            ("Per rank and phase", comparison[comparison["scope"] == SCOPE_RANK].drop(columns="scope")),
        ],
    )
