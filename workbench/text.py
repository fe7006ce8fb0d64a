"""Runs in words: what ``workbench analyse`` and ``compare`` print (header, POP, findings, tables of ranks).

The numbers and tables are ``workbench.formatting``'s. Nothing here loads a run or computes a metric.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from workbench.analysis.compare import SCOPE_RANK, SCOPE_TOTAL, SCOPE_WALL
from workbench.analysis.run_analysis import lateness_summary
from workbench.events import (
    MISSING,
    format_seconds,
    host_count,
    hosts_summary,
    is_finite_number,
    phase_order,
)
from workbench.formatting import WIDTH, format_megabytes, format_percent, format_rate, format_ratio, text_table

if TYPE_CHECKING:
    from workbench.analysis import RunAnalysis


def _wrapped(text: str, indent: str = "", *, width: int = WIDTH) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent) or [indent]


def format_header(header: Mapping[str, Any], *, label: str = "run") -> list[str]:
    """What produced a run: id, name, created, host, ranks, cores, status, versions.

    When ``header["rank_hosts"]`` (``{rank: host}``) names more than one host, one more line says
    where the ranks ran (``hosts_summary``: each host's ranks, or a count for many hosts).
    """
    lines = [f"{label:<9}{header.get('run_id') or MISSING}  ({header.get('name') or 'unnamed'})"]
    facts = [
        f"created {header.get('created') or MISSING}",
        f"host {header.get('host') or MISSING}",
        _count(header.get("ranks"), "rank"),
        _count(header.get("cores"), "core"),
        f"status {header.get('status') or MISSING}",
    ]
    if header.get("exit_code") not in (None, 0):
        facts.append(f"exit code {header['exit_code']}")
    lines += _wrapped(", ".join(facts), " " * 9)
    where = hosts_summary(header.get("rank_hosts"), max_chars=WIDTH - 9)
    if where:
        lines.append(" " * 9 + where)
    versions = header.get("versions") or {}
    if versions:
        lines += _wrapped(", ".join(f"{name} {version}" for name, version in versions.items()), " " * 9)
    return lines


def _count(value: object, noun: str) -> str:
    if value is None:
        return f"{MISSING} {noun}s"
    return f"{value} {noun}" if value == 1 else f"{value} {noun}s"


def format_analysis(result: RunAnalysis, *, width: int = WIDTH) -> str:
    """The run's header, POP metrics, seconds per rank and phase, findings, steps and memory."""
    lines = format_header(result.header)
    hosts = result.header.get("rank_hosts") or {}
    by_rank = _RankColumns(hosts)
    pop = result.pop
    lines += _pop_lines(pop, width)
    if pop.get("note"):
        lines += _wrapped(f"note: {pop['note']}", width=width)

    lines += ["", "Seconds per rank and phase (share of wall time)"]
    lines += _breakdown_lines(result.breakdown, width, by_rank) or ["  no events"]

    lines += ["", "Findings (largest loss first; they overlap: do not add them up)"]
    lines += findings_lines(result.findings, width) or ["  none"]

    lines += ["", "Training steps per rank"]
    if int(result.steps["steps"].sum()) if len(result.steps) else 0:
        lines += text_table(
            [*by_rank.header, "steps", "over", "steps/s", "mean step", "median step"],
            [
                [
                    *by_rank.cells(row.rank),
                    str(row.steps),
                    format_seconds(row.seconds),
                    format_rate(row.steps_per_s),
                    format_seconds(row.mean_step_s),
                    format_seconds(getattr(row, "median_step_s", None)),
                ]
                for row in result.steps.itertuples()
            ],
            width=width,
            labels=by_rank.labels,
        )
    else:
        lines.append("  none recorded (compute spans named 'train_step')")

    if len(result.devices):
        lines += ["", "GPUs (busy: any stream ran; hidden: communication while a compute kernel ran)"]
        lines += text_table(
            [*by_rank.header, "GPU", "steps", "busy", "idle", "compute", "comm", "hidden", "copies"],
            [
                [
                    *by_rank.cells(row.rank),
                    str(row.device),
                    str(row.steps),
                    f"{row.busy_share:.0%}" if row.busy_share == row.busy_share else MISSING,
                    format_seconds(row.idle_s),
                    format_seconds(row.compute_s),
                    format_seconds(row.communication_s),
                    f"{row.communication_hidden_share:.0%}"
                    if row.communication_hidden_share == row.communication_hidden_share
                    else MISSING,
                    format_seconds(row.copy_s),
                ]
                for row in result.devices.itertuples()
            ],
            width=width,
            labels=by_rank.labels,
        )

    if len(result.keras_calls):
        lines += ["", "Keras calls (own: Keras's work per call outside the model's runs)"]
        lines += _keras_call_lines(result.keras_calls, width, by_rank)

    lateness = lateness_summary(result.lateness)
    if len(lateness):
        lines += ["", "Arrival at the allreduce (Horovod's readiness marks, per step)"]
        lines += _lateness_lines(lateness, width, by_rank)

    lines += ["", "Memory per rank (resident set size)"]
    if len(result.memory):
        lines += text_table(
            [*by_rank.header, "samples", "first", "last", "peak", "GPU peak"],
            [
                [
                    *by_rank.cells(row.rank),
                    str(row.samples),
                    format_megabytes(row.first_mb),
                    format_megabytes(row.last_mb),
                    format_megabytes(row.peak_mb),
                    format_megabytes(row.gpu_peak_mb),
                ]
                for row in result.memory.itertuples()
            ],
            width=width,
            labels=by_rank.labels,
        )
    else:
        lines.append("  no samples recorded")
    return "\n".join(lines)


def _pop_lines(pop: Mapping[str, Any], width: int) -> list[str]:
    """The POP metrics of one run (``RunAnalysis.pop``) as a two-column table under its heading."""
    useful = " + ".join(pop.get("useful_phases") or [])
    table = text_table(
        ["metric", "value"],
        [
            ["parallel efficiency", format_ratio(pop.get("parallel_efficiency"))],
            ["  load balance", format_ratio(pop.get("load_balance"))],
            ["  communication efficiency", format_ratio(pop.get("communication_efficiency"))],
            ["runtime", format_seconds(pop.get("runtime_s"))],
            ["useful time per rank, mean", format_seconds(pop.get("useful_mean_s"))],
            ["useful time per rank, max", format_seconds(pop.get("useful_max_s"))],
        ],
        width=width,
    )
    return ["", f"POP metrics (useful phases: {useful})", *table]


#: Ranks listed per table when a run is analysed in rank groups (hundreds of ranks): the slowest ones.
RANKS_SHOWN = 10


def format_split_analysis(result: Any, *, width: int = WIDTH, shown: int = RANKS_SHOWN) -> str:
    """A run analysed in rank groups (``rank_groups.SplitAnalysis``): ``format_analysis`` of its tables, the per-rank
    ones cut to the ranks that matter most (the ``shown`` with most compute and the ``shown`` latest to the
    allreduce) when there are more. ``--json`` has them all."""
    ranks = result.breakdown["rank"].nunique() if len(result.breakdown) else 0
    chosen: set[int] = set()
    if ranks > 2 * shown:
        compute = result.breakdown[result.breakdown["phase"] == "compute"].set_index("rank")["seconds"]
        chosen |= {int(r) for r in compute.sort_values(ascending=False).index[:shown]}
        late = lateness_summary(result.lateness)
        if len(late):
            late = late.sort_values(["last_in_steps", "rank"], ascending=[False, True])
            chosen |= {int(r) for r in late["rank"].head(shown)}
        tables = ("breakdown", "steps", "memory", "waits", "lateness", "in_flight", "keras_calls", "devices")
        cut = {name: _only_ranks(getattr(result, name), chosen) for name in tables}
        result = dataclasses.replace(result, **cut)
    text = format_analysis(result, width=width).split("\n")
    at = len(format_header(result.header))
    lines = [
        f"  analysed in {result.groups} rank group(s) on {result.workers} worker(s):"
        f" {result.events:,} events in {sum(result.seconds.values()):.3g} s"
    ]
    if chosen:
        lines.append(
            f"  per-rank tables: the {len(chosen)} of {ranks} ranks with most compute or latest to the allreduce"
        )
    return "\n".join(text[:at] + lines + text[at:])


def _only_ranks(table: pd.DataFrame, ranks: set[int]) -> pd.DataFrame:
    return table[table["rank"].isin(list(ranks))] if "rank" in table else table


def _lateness_lines(lateness: pd.DataFrame, width: int, by_rank: _RankColumns) -> list[str]:
    """``lateness_summary`` rows as a table: steps, how often last, median and max lateness."""
    return text_table(
        [*by_rank.header, "steps", "last in", "median late", "max late"],
        [
            [
                *by_rank.cells(row.rank),
                str(row.steps),
                f"{row.last_in_steps} ({format_percent(row.last_share)})",
                format_seconds(row.median_lateness_s),
                format_seconds(row.max_lateness_s),
            ]
            for row in lateness.itertuples()
        ],
        width=width,
        labels=by_rank.labels,
    )


class _RankColumns:
    """A table's leading rank column, and a host column next to it when the ranks ran on several hosts."""

    def __init__(self, hosts: Mapping[int, str]) -> None:
        self.hosts = hosts
        self.several = host_count(hosts) > 1
        self.header = ["rank", "host"] if self.several else ["rank"]
        self.labels = len(self.header)

    def cells(self, rank: Any) -> list[str]:
        if not self.several:
            return [str(rank)]
        return [str(rank), self.hosts.get(int(rank)) or MISSING]


def _breakdown_lines(breakdown: pd.DataFrame, width: int, by_rank: _RankColumns | None = None) -> list[str]:
    if breakdown.empty:
        return []
    by_rank = by_rank or _RankColumns({})
    order = phase_order(breakdown["phase"].unique())
    seconds = breakdown.pivot_table(index="rank", columns="phase", values="seconds", aggfunc="sum", fill_value=0.0)
    fraction = breakdown.pivot_table(index="rank", columns="phase", values="fraction", aggfunc="sum", fill_value=0.0)
    rows = []
    for rank in seconds.index:
        cells = [f"{format_seconds(seconds.at[rank, p])} {format_percent(fraction.at[rank, p])}" for p in order]
        rows.append([*by_rank.cells(rank), *cells, format_seconds(float(seconds.loc[rank].sum()))])
    return text_table([*by_rank.header, *order, "wall"], rows, width=width, labels=by_rank.labels)


#: Above this many ranks, per-rank tables of calls are summarised per call (mean over ranks, and the busiest).
RANKS_LISTED = 8


def _keras_call_lines(calls: pd.DataFrame, width: int, by_rank: _RankColumns) -> list[str]:
    """Per rank and Keras call; with more than ``RANKS_LISTED`` ranks, per call: the mean rank and the busiest."""
    if calls["rank"].nunique() <= RANKS_LISTED:
        rows = [
            [
                *by_rank.cells(row.rank),
                str(row.method),
                str(row.model) or MISSING,
                str(row.calls),
                format_seconds(row.seconds),
                format_seconds(row.ms_per_call / 1e3),
                format_seconds(row.model_s),
                format_seconds(row.own_s),
            ]
            for row in calls.itertuples()
        ]
        header = [*by_rank.header, "call", "model", "calls", "seconds", "per call", "model runs", "own"]
        return text_table(header, rows, width=width, labels=by_rank.labels)
    rows = []
    for (method, model), group in calls.groupby(["method", "model"], sort=True):
        busiest = group.loc[group["own_s"].idxmax()]
        rows.append(
            [
                str(method),
                str(model) or MISSING,
                str(len(group)),
                f"{group['calls'].mean():.0f}",
                format_seconds(group["seconds"].mean()),
                format_seconds(group["seconds"].sum() / group["calls"].sum()),
                format_seconds(group["own_s"].mean()),
                f"rank {int(busiest['rank'])}, {format_seconds(busiest['own_s'])}",
            ]
        )
    header = ["call", "model", "ranks", "calls", "seconds", "per call", "own", "most own"]
    return text_table(header, rows, width=width, labels=2)


def findings_lines(found: pd.DataFrame, width: int) -> list[str]:
    lines: list[str] = []
    for row in found.itertuples():
        if is_finite_number(row.seconds_lost):
            cost = f"{format_seconds(row.seconds_lost)} lost ({format_percent(row.fraction_of_wall)} of wall)"
            lines += _wrapped(f"{row.order:>2}. {row.kind}: {cost}; ranks {row.ranks}", width=width)
        else:  # what the run lacks: its cost cannot be measured
            lines += _wrapped(f"{row.order:>2}. {row.kind} (note); ranks {row.ranks}", width=width)
        lines += _wrapped(str(row.text), " " * 4, width=width)
    return lines


# --------------------------------------------------------------------------------------------
# Two runs compared
# --------------------------------------------------------------------------------------------


def format_comparison(
    comparison: pd.DataFrame, header_a: Mapping[str, Any], header_b: Mapping[str, Any], *, width: int = WIDTH
) -> str:
    """Both runs' headers, the wall times, then per phase and per rank where B's time differs from A's."""
    lines = format_header(header_a, label="A") + format_header(header_b, label="B")
    wall = comparison[comparison["scope"] == SCOPE_WALL]
    if len(wall):
        row = wall.iloc[0]
        lines += [
            "",
            f"wall time  A {format_seconds(row.seconds_a)}  B {format_seconds(row.seconds_b)}"
            f"  B − A {format_seconds(row.delta_s, signed=True)}  B / A {format_ratio(row.ratio)}",
        ]
    totals = comparison[comparison["scope"] == SCOPE_TOTAL]
    lines += ["", "Per phase, all ranks (rank-seconds)"]
    values = ["A", "B", "B − A", "B / A", "recorded in"]
    lines += text_table(["phase", *values], _delta_rows(totals, ["phase"]), width=width)
    per_rank = comparison[comparison["scope"] == SCOPE_RANK]
    changed = per_rank[(per_rank["seconds_a"] > 0) | (per_rank["seconds_b"] > 0)]
    lines += ["", "Per rank and phase (phases with time in either run)"]
    lines += text_table(["rank", "phase", *values], _delta_rows(changed, ["rank", "phase"]), width=width, labels=2)
    return "\n".join(lines)


def _delta_rows(frame: pd.DataFrame, keys: list[str]) -> list[list[str]]:
    return [
        [
            *[str(getattr(row, key)) for key in keys],
            format_seconds(row.seconds_a),
            format_seconds(row.seconds_b),
            format_seconds(row.delta_s, signed=True),
            format_ratio(row.ratio),
            row.present,
        ]
        for row in frame.itertuples()
    ]
