"""Case study "POP metrics and scaling": a ResNet on BigEarthNet-shaped data with Horovod.

The published study profiled ResNet-50 on BigEarthNet (12 bands, 120x120, 43 labels) with Horovod on V100s:
at 64 GPUs parallel efficiency 0.34, load balance ~0.99, communication efficiency 0.33 (48 GPUs:
0.27 / 0.99 / 0.26). Training scaled superlinearly, but total scaling was bounded by a **sequential
test phase**; the GPUs idled about half of each epoch waiting for online preprocessing. Its advice:
parallelise the test phase, more image-generator workers, preprocess offline, a larger fusion buffer.

The sweep: strong scaling (global batch fixed) and weak scaling (batch per rank fixed) over ranks
1..N with the sequential test, then at N ranks each recommendation as a before/after: sharded test,
more input workers, offline preprocessing. POP metrics count compute as useful; waiting for input is
a loss, as a GPU waiting for data is idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from workbench import analysis
from workbench.events import EVALUATION, INPUT
from workbench.experiment import Case, CaseOption, ExperimentResult, Point
from workbench.store import RunData
from workbench.workloads.pop_scaling import PopSettings, train_on_rank

#: The published study's POP table (multiplicative model) at 48 and 64 GPUs.
PUBLISHED_POP = [
    {"ranks": 48, "parallel_efficiency": 0.27, "load_balance": 0.99, "communication_efficiency": 0.26},
    {"ranks": 64, "parallel_efficiency": 0.34, "load_balance": 0.99, "communication_efficiency": 0.33},
]
POP_KEYS = ("load_balance", "communication_efficiency", "parallel_efficiency")
#: Beyond this machine: the 1-rank run projected onto the published study's kind of cluster (2 GPUs per node).
PROJECTED_RANKS = (8, 16, 32, 48, 64)
PROJECTION_NETWORK = ("100g-infiniband", 2)


@dataclass(frozen=True)
class PopScalingSettings:
    """A preset: the model's size and the shape of every run, and which parts of the sweep to run."""

    model: str
    image_size: int
    batch: int  # per rank, weak scaling
    global_batch: int  # strong scaling
    epoch_samples: int
    epochs: int
    test_samples: int
    workers_fix: int = 4
    weak_scaling: bool = True
    #: Horovod fusion buffers to try at the largest rank count (MB; Horovod's default is 64)
    fusion_mb: tuple[float, ...] = (1.0, 128.0)

    def workload(self, point: Point) -> PopSettings:
        params = point.as_dict()
        strong = params["scaling"] == "strong"
        return PopSettings(
            model=self.model,
            image_size=self.image_size,
            batch=self.batch,
            global_batch=self.global_batch if strong else 0,
            epoch_samples=self.epoch_samples,
            epochs=self.epochs,
            test_mode=params.get("test", "rank0"),
            test_samples=self.test_samples,
            workers=int(params.get("workers", 1)),
            preprocessing=params.get("data", "online"),
        )


class PopScaling(Case):
    name = "pop-scaling"
    title = "POP metrics and scaling: ResNet on BigEarthNet-shaped data"
    about = "strong/weak scaling with POP metrics; sequential vs sharded test, input workers, offline data"
    presets: Mapping[str, PopScalingSettings] = {
        "ci": PopScalingSettings("resnet-mini", 32, 8, 16, 64, 2, 64, weak_scaling=False),
        "reduced": PopScalingSettings("resnet-mini", 96, 16, 32, 384, 3, 384),
        "full": PopScalingSettings("resnet50", 120, 64, 256, 4096, 3, 1024),
    }
    options = (CaseOption("--epochs", "epochs", "epochs per run", int),)
    workload = staticmethod(train_on_rank)

    def projection_inputs(self, run: RunData, row: Any) -> tuple[dict[str, Any], float, str]:
        """Strong scaling keeps the global batch (each rank's share of it shrinks), weak the batch per rank; the test
        phase runs on rank 0 alone unless sharded, and an epoch is whole batches of the run's samples; measured:
        the wall time."""
        settings = (run.meta.get("config") or {}).get("settings") or {}
        base_ranks = int(((run.meta.get("config") or {}).get("cluster") or {}).get("ranks") or 1)
        strong = str(row.scaling) == "strong"
        batch = int(settings["global_batch"]) // base_ranks if strong else int(settings["batch"])
        kwargs = {
            "step_costs": {"batch_per_rank": batch},
            "kind": str(row.scaling),
            "shard_evaluation": str(row.test) == "sharded",
            "epoch_samples": int(settings["epoch_samples"]) if settings.get("epoch_samples") else None,
        }
        return kwargs, float(row.wall_s), "wall_s"

    def points(self, settings: PopScalingSettings, max_ranks: int) -> list[Point]:
        kinds = ("strong", "weak") if settings.weak_scaling else ("strong",)
        points = [Point.of(n, {"scaling": kind}) for n in range(1, max_ranks + 1) for kind in kinds]
        fixes = [{"test": "sharded"}, {"workers": settings.workers_fix}, {"data": "offline"}]
        fixes += [{"fusion_mb": mb} for mb in settings.fusion_mb]
        if not settings.weak_scaling:  # ci: the test-phase fix only
            fixes = fixes[:1]
        return points + [Point.of(max_ranks, {"scaling": "strong", **fix}) for fix in fixes]

    def workload_kwargs(self, settings: PopScalingSettings, point: Point) -> dict[str, Any]:
        return {"settings_dict": asdict(settings.workload(point))}

    def cluster_overrides(self, settings: PopScalingSettings, point: Point) -> dict[str, Any]:
        """Horovod reads its fusion buffer size when it starts: such points get ranks of their own."""
        fusion = point.as_dict().get("fusion_mb")
        return {} if fusion is None else {"horovod_fusion_threshold_bytes": int(fusion * 1024 * 1024)}

    def row(self, run: RunData, point: Point, settings: PopScalingSettings) -> dict[str, Any]:
        results = run.meta.get("rank_results") or []
        params = point.as_dict()
        events = run.events
        pop = analysis.pop_metrics(events, input_is_useful=False).iloc[0]
        breakdown = analysis.phase_breakdown(events, by=("rank",))
        per_phase = breakdown.groupby("phase")["seconds"].max()  # the slowest rank's time in each phase
        wall = max((r["wall_s"] for r in results), default=float("nan"))
        test_s = float(per_phase.get(EVALUATION, 0.0))
        shares = analysis.input_share(events)
        samples = sum(r["samples"] for r in results)
        history = results[0].get("history", []) if results else []
        return {
            "run_id": run.run_id,
            "ranks": point.ranks,
            "scaling": params["scaling"],
            "test": params.get("test", "rank0"),
            "workers": int(params.get("workers", 1)),
            "data": params.get("data", "online"),
            "fusion_mb": float(params.get("fusion_mb", 64.0)),
            "wall_s": wall,
            "train_s": wall - test_s,
            "test_s": test_s,
            "test_fraction": test_s / wall if wall else float("nan"),
            "input_s": float(per_phase.get(INPUT, 0.0)),
            "input_wait_fraction": float(shares["input_share"].mean()) if len(shares) else float("nan"),
            "samples_per_s": samples / wall if wall else float("nan"),
            **{key: float(pop[key]) for key in POP_KEYS},
            "useful_total_s": float(pop["useful_total_s"]),
            "gradient_mb": results[0]["gradient_bytes"] / 1e6 if results else float("nan"),
            "test_f1": history[-1]["test_f1"] if history else float("nan"),
            "path": str(run.path),
        }

    def tables(self, rows: pd.DataFrame, runs: Mapping[str, RunData], settings: Any) -> dict[str, Any]:
        table = rows.copy()
        baseline = table[
            (table["test"] == "rank0")
            & (table["workers"] == 1)
            & (table["data"] == "online")
            & (table["fusion_mb"] == 64)
        ]
        pops, phases = [], []
        for kind, group in baseline.groupby("scaling"):
            group = group.sort_values("ranks")
            pops.append(analysis.pop_scaling(group, kind=kind).assign(scaling=kind))
            one = group[group["ranks"] == group["ranks"].min()].iloc[0]
            phases.append(
                pd.DataFrame(
                    {
                        "scaling": kind,
                        "ranks": group["ranks"],
                        "total_speedup": one["wall_s"] / group["wall_s"],
                        "train_speedup": one["train_s"] / group["train_s"],
                        "test_speedup": one["test_s"] / group["test_s"].replace(0, np.nan),
                        "test_fraction": group["test_fraction"],
                        "input_wait_fraction": group["input_wait_fraction"],
                    }
                )
            )
        return {
            "runs": table,
            "projection": project_beyond(baseline, runs),
            "pop": pd.concat(pops, ignore_index=True) if pops else pd.DataFrame(),
            "phase_scaling": pd.concat(phases, ignore_index=True) if phases else pd.DataFrame(),
        }

    def summary(self, rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame], settings: Any) -> dict[str, Any]:
        table, pop = tables["runs"], tables["pop"]
        largest = int(table["ranks"].max())
        at = table[(table["ranks"] == largest) & (table["scaling"] == "strong")]
        default = (at["test"] == "rank0") & (at["workers"] == 1) & (at["data"] == "online") & (at["fusion_mb"] == 64)
        base = at[default]

        def fix_speedup(column: str, value: Any) -> float | None:
            fixed = at[at[column] == value]
            return float(base["wall_s"].iloc[0] / fixed["wall_s"].iloc[0]) if len(base) and len(fixed) else None

        strong = table[(table["scaling"] == "strong") & (table["test"] == "rank0") & (table["workers"] == 1)]
        strong = strong[(strong["data"] == "online") & (strong["fusion_mb"] == 64)]
        columns = ["ranks", "scaling", *POP_KEYS, "computation_scalability", "global_efficiency"]
        return {
            "largest_ranks": largest,
            "pop": pop[[c for c in columns if c in pop]].round(4).to_dict("records") if len(pop) else [],
            "test_phase_fraction": {str(int(r.ranks)): float(r.test_fraction) for r in strong.itertuples()},
            "speedup_sharded_test": fix_speedup("test", "sharded"),
            "speedup_input_workers": fix_speedup("workers", settings.workers_fix),
            "speedup_offline_preprocessing": fix_speedup("data", "offline"),
            "speedup_by_fusion_mb": {
                f"{mb:g}": fix_speedup("fusion_mb", mb) for mb in settings.fusion_mb if fix_speedup("fusion_mb", mb)
            },
            "input_wait_fraction": {str(int(r.ranks)): float(r.input_wait_fraction) for r in strong.itertuples()},
            "input_wait_fraction_by_workers": {
                str(int(r.workers)): float(r.input_wait_fraction)
                for r in at[(at["data"] == "online") & (at["fusion_mb"] == 64)].itertuples()
                if r.test == "rank0"
            },
            "published_pop": PUBLISHED_POP,
            "projection": tables["projection"].round(4).to_dict("records") if len(tables["projection"]) else [],
            "model": settings.model,
            "image_size": settings.image_size,
            "gradient_mb": float(table["gradient_mb"].iloc[0]),
        }

    def text(self, summary: Mapping[str, Any]) -> str:
        lines = []
        for row in summary["pop"]:
            lines.append(
                f"- POP, {row['scaling']} scaling, {row['ranks']} rank{'s' if row['ranks'] != 1 else ''}: parallel "
                f"efficiency {row['parallel_efficiency']:.2f} = load balance {row['load_balance']:.2f} × "
                f"communication efficiency {row['communication_efficiency']:.2f}"
                + (f"; global efficiency {row['global_efficiency']:.2f}" if "global_efficiency" in row else "")
            )
        seed = summary["published_pop"][-1]
        lines.append(
            f"- The published study at {seed['ranks']} GPUs: {seed['parallel_efficiency']} = {seed['load_balance']} × "
            f"{seed['communication_efficiency']}, the loss in communication efficiency being ranks waiting for the "
            "sequential test phase and the input pipeline."
        )
        projected = {(r["test"], r["ranks"]): r for r in summary.get("projection", [])}
        if ("sequential", 64) in projected and ("sharded", 64) in projected:
            before, after = projected[("sequential", 64)], projected[("sharded", 64)]
            lines.append(
                f"- Projected from the 1-rank run to 64 ranks ({PROJECTION_NETWORK[0]}, {PROJECTION_NETWORK[1]} per "
                f"node, strong scaling): parallel efficiency {before['parallel_efficiency']:.2f} with the sequential "
                f"test (limited by {before['limiter']}), {after['parallel_efficiency']:.2f} with it sharded; "
                f"the published study measured {seed['parallel_efficiency']}."
            )
        fractions = ", ".join(f"{n} rank(s): {f:.0%}" for n, f in summary["test_phase_fraction"].items())
        lines.append(f"- Share of wall time in the sequential test phase (strong scaling): {fractions}.")
        for key, label in (
            ("speedup_sharded_test", "sharding the test phase over every rank"),
            ("speedup_input_workers", "more input workers"),
            ("speedup_offline_preprocessing", "offline preprocessing (cached)"),
        ):
            if summary.get(key):
                lines.append(
                    f"- At {summary['largest_ranks']} ranks, {label}: {summary[key]:.2f}x the baseline's speed."
                )
        for mb, speedup in summary.get("speedup_by_fusion_mb", {}).items():
            lines.append(
                f"- At {summary['largest_ranks']} ranks, a {mb} MB fusion buffer (default 64 MB): {speedup:.2f}x the "
                f"baseline's speed ({summary['gradient_mb']:.3g} MB of gradients per step)."
            )
        waits = ", ".join(f"{n} rank(s): {f:.1%}" for n, f in summary["input_wait_fraction"].items())
        lines.append(
            f"- Share of step time waiting for input: {waits}. On CPU ranks the model's own compute is slow, so "
            "online preprocessing rarely starves it; on the published study's GPUs it left them idle half of"
            " each epoch."
        )
        return "\n".join(lines)

    def headline(self, result: ExperimentResult) -> pd.DataFrame:
        columns = [
            "ranks",
            "scaling",
            "test",
            "workers",
            "data",
            "fusion_mb",
            "wall_s",
            "test_fraction",
            "input_wait_fraction",
        ]
        return result.tables["runs"][[*columns, *POP_KEYS]]

    def report_sections(self, result: ExperimentResult) -> list[tuple[str, Any]]:
        from workbench import figures
        from workbench.report import REPORT_MAX_SPANS, REPORT_WIDTH_PX, Details

        sections: list[tuple[str, Any]] = [("Summary", result.text())]
        pop = result.tables["pop"]
        for kind, group in pop.groupby("scaling") if len(pop) else ():
            sections.append((f"POP metrics, {kind} scaling", figures.pop_table_figure(group, id_column="ranks")))
        sections.append(
            (
                "POP metrics in the published study (V100 GPUs)",
                figures.pop_table_figure(pd.DataFrame(PUBLISHED_POP), id_column="ranks"),
            )
        )
        sections.append(("What bounds total scaling: speedup per phase", result.tables["phase_scaling"]))
        if len(result.tables["projection"]):
            sections.append(
                (
                    f"Projected beyond this machine ({PROJECTION_NETWORK[0]}, {PROJECTION_NETWORK[1]} ranks per node)",
                    result.tables["projection"],
                )
            )
        table = result.tables["runs"]
        largest = table[(table["ranks"] == table["ranks"].max()) & (table["scaling"] == "strong")]
        slow = largest[largest["test"] == "rank0"].iloc[0]
        sections.append(
            (
                f"Timeline, {slow['point']}",
                figures.timeline_figure(
                    result.run(slow["point"]).events, max_spans=REPORT_MAX_SPANS, width_px=REPORT_WIDTH_PX
                ),
            )
        )
        sections.append(("Runs", self.headline(result)))
        sections.append(
            ("Runs: every column", Details(table.drop(columns=["path", "run_id"]), "show the runs' other columns"))
        )
        return sections


def project_beyond(baseline: pd.DataFrame, runs: Mapping[str, RunData]) -> pd.DataFrame:
    """The 1-rank strong-scaling run projected to ``PROJECTED_RANKS``, with the test phase sequential and sharded."""
    from workbench.analysis import projection

    one = baseline[(baseline["ranks"] == 1) & (baseline["scaling"] == "strong")]
    if one.empty:
        return pd.DataFrame()
    run = runs[one["point"].iloc[0]]
    settings = (run.meta.get("config") or {}).get("settings") or {}
    # a strong-scaling rank trains its share of the global batch (the settings' "batch" is weak scaling's)
    batch = int(settings["global_batch"]) // int(one["ranks"].iloc[0]) if settings.get("global_batch") else None
    costs = projection.step_costs(run.events, run.meta, run.memory, batch_per_rank=batch)
    net = projection.network(PROJECTION_NETWORK[0], ranks_per_node=PROJECTION_NETWORK[1])
    columns = ["ranks", "speedup", "efficiency", *POP_KEYS, "limiter"]
    frames = []
    for label, changes in (("sequential", None), ("sharded", projection.Changes(shard_evaluation=True))):
        projected = projection.project(
            costs, list(PROJECTED_RANKS), net, kind="strong", changes=changes, input_is_useful=False
        )
        frames.append(projected.table[columns].assign(test=label))
    return pd.concat(frames, ignore_index=True)


CASE = PopScaling()

__all__ = ["CASE", "PUBLISHED_POP", "PopScaling", "PopScalingSettings"]
