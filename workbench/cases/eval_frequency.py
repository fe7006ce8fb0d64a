"""Case study "evaluation frequency": how much per-epoch evaluation on rank 0 costs, and the fix.

The published study (000): an MPI + TensorFlow MNIST run spent most of its "MPI time" with ranks waiting for
rank 0 to evaluate on the full training and test sets every epoch; evaluating every 30 epochs
gave 2.18x. The published study (002) found the same: evaluation frequency grew with node count.

The sweep: ranks 1..N × backend × evaluation interval, every point one recorded run. The result
has wall time, phase breakdown, speedup over 1 rank, the speedup from the fix at each rank count,
and the what-if estimate (made from the interval-1 run alone) beside the measured value.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from workbench import analysis
from workbench.analysis.caveats import sweep_caveats
from workbench.experiment import Case, CaseOption, ExperimentResult, Point, parse_counts
from workbench.store import RunData
from workbench.workloads.eval_frequency import BACKENDS, TrainSettings, train_on_rank

PUBLISHED_SPEEDUP_EVAL_FIX = 2.18
WARMUP_STEPS = 10  # steps left out of throughput: graph tracing and first allocations


@dataclass(frozen=True)
class EvalFrequencySettings:
    """A preset: the training run's shape and the sweep's intervals and backends."""

    epochs: int
    dataset_repeat: int
    intervals: tuple[int, ...]
    backends: tuple[str, ...] = BACKENDS
    eval_mode: str = "rank0"
    batch: int = 64
    dataset: str = "digits"

    def train(self, backend: str, eval_interval: int) -> TrainSettings:
        """The workload's settings at one point of the sweep."""
        return TrainSettings(
            backend=backend,
            epochs=self.epochs,
            eval_interval=eval_interval,
            eval_mode=self.eval_mode,
            batch=self.batch,
            dataset=self.dataset,
            dataset_repeat=self.dataset_repeat,
        )


def parse_backends(text: str) -> tuple[str, ...]:
    """``--backend both`` (or ``mpi4py,horovod``) -> the backends to sweep, checked."""
    chosen = BACKENDS if text == "both" else tuple(b.strip() for b in text.split(",") if b.strip())
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown or not chosen:
        raise ValueError(f"backend {text!r} is unknown: use one of {', '.join(BACKENDS)} or both")
    return chosen


def parse_intervals(text: str) -> tuple[int, ...]:
    """``--intervals 1,30`` -> (1, 30): the first is the baseline, the last the fix."""
    return parse_counts(text, at_least=2, example="1,30")


class EvalFrequency(Case):
    name = "eval-frequency"
    title = "Evaluation frequency"
    about = "rank 0 evaluating every epoch stalls the other ranks; the fix and its what-if (as published: 2.18x)"
    presets: Mapping[str, EvalFrequencySettings] = {
        # ci: 20 evaluations against 1, so that the fix's effect (~1.5-2x) stands clear of a shared machine's noise
        # on runs of a few seconds (at 6 epochs a loaded 2-core machine measured 0.96x on a 0.9 s run)
        "ci": EvalFrequencySettings(epochs=20, dataset_repeat=1, intervals=(1, 20)),
        "reduced": EvalFrequencySettings(epochs=30, dataset_repeat=2, intervals=(1, 30)),
        "full": EvalFrequencySettings(epochs=60, dataset_repeat=8, intervals=(1, 30)),
    }
    options = (
        CaseOption("--backend", "backends", "mpi4py, horovod or both (default)", parse_backends),
        CaseOption("--intervals", "intervals", "evaluation intervals in epochs, e.g. 1,30", parse_intervals),
        CaseOption("--epochs", "epochs", "epochs per run", int),
    )
    workload = staticmethod(train_on_rank)

    def projection_inputs(self, run: RunData, row: Any) -> tuple[dict[str, Any], float, str]:
        """The mpi4py backend calls MPI.Allreduce directly (no Horovod cost per call); the workload takes whole
        batches of each rank's shard, so the training set's size fixes its steps per epoch at every rank count;
        measured: the wall time."""
        kwargs = {
            "step_costs": {},
            "no_horovod": row.backend != "horovod",
            "epoch_samples": _training_samples(run.meta),
        }
        return kwargs, float(row.wall_s), "wall_s"

    def points(self, settings: EvalFrequencySettings, max_ranks: int) -> list[Point]:
        return [
            Point.of(n, {"backend": backend, "eval_interval": k}, {"eval_interval": "k"})
            for n in range(1, max_ranks + 1)
            for backend in settings.backends
            for k in settings.intervals
        ]

    def workload_kwargs(self, settings: EvalFrequencySettings, point: Point) -> dict[str, Any]:
        return {"settings_dict": asdict(settings.train(point["backend"], point["eval_interval"]))}

    def row(self, run: RunData, point: Point, settings: EvalFrequencySettings) -> dict[str, Any]:
        results = run.meta.get("rank_results") or []
        events = run.events
        pop = analysis.pop_metrics(events).iloc[0]
        throughput = analysis.step_throughput(
            events, warmup_steps=WARMUP_STEPS, measured_steps=10_000, samples_per_step=settings.batch * point.ranks
        ).iloc[0]
        breakdown = analysis.phase_breakdown(events, by=("rank",))
        fractions = breakdown.groupby("phase")["seconds"].sum() / breakdown["seconds"].sum()
        history = results[0].get("history", []) if results else []
        row = {
            "run_id": run.run_id,
            "backend": point["backend"],
            "ranks": point.ranks,
            "eval_interval": point["eval_interval"],
            "eval_mode": settings.eval_mode,
            "wall_s": max((r["wall_s"] for r in results), default=float("nan")),
            "train_samples_per_s": float(throughput["throughput"]),
            "load_balance": float(pop["load_balance"]),
            "communication_efficiency": float(pop["communication_efficiency"]),
            "parallel_efficiency": float(pop["parallel_efficiency"]),
            "test_accuracy": history[-1]["test_accuracy"] if history else float("nan"),
            # Cristian's estimate of the other ranks' clocks against rank 0's: the bound, and the offset found
            "clock_precision_ns": max((r.get("clock_precision_ns") or 0 for r in results[1:]), default=float("nan")),
            "clock_offset_ns": max((abs(r.get("clock_offset_ns") or 0) for r in results[1:]), default=float("nan")),
            "path": str(run.path),
        }
        row.update({f"fraction_{phase}": float(value) for phase, value in fractions.items()})
        return row

    def tables(
        self, rows: pd.DataFrame, runs: Mapping[str, RunData], settings: EvalFrequencySettings
    ) -> dict[str, Any]:
        table = add_speedups(
            rows, settings.intervals, {row.run_id: runs[row.point].events for row in rows.itertuples()}
        )
        breakdowns, found = [], []
        labels = ["run_id", "backend", "ranks", "eval_interval"]
        for row in table.itertuples():
            run = runs[row.point]
            tags = {name: getattr(row, name) for name in labels}
            breakdowns.append(analysis.phase_breakdown(run.events, by=("rank",)).assign(**tags))
            trap = analysis.oversubscription_finding_from_meta(run.meta, wall_s=float(row.wall_s))
            found.append(analysis.combine_findings(analysis.findings(run.events), trap).assign(**tags))
        fixed = table[table["eval_interval"] == max(settings.intervals)]
        scaling = pd.concat(
            [
                analysis.scaling_table(
                    group.rename(columns={"train_samples_per_s": "throughput"})[["ranks", "throughput"]],
                    "weak",
                    statistic="mean",
                ).assign(backend=backend)
                for backend, group in fixed.groupby("backend")
            ],
            ignore_index=True,
        )
        cores = min((int(run.meta.get("cores") or 0) for run in runs.values()), default=0) or None
        # ranks that share one host's cores: all of them on one machine, one per node on a cluster's nodes
        sharing = max((_ranks_on_busiest_host(run) for run in runs.values()), default=0)
        caveats = analysis.combine_findings(
            *(
                sweep_caveats(scaling=group, label=f"{backend}: ")
                for backend, group in scaling.groupby("backend", sort=False)
            ),
            sweep_caveats(walls_s=table["wall_s"], ranks=sharing or int(table["ranks"].max()), cores=cores),
        ).drop_duplicates("text")
        return {
            "runs": table,
            "breakdown": pd.concat(breakdowns, ignore_index=True),
            "findings": pd.concat(found, ignore_index=True),
            "scaling": scaling,
            "caveats": caveats,
        }

    def summary(self, rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame], settings: Any) -> dict[str, Any]:
        table, scaling = tables["runs"], tables["scaling"]
        largest_ranks = int(table["ranks"].max())
        largest = table[(table["ranks"] == largest_ranks) & table["speedup_eval_fix"].notna()]
        by_backend = dict(zip(largest["backend"], largest["speedup_eval_fix"].astype(float)))
        whatif = dict(zip(largest["backend"], (largest["whatif_estimated_wall_s"] / largest["wall_s"]).astype(float)))
        throughput_speedup = {
            backend: float(group.loc[group["ranks"] == largest_ranks, "speedup"].iloc[0])
            for backend, group in scaling.groupby("backend")
            if (group["ranks"] == largest_ranks).any()
        }
        primary = settings.backends[0]
        return {
            "largest_ranks": largest_ranks,
            "backend": primary,
            "speedup_eval_fix": by_backend.get(primary),
            "speedup_eval_fix_by_backend": by_backend,
            "whatif_estimate_over_measured": whatif,
            "throughput_speedup_vs_1_rank": throughput_speedup,
            "intervals": list(settings.intervals),
            "published_speedup_eval_fix": PUBLISHED_SPEEDUP_EVAL_FIX,
            "caveats": [str(text) for text in tables["caveats"]["text"]] if "caveats" in tables else [],
            "clock_alignment_ns": {
                "precision": [float(aligned["clock_precision_ns"].min()), float(aligned["clock_precision_ns"].max())],
                "offset": [float(aligned["clock_offset_ns"].min()), float(aligned["clock_offset_ns"].max())],
                "runs": len(aligned),
            }
            if len(aligned := table.dropna(subset=["clock_precision_ns"]))
            else None,
        }

    def text(self, summary: Mapping[str, Any]) -> str:
        intervals, ranks, fix = summary["intervals"], summary["largest_ranks"], summary.get("speedup_eval_fix")
        lines = [
            f"- Evaluating every {max(intervals)} epochs instead of every {min(intervals)} made training "
            f"**{fix:.2f}x** faster on {ranks} ranks ({summary['backend']}); the published study measured "
            f"{summary['published_speedup_eval_fix']}x."
            if fix
            else "- No evaluation-fix speedup was measured (the sweep lacks the baseline or the fixed run)."
        ]
        for backend, ratio in summary["whatif_estimate_over_measured"].items():
            lines.append(
                f"- What-if estimate made from the slow run alone, over the measured fixed run ({backend}): {ratio:.2f}"
            )
        for backend, speedup in summary["throughput_speedup_vs_1_rank"].items():
            lines.append(
                f"- Training throughput (evaluation excluded), {ranks} ranks over 1 rank ({backend}): {speedup:.2f}x"
            )
        lines += [f"- **Caveat**: {text}." for text in summary.get("caveats", [])]
        return "\n".join(lines)

    def headline(self, result: ExperimentResult) -> pd.DataFrame:
        columns = [
            "backend",
            "ranks",
            "eval_interval",
            "wall_s",
            "speedup_eval_fix",
            "whatif_estimated_wall_s",
            "wall_speedup_vs_1_rank",
            "train_samples_per_s",
            "parallel_efficiency",
        ]
        return result.tables["runs"][columns]

    def report_sections(self, result: ExperimentResult) -> list[tuple[str, Any]]:
        from workbench import figures
        from workbench.report import REPORT_MAX_SPANS, REPORT_WIDTH_PX, Details

        table, summary = result.tables["runs"], result.summary
        largest = int(table["ranks"].max())
        slow = table[(table["ranks"] == largest) & (table["eval_interval"] == table["eval_interval"].min())].iloc[0]
        return [
            ("Summary", result.text()),
            ("Runs", self.headline(result)),  # the numbers first, the figures that explain them below
            (
                "Timeline of the slow run",
                figures.timeline_figure(
                    result.run(slow["point"]).events,
                    max_spans=REPORT_MAX_SPANS,
                    width_px=REPORT_WIDTH_PX,
                    title=f"{slow['backend']}, {largest} ranks, evaluate every {slow['eval_interval']} epoch(s)",
                ),
            ),
            (
                "Phase breakdown per rank",
                figures.breakdown_figure(
                    result.tables["breakdown"][result.tables["breakdown"]["run_id"] == slow["run_id"]].drop(
                        columns=["run_id"]
                    )
                ),
            ),
            ("Runs: every column", Details(table.drop(columns=["path"]), "show the runs' other columns")),
            (
                "Throughput scaling (training steps only)",
                figures.scaling_figure(
                    result.tables["scaling"][result.tables["scaling"]["backend"] == summary["backend"]]
                ),
            ),
            (
                "Findings",
                result.tables["findings"][["backend", "ranks", "eval_interval", "text", "seconds_lost"]].round(3),
            ),
        ]


def add_speedups(
    table: pd.DataFrame, intervals: tuple[int, ...], events_by_run: Mapping[str, pd.DataFrame]
) -> pd.DataFrame:
    """Speedup over 1 rank, speedup from the evaluation fix, and the what-if estimate beside it.

    ``wall_speedup_vs_1_rank`` is a ratio of wall times (evaluation included); the summary's
    ``throughput_speedup_vs_1_rank`` is a ratio of training throughputs (evaluation excluded):
    two questions, two names.
    """
    table = table.copy()
    one_rank = table[table["ranks"] == 1].set_index(["backend", "eval_interval"])["wall_s"]
    table["wall_speedup_vs_1_rank"] = [
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


CASE = EvalFrequency()

__all__ = ["CASE", "EvalFrequency", "EvalFrequencySettings", "add_speedups", "parse_backends", "parse_intervals"]


def _ranks_on_busiest_host(run: RunData) -> int:
    """How many of a run's ranks ran on its busiest host (0 when its ranks' hosts were not recorded)."""
    hosts = run.rank_meta["host"] if "host" in run.rank_meta else pd.Series(dtype=object)
    hosts = hosts[hosts.astype(str) != ""]
    return int(hosts.value_counts().max()) if len(hosts) else 0


def _training_samples(meta: Mapping[str, Any]) -> int | None:
    """The workload's training-set size, from the settings its ranks reported (None: unknown)."""
    results = meta.get("rank_results") or []
    settings = (results[0] if results else {}).get("settings")
    return _training_set_size(json.dumps(settings, sort_keys=True)) if settings else None


@functools.lru_cache(maxsize=16)
def _training_set_size(settings_json: str) -> int:
    """Loads the data set once per distinct settings: every run of a sweep reports the same ones."""
    from workbench.workloads.eval_frequency import TrainSettings, load_data

    return len(load_data(TrainSettings(**json.loads(settings_json))).x_train)
