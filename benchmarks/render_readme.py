"""Measured tables in the docs rendered from saved results, so that a figure and its source cannot disagree.

Each measured table in README.md and docs/*.md sits between two markers::

    <!-- table: NAME -->
    ...generated...
    <!-- /table -->

and is rendered from ``benchmarks/results/NAME.json``, which holds what a command printed with
``--json`` plus the command itself and when it ran (``save`` writes that file). ``--check`` (what
the tests run) fails when a block in any of those files differs from what its JSON renders;
``--write`` rewrites them. A case study's tables are the case's own (``docsbench.cases``: ``CaseDocs.tables``, its prose
``Case.text``), and a case with none gets its headline table and text: a new case needs no code here.

Every saved result is a registered measurement (``docsbench.registry.measurements()``: the benchmarks' and each
case's ``CaseDocs.measurements``); ``measure`` runs them again, saves each and rewrites the tables (what
``benchmarks/measure_readme.sh`` calls), ``list`` prints them::

    python benchmarks/render_readme.py list
    python benchmarks/render_readme.py measure ps-vs-allreduce-reduced      # or no name: all of them
    python benchmarks/render_readme.py --write
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from docsbench.cases.common import case_text
from docsbench.cases.eval_frequency import EVAL_NODE_SWEEPS
from docsbench.cases.pop_scaling import POP_NODE_SWEEPS
from docsbench.cases.ps_vs_allreduce import PS_NODE_SWEEPS
from docsbench.markdown import (
    ReadmeClause,
    SavedResults,
    cell,
    duration,
    fixed,
    number,
    rate_words,
    share,
    signed_share,
    source_line,
    sources_line,
    table,
    times,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- table: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def render_case(saved: Mapping[str, Any]) -> str:
    """Any case study's sweep with no renderer of its own: its headline table as saved, then its own text."""
    records = saved["result"]["headline"]
    header = list(records[0]) if records else []
    align = ["r" if any(isinstance(r.get(c), (int, float)) for r in records) else "l" for c in header]
    rows = [[cell(r.get(c)) for c in header] for r in records]
    return table(header, align, rows) + "\n\n" + case_text(saved) + "\n\n" + source_line(saved)


def render_allreduce(saved: Mapping[str, Any]) -> str:
    """Bus bandwidth per message size, raw MPI beside Horovod."""
    rows = [
        [
            number(r["bytes"]),
            fixed(r["mpi_busbw_gbps"]),
            fixed(r["horovod_busbw_gbps"]),
            fixed(r["horovod_over_mpi"], 2),
            fixed(r["mpi_seconds"] * 1e3, 3),
            fixed(r["horovod_seconds"] * 1e3, 3),
        ]
        for r in saved["result"]
    ]
    header = ["bytes", "MPI busbw GB/s", "Horovod busbw GB/s", "Horovod / MPI", "MPI ms", "Horovod ms"]
    idle = [r["horovod_thread_cores"] for r in saved["result"] if r.get("horovod_thread_cores") is not None]
    thread_line = (
        f"Horovod's background thread, idle beside a busy rank (a convolution step on the rank's one core, "
        f"Horovod stopped vs running, 3 interleaved rounds): it took **{fixed(idle[0], 2)} of a core** per rank."
        "\n\n"
        if idle
        else ""
    )
    return table(header, ["r"] * 6, rows) + "\n\n" + thread_line + source_line(saved)


def render_overhead(saved: Mapping[str, Any]) -> str:
    """Recorded / plain throughput in three clocks, then the recorder's own costs."""
    result = saved["result"]
    clocks = [
        ("wall clock", "overhead_ratio"),
        ("CPU time, process", "cpu_overhead_ratio"),
        ("CPU time, training thread", "thread_cpu_overhead_ratio"),
    ]
    by_totals = "cpu_overhead_median_of_pairs" in result  # results before the estimator changed: medians
    ratios = [
        [name, fixed(result[key]), "–".join(fixed(v) for v in result[key.replace("ratio", "ci")])]
        + ([fixed(result[key.replace("ratio", "median_of_pairs")])] if by_totals else [])
        for name, key in clocks
    ]
    plain = result["steps_per_s_plain"]
    costs = [
        [
            str(r["spans_per_step"]),
            number(r["ns_per_span"]),
            number(r["rows_per_flush"]),
            number(r["ms_per_flush"]),
            number(r["ns_per_row_flushed"]),
            f"{100 * r['cpu_share']:.2g} %",
            fixed(r["cpu_ratio"]),
        ]
        for r in result["recorder_costs"]
    ]
    summary = (
        f"{result['repetitions']} paired blocks of {result['steps']} steps (batch {result['batch']}"
        + (f", TensorFlow on {result['tf_threads']} intra- and inter-op thread" if result.get("tf_threads") else "")
        + f"); plain "
        f"{number(plain)} steps/s, so a step is {number(1e3 / plain)} ms. Hot path (one span and one input wait) "
        f"{number(result['hot_path_ns_per_step'] / 1e3)} µs per step; background thread "
        f"{100 * result['background_cpu_share']:.2g} % of a second; analytic ratio {fixed(result['analytic_ratio'])}."
    )
    low = result["cpu_overhead_ci"][0]
    met = result["cpu_overhead_ratio"] >= 0.99 and low > 0.98
    goal = (
        f"Goal (≥ 0.99 in process CPU time, the interval's low end above 0.98): **{'met' if met else 'not met'}** "
        f"in this run ({fixed(result['cpu_overhead_ratio'])}, low end {fixed(low)})."
    )
    return (
        "\n".join(
            [
                summary,
                "",
                table(
                    ["recorded / plain", "ratio of totals", "95 % interval (bootstrap)", "median of pairs"]
                    if by_totals
                    else ["recorded / plain", "median", "95 % interval"],
                    ["l", "r", "r", "r"] if by_totals else ["l", "r", "r"],
                    ratios,
                ),
                "",
                goal,
                "",
                table(
                    [
                        "spans per step",
                        "ns per span",
                        "rows per flush",
                        "ms per flush",
                        "ns per row flushed",
                        "CPU share",
                        "ratio",
                    ],
                    ["r"] * 7,
                    costs,
                ),
            ]
        )
        + "\n\n"
        + source_line(saved)
    )


def render_analysis(saved: Mapping[str, Any]) -> str:
    """Load + breakdown + POP + findings of 10 M events, categorical and object strings side by side."""
    other = load("analysis-object")
    rows = []
    for one, how in ((saved, "`Run.load(path, categorical=True)`"), (other, "`Run.load(path)` (object strings)")):
        r = one["result"]
        rows.append(
            [
                how,
                number(r["events"]),
                str(r["ranks"]),
                fixed(r["seconds"], 2),
                fixed(r["cpu_seconds"], 2),
                fixed(r["load_seconds"], 2),
                fixed(r["breakdown_seconds"], 2),
                fixed(r["pop_seconds"] + r["findings_seconds"], 2),
                f"{r['peak_rss_mb'] / 1024:.2f} GB",
                fixed(r["parallel_efficiency"]),
            ]
        )
    header = ["strings", "events", "ranks", "seconds", "CPU s", "load", "breakdown", "POP + findings", "peak RSS", "PE"]
    first = saved["result"]
    verdict = (
        f"Goals with categorical strings: ≤ 2 s — **{'met' if first['seconds'] <= 2 else 'not met'}** "
        f"({fixed(first['seconds'], 2)} s); peak ≤ 1.5 GB — **{'met' if first['peak_rss_mb'] <= 1536 else 'not met'}** "
        f"({first['peak_rss_mb'] / 1024:.2f} GB). Findings: {', '.join(first['findings'])}."
    )
    return table(header, ["l"] + ["r"] * 9, rows) + "\n\n" + verdict + "\n\n" + sources_line(saved, other)


#: Issue 36's goal for a 1 024-rank run of 100 M events: seconds and peak memory (GB) on this 2-core machine.
SPLIT_GOAL_S, SPLIT_GOAL_GB = 10.0, 4.0
#: The sizes ``workbench bench analysis --split`` is saved at (measure_readme.sh), smallest first.
SPLIT_SIZES = ("analysis-split-1m", "analysis-split-10m", "analysis-split-30m")


def render_analysis_split(saved: Mapping[str, Any]) -> str:
    """A 1 024-rank job analysed at once and in rank groups (here, or on 2 worker processes), by size."""
    runs = [load(name) for name in SPLIT_SIZES] + [saved]
    label = {
        "whole": "at once",
        "split-0": "rank groups, in the process",
        "split-2": "rank groups, 2 workers",
        "minicluster-nodes": "rank groups, 4 nodes' engines",
    }
    rows = []
    for one in runs:
        r = one["result"]
        same = {True: "same", False: "DIFFER"}.get(r.get("same_numbers"), "not checked")
        for mode, m in r["modes"].items():
            how = label.get(mode, mode)
            if "killed" in m:
                rows.append([number(r["events"]), number(r["ranks"]), how, "killed", m["killed"], "", "", "", ""])
                continue
            latest = m.get("latest_hosts", [])[: len(r["slow_hosts"])]
            found = "all" if latest and set(latest) == set(r["slow_hosts"]) else ", ".join(latest) or "not reported"
            workers = m.get("worker_peak_rss_mb") or []
            rows.append(
                [
                    number(r["events"]),
                    number(r["ranks"]),
                    how,
                    fixed(m["seconds"], 2),
                    f"{m['peak_rss_mb'] / 1024:.2f} GB",
                    f"{max(workers) / 1024:.2f} GB" if workers else "",
                    fixed(m["parallel_efficiency"]),
                    found,
                    same,
                ]
            )
    header = [
        "events", "ranks", "analysed", "seconds", "peak memory", "a worker's peak", "PE", "slow nodes named latest",
        "numbers",
    ]  # fmt: skip
    big = saved["result"]
    best = big["modes"].get("split-2") or next(iter(big["modes"].values()))
    seconds, gb = best.get("seconds"), best.get("peak_rss_mb", float("nan")) / 1024
    pays = [
        number(one["result"]["events"])
        for one in runs
        if {"whole", "split-2"} <= set(one["result"]["modes"])
        and "killed" not in one["result"]["modes"]["whole"]
        and one["result"]["modes"]["split-2"]["seconds"] < one["result"]["modes"]["whole"]["seconds"]
    ]
    verdict = (
        f"Goals at {number(big['events'])} events on {number(big['ranks'])} ranks (2 workers): ≤ {SPLIT_GOAL_S:g} s —"
        f" **{'met' if seconds is not None and seconds <= SPLIT_GOAL_S else 'not met'}** ({fixed(seconds, 2)} s);"
        f" peak ≤ {SPLIT_GOAL_GB:g} GB — **{'met' if gb <= SPLIT_GOAL_GB else 'not met'}** ({gb:.2f} GB)."
        + (f" Splitting is faster than one process from {pays[0]} events." if pays else "")
    )
    aligned = ["r", "r", "l", "r", "r", "r", "r", "l", "l"]
    return table(header, aligned, rows) + "\n\n" + verdict + "\n\n" + sources_line(*runs)


def render_analysis_split_1b(saved: Mapping[str, Any]) -> str:
    """The 1 B-event, 4 096-rank run in rank groups, with how time and memory grew from 10 M events."""
    r = saved["result"]
    label = {"split-2": "rank groups, 2 workers here", "minicluster-nodes": "rank groups, 4 nodes' engines"}
    steps = r["events"] / r["ranks"] / (3 + r["shape"]["allreduce_parts"])
    rows = []
    for mode, m in r["modes"].items():
        if "killed" in m:
            rows.append([label.get(mode, mode), "killed", m["killed"], "", "", "", ""])
            continue
        rounds = m.get("rounds", {})
        latest = m.get("latest_hosts", [])[: len(r["slow_hosts"])]
        rows.append(
            [
                label.get(mode, mode),
                fixed(m["seconds"], 0),
                " / ".join(f"{rounds[k]:.0f}" for k in ("open", "lanes", "merge") if k in rounds),
                f"{m['parent_peak_rss_mb'] / 1024:.2f} GB",
                f"{max(m.get('worker_peak_rss_mb') or [0]) / 1024:.2f} GB",
                "all" if latest and set(latest) == set(r["slow_hosts"]) else ", ".join(latest) or "not reported",
                m.get("numbers", ""),
            ]
        )
    header = ["analysed", "seconds", "open / lanes / merge (s)", "caller's peak", "a worker's peak", "slow nodes",
              "numbers"]  # fmt: skip
    body = table(header, ["l", "r", "r", "r", "r", "l", "l"], rows)
    ten = load("analysis-split-10m")["result"]["modes"].get("split-2", {})
    big = r["modes"].get("split-2", {})
    growth = ""
    if ten and big and "seconds" in big:
        per_event = (big["seconds"] / r["events"]) / (ten["seconds"] / 10_000_000)
        growth = (
            f" From 10 M events (1 024 ranks, 5 events a step: 2 M rank-steps) to 1 B (4 096 ranks, "
            f"{r['shape']['allreduce_parts']} transfers a step: {r['ranks'] * steps / 1e6:.1f} M rank-steps) on 2"
            f" workers: seconds per event x{per_event:.2g}, a worker's peak"
            f" {max(ten['worker_peak_rss_mb']) / 1024:.2f} -> {max(big['worker_peak_rss_mb']) / 1024:.2f} GB, the"
            f" caller's {ten['parent_peak_rss_mb'] / 1024:.2f} -> {big['parent_peak_rss_mb'] / 1024:.2f} GB."
        )
    same = "the same on both paths" if r.get("same_numbers") else "NOT the same on both paths"
    verdict = (
        f"{number(r['events'])} events on {number(r['ranks'])} ranks, about {number(round(steps))} steps a rank,"
        f" written in {r['write_seconds']:.0f} s ({r['group_ranks']} ranks a group): tables and findings"
        f" {same}.{growth}"
    )
    return body + "\n\n" + verdict + "\n\n" + source_line(saved)


def render_fuzz(saved: Mapping[str, Any]) -> str:
    """Damaged traces of every format: outcomes by kind, the slowest case, the peak memory."""
    r = saved["result"]
    rows = [
        [name, str(sum(c.values())), str(c.get("imported", 0)), str(c.get("refused", 0)), str(c.get("bad", 0))]
        for name, c in r["outcomes"].items()
    ]
    slow = r["slowest"]
    text = (
        f"{number(r['cases'])} damaged files, {r['per_seed']} from each of {len(r['seeds'])} good ones"
        f" ({', '.join(f'`{s}`' for s in r['seeds'])}), in {r['seconds']:.0f} s: the slowest case took"
        f" {slow['seconds']:.2f} s ({slow.get('seed')} #{slow.get('case')}: {slow.get('damage')}), the process's peak"
        f" memory was {r['peak_rss_mb']:.0f} MB. "
        + ("No bad outcome." if not r["bad"] else f"**{len(r['bad'])} bad outcomes** (see the JSON).")
    )
    header = ["format", "cases", "imported, damage said", "refused in one line", "bad"]
    return table(header, ["l", "r", "r", "r", "r"], rows) + "\n\n" + text + "\n\n" + source_line(saved)


MIDRUN_FAULTS = {
    "link_down": "node3's link down",
    "slowed_link": "node3's link at 100 Mbit/s",
    "disk_full": "the run folder's disk full",
}


def render_midrun_faults(saved: Mapping[str, Any]) -> str:
    """Faults mid-run on the miniature cluster: how soon each was named, whether the run kept every step, what
    the analysis said; then what the heartbeat's reading of the connections costs."""
    r = saved["result"]
    rows = []
    for fault in r["faults"]:
        detected = fault["detected"]
        rows.append(
            [
                f"{MIDRUN_FAULTS.get(fault['fault'], fault['fault'])} for {fault['held_s']:g} s",
                f"{detected['seconds']:.1f} s" if detected else "not named",
                "yes" if fault["finished"] else f"no ({fault['error']})",
                "yes" if fault["every_step_recorded"] else "no",
                fault["finding"] or "none",
            ]
        )
    costs = r["probe"]["cpu_s_per_sample"]
    probe = ", ".join(f"{number(float(cost) * 1e6)} µs with {count}" for count, cost in costs.items())
    text = (
        f"{r['nodes']} nodes of {r['cpus_per_node']:g} core with {r['link']} links, a rank each, {number(r['steps'])}"
        " steps of compute then a 1 MB allreduce, watched as a notebook's run is (`Cluster.watch`, every 0.5 s;"
        " network and disk every 2 s). Named: the first network alert in `run.json`, or the watch's line that the"
        f" disk is full. The heartbeat's reading of a rank's TCP connections costs {probe} connections open (CPU"
        " per reading, once a second)."
    )
    header = ["fault mid-run", "named after", "run finished", "every step recorded", "the analysis afterwards"]
    return table(header, ["l", "r", "l", "l", "l"], rows) + "\n\n" + text + "\n\n" + source_line(saved)


PEERS_GOALS = {"points": 1.0, "speedup": 5.0, "memory": 1 / 3}


def render_peers(saved: Mapping[str, Any]) -> str:
    """The workbench beside HTA on the same Kineto traces: the largest difference of their numbers, the launch
    statistics, the costs; then the goals on the large made sets and the 100 M-event analysis of the same run."""
    rows = []
    for result in saved["result"]["sets"]:
        hta, ours = result["hta"], result["ours"]
        hta_s, ours_s = hta["load_s"] + hta["analysis_s"], ours["load_s"] + ours["analysis_s"]
        launches = result.get("launch_numbers_equal")
        rows.append(
            [
                result["traces"],
                str(len(result["ranks"])),
                f"{result['max_diff_points']:.2f}",
                "–" if launches is None else "equal" if launches else "differ",
                fixed(hta_s, 2),
                fixed(ours_s, 2),
                f"**{result['speedup']:.1f}×**",
                number(hta["peak_mb"]),
                number(ours["peak_mb"]),
                f"{result['memory_ratio']:.2f}×",
                _groups_cell(result.get("groups")),
            ]
        )
    header = [
        "traces", "ranks", "largest difference (points)", "launch statistics", "HTA s", "workbench s", "faster",
        "HTA MB", "workbench MB", "memory", "in rank groups: difference, s, MB",
    ]  # fmt: skip
    text = table(header, ["l"] + ["r"] * 10, rows)
    text += (
        "\n\n*In rank groups*: the traces imported into a run and analysed whole in rank groups (a rank a group, 2"
        " workers), as a large run is: HTA's four shares from the analysis's `gpu_time` table, import and analysis"
        " timed together."
    )
    made = [r for r in saved["result"]["sets"] if r["traces"].startswith("made")]
    if made:
        points = max(r["max_diff_points"] for r in saved["result"]["sets"])
        speedup = min(r["speedup"] for r in made)
        memory = max(r["memory_ratio"] for r in made)
        verdict = [
            f"same numbers within {PEERS_GOALS['points']:g} point — **{_met(points <= PEERS_GOALS['points'])}**"
            f" ({points:.2f})",
            f"≥ {PEERS_GOALS['speedup']:g}× faster — **{_met(speedup >= PEERS_GOALS['speedup'])}** ({speedup:.1f}×)",
            f"≤ ⅓ of HTA's memory — **{_met(memory <= PEERS_GOALS['memory'])}** ({memory:.2f}×)",
        ]
        scale = saved["result"].get("scale")
        if scale:
            fits = scale["seconds"] <= SPLIT_GOAL_S and scale["peak_mb"] / 1000 <= SPLIT_GOAL_GB
            verdict.append(
                f"the workbench's analysis of {number(scale['events'])} events in {number(scale['ranks'])} ranks in"
                f" the same run ≤ {SPLIT_GOAL_S:g} s and {SPLIT_GOAL_GB:g} GB — **{_met(fits)}**"
                f" ({scale['seconds']:.1f} s, {scale['peak_mb'] / 1000:.2f} GB)"
            )
        text += "\n\nGoals on the made sets: " + "; ".join(verdict) + "."
    return text + "\n\n" + source_line(saved)


def _groups_cell(groups: Mapping[str, Any] | None) -> str:
    if not groups:
        return "not measured"
    diff = groups.get("max_diff_points")
    points = "–" if diff is None else f"{diff:.2f}"
    return f"{points}, {fixed(groups['load_s'] + groups['analysis_s'], 2)}, {number(groups['peak_mb'])}"


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def render_timeline(saved: Mapping[str, Any]) -> str:
    """One import of a synthetic Horovod timeline per engine: speed and memory."""
    r = saved["result"]
    engines = r.get("engines", {"auto": r})
    label = {"auto": "direct (default)", "arrow": "Arrow JSON reader"}
    rows = [
        [
            label.get(engine, engine),
            number(e["file_mb"]),
            number(e["events"]),
            fixed(e["seconds"], 2),
            f"**{number(e['mb_per_s'])}**" if engine == "auto" else number(e["mb_per_s"]),
            f"{e['peak_rss_mb'] / 1024:.2f} GB",
            f"{fixed(e['peak_over_file'], 2)}×",
            number(e["import_rss_mb"]),
        ]
        for engine, e in engines.items()
    ]
    header = ["parse", "file MB", "events", "seconds", "MB/s", "peak RSS", "peak / file", "MB for the import itself"]
    return table(header, ["l"] + ["r"] * 7, rows) + "\n\n" + source_line(saved)


def render_timeline_stream(saved: Mapping[str, Any]) -> str:
    """A GB-sized Horovod timeline imported into a run batch by batch: speed and memory against the goals.

    With many ranks (``--ranks``), also every rank's readiness and lateness read back from the run.
    """
    r = saved["result"]
    goal = r["goal"]
    row = [
        number(r["file_mb"]),
        number(r.get("ranks", 2)),
        number(r["events"]),
        fixed(r["seconds"], 1),
        number(r["mb_per_s"]),
        f"{r['peak_rss_mb']:.0f} MB",
        f"{r['import_rss_mb']:.0f} MB",
        number(r["store_files"]),
    ]
    header = ["file MB", "ranks", "events", "seconds", "MB/s", "peak RSS", "MB for the import itself"]
    header.append("files in the run")
    met = {
        "memory": r["peak_rss_mb"] <= goal["peak_rss_mb"],
        "speed": r["mb_per_s"] >= goal["mb_per_s"],
    }
    verdict = (
        f"Goals: peak ≤ {number(goal['peak_rss_mb'])} MB — **{'met' if met['memory'] else 'not met'}**;"
        f" ≥ {number(goal['mb_per_s'])} MB/s — **{'met' if met['speed'] else 'not met'}**."
    )
    text = table(header, ["r"] * 8, [row]) + "\n\n" + verdict
    late = r.get("lateness")
    if late:
        latest = zip(late["latest_ranks"], late["latest_median_lateness_us"])
        found = ", ".join(f"rank {rank} ({fixed(us, 0)} µs)" for rank, us in latest)
        text += (
            f"\n\nEvery rank's readiness and lateness read back from the run (`analyse_split`, rank groups of 32 on"
            f" 2 workers): {number(late['ranks_with_lateness'])} ranks over {number(late['steps'])} steps,"
            f" {number(late['events'])} events, in {fixed(late['seconds'], 2)} s and"
            f" {fixed(late['peak_rss_mb'] / 1000, 2)} GB (the sum of the processes' peaks). Latest by median lateness:"
            f" {found}; the timeline made ranks {', '.join(str(x) for x in late['late_ranks'])}"
            f" {number(late['made_late_us'])} µs late — **{'found' if late['latest_found'] else 'not found'}**."
        )
    return text + "\n\n" + source_line(saved)


def render_export(saved: Mapping[str, Any]) -> str:
    """``workbench export`` of a large synthetic run, plain and gzipped: speed, size, memory."""
    r = saved["result"]
    label = {"json": "`trace.json`", "gzip": "`trace.json.gz` (level 1)"}
    rows = [
        [
            label.get(kind, kind),
            number(r["events"]),
            str(r["ranks"]),
            fixed(e["seconds"], 2),
            number(e["spans_per_s"]),
            number(e["file_mb"]),
            number(e["mb_per_s"]),
            f"{e['peak_rss_mb']:.0f} MB",
            f"{e['import_rss_mb']:.0f} MB",
        ]
        for kind, e in r["exports"].items()
    ]
    header = ["file", "spans", "ranks", "seconds", "spans/s", "file MB", "MB/s", "peak RSS", "MB for the export itself"]
    plain = r["exports"]["json"]
    verdict = (
        f"The run on disk: {number(r['store_mb'])} MB of Parquet, largest part {r['largest_part_mb']:.3g} MB."
        f" Goal: bounded memory — **{'met' if plain['import_rss_mb'] <= 256 else 'not met'}**"
        f" ({plain['import_rss_mb']:.0f} MB for a {number(plain['file_mb'])} MB file)."
    )
    return table(header, ["l"] + ["r"] * 8, rows) + "\n\n" + verdict + "\n\n" + source_line(saved)


def render_late_attach(saved: Mapping[str, Any]) -> str:
    """A dashboard opened late on a long 64-rank job: files, first refresh, ``Run.load``, merged or not."""
    r = saved["result"]
    rows = [
        [
            f"{number(row['minutes'])} min",
            "merged (fanout 8)" if row["merge_fanout"] else "not merged",
            number(row["files"]),
            number(row["rows"]),
            fixed(row["first_refresh_s"], 2),
            fixed(row["run_load_s"], 2),
            fixed(row["write_s"], 1),
        ]
        for row in r["rows"]
    ]
    header = ["job", "writers", "part files", "spans", "first refresh s", "Run.load s", "writing s (simulated job)"]
    merged = [row for row in r["rows"] if row["merge_fanout"]]
    longest = max(merged, key=lambda row: row["minutes"]) if merged else None
    verdict = (
        f"Goal: a late dashboard starts in ≤ {r['goal_s']:g} s — at {number(longest['minutes'])} minutes"
        f" **{'met' if longest['first_refresh_s'] <= r['goal_s'] else 'not met'}**"
        f" ({fixed(longest['first_refresh_s'], 2)} s)."
        if longest
        else ""
    )
    return table(header, ["l", "l"] + ["r"] * 5, rows) + "\n\n" + verdict + "\n\n" + source_line(saved)


#: The live view's goal at 1 024 ranks (issue 36): a refresh (poll + redraw) within a second.
LIVE_REFRESH_GOAL_S = 1.0


def render_live(saved: Mapping[str, Any]) -> str:
    """The dashboard following a synthetic job (64 or 1 024 ranks): refresh time, marker latency, decimation."""
    r = saved["result"]
    hosts = f" on {number(r['ranks'] // r['ranks_per_host'])} hosts" if r.get("ranks_per_host") else ""
    rows = [
        [
            "job",
            f"{number(r['ranks'])} ranks{hosts}, steps of {fixed(r['step_s'], 2)} s (3 spans each), a flush every"
            f" {fixed(r.get('flush_s', 0.5), 1)} s per rank ({r.get('feed_processes', 1)} writer process(es))",
        ],
        [
            "followed for",
            f"{number(r['seconds'])} s: {number(r['spans_at_end'])} spans ({number(r['spans_per_s'])} spans/s)",
        ],
        ["bars drawn at the end", number(r["drawn_at_end"])],
        *(
            [
                [
                    "what is drawn",
                    f"the rank × time heatmap of all {number(r['ranks'])} ranks; the timeline of"
                    f" {len(r['timeline_ranks'])}, the slowest"
                    + (
                        f" ({r['slow_host_ranks_on_timeline']} of the slow host's {r['ranks_per_host']} among them)"
                        if r.get("slow_host_ranks_on_timeline") is not None
                        else ""
                    ),
                ]
            ]
            if r.get("heatmap")
            else []
        ),
        [
            "refresh (poll + redraw), median / p95 / max",
            f"**{fixed(r['refresh_median_s'], 2)}** / {fixed(r['refresh_p95_s'], 2)} / {fixed(r['refresh_max_s'], 2)} s"
            f" (poll {fixed(r['poll_median_s'], 3)} s, redraw {fixed(r['redraw_median_s'], 2)} s;"
            f" last {fixed(r['last_refresh_s'], 2)} s)",
        ],
        # past 64 ranks the timeline shows the slowest, so most markers are on ranks it does not draw
        *(
            []
            if r.get("heatmap")
            else [
                [
                    "marker span's end → drawn in the widget, median / max",
                    f"**{fixed(r['marker_latency_median_s'], 2)}** / {fixed(r['marker_latency_max_s'], 2)} s"
                    f" ({r['markers_drawn']} of {r['markers']} markers)",
                ]
            ]
        ),
        [
            "timeline ranks whose longest span is a bar of its own",
            f"{r['ranks_with_longest_span_drawn']} of {len(r.get('timeline_ranks') or range(r['ranks']))}",
        ],
    ]
    verdict = ""
    if r["ranks"] >= 1024:
        met = r["refresh_median_s"] <= LIVE_REFRESH_GOAL_S
        verdict = (
            f"Goal: a refresh ≤ {LIVE_REFRESH_GOAL_S:g} s with {number(r['ranks'])} ranks writing —"
            f" **{'met' if met else 'not met'}** at the median ({fixed(r['refresh_median_s'], 2)} s;"
            f" p95 {fixed(r['refresh_p95_s'], 2)} s).\n\n"
        )
    return table(["measure", "value"], ["l", "l"], rows) + "\n\n" + verdict + source_line(saved)


#: The processes whose CPU the dashboard-cost benchmark reads (its JSON keys ``<name>_cpu_per_s``).
PROCESSES = ("kernel", "server", "browser")


def dashboard_cores(result: Mapping[str, Any], name: str) -> float:
    """Cores one process (``PROCESSES``) spends on the dashboard: its CPU per second live minus headless."""
    return result["live"][f"{name}_cpu_per_s"] - result["headless"][f"{name}_cpu_per_s"]


def render_dashboard_cost(saved: Mapping[str, Any]) -> str:
    """The live dashboard's CPU (kernel, Jupyter server, Chromium) and the live point against headless."""
    r = saved["result"]
    live, headless = r["live"], r["headless"]

    def cores(name: str) -> list[str]:
        extra = dashboard_cores(r, name)
        return [fixed(headless[f"{name}_cpu_per_s"], 3), fixed(live[f"{name}_cpu_per_s"], 3), f"**{fixed(extra, 3)}**"]

    rows = [
        ["notebook kernel", *cores("kernel")],
        ["Jupyter server", *cores("server")],
        ["Chromium (every process)", *cores("browser")],
    ]
    walls = (
        " / ".join(fixed(w, 2) for w in live["walls_s"])
        + " s live; "
        + " / ".join(fixed(w, 2) for w in headless["walls_s"])
    )
    refresh_new, refresh_idle = r["refresh_with_new_events"], r["refresh_without_new_events"]
    lines = [
        table(["CPU s per s of the point", "headless", "live", "the dashboard's"], ["l", "r", "r", "r"], rows),
        "",
        f"- The point on {r['ranks']} ranks ({r['preset']} preset, {r['repetitions']} repetitions each way,"
        " alternating):"
        f" **{fixed(r['slowdown_live_over_headless'], 3)}x** the headless wall time with the dashboard live"
        f" (medians; {walls} s headless).",
        f"- A refresh that brought new events: {fixed(refresh_new['median_ms'], 1)} ms in the kernel (median of"
        f" {refresh_new['count']}); one that brought none: {fixed(refresh_idle['median_ms'], 2)} ms (median of"
        f" {refresh_idle['count']}).",
    ]
    return "\n".join(lines) + "\n\n" + source_line(saved)


def render_redraw(saved: Mapping[str, Any]) -> str:
    """Timeline figure build and widget update, decimated and not; a dashboard's first and steady refresh."""
    r = saved["result"]
    first, steady = r["dashboard_first_update"], r["dashboard_refresh"]
    rows = [
        [
            f"timeline figure, {number(r['spans'])} spans decimated to {number(r['drawn_spans'])} bars",
            f"{fixed(r['build_seconds'])} s build, {fixed(r['update_seconds'])} s widget update "
            f"({number(r['update_payload_bytes'] / 1e3)} kB sent)",
        ],
        [
            "the same with every bar (no decimation)",
            f"{fixed(r['build_seconds_all_80k_bars'])} s build, {fixed(r['update_seconds_all_80k_bars'])} s update "
            f"({number(r['update_payload_bytes_all_80k_bars'] / 1e6)} MB sent); WebGL scatter "
            f"{fixed(r['build_seconds_all_80k_scattergl'])} s build",
        ],
        [
            "dashboard: first update with every span / a steady refresh (poll + redraw)",
            f"{fixed(first['poll_s'])} + {fixed(first['redraw_s'])} s / "
            f"{fixed(steady['poll_s'])} + {fixed(steady['redraw_s'])} s",
        ],
    ]
    return table(["measure", "value"], ["l", "l"], rows) + "\n\n" + source_line(saved)


def render_browser(saved: Mapping[str, Any]) -> str:
    """What the JupyterLab + headless Chromium test measured: latency, first figure, a big redraw."""
    r = saved["result"]
    latency, redraw = r["event_to_screen_ms"], r["redraw_80k_spans"]
    rows = [
        [
            f"event on a rank → its span on screen, median of {len(latency['all'])}",
            f"**{number(latency['median'])} ms** (runs: {number(latency['min'])}–{number(latency['max'])} ms; "
            "includes the 0.5 s flush and 0.5 s refresh)",
        ],
        [
            "dashboard cell start → its first figure on screen",
            f"**{fixed(r['first_figure']['after_cell_start_s'], 2)} s**",
        ],
        [
            f"redraw of {number(redraw['spans'])} spans ({number(redraw['bars_drawn'])} bars): kernel update / "
            "first plotly draw / settled",
            f"{fixed(redraw['kernel_update_s'], 2)} / {fixed(redraw['first_afterplot_with_bars_s'], 2)} / "
            f"{fixed(redraw['settled_s'], 2)} s",
        ],
        ["first event → first bars on screen", f"{fixed(r['first_event_to_first_bars_s'], 2)} s"],
    ]
    live = r.get("live_64_ranks")
    if live:
        rows.append(
            [
                f"64 ranks live ({number(live['spans'])} spans): marker → on screen, median / max of"
                f" {live['markers']}; kernel refresh median / max",
                f"**{number(live['event_to_screen_median_ms'])} ms** / {number(live['event_to_screen_max_ms'])} ms;"
                f" {fixed(live['kernel_refresh_median_s'], 2)} / {fixed(live['kernel_refresh_max_s'], 2)} s",
            ]
        )
    live = r.get("live_1024_ranks")
    if live:
        rows.append(
            [
                f"1 024 ranks live on 128 hosts ({number(live['events'])} spans, {live['refreshes']} refreshes with"
                " events): refresh start → heatmap on screen, median / max; kernel refresh median / max",
                f"**{number(live['refresh_to_screen_median_ms'])} ms** / {number(live['refresh_to_screen_max_ms'])}"
                f" ms; {fixed(live['kernel_refresh_median_s'], 2)} / {fixed(live['kernel_refresh_max_s'], 2)} s",
            ]
        )
    return table(["measure (" + r["browser"] + ")", "value"], ["l", "l"], rows) + "\n\n" + source_line(saved)


def render_report_open(saved: Mapping[str, Any]) -> str:
    """Each case study's HTML report opened in headless Chromium: size, first screen drawn, every figure."""
    r = saved["result"]
    rows = [
        [
            f"`{row['report']}`",
            f"{fixed(row['mb'], 2)} MB",
            str(row["figures"]),
            f"{fixed(row['text_s'], 2)} s",
            f"**{fixed(row['open_s'], 2)} s** (max {fixed(row['open_max_s'], 2)})",
            f"{fixed(row['all_drawn_s'], 2)} s",
        ]
        for row in r["reports"]
    ]
    header = ["report", "size", "figures", "text and tables shown", "first screen drawn", "every figure (scrolled)"]
    return table(header, ["l", "r", "r", "r", "r", "r"], rows) + "\n\n" + source_line(saved)


def render_projection(saved: Mapping[str, Any]) -> str:
    """The projection checked against the saved sweeps, then the published studies' published figures beside
    the model."""
    result = saved["result"]

    def cores(value: str | None) -> str:
        return "same" if value in (None, "same") else value.replace("->", "→") + " threads"

    checked = [
        [
            r["case"],
            r["point"],
            cores(r.get("cores")),
            str(r.get("repetitions", 1)),
            duration(r["measured_s"]),
            share(r["measured_spread"]) if r.get("repetitions", 1) > 1 else "–",
            duration(r["predicted_s"]),
            signed_share(r["error"]),
        ]
        for r in result["validation"]
    ]  # fmt: skip

    def line(title: str, strict: Mapping[str, Any], calibrated: Mapping[str, Any] | None) -> str:
        text = (
            f"{title}: median |error| **{share(strict['median_error'])}**, max **{share(strict['max_error'])}** "
            f"over {strict['runs']} points ({strict['within_5_percent']} within 5 %, "
            f"{strict['within_10_percent']} within 10 %)"
        )
        if calibrated and calibrated.get("median_error") is not None:
            text += (
                f"; with `thread_scaling` fitted on the other points (leave one out, `error_calibrated`): median "
                f"{share(calibrated['median_error'])}, max {share(calibrated['max_error'])}"
            )
        return text + "."

    lines = [line("Same cores per rank (the goal), medians of the repetitions", result, result.get("calibrated"))]
    if (single := result.get("single_repetitions")) and single.get("median_error") is not None:
        lines.append(
            f"Same cores, each repetition predicted alone (one run against one run): median |error| "
            f"{share(single['median_error'])}, max {share(single['max_error'])} over {single['runs']} runs "
            f"({single['within_10_percent']} within 10 %)."
        )
    if (shared := result.get("shared_cores")) and shared["strict"].get("median_error") is not None:
        lines.append(line("Cores shared out (2 → 1 threads per rank)", shared["strict"], shared["calibrated"]))
    lines.append(
        "By case: "
        + "; ".join(
            f"{case} median {share(parts['strict']['median_error'])}, max {share(parts['strict']['max_error'])}"
            for case, parts in result["by_case"].items()
        )
        + f". Network: {result['network']}."
    )
    summary = "\n\n".join(lines)
    seed_000 = [
        [
            r["backend"],
            str(r["ranks"]),
            times(r["seed_speedup"]),
            f"**{times(r['projected_speedup'])}**",
            share(r["evaluation_share_before"]),
            share(r["seed_evaluation_share"]),
        ]
        for r in result["seed_000"]
    ]
    return (
        "\n".join(
            [
                table(
                    [
                        "case",
                        "point (2 ranks)",
                        "cores per rank",
                        "runs",
                        "measured",
                        "spread",
                        "predicted",
                        "error",
                    ],
                    ["l", "l", "l", "r", "r", "r", "r", "r"],
                    checked,
                ),
                "",
                summary,
                "",
                "The eval-frequency study (000), evaluating every 30 epochs instead of every epoch (from this "
                "machine's 1-rank run):",
                "",
                table(
                    ["backend", "ranks", "seed", "model", "evaluation share (model)", "evaluation share (seed)"],
                    ["l", "r", "r", "r", "r", "r"],
                    seed_000,
                ),
            ]
        )
        + "\n\n"
        + source_line(saved)
    )


def case_and_nodes(name: str) -> str:
    """``eval-frequency, 8 nodes: 0.2 core, 1gbit per node`` -> ``eval-frequency on 0.2 core, 1gbit per node``."""
    case, _, cluster = name.partition(", ")
    return f"{case} on {cluster.split(': ', 1)[-1]}"


def render_projection_nodes(saved: Mapping[str, Any]) -> str:
    """Sweeps on a miniature cluster's nodes: each count's medians beside the prediction from its 1-node run."""
    result = saved["result"]
    # a rank's compute per step in the predicted run over its 1-node run's (results saved before 2026-11-27 lack it)
    growth = any("compute_growth" in r for r in result["validation"])
    rows = [
        [
            r["case"],
            r["cluster"].split(": ", 1)[-1],
            r["point"].split("/", 1)[-1],
            str(r["ranks"]),
            str(r["repetitions"]),
            duration(r["measured_s"]),
            share(r["measured_spread"]) if r["repetitions"] > 1 else "–",
            duration(r["predicted_s"]),
            signed_share(r["error"]),
            r["limiter"],
            times(r.get("host_slowdown")),
            signed_share(r.get("error_at_host_speed")),
            *([times(r.get("compute_growth")) or "–"] if growth else []),
        ]
        for r in sorted(
            result["validation"], key=lambda r: (r["case"], r["cluster"], r["point"].split("/", 1)[1], r["ranks"])
        )
    ]
    single = result["single_repetitions"]
    at_speed, alone = result.get("at_host_speed") or {}, result.get("single_repetitions_at_host_speed") or {}
    speed_line = (
        f"At the host's measured speed (its drift between each 1-node run and the run it predicts divided out):"
        f" median |error| **{share(at_speed['median_error'])}**, max **{share(at_speed['max_error'])}** over"
        f" {at_speed['runs']} points ({at_speed['within_5_percent']} within 5 %, {at_speed['within_10_percent']}"
        f" within 10 %); each repetition alone: median {share(alone['median_error'])}, max"
        f" {share(alone['max_error'])} over {alone['runs']} runs. By case and link: "
        + "; ".join(
            f"{case_and_nodes(name)} median {share(part['at_host_speed']['median_error'])}, max"
            f" {share(part['at_host_speed']['max_error'])}"
            for name, part in result["by_cluster"].items()
            if (part.get("at_host_speed") or {}).get("median_error") is not None
        )
        + "."
        if at_speed.get("median_error") is not None
        else "The host's speed was not sampled during these sweeps (no host-speed.txt beside them)."
    )
    lines = [
        table(
            [
                "case",
                "nodes' share and link",
                "point",
                "nodes",
                "runs",
                "measured",
                "spread",
                "predicted",
                "error",
                "limit",
                "host slower",
                "error at host speed",
                *(["compute per step vs 1 node"] if growth else []),
            ],
            ["l", "l", "l", "r", "r", "r", "r", "r", "r", "l", "r", "r", *(["r"] if growth else [])],
            rows,
        ),
        "",
        f"Across nodes, medians of the repetitions: median |error| **{share(result['median_error'])}**, max"
        f" **{share(result['max_error'])}** over {result['runs']} points ({result['within_5_percent']} within 5 %,"
        f" {result['within_10_percent']} within 10 %); each repetition predicted alone: median"
        f" {share(single['median_error'])}, max {share(single['max_error'])} over {single['runs']} runs."
        " By case and link: "
        + "; ".join(
            f"{case_and_nodes(name)} median {share(part['strict']['median_error'])}, max"
            f" {share(part['strict']['max_error'])}"
            for name, part in result["by_cluster"].items()
        )
        + ".",
        "",
        *noise_floor_lines(result.get("noise_floor") or {}),
        speed_line,
        "",
        *step_split_table(result["validation"]),
        source_line(saved),
    ]
    return "\n".join(lines)


def noise_floor_lines(floor: Mapping[str, Any]) -> list[str]:
    """What an exact model would score on the same repetitions (results saved before 2026-11-27 lack it: [])."""
    if not floor.get("points"):
        return []
    more = floor.get("max_error_by_repetitions") or {}
    return [
        f"An exact model on these repetitions (the points' scatter alone: each case and link's spread of the"
        f" measured runs and of the predictions from their 1-node runs, drawn again in simulated sets): median"
        f" |error| {share(floor['median_error'])}, max {share(floor['max_error'])} (95th percentile"
        f" {share(floor['max_error_p95'])}); its max was within 10 % in {share(floor['within_10_percent_max'])} of"
        " the sets."
        + (
            " With more repetitions a point its max would be "
            + ", ".join(f"{share(value)} ({count})" for count, value in more.items() if value is not None)
            + "."
            if more
            else ""
        ),
        "",
    ]


def correlation(value: float | None) -> str:
    """A correlation with 2 decimals (``0.27``, ``−0.05``); – where there is none."""
    if value is None or not math.isfinite(value):
        return "–"
    return "0.00" if round(value, 2) == 0 else f"{value:.2f}".replace("-", "−")


def step_split_table(validation: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where a step went at each point whose ranks met in a collective, measured beside the model (results
    saved before 2026-11-27 lack it: nothing)."""
    found = [r for r in validation if r.get("measured_step_split") and r.get("predicted_step_split")]
    if not found:
        return []

    def pair(r: Mapping[str, Any], name: str) -> str:
        measured, predicted = r["measured_step_split"][name], r["predicted_step_split"][name]
        return f"{number(measured * 1e3)} / {number(predicted * 1e3)}"

    rows = [
        [
            r["case"],
            r["cluster"].split(": ", 1)[-1],
            r["point"].split("/", 1)[-1],
            str(r["ranks"]),
            pair(r, "between_s"),
            pair(r, "wait_s"),
            pair(r, "collective_s"),
            correlation(r["measured_step_split"].get("correlation")),
        ]
        for r in sorted(found, key=lambda r: (r["case"], r["cluster"], r["point"].split("/", 1)[1], r["ranks"]))
    ]
    return [
        "Where a training step's time went at each point, measured / as the model has it (means over the steps,"
        " medians over the repetitions): the ranks' time between collectives, the wait for the last rank to"
        " arrive, and the collective after it (the last arrival's own; `analysis.collective_split`); and how the"
        " ranks' times between collectives varied together step by step (`analysis.step_correlation`, the mean"
        " over pairs of ranks; the model draws them independently).",
        "",
        table(
            [
                "case",
                "nodes' share and link",
                "point",
                "nodes",
                "between (ms)",
                "wait (ms)",
                "collective (ms)",
                "step correlation",
            ],
            ["l", "l", "l", "r", "r", "r", "r", "r"],
            rows,
        ),
        "",
    ]


def render_projection_seeds(saved: Mapping[str, Any]) -> str:
    """Seeds 004 and 001 beside the projection from a system description: every row, its error, the misses' reasons."""
    from docsbench.seed_systems import unexplained

    result = saved["result"]

    def signed(value: float) -> str:
        return "0" if value == 0 else signed_share(value)

    def band(low: float, high: float) -> str:
        return share(low) if round(low, 2) == round(high, 2) else f"{share(low)}–{share(high)}"

    seed_004 = [
        [
            r["system"],
            str(r["gpus"]),
            str(r["nodes"]),
            share(r["published"]),
            band(r["model_no_overlap"], r["model_full_overlap"]),
            str(r["servers"]),
            signed(r["error"]),
            "yes" if r["explained"] else "**no**",
        ]
        for r in result["seed_004"]
    ]
    seed_001 = [
        [
            str(r["gpus"]),
            r["metric"],
            fixed(r["published"], 2),
            fixed(r["model"], 2),
            signed(r["error"]),
            "yes" if r["explained"] else "**no**",
        ]
        for r in result["seed_001"]
    ]
    misses = [
        f"- *Seed {seed}, {system}, {gpus} GPUs ({', '.join(metrics)}):* {reason}."
        for (seed, system, gpus, reason), metrics in unexplained(result).items()
    ]
    inputs = [f"- *{system}:* " + "; ".join(lines) + "." for system, lines in result["inputs"].items()]
    within = share(result["explained_within"])
    return "\n".join(
        [
            "The ps-vs-allreduce study (004), InceptionV3 with parameter servers, scaling efficiency (model: no"
            " overlap – full overlap; PS: the count the model found best):",
            "",
            table(
                ["system", "GPUs", "nodes", "seed", "model", "PS", "error", f"within {within}"],
                ["l", "r", "r", "r", "r", "r", "r", "l"],
                seed_004,
            ),
            "",
            "The pop-scaling study (001), ResNet-50 on BigEarthNet, POP metrics:",
            "",
            table(
                ["GPUs", "metric", "seed", "model", "error", f"within {within}"],
                ["r", "l", "r", "r", "r", "l"],
                seed_001,
            ),
            "",
            f"{result['explained']} of {result['rows']} rows within {within}; median |error|"
            f" {share(result['median_error'])}, max {share(result['max_error'])}.",
            "",
            "The rows the model does not explain, and why:",
            "",
            *misses,
            "",
            "The inputs, each with its source:",
            "",
            *inputs,
            "",
            source_line(saved),
        ]
    )


def render_projection_published(saved: Mapping[str, Any]) -> str:
    """Published large-scale results beside the projection from their systems described: rows, errors, reasons."""
    result = saved["result"]
    rows = []
    for r in result["rows"]:
        ps = r["scheme"] == "ps"
        rows.append(
            [
                r["source"],
                r["model_name"].replace("_", " "),
                str(r["gpus"]),
                str(r["nodes"]),
                share(r["published"]),
                f"{share(r['model_low'])}–{share(r['model_high'])}" if ps else share(r["model"]),
                "–" if ps else share(r["model_low"]),
                "–" if ps else share(r["hidden_share"]),
                f"{r['error_points']:+.1f}".replace("-", "−") if round(r["error_points"], 1) else "0",
            ]
        )
    misses = [
        f"- *{r['source']}, {r['model_name']}, {r['gpus']} GPUs ({r['error_points']:+.1f} points):* {r['reason']}."
        for r in result["rows"]
        if r["reason"]
    ]
    inputs = [f"- *{key}:* " + "; ".join(lines) + "." for key, lines in result["inputs"].items()]
    met = (
        result["median_error_points"] <= result["median_goal_points"]
        and result["max_error_points"] <= result["max_goal_points"]
    )
    return "\n".join(
        [
            "Scaling efficiency against one GPU (Horovod rows: Horovod's loop played over each step from the"
            f" model's gradients, {result['horovod_settings']}; parameter-server rows: none of the traffic hidden –"
            " all of it, error 0 inside the band):",
            "",
            table(
                ["source", "model", "GPUs", "nodes", "published", "model", "without layout", "hidden", "error (pts)"],
                ["l", "l", "r", "r", "r", "r", "r", "r", "r"],
                rows,
            ),
            "",
            f"Median |error| {result['median_error_points']:.1f} points (goal {result['median_goal_points']:g}),"
            f" max {result['max_error_points']:.1f} (goal {result['max_goal_points']:g}):"
            f" {'met' if met else 'not met'}; {result['explained']} of {len(result['rows'])} rows within"
            f" {result['max_goal_points']:g} points.",
            "",
            *(
                [f"The rows off by more than {result['median_goal_points']:g} points, and why:", "", *misses, ""]
                if misses
                else []
            ),
            "The inputs, each with its source:",
            "",
            *inputs,
            "",
            source_line(saved),
        ]
    )


def render_horovod_step(saved: Mapping[str, Any]) -> str:
    """The eval-frequency step on 1 and 2 ranks, the gradients averaged four ways at three cycle times."""
    result = saved["result"]
    names = {
        "mpi4py": "one fused `MPI.Allreduce` (numpy)",
        "grouped": "`hvd.grouped_allreduce`, eager",
        "fused": "one `hvd.allreduce` of the concatenated gradients, eager",
        "in_graph": "`hvd.grouped_allreduce` inside the step's `tf.function`",
    }
    best = max(result["rows"], key=lambda r: r["speedup_2_over_1"])
    rows = [
        [
            names.get(r["variant"], r["variant"]),
            f"{r['cycle_time_ms']:g}",
            fixed(r["one_rank_ms_per_step"], 2),
            fixed(r["ms_per_step"], 2),
            fixed(r["added_ms_per_step"], 2),
            f"**{times(r['speedup_2_over_1'])}**" if r is best else times(r["speedup_2_over_1"]),
        ]
        for r in result["rows"]
    ]
    header = ["gradients averaged by", "HOROVOD_CYCLE_TIME ms", "1 rank ms/step", "2 ranks ms/step",
              "added by 2 ranks, ms", "2 ranks / 1 (samples/s)"]  # fmt: skip
    line = (
        f"Batch {result['batch']} per rank; each cell the median of {result['rounds']} interleaved blocks of "
        f"{result['steps']} steps (one rank runs the same step without any allreduce)."
    )
    return line + "\n\n" + table(header, ["l"] + ["r"] * 5, rows) + "\n\n" + source_line(saved)


def render_minicluster(saved: Mapping[str, Any]) -> str:
    """The miniature cluster: its links against MPI and Horovod, a slow link, the same step on 1/2/4 nodes."""
    r = saved["result"]
    link, slow, hardware = r["link_test"], r["slow_link"], r["hardware"]

    def mbps(value: float | None) -> str:
        return "–" if value is None or value != value else f"{fixed(value, 1)} MB/s"

    def asked(rate: str, mbps_of_packets: float, where: str) -> str:
        return f"{rate} ({number(mbps_of_packets)} MB/s of packets), {where}"

    links = [
        [
            asked(link["link"], link["link_mbps"], f"{' → '.join(link['nodes'])} at {link['cpus']:g} core each"),
            mbps(link["tcp_stream_mbps"]),
            mbps(link["mpi_busbw_mbps"]["1"]),
            f"**{mbps(link['mpi_busbw_mbps']['4'])}**",
            mbps(link["horovod_busbw_mbps"]["4"]),
        ],
        [asked(slow["link"], slow["link_mbps"], f"to {slow['node']}"), mbps(slow["tcp_stream_mbps"]), "–", "–", "–"],
    ]
    header = ["link asked", "TCP stream", "MPI busbw, 1 TCP link per peer", "MPI busbw, 4 links (default)",
              "Horovod busbw, 4 links"]  # fmt: skip
    steps = hardware["median_step_ms"]
    nodes = [
        [
            f"1-thread TF step at {hardware['cpus']:g} core, median of {hardware['rounds']} interleaved rounds",
            *(f"{fixed(steps[busy], 1)} ms" for busy in ("1", "2", "4")),
            f"**{fixed(100 * hardware['spread'], 1)} %**",
        ]
    ]
    down = f", down in {fixed(r['down_s'], 1)} s" if r.get("down_s") is not None else ""
    line = (
        f"{r['nodes']} nodes of {r['cpus_per_node']:g} core with a {rate_words(r['link'])} link each: up in "
        f"{fixed(r['up_s'], 1)} s{down}. Allreduce of {number(link['allreduce_bytes'] / 2**20)} MiB on 2 ranks "
        "(busbw = algbw there); MB/s are 10⁶ bytes/s."
    )
    hardware_header = ["each node's hardware", "1 busy node", "2 busy nodes", "4 busy nodes", "spread"]
    return "\n\n".join(
        [
            line,
            table(header, ["l", "r", "r", "r", "r"], links),
            table(hardware_header, ["l", "r", "r", "r", "r"], nodes),
            source_line(saved),
        ]
    )


def median_and_range(numbers: Mapping[str, Any], unit: str, digits: int, *, scale: float = 1) -> str:
    """``median unit (min–max)`` of ``{"median", "values"}`` (times ``scale``: 1000 shows seconds as ms)."""
    values = numbers["values"]
    return (
        f"{fixed(scale * numbers['median'], digits)} {unit}"
        f" ({fixed(scale * min(values), digits)}–{fixed(scale * max(values), digits)})"
    )


def render_idle_wait(saved: Mapping[str, Any]) -> str:
    """Ranks waiting in MPI on the miniature cluster, polling against sleeping: what each costs (median; range)."""
    r = saved["result"]
    names = {
        "spin": "poll and yield (`WORKBENCH_MINICLUSTER_IDLE=spin`)",
        "sleep": f"MPI's yields sleep {r['idle_sleep_us']} µs as SCHED_BATCH (the default)",
        "sleep-preempting": "… the same sleep as a normal task (its wake-ups preempt)",
    }

    rows = [
        [
            names.get(way, f"`{way}` (a library of one's own)"),
            median_and_range(numbers["allreduce_ms"], "ms", 1),
            median_and_range(numbers["working_beside_waiters_s"], "s", 2),
            median_and_range(numbers["all_working_s"], "s", 2),
        ]
        for way, numbers in r["ways"].items()
    ]
    header = [
        "ranks waiting in MPI",
        f"{number(r['allreduce_bytes'] / 1000)} KB allreduce",
        f"rank 0's {r['steps']} steps while the {r['nodes'] - 1} others wait",
        "the same, all working",
    ]
    line = (
        f"{r['nodes']} nodes of {r['cpus_per_node']:g} core at {rate_words(r['link'])}, {r['rounds']} interleaved "
        "rounds (fresh ranks each), median (range):"
    )
    return "\n\n".join([line, table(header, ["l", "r", "r", "r"], rows), source_line(saved)])


def render_recording_on_quota(saved: Mapping[str, Any]) -> str:
    """A step on nodes with a CPU quota: MPI's allreduce alone, the workload's averaging, the same recorded; the
    recorder before this one beside it (medians)."""
    r, before = saved["result"], load("recording-on-quota-before")["result"]

    def step(sides: Mapping[str, Any], side: str) -> str:
        numbers = sides.get(side)
        return f"{duration(numbers['step_s'])} ({duration(numbers['collective_s'])})" if numbers else "–"

    def recorded(sides: Mapping[str, Any]) -> str:
        return f"{step(sides, 'recorded')}, {signed_share(sides['recorded_over_plain'] - 1)}"

    def correlation(sides: Mapping[str, Any]) -> str:
        values = [sides[side]["correlation"] for side in ("plain", "recorded")]
        return "–" if any(value != value for value in values) else " / ".join(f"{value:.2f}" for value in values)

    rows = []
    for count, sides in r["by_count"].items():
        old = before["by_count"].get(count)
        rows.append(
            [
                count,
                step(sides, "bare"),
                step(sides, "plain"),
                recorded(sides),
                correlation(sides),
                f"{step(old, 'plain')}; {recorded(old)}" if old else "–",
                correlation(old) if old else "–",
            ]
        )
    header = [
        "nodes",
        "MPI's allreduce alone",
        "averaged as the workload does",
        "recorded",
        "steps' correlation, averaged / recorded",
        "before: averaged; recorded",
        "before: correlation",
    ]
    line = (
        f"Nodes of {r['cpus_per_node']:g} core at {rate_words(r['link'])}: the eval-frequency step (784-128-10, batch"
        f" 64), its gradients' bytes summed by MPI alone, then averaged as the workload does (copied out of TensorFlow"
        f" into one buffer, `MPI.Allreduce`, divided, rebuilt as tensors), then the same recorded; {r['steps']} steps"
        f" a side, {r['rounds']} rounds, medians; a step (its allreduce). *Before*: the recorder as it was (a flush at"
        " every memory sample, merges read back from disk, the workloads flushing every"
        f" {before['flush_interval_s']:g} s), measured just before:"
    )
    return "\n\n".join(
        [
            line,
            table(header, ["r"] * len(header), rows),
            source_line(saved),
            source_line(load("recording-on-quota-before")),
        ]
    )


def render_quota_wait(saved: Mapping[str, Any]) -> str:
    """The compute after a wait on a node whose CPU is a quota: its time by the wait's length, per share and kind."""
    shares = saved["result"]["shares"]
    kinds = {"sleep": "asleep", "poll": "waking every 50 µs"}
    columns = [(share, kind) for share in shares for kind in kinds]

    def entry(share: Mapping[str, Any], kind: str, wait_s: float) -> str:
        row = next(r for r in share["rows"] if r["wait"] == kind and r["wait_s"] == wait_s)
        saved_s = row["saved_s"] if wait_s else 0.0
        return duration(row["compute_wall_s"]) + (f" (−{duration(saved_s)})" if saved_s > 0.0005 else "")

    waits = sorted({r["wait_s"] for r in shares[0]["rows"]})
    rows = [
        [duration(wait_s) if wait_s else "none", *(entry(share, kind, wait_s) for share, kind in columns)]
        for wait_s in waits
    ]
    heads = [f"{share['share']:.2g} core, {kinds[kind]}" for share, kind in columns]
    header = "; ".join(
        f"{share['share']:.2g} of a core ({duration(share['quota_s'])} in each {duration(share['period_s'])}):"
        f" {duration(share['cpu_s'])} of CPU a step, {duration(share['fluid_s'])} at the quota's average rate"
        for share in shares
    )
    costs = [r["wait_cpu_cores"] for share in shares for r in share["rows"] if r["wait"] == "poll" and r["wait_s"]]
    return "\n".join(
        [
            f"{header}. The compute's wall time after each wait (medians of {saved['result']['repeats']} x"
            f" {saved['result']['rounds']}; in brackets what it saved against back to back). Waking to look cost the"
            f" wait {min(costs):.2f}–{max(costs):.2f} of a core.",
            "",
            table(["wait", *heads], ["r"] * (1 + len(heads)), rows),
            "",
            source_line(saved),
        ]
    )


#: Node rows (nodes of their share) the goal needs before it is judged: one sweep's three sizes at two points.
MIN_NODE_ROWS = 6


def render_projection_nodes_cpu(saved: Mapping[str, Any]) -> str:
    """Node rows beside their ranks' CPU: cores used, threads waiting for a core, the quota's periods that ran out,
    each against the 1-node run the row is predicted from (``bench projection --nodes``, 2026-11-27 on)."""
    from docsbench.projection_check import nodes_of_their_share, nodes_summary

    result = saved["result"]
    rows = []
    read = [r for r in result["validation"] if r.get("cpu_target") and r.get("cpu_base")]
    for r in sorted(read, key=lambda r: (r["cluster"], r["point"].split("/", 1)[1], r["ranks"])):
        target, base = r["cpu_target"], r["cpu_base"]
        rows.append(
            [
                r["cluster"].split(": ", 1)[-1],
                r["point"].split("/", 1)[-1],
                str(r["ranks"]),
                str(r["repetitions"]),
                times(r.get("compute_growth")) or "–",
                f"{target['cpu_cores']:.2g} / {base['cpu_cores']:.2g}",
                f"{target['waiting_cores']:.2g} / {base['waiting_cores']:.2g}",
                f"{share(target['throttled_share'])} / {share(base['throttled_share'])}",
                {True: "yes", False: "no", None: "–"}[nodes_of_their_share(r)],
                signed_share(r["error"]),
            ]
        )
    header = [
        "nodes' share and link",
        "point",
        "nodes",
        "runs",
        "compute per step vs 1 node",
        "cores used (this / 1 node)",
        "threads waiting for a core",
        "quota ran out",
        "nodes of their share",
        "error",
    ]
    judged = nodes_summary(read)
    nodes, apart = judged["nodes"], judged["not_nodes"]

    def errors(group: Mapping[str, Any]) -> str:
        if not group["rows"]:
            return "none"
        sizes = ", ".join(str(n) for n in group["sizes"])
        return (
            f"{group['rows']} (on {sizes} nodes), median |error| {share(group['median_error'])},"
            f" max {share(group['max_error'])}"
        )

    return "\n".join(
        [
            "Each rank's CPU from its heartbeat, medians over the ranks and the repetitions, beside the 1-node run"
            " the row is predicted from:",
            "",
            table(header, ["l", "l", "r", "r", "r", "r", "r", "r", "l", "r"], rows),
            "",
            f"Rows whose nodes were nodes of their share ({judged['rule']}): {errors(nodes)}; the others, apart:"
            f" {errors(apart)}. The goal (median ≤ 5 %, max ≤ 10 % on medians of 3) is judged on the first: "
            + (
                f"{nodes['rows']} row(s) are too few to judge it."
                if nodes["rows"] < MIN_NODE_ROWS
                else "met." if nodes["median_error"] <= 0.05 and nodes["max_error"] <= 0.10 else "not met."
            ),
            "",
            source_line(saved),
        ]
    )


def render_cpu_probe_cost(saved: Mapping[str, Any]) -> str:
    """The heartbeat's wait-for-a-core reading: its CPU per call in a TensorFlow rank, beside the CPU % read."""
    r = saved["result"]
    hundred_ms = 100 * r["per_thread_us"] / 1e3
    return "\n".join(
        [
            f"{r['process']}, {r['threads']} threads on this machine: `CpuWaitProbe.sample()` took"
            f" {r['probe_us']:.0f} µs of CPU (median of {r['samples']}; 90th percentile {r['probe_p90_us']:.0f} µs),"
            f" {r['per_thread_us']:.1f} µs a thread, beside {r['cpu_percent_us']:.0f} µs for the heartbeat's CPU %"
            f" (psutil). At a heartbeat a second that is {r['share_of_node'] * 100:.2g} % of a node of"
            f" {r['node_share']:g} core; a rank of 100 threads (TensorFlow's pools on a large node) would take"
            f" about {hundred_ms:.2g} ms a second.",
            "",
            source_line(saved),
        ]
    )


def render_cluster_start(saved: Mapping[str, Any]) -> str:
    """Starting and stopping a local cluster: the controller's heartbeat period, ours against ipyparallel's."""
    r = saved["result"]
    names = {
        "workbench": "pings every 500 ms (workbench)",
        "ipyparallel-heartbeat": "pings every 3 s (ipyparallel's own)",
    }

    rows = [
        [
            f"{names.get(way, way)}, {ranks} rank{'s' if int(ranks) > 1 else ''}",
            median_and_range(parts["start_s"], "s", 2),
            median_and_range(parts["first_task_s"], "ms", 1, scale=1000),
            median_and_range(parts["stop_s"], "s", 2),
        ]
        for way, by_ranks in r["ways"].items()
        for ranks, parts in by_ranks.items()
    ]
    header = ["controller", "`start_sync()`", "first task", "`stop_sync()`"]
    line = f"{r['rounds']} interleaved rounds, a fresh cluster each, median (range):"
    return "\n\n".join([line, table(header, ["l", "r", "r", "r"], rows), source_line(saved)])


def render_clock_alignment(saved: Mapping[str, Any]) -> str:
    """The clock-offset estimates of the eval-frequency sweep's multi-rank runs: bound and offset found."""
    clock = saved["result"].get("clock_alignment_ns")
    if not clock:
        return "No multi-rank run in that sweep: nothing to align.\n\n" + source_line(saved)
    precision, offset = clock["precision"], clock["offset"]
    return (
        f"- precision bound: **{number(precision[0] / 1e3)}–{number(precision[1] / 1e3)} µs** "
        f"(over the {clock['runs']} multi-rank runs of the eval-frequency sweep);\n"
        f"- estimated offsets: {number(offset[0])}–{number(offset[1])} ns (both ranks share one host clock, so "
        "the true offset is 0).\n\n" + source_line(saved)
    )


def case_lines() -> tuple[list[str], list[str]]:
    """The README's headline lines the cases write (``CaseDocs.readme_clause``: a case's clause, joined with the others'
    of its line), in the order of their cases, and the saved results they read."""
    from docsbench.cases import case_docs
    from workbench.experiment import case_names

    by_line: dict[str, list[ReadmeClause]] = {}
    for name in case_names():
        write = case_docs(name).readme_clause
        clause = write(SavedResults(RESULTS)) if write else None
        if clause is not None:
            by_line.setdefault(clause.line, []).append(clause)
    lines = [f"- **{line}:** {'; '.join(c.text for c in clauses)}." for line, clauses in by_line.items()]
    return lines, [source for clauses in by_line.values() for clause in clauses for source in clause.sources]


def projection_nodes_headline(saved: Mapping[str, Any]) -> str:
    """The README's line on the projection across nodes: over all points, then each case's median and max."""
    result = saved["result"]
    rows = result["validation"]
    counts = sorted({r["ranks"] for r in rows})
    by_case: dict[str, list[float]] = {}
    for r in rows:
        by_case.setdefault(r["case"], []).append(abs(r["error"]))
    cases = "; ".join(
        f"{case} {share(statistics.median(errors))} and {share(max(errors))}" for case, errors in by_case.items()
    )
    return (
        f"- **The projection across nodes:** each node count projected from its sweep's 1-node run is within"
        f" {share(result['median_error'])} (median) and {share(result['max_error'])} (max) of the measured medians"
        f" of {result['runs']} points on {counts[0]}–{counts[-1]} nodes, ranks waiting in MPI asleep (the goal:"
        f" 5 % and 10 %); by case, median and max: {cases}."
        + (
            f" An exact model would score about {share(floor['median_error'])} and {share(floor['max_error'])} on"
            " these repetitions (their scatter alone)."
            if (floor := result.get("noise_floor") or {}).get("points")
            else ""
        )
    )


def published_headline(saved: Mapping[str, Any]) -> str:
    """The README's line on the projection at the scale users plan for: the published large-scale results."""
    result = saved["result"]
    rows = result["rows"]
    gpus = sorted({r["gpus"] for r in rows})
    hidden = [r["hidden_share"] for r in rows if r["scheme"] == "allreduce"]
    met = (
        result["median_error_points"] <= result["median_goal_points"]
        and result["max_error_points"] <= result["max_goal_points"]
    )
    return (
        f"- **The projection at scale:** beside {len(rows)} published results at {gpus[0]}–{gpus[-1]} GPUs"
        " (Horovod's own benchmark, TensorFlow's EC2 table), described from their systems with nothing fitted,"
        f" the projection's efficiency is off by {result['median_error_points']:.1f} points (median) and"
        f" {result['max_error_points']:.1f} (max) (the goal: 5 and 10, {'met' if met else 'not met'}); Horovod's"
        f" overlap with backprop, played from the models' gradients, hides {share(min(hidden))}–{share(max(hidden))}"
        " of the allreduce."
    )


def render_headline(saved: Mapping[str, Any]) -> str:
    """The README's three lines of key figures, each from the saved result its docs page renders in full."""
    overhead = saved["result"]
    analysis, browser, live = load("analysis-categorical")["result"], load("browser")["result"], load("live")["result"]
    evaluation, pipeline = load("eval-frequency-reduced")["result"], load("input-pipeline-reduced")["result"]
    projection, cost = load("projection")["result"], load("dashboard-cost")["result"]
    mini = load("minicluster")["result"]
    mini_link = mini["link_test"]
    large = load("live-1024")["result"]
    split = load("analysis-split-100m")["result"]
    in_groups = split["modes"]["split-2"]
    billion = load("analysis-split-1b")["result"]
    on_nodes = billion["modes"]["minicluster-nodes"]
    fuzzed = load("fuzz")["result"]
    midrun = {fault["fault"]: fault for fault in load("midrun-faults")["result"]["faults"]}
    midrun_named = [midrun[kind]["detected"]["seconds"] if midrun[kind]["detected"] else float("nan") for kind in
                    ("link_down", "slowed_link", "disk_full")]  # fmt: skip
    midrun_kept = all(fault["every_step_recorded"] and fault["finished"] for fault in midrun.values())
    fuzz_counts = Counter()
    for counts in fuzzed["outcomes"].values():
        fuzz_counts.update(counts)
    quota, quota_before = load("recording-on-quota")["result"], load("recording-on-quota-before")["result"]
    quota_counts = list(quota["by_count"])
    quota_shares = [
        run["by_count"][count]["recorded_over_plain"] - 1
        for run in (quota, load("recording-on-quota-first")["result"])
        for count in quota_counts
    ]
    widest = quota_counts[-1]
    widest_before = share(quota_before["by_count"][widest]["recorded_over_plain"] - 1)
    least = share(min(quota_shares)).removesuffix(" %")
    low, high = overhead["cpu_overhead_ci"]
    cores_live = sum(dashboard_cores(cost, name) for name in PROCESSES)
    lines = [
        f"- **Cost of recording:** {share(1 - overhead['cpu_overhead_ratio'])} of CPU time on a "
        f"{number(1e3 / overhead['steps_per_s_plain'])} ms training step (recorded / plain "
        f"{fixed(overhead['cpu_overhead_ratio'])}, 95 % interval {fixed(low)}–{fixed(high)}); on nodes of"
        f" {quota['cpus_per_node']:g} core, where the recorder's thread has no spare core, {least}"
        f"–{share(max(quota_shares))} of a step on {quota_counts[0]}–{widest} nodes in two runs (before this release's"
        f" lighter flushes, {widest_before} on {widest}); analysing "
        f"{analysis['events'] / 1e6:.3g} M events of {analysis['ranks']} ranks takes {fixed(analysis['seconds'], 2)} s "
        f"and {analysis['peak_rss_mb'] / 1024:.2f} GB on one core (breakdown, POP, findings); every table and"
        f" finding of {split['events'] / 1e6:.3g} M events of {number(split['ranks'])} ranks, in rank groups on 2"
        f" processes, {number(in_groups['seconds'])} s and {in_groups['peak_rss_mb'] / 1024:.3g} GB (the groups"
        f" {max(in_groups['worker_peak_rss_mb']) / 1024:.2g} GB each; the rest is the per rank and step tables the"
        f" caller merges); {billion['events'] / 1e9:.3g} B events of {number(billion['ranks'])} ranks on 4"
        f" miniature nodes' engines, {number(on_nodes['seconds'] / 60)} min with"
        f" {max(on_nodes['worker_peak_rss_mb']) / 1024:.2g} GB an engine.",
        f"- **Reliability:** {number(fuzzed['cases'])} damaged trace files of the {len(fuzzed['outcomes'])} formats"
        f" import reads: {number(fuzz_counts['imported'])} imported and analysed with the damage said,"
        f" {number(fuzz_counts['refused'])} refused in one line naming the file, {fuzz_counts['bad']} otherwise;"
        f" the slowest took {fixed(fuzzed['slowest']['seconds'], 2)} s. On 4 miniature nodes, a node's link down"
        f" for {midrun['link_down']['held_s']:g} s, slowed to a tenth for {midrun['slowed_link']['held_s']:g} s and"
        f" the run folder's disk full for {midrun['disk_full']['held_s']:g} s mid-run were named after"
        f" {', '.join(f'{value:.1f}' for value in midrun_named[:2])} and {midrun_named[2]:.1f} s"
        + (", every step of every rank recorded." if midrun_kept else "; NOT every step was recorded."),
        f"- **Live:** an event on a rank is on screen in JupyterLab {number(browser['event_to_screen_ms']['median'])} "
        f"ms later (median); a {live['ranks']}-rank job is followed with a "
        f"{fixed(live['refresh_median_s'], 2)} s refresh (median), a {number(large['ranks'])}-rank one on"
        f" {number(large['ranks'] // large['ranks_per_host'])} hosts with {fixed(large['refresh_median_s'], 2)} s"
        f" (a heatmap of every rank, the timeline of the slowest); live on {cost['ranks']} ranks, the dashboard takes "
        f"{fixed(cores_live, 2)} of a core (kernel, server and browser) and the ranks' wall time is "
        f"{fixed(cost['slowdown_live_over_headless'], 2)}x headless.",
        f"- **Case studies:** evaluating every {max(evaluation['intervals'])} epochs instead of every epoch made "
        f"training {times(evaluation['speedup_eval_fix'])} faster on {evaluation['largest_ranks']} ranks (the "
        f"eval-frequency seed: {evaluation['published_speedup_eval_fix']}×); data in memory made steps "
        f"{times(pipeline['speedup_in_memory_by_ranks']['1'])} faster than the contested queue on 1 rank (the "
        f"input-pipeline seed: ~{pipeline['published_speedup_in_memory']:g}×); the scaling projection is within "
        f"{share(projection['median_error'])} (median) and {share(projection['max_error'])} (max) of measured "
        "2-rank runs.",
        f"- **Across nodes:** on a {mini['nodes']}-node miniature cluster with {rate_words(mini['link'])} links, an "
        f"MPI allreduce of {number(mini_link['allreduce_bytes'] / 2**20)} MiB between two nodes moved "
        f"{number(mini_link['mpi_busbw_mbps']['4'])} MB/s beside {number(mini_link['tcp_stream_mbps'])} MB/s of one "
        f"TCP stream ({number(mini_link['mpi_busbw_mbps']['1'])} MB/s with Open MPI's default of one TCP socket per "
        "peer, hence the workbench's 4).",
    ]
    cases, case_sources = case_lines()
    lines += [
        *cases,
        projection_nodes_headline(load("projection-nodes-sleeping")),
        published_headline(load("projection-published")),
    ]
    sources = (
        "overhead, recording-on-quota, recording-on-quota-first, recording-on-quota-before, analysis-categorical,"
        " analysis-split-100m, analysis-split-1b, fuzz, midrun-faults,"
        " browser, live, live-1024, dashboard-cost,"
        " eval-frequency-reduced,"
        " input-pipeline-reduced,"
        f" projection, minicluster, {', '.join(case_sources)}, projection-nodes-sleeping, projection-published"
    )
    return (
        "\n".join(lines)
        + f"\n\n*Rendered from `benchmarks/results/` ({sources}); the commands and dates are on the docs pages.*"
    )


RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "allreduce": render_allreduce,
    "overhead": render_overhead,
    "analysis-categorical": render_analysis,
    "analysis-split-100m": render_analysis_split,
    "analysis-split-1b": render_analysis_split_1b,
    "fuzz": render_fuzz,
    "midrun-faults": render_midrun_faults,
    "timeline": render_timeline,
    "peers": render_peers,
    "export": render_export,
    "timeline-stream": render_timeline_stream,
    "timeline-stream-1024": render_timeline_stream,
    "redraw": render_redraw,
    "dashboard-cost": render_dashboard_cost,
    "live": render_live,
    "live-1024": render_live,
    "late-attach": render_late_attach,
    "browser": render_browser,
    "report-open": render_report_open,
    "projection": render_projection,
    "projection-seeds": render_projection_seeds,
    "projection-published": render_projection_published,
    "projection-nodes": render_projection_nodes,
    "projection-nodes-sleeping": render_projection_nodes,
    "horovod-step": render_horovod_step,
    "clock-alignment": render_clock_alignment,
    "minicluster": render_minicluster,
    "idle-wait": render_idle_wait,
    "recording-on-quota": render_recording_on_quota,
    "quota-wait": render_quota_wait,
    "cpu-probe-cost": render_cpu_probe_cost,
    "projection-nodes-cpu-wait": render_projection_nodes_cpu,
    "cluster-start": render_cluster_start,
    "headline": render_headline,
}
#: Blocks rendered from another block's saved result (block name -> result name).
SOURCES: dict[str, str] = {
    "clock-alignment": "eval-frequency-reduced",
    "headline": "overhead",
    "pop-scaling-nodes": POP_NODE_SWEEPS[0],
    "eval-frequency-nodes": EVAL_NODE_SWEEPS[0],
    "ps-vs-allreduce-nodes": PS_NODE_SWEEPS[0],
    "ps-vs-allreduce-nodes-repeated": "projection-nodes",
}


# -- the documents --------------------------------------------------------------------------------------------
def documents(root: Path | None = None) -> list[Path]:
    """Every file whose blocks are rendered: README.md, then docs/*.md (a new page is found, not listed)."""
    base = ROOT if root is None else root
    return [base / "README.md", *sorted((base / "docs").glob("*.md"))]


def load(name: str) -> dict[str, Any]:
    return SavedResults(RESULTS).load(name)


def case_renderers() -> dict[str, Callable[[Mapping[str, Any]], str]]:
    """The tables the cases render themselves (``CaseDocs.tables``), by block name, reading saved results here."""
    from docsbench.cases import case_docs
    from workbench.experiment import case_names

    found: dict[str, Callable[[Mapping[str, Any]], str]] = {}
    for case in case_names():
        for name, render in case_docs(case).tables.items():
            found[name] = lambda saved, render=render: render(saved, SavedResults(RESULTS))
    return found


def renderer(name: str, saved: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], str]:
    """The block's own renderer, a case's, else the generic one for a case study's saved sweep."""
    if name in RENDERERS:
        return RENDERERS[name]
    cases = case_renderers()
    if name in cases:
        return cases[name]
    result = saved.get("result")
    if isinstance(result, Mapping) and result.get("case") and "headline" in result:
        from workbench.experiment import case_names

        if result["case"] in case_names():
            return render_case
    raise SystemExit(f"block {name!r} has no renderer in benchmarks/render_readme.py and is not a case's sweep")


def rendered(text: str) -> tuple[str, list[str]]:
    """A document's text with every block rendered from its JSON, and the names of the blocks that changed."""
    changed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        saved = load(SOURCES.get(name, name))
        body = renderer(name, saved)(saved) + "\n"
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, text), changed


def render_files(paths: Sequence[Path]) -> dict[Path, tuple[str, list[str]]]:
    """Each file's rendered text and its changed blocks; a file without blocks is left out."""
    out: dict[Path, tuple[str, list[str]]] = {}
    for path in paths:
        text = path.read_text()
        if BLOCK.search(text):
            out[path] = rendered(text)
    return out


def save(name: str, output: Path, command: str, seconds: float | None = None) -> Path:
    """Wrap a command's ``--json`` output (the file ``output``) with the command, the date and the machine, as
    ``results/NAME.json``."""
    return save_result(name, json.loads(output.read_text()), command, seconds)


def save_result(name: str, result: Any, command: str, seconds: float | None = None) -> Path:
    """``result`` (a command's ``--json`` output, parsed) saved as ``save`` saves it."""
    from workbench.config import physical_cores

    saved = {
        "name": name,
        "command": command,
        "measured": time.strftime("%Y-%m-%d"),
        "machine": f"{socket.gethostname()}, {physical_cores()} cores",
        # this machine is shared: how busy it was when the command ended (1, 5 and 15 minutes)
        "load_average": [round(v, 2) for v in os.getloadavg()],
        # how long the command took, start to end (a sweep's duration is what a user plans around)
        "seconds": seconds,
        "result": result,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(saved, indent=1) + "\n")
    return path


def measure(names: Sequence[str]) -> int:
    """Run the registered measurements (``names``: those and every sweep of a named group; none: all but the kept),
    in their order; save each one's JSON; then rewrite the tables. 1 if any failed or was skipped."""
    from docsbench.registry import measurements

    registered = measurements()
    unknown = sorted(set(names) - {m.name for m in registered})
    if unknown:
        raise SystemExit(f"no measurement {unknown[0]!r}: `python benchmarks/render_readme.py list` names them")
    chosen = [m for m in registered if not m.kept and (not names or m.name in names)]
    environment = {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    failed = 0
    for entry in chosen:
        if entry.root and os.geteuid() != 0:
            print(f"== {entry.name}: skipped, it needs root (a miniature cluster's nodes)", file=sys.stderr)
            failed = 1
            continue
        print(f"== {entry.name}: {entry.command}", file=sys.stderr)
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-c", entry.command], cwd=ROOT, env=environment, stdout=subprocess.PIPE, text=True, check=False
        )
        seconds = round(time.monotonic() - started)
        if entry.sweep:
            if done.returncode:
                print(f"   {entry.name} failed (exit code {done.returncode})", file=sys.stderr)
                failed = 1
            continue
        try:
            result = json.loads(done.stdout)
        except ValueError:
            print(f"   {entry.name} failed: no JSON on its output (exit code {done.returncode})", file=sys.stderr)
            failed = 1
            continue
        if done.returncode:  # a case whose result cannot be trusted exits 1 but still prints its JSON
            print(f"   {entry.name} exited non-zero; its JSON is saved (read its caveats)", file=sys.stderr)
        save_result(entry.name, result, entry.command, seconds)
    stale_tables(write=True)
    return failed


def stale_tables(*, write: bool) -> list[str]:
    """``FILE: blocks`` of every document whose tables differ from their saved results; ``write``: rewrite them."""
    stale: list[str] = []
    for path, (new, changed) in render_files(documents()).items():
        if not changed:
            continue
        stale.append(f"{path.relative_to(ROOT)}: {', '.join(changed)}")
        if write:
            path.write_text(new)
    return stale


def list_measurements() -> str:
    """One line per registered measurement: stage, name, what it needs and its command."""
    from docsbench.registry import measurements

    lines = []
    for entry in measurements():
        flags = ", ".join(f for f, on in (("sweep", entry.sweep), ("root", entry.root), ("kept", entry.kept)) if on)
        lines.append(f"{entry.stage} {entry.name}{f' ({flags})' if flags else ''}: {entry.command}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a table in README.md or docs/*.md differs from its JSON"
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite the tables in README.md and docs/*.md from their JSON"
    )
    sub = parser.add_subparsers(dest="action")
    saver = sub.add_parser("save", help="store a command's --json output as benchmarks/results/NAME.json")
    saver.add_argument("name")
    saver.add_argument("output", type=Path)
    saver.add_argument("--command", required=True)
    saver.add_argument("--seconds", type=float, default=None, help="how long the command took")
    measurer = sub.add_parser("measure", help="run registered measurements again (all but the kept ones by default)")
    measurer.add_argument("names", nargs="*", help="measurements or sweep groups (see list)")
    sub.add_parser("list", help="the registered measurements, in the order they run")
    args = parser.parse_args(argv)
    if args.action == "save":
        print(save(args.name, args.output, args.command, args.seconds))
        return 0
    if args.action == "measure":
        return measure(args.names)
    if args.action == "list":
        print(list_measurements())
        return 0
    stale = stale_tables(write=args.write)
    if stale:
        print(("rewrote " if args.write else "out of date: ") + "; ".join(stale))
        return 0 if args.write else 1
    print("tables in README.md and docs/*.md match benchmarks/results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
