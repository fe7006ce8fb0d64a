"""Case study "input pipeline": queue exhaustion on contested I/O, and the fixes.

The published study trained LeNet-5 on MNIST (batch 256) on an HPC system where ~16 jobs shared the file
system: a step took ~50 ms with the standard asynchronous queue and ~3 ms with the data in memory
(~17x). The input queue ran dry because the dequeue rate of data-parallel training exceeded what
the reader threads could enqueue from shared storage; more threads only delayed it, while
**batch repetition** (a new batch only every k steps) let the queue refill, with diminishing returns
past k ≈ 16 and a cost in what each step learns.

The sweep, per rank count: contested storage × enqueue threads × interval k, the data in memory,
and the same reads through ``tf.data``. Storage contention is a model (shared token buckets, per-read
latency, competing jobs: ``workbench.workloads.contested_io``), stated in every report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workbench import analysis
from workbench.analysis import projection as pj
from workbench.events import BYTES_PER_MB
from workbench.experiment import Case, CaseOption, ExperimentResult, Point, parse_counts
from workbench.store import RunData
from workbench.workloads.contested_io import StorageModel
from workbench.workloads.input_pipeline import PipelineSettings, train_on_rank

PUBLISHED_SPEEDUP_IN_MEMORY = 17.0
WARMUP_STEPS = 2  # graph tracing and first allocations: not part of a step's steady cost
PUBLISHED_STEP_MS = {"contested": 50.0, "memory": 3.0}


#: LeNet-5's parameters: conv 5x5x1x6 + 6, conv 5x5x6x16 + 16, dense 400x120 + 120, 120x84 + 84, 84x10 + 10.
LENET5_PARAMETERS = 156 + 2416 + 48120 + 10164 + 850
#: One MNIST IDX record: 784 pixel bytes + 1 label byte.
MNIST_RECORD_BYTES = 785


@dataclass(frozen=True)
class InputPipelineSettings:
    """A preset: seconds of training per point, the sweep's axes and the storage model."""

    seconds: float
    threads: tuple[int, ...]
    intervals: tuple[int, ...]
    tf_data: bool = True
    all_rank_counts: bool = True  # False: only the largest rank count (the ci preset)
    batch: int = 256
    queue_capacity: int = 8
    fresh_batches_for_accuracy: int = 8
    storage: StorageModel = field(default_factory=StorageModel)

    def pipeline(self, point: Point) -> PipelineSettings:
        """The workload's settings at one point."""
        params = point.as_dict()
        return PipelineSettings(
            source=params["source"],
            threads=int(params.get("threads", 1)),
            interval=int(params.get("k", 1)),
            seconds=self.seconds,
            fresh_batches_for_accuracy=self.fresh_batches_for_accuracy,
            batch=self.batch,
            queue_capacity=self.queue_capacity,
            storage=self.storage,
        )


class InputPipeline(Case):
    name = "input-pipeline"
    title = "Input pipeline: queue exhaustion on contested I/O"
    about = "LeNet-5 fed by a queue from shared storage: threads, batch repetition, in-memory, tf.data"
    presets: Mapping[str, InputPipelineSettings] = {
        "ci": InputPipelineSettings(seconds=3.0, threads=(1,), intervals=(1, 8), tf_data=False, all_rank_counts=False),
        "reduced": InputPipelineSettings(seconds=5.0, threads=(1, 4), intervals=(1, 2, 4, 8, 16, 32)),
        "full": InputPipelineSettings(seconds=30.0, threads=(1, 2, 4, 8), intervals=(1, 2, 4, 8, 16, 32)),
    }
    options = (
        CaseOption("--threads", "threads", "enqueue threads to sweep, e.g. 1,4", parse_counts),
        CaseOption("--intervals", "intervals", "batch-repetition intervals k to sweep, e.g. 1,4,16", parse_counts),
        CaseOption("--seconds", "seconds", "training seconds per point", float),
    )
    workload = staticmethod(train_on_rank)

    def projection_inputs(self, run: RunData, row: Any) -> tuple[dict[str, Any], float, str]:
        """LeNet-5's gradients, the batch, and the contested storage the workload reads (``SharedStorage``: a file
        system read fairly per request by every reader, this job's and the other jobs', through the node's link);
        measured: the step."""
        settings = (run.meta.get("config") or {}).get("settings") or {}
        batch = int(settings.get("batch", 256))
        storage = settings.get("storage") or {}
        shared = None
        if row.source != "memory" and storage.get("filesystem_mb_s"):
            shared = pj.SharedStorage(
                bandwidth_bytes_per_s=storage["filesystem_mb_s"] * BYTES_PER_MB,
                other_readers=int(storage.get("other_jobs", 0)),
                readers_per_rank=int(row.threads),
                bytes_per_read=batch * MNIST_RECORD_BYTES,
                node_link_bytes_per_s=(storage.get("node_link_mb_s") or 0) * BYTES_PER_MB or None,
                steps_per_read=int(row.interval) if pd.notna(row.interval) else 1,
                # tf.numpy_function readers in map() run on TensorFlow's threads: at most those at once
                readers_bound_by_threads=row.source == "tf.data",
            )
        kwargs = {
            "step_costs": {"gradient_bytes": 4 * LENET5_PARAMETERS, "batch_per_rank": batch},
            "shared_storage": shared,
        }
        return kwargs, float(row.step_ms) / 1e3, "step_s"

    def points(self, settings: InputPipelineSettings, max_ranks: int) -> list[Point]:
        counts = range(1, max_ranks + 1) if settings.all_rank_counts else [max_ranks]
        points = []
        for n in counts:
            points += [
                Point.of(n, {"source": "contested", "threads": t, "k": k})
                for t in settings.threads
                for k in settings.intervals
            ]
            points.append(Point.of(n, {"source": "memory"}))
            if settings.tf_data:
                points += [Point.of(n, {"source": "tf.data", "threads": t}) for t in settings.threads]
        return points

    def workload_kwargs(self, settings: InputPipelineSettings, point: Point) -> dict[str, Any]:
        return {"settings_dict": asdict(settings.pipeline(point))}

    def row(self, run: RunData, point: Point, settings: InputPipelineSettings) -> dict[str, Any]:
        results = run.meta.get("rank_results") or []
        params = point.as_dict()
        shares = analysis.input_share(run.events)
        timing = analysis.step_times(run.events, warmup_steps=WARMUP_STEPS)
        dry = analysis.queue_exhaustion(run.counters)
        steps = np.array([r["steps"] for r in results], dtype=float)
        walls = np.array([r["wall_s"] for r in results], dtype=float)
        enqueued = [r["enqueued"] / r["wall_s"] for r in results if r.get("enqueued") is not None]
        first = results[0] if results else {}
        return {
            "run_id": run.run_id,
            "ranks": point.ranks,
            "source": params["source"],
            "threads": int(params.get("threads", 0)),
            "interval": int(params.get("k", 1)),
            "steps": int(steps.min()) if len(steps) else 0,
            "step_ms": float(timing["mean_ms"].mean()) if len(timing) else float("nan"),
            "samples_per_s": float((steps * settings.batch / walls).sum()) if len(steps) else float("nan"),
            "fresh_samples_per_s": float(sum(r["fresh_batches"] * settings.batch / r["wall_s"] for r in results)),
            "input_share": float(shares["input_share"].mean()) if len(shares) else float("nan"),
            "queue_empty_fraction": float(dry["empty_fraction"].mean()) if len(dry) else float("nan"),
            "ran_dry_after_s": float(dry["ran_dry_after_s"].min()) if len(dry) else float("nan"),
            "net_enqueue_batches_per_s": float(np.mean(enqueued)) if enqueued else float("nan"),
            "accuracy_at_time": first.get("accuracy_at_time", float("nan")),
            "accuracy_at_fresh_samples": first.get("accuracy_at_fresh_samples", float("nan")),
            "path": str(run.path),
        }

    def tables(
        self, rows: pd.DataFrame, runs: Mapping[str, RunData], settings: InputPipelineSettings
    ) -> dict[str, Any]:
        table = rows.copy()
        memory = table[table["source"] == "memory"].set_index("ranks")["step_ms"]
        table["slowdown_vs_memory"] = [
            step / memory.get(n, float("nan")) for n, step in zip(table["ranks"], table["step_ms"])
        ]
        found, depth = [], []
        for row in table.itertuples():
            run = runs[row.point]
            tags = {"run_id": row.run_id, "ranks": row.ranks, "source": row.source, "threads": row.threads}
            tags["interval"] = row.interval
            found_here = analysis.input_findings(run.events, run.counters)
            if len(found_here):
                found.append(found_here.assign(**tags))
            counters = run.counters[run.counters["name"] == "queue_depth"]
            if len(counters):
                depth.append(counters[["rank", "name", "time_ns", "value"]].assign(point=row.point))
        return {
            "runs": table,
            "findings": pd.concat(found, ignore_index=True) if found else pd.DataFrame(),
            "queue_depth": pd.concat(depth, ignore_index=True) if depth else pd.DataFrame(),
        }

    def summary(self, rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame], settings: Any) -> dict[str, Any]:
        table = tables["runs"]
        largest = int(table["ranks"].max())
        at = table[table["ranks"] == largest]
        contested = at[at["source"] == "contested"]
        baseline = contested[(contested["interval"] == 1) & (contested["threads"] == contested["threads"].min())]
        memory = at[at["source"] == "memory"]
        speedup = (
            float(baseline["step_ms"].iloc[0] / memory["step_ms"].iloc[0]) if len(baseline) and len(memory) else None
        )
        step_ms = {
            f"threads={t}": {str(int(k)): round(float(ms), 2) for k, ms in zip(g["interval"], g["step_ms"])}
            for t, g in contested.groupby("threads")
        }
        by_interval = contested[contested["threads"] == contested["threads"].min()].sort_values("interval")
        accuracy = {
            str(int(r.interval)): {"at_time": r.accuracy_at_time, "at_fresh_samples": r.accuracy_at_fresh_samples}
            for r in by_interval.itertuples()
        }
        fixes = at[at["point"] != (baseline["point"].iloc[0] if len(baseline) else "")]
        best = fixes.loc[fixes["step_ms"].idxmin()] if len(fixes) else None
        by_ranks = {}
        for n, group in table.groupby("ranks"):
            default = group[(group["source"] == "contested") & (group["interval"] == 1)].sort_values("threads")
            in_memory = group[group["source"] == "memory"]
            if len(default) and len(in_memory):
                by_ranks[str(int(n))] = float(default["step_ms"].iloc[0] / in_memory["step_ms"].iloc[0])
        return {
            "largest_ranks": largest,
            "speedup_in_memory": speedup,
            "speedup_in_memory_by_ranks": by_ranks,
            "published_speedup_in_memory": PUBLISHED_SPEEDUP_IN_MEMORY,
            "step_ms": step_ms,
            "step_ms_memory": float(memory["step_ms"].iloc[0]) if len(memory) else None,
            "step_ms_tf_data": {
                f"threads={int(r.threads)}": float(r.step_ms) for r in at[at["source"] == "tf.data"].itertuples()
            },
            "queue_empty_fraction": {
                r.point: (None if np.isnan(r.queue_empty_fraction) else float(r.queue_empty_fraction))
                for r in contested.itertuples()
            },
            "accuracy_by_interval": accuracy,
            "flattening": flattening(by_interval),
            "best_fix": None if best is None else {"point": best["point"], "step_ms": float(best["step_ms"])},
            "storage_model": asdict(settings.storage),
            "seconds_per_point": settings.seconds,
        }

    def text(self, summary: Mapping[str, Any]) -> str:
        lines = []
        speedup, ranks = summary.get("speedup_in_memory"), summary["largest_ranks"]
        if speedup:
            others = ", ".join(
                f"{n} rank{'s' if n != '1' else ''}: {x:.1f}x"
                for n, x in summary.get("speedup_in_memory_by_ranks", {}).items()
                if n != str(ranks)
            )
            lines.append(
                f"- Data in memory: **{speedup:.1f}x** faster steps than the standard queue on contested storage "
                f"({ranks} ranks, one enqueue thread{'; ' + others if others else ''}); the published study measured "
                f"~{summary['published_speedup_in_memory']:.0f}x ({PUBLISHED_STEP_MS['contested']:.0f} ms vs "
                f"{PUBLISHED_STEP_MS['memory']:.0f} ms per step)."
            )
        for threads, by_k in summary["step_ms"].items():
            steps = ", ".join(f"k={k}: {ms:.3g} ms" for k, ms in by_k.items() if ms is not None)
            lines.append(f"- Step time by batch-repetition interval, {threads}: {steps}.")
        flat = summary.get("flattening")
        if flat:
            beyond = (
                f"falls by only {flat['gain_beyond']:.0%} more" if flat["gain_beyond"] > 0.005 else "no longer falls"
            )
            lines.append(
                f"- Past k={flat['k']} the step time {beyond} (to k={flat['last_k']}): diminishing returns "
                "(the published study saw them past k≈16)."
            )
        if summary.get("best_fix"):
            best = summary["best_fix"]
            lines.append(
                f"- The fix that helped most in this sweep: `{best['point']}` at {best['step_ms']:.3g} ms per step."
            )
        accuracy = summary.get("accuracy_by_interval") or {}
        if accuracy:
            parts = ", ".join(f"k={k}: {v['at_time']:.2f}" for k, v in accuracy.items() if v["at_time"] is not None)
            lines.append(f"- Test accuracy after {summary['seconds_per_point']:.3g} s of training: {parts}.")
            fresh = ", ".join(
                f"k={k}: {v['at_fresh_samples']:.2f}" for k, v in accuracy.items() if v["at_fresh_samples"] is not None
            )
            if fresh:
                lines.append(f"- Test accuracy after the same number of fresh batches: {fresh}.")
        storage = summary["storage_model"]
        lines.append(
            f"- Storage model: file system {storage['filesystem_mb_s']:g} MB/s shared with "
            f"{storage['other_jobs']} competing jobs, node link {storage['node_link_mb_s']:g} MB/s, "
            f"{storage['latency_ms']:g} ms per read; all ranks are on this one machine."
        )
        return "\n".join(lines)

    def headline(self, result: ExperimentResult) -> pd.DataFrame:
        columns = ["ranks", "source", "threads", "interval", "step_ms", "slowdown_vs_memory", "input_share"]
        return result.tables["runs"][[*columns, "queue_empty_fraction", "accuracy_at_time"]]

    def report_sections(self, result: ExperimentResult) -> list[tuple[str, Any]]:
        from workbench import figures
        from workbench.report import REPORT_MAX_SPANS, REPORT_WIDTH_PX, Details

        table = result.tables["runs"]
        largest = int(table["ranks"].max())
        contested = table[(table["source"] == "contested") & (table["ranks"] == largest)]
        slow = contested.sort_values(["interval", "threads"]).iloc[0] if len(contested) else None
        # the numbers first, the figures that explain them below
        sections: list[tuple[str, Any]] = [("Summary", result.text()), ("Runs", self.headline(result))]
        if len(contested):
            sections.append(("Step time by interval", figures.interval_figure(table[table["ranks"] == largest])))
        depth = result.tables.get("queue_depth")
        if slow is not None and depth is not None and len(depth):
            sections.append(
                (
                    f"Queue depth over time, {slow['point']}",
                    figures.counter_figure(
                        depth[depth["point"] == slow["point"]],
                        reference=(result.settings.queue_capacity, "capacity"),
                        title="Input queue depth (batches)",
                    ),
                )
            )
            sections.append(
                (
                    f"Timeline, {slow['point']}",
                    figures.timeline_figure(
                        result.run(slow["point"]).events, max_spans=REPORT_MAX_SPANS, width_px=REPORT_WIDTH_PX
                    ),
                )
            )
        sections.append(
            ("Runs: every column", Details(table.drop(columns=["path", "run_id"]), "show the runs' other columns"))
        )
        findings = result.tables["findings"]
        if len(findings):
            sections.append(("Findings", findings[["ranks", "source", "threads", "interval", "text"]]))
        return sections


def flattening(by_interval: pd.DataFrame, *, knee_gain: float = 0.1) -> dict[str, Any] | None:
    """Where doubling the interval stops paying: the first k after which all further gain is < ``knee_gain``."""
    if len(by_interval) < 3:
        return None
    ks, ms = by_interval["interval"].to_numpy(), by_interval["step_ms"].to_numpy()
    for i in range(len(ks) - 1):
        gain = 1 - ms[-1] / ms[i]
        if gain < knee_gain:
            return {"k": int(ks[i]), "last_k": int(ks[-1]), "gain_beyond": float(max(gain, 0.0))}
    return None


CASE = InputPipeline()

__all__ = ["CASE", "InputPipeline", "InputPipelineSettings", "flattening"]
