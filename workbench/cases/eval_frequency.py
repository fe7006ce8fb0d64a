"""Case study "evaluation frequency": how much per-epoch evaluation on rank 0 costs, and the fix.

Seed (000): an MPI + TensorFlow MNIST run spent most of its "MPI time" with ranks waiting for
rank 0 to evaluate on the full training and test sets every epoch; evaluating every 30 epochs
gave 2.18x. Seed (002) found the same: evaluation frequency grew with node count.

The experiment: ranks 1..N × evaluation interval × backend, every run recorded in the store. The
summary table has wall time, phase breakdown, speedup over 1 rank, speedup from the fix at each
rank count, the what-if estimate (made from the interval-1 run before the fixed run is measured)
next to the measured value, and findings.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from workbench import analysis
from workbench.cluster import Cluster
from workbench.config import ClusterConfig, physical_cores
from workbench.store import Run, create_run, update_run_meta
from workbench.workloads.eval_frequency import BACKENDS, TrainSettings, train_on_rank

#: Presets: "reduced" runs here (2 cores) in a few minutes; "full" is the seed's shape.
PRESETS: dict[str, dict[str, Any]] = {
    "reduced": {"epochs": 30, "dataset_repeat": 2, "intervals": (1, 30)},
    "full": {"epochs": 60, "dataset_repeat": 8, "intervals": (1, 30)},
    "ci": {"epochs": 6, "dataset_repeat": 1, "intervals": (1, 6)},
}


@dataclass
class EvalFrequencyResult:
    """Everything the notebook and the headless runner show."""

    table: pd.DataFrame
    breakdown: pd.DataFrame
    findings: pd.DataFrame
    scaling: pd.DataFrame
    runs: dict[str, Path] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def start_one_async(
    cluster: Cluster, root: str | Path, settings: TrainSettings, *, suffix: str = "-live"
) -> tuple[Path, Any]:
    """Start one run without blocking (for the live dashboard); returns (run path, AsyncResult)."""
    run_path = create_run(
        root,
        f"{settings.backend}-n{cluster.n}-k{settings.eval_interval}{suffix}",
        ranks=cluster.n,
        config={"train": asdict(settings), "cluster": cluster.config.as_dict()},
    )
    async_result = cluster.client[sorted(cluster.client.ids)].apply_async(
        train_on_rank, str(run_path.resolve()), asdict(settings)
    )
    return run_path, async_result


def run_one(cluster: Cluster, root: str | Path, settings: TrainSettings) -> tuple[Path, list[dict[str, Any]]]:
    """One training run on all engines of ``cluster``, recorded under ``root``; blocking."""
    run_path, async_result = start_one_async(cluster, root, settings, suffix="")
    try:
        results = async_result.get()
    except Exception:
        update_run_meta(run_path, status="failed")
        raise
    update_run_meta(
        run_path, status="finished", wall_s=max(r["wall_s"] for r in results), history=results[0]["history"]
    )
    return run_path, results


def summarise_run(run: Run, settings: TrainSettings, results: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of the result table from a recorded run."""
    events = run.events
    pop = analysis.pop_metrics(events).iloc[0]
    throughput = analysis.step_throughput(
        events, warmup_steps=10, measured_steps=10_000, samples_per_step=settings.batch * len(results)
    ).iloc[0]
    breakdown = analysis.phase_breakdown(events, by=("rank",))
    fractions = breakdown.groupby("phase")["seconds"].sum() / breakdown["seconds"].sum()
    row = {
        "run_id": run.run_id,
        "backend": settings.backend,
        "ranks": len(results),
        "eval_interval": settings.eval_interval,
        "eval_mode": settings.eval_mode,
        "wall_s": max(r["wall_s"] for r in results),
        "train_samples_per_s": float(throughput["throughput"]),
        "load_balance": float(pop["load_balance"]),
        "communication_efficiency": float(pop["communication_efficiency"]),
        "parallel_efficiency": float(pop["parallel_efficiency"]),
        "test_accuracy": results[0]["history"][-1]["test_accuracy"] if results[0]["history"] else float("nan"),
        "path": str(run.path),
    }
    row.update({f"fraction_{phase}": float(value) for phase, value in fractions.items()})
    return row


def run(
    *,
    ranks: int | None = None,
    preset: str = "reduced",
    backends: tuple[str, ...] = BACKENDS,
    intervals: tuple[int, ...] | None = None,
    out: str | Path | None = None,
    cluster_config: ClusterConfig | None = None,
    on_progress: Callable[[str], None] | None = None,
    settings_overrides: dict[str, Any] | None = None,
) -> EvalFrequencyResult:
    """The sweep: ranks 1..N × interval × backend; a cluster per rank count."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}")
    for backend in backends:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    spec = dict(PRESETS[preset])
    intervals = tuple(intervals or spec.pop("intervals"))
    spec.pop("intervals", None)
    max_ranks = ranks or physical_cores()
    out = Path(out or "artifacts/eval-frequency")
    runs_root = out / "runs"
    base = TrainSettings(**{**spec, **(settings_overrides or {})})
    rows, run_paths, events_by_run = [], {}, {}
    for n in range(1, max_ranks + 1):
        config = replace(cluster_config or ClusterConfig(), n=n)
        with Cluster(config=config) as cluster:
            for backend in backends:
                for interval in intervals:
                    settings = replace(base, backend=backend, eval_interval=interval)
                    if on_progress:
                        on_progress(f"{backend}, {n} rank(s), evaluate every {interval} epoch(s)")
                    run_path, results = run_one(cluster, runs_root, settings)
                    recorded = Run.load(run_path)
                    row = summarise_run(recorded, settings, results)
                    rows.append(row)
                    run_paths[row["run_id"]] = run_path
                    events_by_run[row["run_id"]] = recorded.events
    table = pd.DataFrame(rows)
    table = _add_speedups(table, intervals, events_by_run)
    return _finish(table, events_by_run, run_paths, max_ranks, backends, intervals, out)


def _add_speedups(
    table: pd.DataFrame, intervals: tuple[int, ...], events_by_run: dict[str, pd.DataFrame]
) -> pd.DataFrame:
    """Speedup over 1 rank, speedup from the evaluation fix, and the what-if estimate beside it."""
    table = table.copy()
    one_rank = table[table["ranks"] == 1].set_index(["backend", "eval_interval"])["wall_s"]
    table["speedup_vs_1_rank"] = [
        one_rank.get((b, k), float("nan")) / w
        for b, k, w in zip(table["backend"], table["eval_interval"], table["wall_s"])
    ]
    base_interval, fixed = min(intervals), max(intervals)
    baseline = table[table["eval_interval"] == base_interval].set_index(["backend", "ranks"])
    estimates, fix_speedups = [], []
    for row in table.itertuples():
        if row.eval_interval == fixed and (row.backend, row.ranks) in baseline.index:
            base_row = baseline.loc[(row.backend, row.ranks)]
            what_if = analysis.estimate_eval_interval(
                events_by_run[base_row["run_id"]], fixed, current_interval=base_interval
            )
            estimates.append(what_if.estimated_s)
            fix_speedups.append(base_row["wall_s"] / row.wall_s)
        else:
            estimates.append(float("nan"))
            fix_speedups.append(float("nan"))
    table["whatif_estimated_wall_s"] = estimates
    table["speedup_eval_fix"] = fix_speedups
    return table


def _finish(
    table: pd.DataFrame,
    events_by_run: dict[str, pd.DataFrame],
    run_paths: dict[str, Path],
    max_ranks: int,
    backends: tuple[str, ...],
    intervals: tuple[int, ...],
    out: Path,
) -> EvalFrequencyResult:
    breakdowns, finding_frames = [], []
    for run_id, events in events_by_run.items():
        row = table[table["run_id"] == run_id].iloc[0]
        breakdown = analysis.phase_breakdown(events, by=("rank",))
        breakdowns.append(
            breakdown.assign(
                run_id=run_id, backend=row["backend"], ranks=row["ranks"], eval_interval=row["eval_interval"]
            )
        )
        found = analysis.findings(events)
        cores = physical_cores()
        threads = int(ClusterConfig(n=int(row["ranks"])).threads)
        trap = analysis.oversubscription_finding(int(row["ranks"]), threads, cores)
        found = pd.concat([found, trap], ignore_index=True) if len(trap) else found
        finding_frames.append(
            found.assign(run_id=run_id, backend=row["backend"], ranks=row["ranks"], eval_interval=row["eval_interval"])
        )
    throughput_rows = table[table["eval_interval"] == max(intervals)][["backend", "ranks", "train_samples_per_s"]]
    scaling = pd.concat(
        [
            analysis.scaling_table(
                group.rename(columns={"train_samples_per_s": "throughput"}), "weak", statistic="mean"
            ).assign(backend=backend)
            for backend, group in throughput_rows.groupby("backend")
        ],
        ignore_index=True,
    )
    largest = table[(table["ranks"] == max_ranks) & table["speedup_eval_fix"].notna()]
    by_backend = dict(zip(largest["backend"], largest["speedup_eval_fix"].astype(float)))
    whatif = dict(zip(largest["backend"], (largest["whatif_estimated_wall_s"] / largest["wall_s"]).astype(float)))
    scaling_by_backend = {
        b: float(g.loc[g["ranks"] == max_ranks, "speedup"].iloc[0])
        for b, g in scaling.groupby("backend")
        if (g["ranks"] == max_ranks).any()
    }
    primary = backends[0]
    summary = {
        "case": "eval-frequency",
        "ranks": max_ranks,
        "backend": primary,
        "speedup_eval_fix": by_backend.get(primary),
        "speedup_eval_fix_by_backend": by_backend,
        "whatif_estimate_over_measured": whatif,
        "throughput_speedup_vs_1_rank": scaling_by_backend,
        "intervals": list(intervals),
        "seed_speedup_eval_fix": 2.18,
        "out": str(out),
    }
    result = EvalFrequencyResult(
        table=table,
        breakdown=pd.concat(breakdowns, ignore_index=True),
        findings=pd.concat(finding_frames, ignore_index=True),
        scaling=scaling,
        runs=run_paths,
        summary=summary,
    )
    write_outputs(result, out)
    return result


def write_outputs(result: EvalFrequencyResult, out: Path) -> Path:
    """Parquet tables and one self-contained HTML report into ``out``; returns the report path."""
    from workbench import figures
    from workbench.report import write_report

    out.mkdir(parents=True, exist_ok=True)
    result.table.to_parquet(out / "runs.parquet")
    result.breakdown.to_parquet(out / "breakdown.parquet")
    result.findings.to_parquet(out / "findings.parquet")
    result.scaling.to_parquet(out / "scaling.parquet")
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2, default=str))
    table = result.table
    largest = int(table["ranks"].max())
    slow = table[(table["ranks"] == largest) & (table["eval_interval"] == table["eval_interval"].min())].iloc[0]
    sections: list[tuple[str, Any]] = [
        ("Summary", _summary_text(result.summary)),
        (
            "Timeline of the slow run",
            figures.timeline_figure(
                Run.load(slow["path"]).events,
                title=f"{slow['backend']}, {largest} ranks, evaluate every {slow['eval_interval']} epoch(s)",
            ),
        ),
        (
            "Phase breakdown per rank",
            figures.breakdown_figure(
                result.breakdown[result.breakdown["run_id"] == slow["run_id"]].drop(columns=["run_id"])
            ),
        ),
        ("Runs", table.drop(columns=["path"]).round(4)),
        (
            "Throughput scaling (training steps only)",
            figures.scaling_figure(result.scaling[result.scaling["backend"] == result.summary["backend"]]),
        ),
        ("Findings", result.findings[["backend", "ranks", "eval_interval", "text", "seconds_lost"]].round(3)),
    ]
    return write_report(out / "report.html", title="Evaluation frequency", sections=sections)


def _summary_text(summary: dict[str, Any]) -> str:
    fix = summary.get("speedup_eval_fix")
    lines = [
        f"Evaluating every {max(summary['intervals'])} epochs instead of every {min(summary['intervals'])} "
        f"made training {fix:.2f}x faster on {summary['ranks']} ranks ({summary['backend']})"
        if fix
        else "No evaluation-fix speedup was measured.",
        f"The seed measured {summary['seed_speedup_eval_fix']}x.",
    ]
    for backend, ratio in summary["whatif_estimate_over_measured"].items():
        lines.append(f"What-if estimate / measured wall time ({backend}): {ratio:.2f}")
    for backend, speedup in summary["throughput_speedup_vs_1_rank"].items():
        lines.append(f"Training throughput {summary['ranks']} ranks vs 1 rank ({backend}): {speedup:.2f}x")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    backends = BACKENDS if args.backend in (None, "both") else (args.backend,)
    result = run(
        ranks=args.ranks,
        preset=args.preset,
        backends=backends,
        out=args.out,
        on_progress=None if args.json else (lambda text: print(f"  running: {text}", file=sys.stderr)),
    )
    if args.json:
        print(json.dumps(result.summary, indent=2, default=str))
    else:
        columns = [
            "backend",
            "ranks",
            "eval_interval",
            "wall_s",
            "speedup_eval_fix",
            "whatif_estimated_wall_s",
            "speedup_vs_1_rank",
            "train_samples_per_s",
            "parallel_efficiency",
        ]
        print(result.table[columns].round(3).to_string(index=False))
        print()
        print(_summary_text(result.summary))
        print(f"report: {Path(result.summary['out']) / 'report.html'}")
    return 0
