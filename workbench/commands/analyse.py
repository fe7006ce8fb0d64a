"""``workbench analyse RUN_DIR``: one recorded run, after the fact, as text, JSON or an HTML report.

The numbers come from ``analysis.analyse_run``, the text from ``workbench.text``; this module only
loads the run, picks the output and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from workbench import analysis
from workbench.analysis import RunAnalysis
from workbench.events import host_count
from workbench.store import Run
from workbench.text import findings_lines, format_analysis, format_header


def analyse_command(
    run_dir: str | Path,
    *,
    as_json: bool = False,
    html: str | Path | None = None,
    workers: int | None = None,
    group_ranks: int | None = None,
) -> int:
    """Analyse one recorded run: print text (or JSON), optionally write the HTML report.

    With ``workers`` (or ``group_ranks``) the run is analysed in rank groups (``analysis.split``): for
    runs of hundreds of ranks that do not fit one process; no HTML report then.
    """
    if workers is not None or group_ranks is not None:
        from workbench.analysis.split import DEFAULT_GROUP_RANKS, analyse_split
        from workbench.text import format_split_analysis

        if html is not None:
            raise SystemExit("--html is not available with --workers/--group-ranks: drop one of them")
        split = analyse_split(run_dir, group_ranks=group_ranks or DEFAULT_GROUP_RANKS, workers=workers or None)
        print(json.dumps(split.to_dict(), indent=2, allow_nan=False) if as_json else format_split_analysis(split))
        return 0
    run = Run.load(run_dir)
    result = analysis.analyse_run(
        run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters, devices=run.devices
    )
    if html is not None:
        path = write_analysis_report(html, result, run)
        if not as_json:
            print(f"report: {path}")
    print(json.dumps(result.to_dict(), indent=2, allow_nan=False) if as_json else format_analysis(result))
    return 0


def write_analysis_report(path: str | Path, result: RunAnalysis, run: Run) -> Path:
    """The analysis as one self-contained HTML file: header, POP table, findings, figures, tables."""
    from workbench import figures
    from workbench.report import run_metadata, write_report

    header = result.header
    hosts = header.get("rank_hosts") or {}
    several_hosts = host_count(hosts) > 1

    def per_rank(table: pd.DataFrame) -> pd.DataFrame:  # a host column only says something on several hosts
        return table if several_hosts else table.drop(columns="host", errors="ignore")

    sections: list[tuple[str, Any]] = [("Run", "\n".join(f"- {line.strip()}" for line in format_header(header)))]
    pop_row = {k: v for k, v in result.pop.items() if k != "useful_phases"}
    sections.append(("POP metrics", figures.pop_table_figure(pd.DataFrame([pop_row]), id_column="run_id")))
    sections.append(
        ("Useful phases", f"Useful phases: {', '.join(result.pop['useful_phases'])}. {result.pop.get('note') or ''}")
    )
    found = findings_lines(result.findings, width=10_000)
    sections.append(("Findings", "\n".join(f"- {line.strip()}" for line in found) if found else "none"))
    if len(result.breakdown):
        # on several hosts the bars group by host (rank inside), so a slow host stands out
        sections.append(("Seconds per rank and phase", figures.breakdown_figure(per_rank(result.breakdown))))
        sections.extend(_timeline_sections(run, hosts))
    sections.append(("Training steps per rank", per_rank(result.steps)))
    lateness = per_rank(analysis.lateness_summary(result.lateness, hosts))
    if len(lateness):
        sections.append(("Arrival at the allreduce per rank (Horovod's readiness marks)", lateness))
    if len(result.devices):
        sections.append(("GPUs: busy, idle, communication hidden behind compute (seconds)", per_rank(result.devices)))
    if len(result.in_flight):
        sections.append(("Collectives in flight (overlap with the ranks' own work)", per_rank(result.in_flight)))
    if len(run.memory):
        sections.append(("Memory", figures.memory_figure(run.memory)))
    sections.append(("Memory per rank (MB)", per_rank(result.memory)))
    title = f"workbench analyse: {header.get('run_id') or run.path.name}"
    metadata = run_metadata([run.path], case=run.meta.get("experiment", {}).get("case"))
    return write_report(path, title=title, sections=sections, metadata=metadata)


def _timeline_sections(run: Run, hosts: dict[int, str]) -> list[tuple[str, Any]]:
    """The timeline of every rank; past ``MAX_TIMELINE_RANKS``, the rank × time heatmap and the slowest's timeline."""
    from workbench import figures
    from workbench.analysis.activity import DEFAULT_SLOWEST, heatmap_marks, rank_activity, rank_time_grid
    from workbench.figures.timeline import MAX_TIMELINE_RANKS

    if len(run.ranks) <= MAX_TIMELINE_RANKS:
        return [("Timeline", figures.timeline_figure(run.events, ranks=run.ranks))]
    grid = rank_time_grid(run.events)
    activity = rank_activity(grid, slowest=DEFAULT_SLOWEST, hosts=hosts)
    marks = heatmap_marks(activity)
    slowest = marks["marked"]
    heatmap = figures.rank_time_figure(grid.share(), hosts={**grid.hosts, **hosts}, **marks)
    events = run.events[run.events["rank"].isin(slowest)]
    return [
        (f"Waiting share per rank over time ({len(run.ranks)} ranks; the {len(slowest)} slowest marked)", heatmap),
        (
            f"Timeline of the {len(slowest)} slowest ranks (those that wait least)",
            figures.timeline_figure(events, ranks=slowest),
        ),
    ]
