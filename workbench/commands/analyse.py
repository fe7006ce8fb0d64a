"""``workbench analyse RUN_DIR``: one recorded run, after the fact, as text, JSON or an HTML report.

The numbers come from ``analysis.analyse_run``, the text from ``workbench.text``; this module only
loads the run, picks the output and prints.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from workbench import analysis
from workbench.analysis import RunAnalysis
from workbench.events import host_count
from workbench.store import RunData
from workbench.text import findings_lines, format_analysis, format_header


def analyse_command(
    run_dir: str | Path,
    *,
    as_json: bool = False,
    html: str | Path | None = None,
    workers: int | None = None,
    group_ranks: int | None = None,
    hostfile: str | None = None,
    minicluster: bool = False,
    per_node: int = 1,
    launch_agent: str | None = None,
) -> int:
    """Analyse one recorded run: print text (or JSON), optionally write the HTML report.

    With ``workers`` (or ``group_ranks``) the run is analysed in rank groups (``workbench.rank_groups``): for
    runs of hundreds of ranks that do not fit one process. Without them, a run too large for this
    machine's free memory (``whole_run_fits``) is analysed in rank groups anyway, said in one line. The groups
    run on ipyparallel engines, ``per_node`` on each node, with ``hostfile``, on the miniature cluster, or inside
    a Slurm allocation of several nodes (``engine_placement``); else on local processes.
    """
    engines = engine_placement(
        hostfile=hostfile, minicluster=minicluster, per_node=per_node, workers=workers, launch_agent=launch_agent
    )
    if workers is None and group_ranks is None and (engines is None or engines.kind == "allocation"):
        fits, line, chosen = _whole_run_plan(run_dir)
        if not fits:
            where = f" on {engines.describe()}" if engines is not None else ""
            print(line + where if where else line, file=sys.stderr)
            workers = chosen
        elif engines is not None and engines.kind == "allocation":
            engines = None  # it fits here: no engines to start
    if workers is not None or group_ranks is not None or engines is not None:
        from workbench.rank_groups import DEFAULT_GROUP_RANKS, analyse_split
        from workbench.text import format_split_analysis

        size = group_ranks or DEFAULT_GROUP_RANKS
        if engines is not None:
            split = _analyse_on_engines(Path(run_dir).resolve(), engines, size)
        else:
            split = analyse_split(run_dir, group_ranks=size, workers=workers or None)
        if html is not None:
            path = write_analysis_report(html, split, Path(run_dir))
            if not as_json:
                print(f"report: {path}")
        print(json.dumps(split.to_dict(), indent=2, allow_nan=False) if as_json else format_split_analysis(split))
        return 0
    run = RunData.load(run_dir)
    result = analysis.analyse_run(
        run.events, run.memory, run.meta, rank_meta=run.rank_meta, counters=run.counters, devices=run.devices
    )
    if html is not None:
        path = write_analysis_report(html, result, run)
        if not as_json:
            print(f"report: {path}")
    print(json.dumps(result.to_dict(), indent=2, allow_nan=False) if as_json else format_analysis(result))
    return 0


def engine_placement(
    *, hostfile: str | None = None, minicluster: bool = False, per_node: int = 1, workers: int | None = None,
    launch_agent: str | None = None, environment: Any = None,
) -> Any:  # fmt: skip
    """Where the rank groups go when they leave this machine: ``placement.Placement`` of ``per_node`` engines on
    each node of the hostfile, the miniature cluster, or the Slurm allocation this runs in (several nodes, and no
    ``workers`` asked for: local processes); None: local processes. The same placement ``workbench profile`` uses.
    """
    from workbench.placement import PlacementError, allocation_from_environment, place, read_hostfile

    if per_node < 1:
        raise PlacementError(f"--per-node {per_node}: run at least 1 engine on each node")
    if hostfile and minicluster:
        raise PlacementError("--minicluster and --hostfile both name the nodes: pass one")
    if (hostfile or minicluster) and workers is not None:
        raise PlacementError("--workers runs the groups on local processes: drop it, or drop --hostfile/--minicluster")
    if minicluster:
        from workbench import minicluster as mini_module

        mini = mini_module.running()  # one line when none is up
        return place(ranks=per_node * len(mini.node_names), ranks_per_node=per_node, minicluster=mini)
    if hostfile:
        hosts = read_hostfile(hostfile)
        return place(ranks=per_node * len(hosts), hostfile=hostfile, ranks_per_node=per_node, launch_agent=launch_agent)
    allocation = allocation_from_environment(environment)
    if workers is None and allocation is not None and len(allocation.nodes) > 1:
        ranks = per_node * len(allocation.nodes)
        return place(ranks=ranks, ranks_per_node=per_node, launch_agent=launch_agent, environment=environment)
    return None


def _analyse_on_engines(run_path: Path, engines: Any, group_ranks: int) -> Any:
    """The rank groups on ipyparallel engines placed as ``engines`` says, each reading its ranks where it runs."""
    from workbench.cluster import Cluster
    from workbench.rank_groups import analyse_split, engine_workers

    config = engines.config
    where = engines.describe().replace(" ranks by ", " engines by ", 1)
    if engines.kind == "minicluster":
        from workbench import minicluster as mini_module

        config = mini_module.running().cluster_config(engines.ranks)  # Slurm engines, one batch job
        where = f"{engines.ranks} engines on the miniature cluster's nodes ({', '.join(engines.hosts)}), one Slurm job"
    else:  # engines on other hosts reach the controller on this host's address, not its loopback
        config = replace(config, controller_ip="0.0.0.0")
    print(f"workbench analyse: rank groups on {where}", file=sys.stderr)
    with Cluster(config=config) as cluster:
        return analyse_split(run_path, group_ranks=group_ranks, workers=engine_workers(cluster))


#: Memory one event takes in the whole-run analysis (``Run.load`` with string columns, then ``analyse_run``'s
#: tables): 10 M events peaked at 1.29 GB in the load and breakdown alone (``benchmarks/results/
#: analysis-object.json``); the rest of the analysis about doubles it.
BYTES_PER_EVENT_WHOLE_RUN = 300
#: Share of the free memory the whole-run analysis may take before rank groups are chosen instead.
MEMORY_SHARE = 0.6
#: Memory one event of a rank group takes in its worker: 3.1 M events (32 ranks of a 100 M-event, 1 024-rank run)
#: peaked at 0.71 GB a worker (``benchmarks/results/analysis-split-100m.json``).
BYTES_PER_EVENT_IN_GROUP = 250


def whole_run_fits(run_dir: str | Path, *, available: int | None = None) -> tuple[bool, str]:
    """Whether analysing the run in one process fits this machine's free memory, and the line that says why not."""
    fits, line, _workers = _whole_run_plan(run_dir, available=available)
    return fits, line


def split_workers(run_dir: str | Path, *, available: int | None = None, cores: int | None = None) -> int:
    """Local workers for a run analysed in rank groups: one per core, as many as the free memory holds (a worker
    holds one group at a time), at least one."""
    from workbench.rank_groups import stored_ranks
    from workbench.store import stream_rows

    return _workers_for(stream_rows(run_dir, "events"), len(stored_ranks(run_dir)), _free(available), cores)


def _whole_run_plan(run_dir: str | Path, *, available: int | None = None) -> tuple[bool, str, int]:
    """``whole_run_fits``' answer and line, and the workers of the rank groups when it does not fit: the run's
    part-file footers read once."""
    from workbench.rank_groups import stored_ranks
    from workbench.store import stream_rows

    events = stream_rows(run_dir, "events")
    needed = events * BYTES_PER_EVENT_WHOLE_RUN
    free = _free(available)
    if needed <= MEMORY_SHARE * free:
        return True, "", 0
    workers = _workers_for(events, len(stored_ranks(run_dir)), free)
    return False, (
        f"workbench analyse: {events / 1e6:.3g} M events need about {needed / 1e9:.3g} GB in one process and this"
        f" machine has {free / 1e9:.3g} GB free: analysing the run in rank groups on {workers}"
        f" worker{'s' if workers > 1 else ''} (--workers N and --group-ranks R choose)"
    ), workers  # fmt: skip


def _free(available: int | None) -> int:
    import psutil

    return psutil.virtual_memory().available if available is None else available


def _workers_for(events: int, ranks: int, free: int, cores: int | None = None) -> int:
    """One worker per core while ``free`` memory holds a group of ``DEFAULT_GROUP_RANKS`` of the run's ranks each."""
    from workbench.config import physical_cores
    from workbench.rank_groups import DEFAULT_GROUP_RANKS

    ranks = max(1, ranks)
    per_worker = events * min(DEFAULT_GROUP_RANKS, ranks) / ranks * BYTES_PER_EVENT_IN_GROUP
    cores = physical_cores() if cores is None else cores
    held = int(MEMORY_SHARE * free // per_worker) if per_worker else cores
    return max(1, min(cores, held))


def write_analysis_report(path: str | Path, result: RunAnalysis, run: RunData | Path) -> Path:
    """The analysis as one self-contained HTML file: header, POP table, findings, figures, tables.

    ``run``: the loaded run (its timelines and memory samples are drawn), or the run's path for a run analysed
    in rank groups (``rank_groups.SplitAnalysis``): every table is the same, and the two figures that need every
    event or sample at once say how to draw them for the ranks that matter.
    """
    from workbench import figures
    from workbench.report import run_metadata, write_report

    header = result.header
    hosts = header.get("rank_hosts") or {}
    several_hosts = host_count(hosts) > 1
    loaded = run if isinstance(run, RunData) else None
    run_path = loaded.path if loaded is not None else Path(run)

    def per_rank(table: pd.DataFrame) -> pd.DataFrame:  # a host column only says something on several hosts
        return table if several_hosts else table.drop(columns="host", errors="ignore")

    sections: list[tuple[str, Any]] = [("Run", "\n".join(f"- {line.strip()}" for line in format_header(header)))]
    groups = getattr(result, "groups", None)
    if groups is not None:
        sections.append(
            (
                "How it was analysed",
                f"In {groups} rank groups on {result.workers} workers ({result.events:,} events), because the whole"  # type: ignore[attr-defined]
                " run did not fit one process: every table and finding below is the one the whole run gives. Not"
                " drawn here: the timelines and the memory samples over time, which need every event at once;"
                " draw them for the slowest ranks with `Run.load(path, ranks=[...])`.",
            )
        )
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
        if loaded is not None:
            sections.extend(_timeline_sections(loaded, hosts))
    sections.append(("Training steps per rank", per_rank(result.steps)))
    lateness = per_rank(analysis.lateness_summary(result.lateness, hosts))
    if len(lateness):
        sections.append(("Arrival at the allreduce per rank (Horovod's readiness marks)", lateness))
    if len(result.devices):
        sections.append(("GPUs: busy, idle, communication hidden behind compute (seconds)", per_rank(result.devices)))
    if len(result.in_flight):
        sections.append(("Collectives in flight (overlap with the ranks' own work)", per_rank(result.in_flight)))
    if len(result.keras_calls):
        title = "Keras calls per rank (seconds; own_s: Keras's work outside the model)"
        sections.append((title, per_rank(result.keras_calls)))
    if loaded is not None and len(loaded.memory):
        sections.append(("Memory", figures.memory_figure(loaded.memory)))
    sections.append(("Memory per rank (MB)", per_rank(result.memory)))
    title = f"workbench analyse: {header.get('run_id') or run_path.name}"
    case = loaded.meta.get("experiment", {}).get("case") if loaded is not None else None
    metadata = run_metadata([run_path], case=case)
    return write_report(path, title=title, sections=sections, metadata=metadata)


def _timeline_sections(run: RunData, hosts: dict[int, str]) -> list[tuple[str, Any]]:
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
