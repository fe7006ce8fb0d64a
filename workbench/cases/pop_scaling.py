"""Case study "POP metrics and scaling": a ResNet on BigEarthNet-shaped data with Horovod.

The seed profiled ResNet-50 on BigEarthNet (12 bands, 120x120, 43 labels) with Horovod on V100s:
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

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from workbench import analysis
from workbench.cases.docs import case_text, node_cluster, node_sweep_runs, node_sweeps
from workbench.events import EVALUATION, INPUT
from workbench.experiment import Case, CaseOption, ExperimentResult, Point
from workbench.markdown import (
    Measurement,
    ReadmeClause,
    SavedResults,
    fixed,
    share,
    source_line,
    sources_line,
    table,
    times,
    varied,
)
from workbench.store import RunData
from workbench.workloads.pop_scaling import PopSettings, train_on_rank

#: The seed's POP table (multiplicative model) at 48 and 64 GPUs.
SEED_POP = [
    {"ranks": 48, "parallel_efficiency": 0.27, "load_balance": 0.99, "communication_efficiency": 0.26},
    {"ranks": 64, "parallel_efficiency": 0.34, "load_balance": 0.99, "communication_efficiency": 0.33},
]
POP_KEYS = ("load_balance", "communication_efficiency", "parallel_efficiency")
#: Beyond this machine: the 1-rank run projected onto the seed's kind of cluster (2 GPUs per node).
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
    #: its sweeps on a miniature cluster's nodes the projection is checked on (`workbench run CASE --nodes ...`)
    node_sweeps = ("artifacts/nodes-pop-scaling-*",)
    measurements = (
        Measurement(
            "pop-scaling-reduced",
            "workbench run pop-scaling --preset reduced --ranks 2 --out artifacts/pop-scaling-reduced --json",
            "the case study's table on this machine's cores",
        ),
        *varied(
            Measurement(
                "pop-scaling-nodes-{link}",
                "workbench run pop-scaling --preset reduced"
                " --nodes 1,2,4 --cpus-per-node 0.4 --link {link}"
                " --out artifacts/nodes-pop-scaling-{link} --json",
                "the case study on 1, 2 and 4 nodes of 0.4 core (the first repetition of the projection's)",
                root=True,
            ),
            link=("50mbit", "1gbit"),
        ),
        *node_sweep_runs(
            "projection-nodes-sweeps",
            "pop-scaling --preset reduced",
            "nodes-pop-scaling-{link}-r{repetition}",
            "1,2,4",
            0.4,
            ("50mbit", "1gbit"),
            "the projection's two more repetitions",
            repetitions=("2", "3"),
        ),
        *node_sweep_runs(
            "projection-nodes-sleeping-sweeps",
            "pop-scaling --preset reduced",
            "sleepbatch/nodes-pop-scaling-{link}-r{repetition}",
            "1,2,4",
            0.4,
            ("1gbit", "50mbit"),
            "ranks waiting in MPI asleep",
        ),
        *node_sweep_runs(
            "projection-nodes-sleeping-sweeps",
            "pop-scaling --preset reduced",
            "lightrec/nodes-pop-scaling-{link}-r{repetition}",
            "1,2,4",
            0.4,
            ("1gbit",),
            "the lighter recorder",
        ),
    )

    def docs_tables(self) -> dict[str, Callable[[Mapping[str, Any], SavedResults], str]]:
        """The docs' tables this case renders, by the name of the saved result each comes from."""
        return {"pop-scaling-reduced": render_pop_scaling, "pop-scaling-nodes": render_pop_scaling_nodes}

    def readme_clause(self, results: SavedResults) -> ReadmeClause | None:
        """The README's line on the case studies on nodes: strong scaling on the fast link's nodes, its
        communication efficiency beside the seed's, what sharding the test did."""
        name = POP_NODE_SWEEPS[1]
        if not results.has(name):
            return None
        saved = results.load(name)
        points = saved["result"]["headline"]
        strong = {p["ranks"]: p for p in points if p["scaling"] == "strong" and pop_unchanged(p)}
        most = max(strong)
        sharded = next(p for p in points if p["ranks"] == most and p["scaling"] == "strong" and p["test"] != "rank0")
        seed = max(saved["result"]["seed_pop"], key=lambda row: row["ranks"])
        speedups = " and ".join(
            f"{times(strong[1]['wall_s'] / strong[n]['wall_s'])} on {n}" for n in sorted(strong)[1:]
        )
        return ReadmeClause(
            "Case studies on nodes",
            f"the pop-scaling ResNet trained {speedups} nodes ({node_cluster(saved)[1]}; strong scaling, the same"
            " nodes at every count), its communication efficiency falling to"
            f" {fixed(strong[most]['communication_efficiency'], 2)} on {most} (the seed:"
            f" {fixed(seed['communication_efficiency'], 2)} on {seed['ranks']} GPUs); sharding its sequential test"
            f" made {most} nodes {times(strong[most]['wall_s'] / sharded['wall_s'])} faster",
            (name,),
        )

    def projection_inputs(self, run: RunData, row: Any) -> tuple[dict[str, Any], float, str]:
        """Strong scaling keeps the global batch (each rank's share of it shrinks), weak the batch per rank; the test
        phase runs on rank 0 alone unless sharded, and an epoch is whole batches of the run's samples; measured:
        the wall time."""
        settings = (run.meta.get("config") or {}).get("settings") or {}
        base_ranks = int(((run.meta.get("config") or {}).get("cluster") or {}).get("ranks") or 1)
        strong = str(row.scaling) == "strong"
        batch = int(settings["global_batch"]) // base_ranks if strong else int(settings["batch"])
        kwargs = {
            "profile": {"batch_per_rank": batch},
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
            "seed_pop": SEED_POP,
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
        seed = summary["seed_pop"][-1]
        lines.append(
            f"- The seed at {seed['ranks']} GPUs: {seed['parallel_efficiency']} = {seed['load_balance']} × "
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
                f"the seed measured {seed['parallel_efficiency']}."
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
            "online preprocessing rarely starves it; on the seed's GPUs it left them idle half of each epoch."
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
            ("POP metrics in the seed (V100 GPUs)", figures.pop_table_figure(pd.DataFrame(SEED_POP), id_column="ranks"))
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
    profile = projection.step_costs(run.events, run.meta, run.memory, batch_per_rank=batch)
    net = projection.network(PROJECTION_NETWORK[0], ranks_per_node=PROJECTION_NETWORK[1])
    columns = ["ranks", "speedup", "efficiency", *POP_KEYS, "limiter"]
    frames = []
    for label, changes in (("sequential", None), ("sharded", projection.Changes(shard_evaluation=True))):
        projected = projection.project(
            profile, list(PROJECTED_RANKS), net, kind="strong", changes=changes, input_is_useful=False
        )
        frames.append(projected.table[columns].assign(test=label))
    return pd.concat(frames, ignore_index=True)


CASE = PopScaling()

__all__ = ["CASE", "SEED_POP", "PopScaling", "PopScalingSettings"]


# -- its tables in the docs (benchmarks/render_readme.py renders them from saved results) -----------
#: The pop-scaling sweeps on a miniature cluster's nodes, slow link first (``measure_readme.sh``).
POP_NODE_SWEEPS = ("pop-scaling-nodes-50mbit", "pop-scaling-nodes-1gbit")


def pop_unchanged(point: Mapping[str, Any]) -> bool:
    """A pop-scaling point with no change: the sequential test, 1 input worker, online data, 64 MB fusion."""
    return (point["test"], point["workers"], point["data"], point["fusion_mb"]) == ("rank0", 1, "online", 64)


def pop_change(point: Mapping[str, Any]) -> str:
    """The change against pop-scaling's default, in words (``test sharded``, ``fusion buffer 1 MB``)."""
    parts = []
    if point["test"] != "rank0":
        parts.append(f"test {point['test']}")
    if point["workers"] != 1:
        parts.append(f"{point['workers']} input workers")
    if point["data"] != "online":
        parts.append(f"{point['data']} preprocessing")
    if point["fusion_mb"] != 64:
        parts.append(f"fusion buffer {point['fusion_mb']:g} MB")
    return ", ".join(parts) or "–"


def render_pop_scaling(saved: Mapping[str, Any], results: SavedResults) -> str:
    """Every point with its POP metrics; the change against the default named in words."""
    result = saved["result"]

    change = pop_change

    rows = [
        [
            str(r["ranks"]),
            r["scaling"],
            change(r),
            fixed(r["wall_s"], 2),
            share(r["test_fraction"]),
            share(r["input_wait_fraction"]),
            fixed(r["load_balance"], 2),
            fixed(r["communication_efficiency"], 2),
            fixed(r["parallel_efficiency"], 2),
        ]
        for r in sorted(result["headline"], key=lambda r: (r["ranks"], r["scaling"] != "strong", change(r) != "–"))
    ]
    header = ["ranks", "scaling", "change", "wall s", "test share", "input wait", "LB", "CommE", "PE"]
    return "\n\n".join([table(header, ["r", "l", "l"] + ["r"] * 6, rows), case_text(saved), source_line(saved)])


def render_pop_scaling_nodes(saved: Mapping[str, Any], results: SavedResults) -> str:
    """pop-scaling on 1, 2 and 4 nodes at each link rate, beside the seed's POP table: the claims' evidence."""
    sweeps = node_sweeps(saved, POP_NODE_SWEEPS, results)
    rows, lines = [], []
    for one in sweeps:
        link, shape = node_cluster(one)
        points = one["result"]["headline"]

        base = {(p["ranks"], p["scaling"]): p for p in points if pop_unchanged(p)}
        for point in sorted(points, key=lambda p: (p["scaling"] != "strong", p["ranks"], not pop_unchanged(p))):
            alone = base.get((1, point["scaling"]))
            same = base.get((point["ranks"], point["scaling"]))
            rows.append(
                [
                    link,
                    str(point["ranks"]),
                    point["scaling"],
                    pop_change(point),
                    fixed(point["wall_s"], 2),
                    times(alone["wall_s"] / point["wall_s"]) if alone and pop_unchanged(point) else "",
                    times(same["wall_s"] / point["wall_s"]) if same and not pop_unchanged(point) else "",
                    share(point["test_fraction"]),
                    fixed(point["load_balance"], 2),
                    fixed(point["communication_efficiency"], 2),
                    fixed(point["parallel_efficiency"], 2),
                ]
            )
        strong = sorted((p for p in points if pop_unchanged(p) and p["scaling"] == "strong"), key=lambda p: p["ranks"])
        if strong:
            comm = ", ".join(f"{fixed(p['communication_efficiency'], 2)} ({p['ranks']})" for p in strong)
            tests = ", ".join(f"{share(p['test_fraction'])} ({p['ranks']})" for p in strong)
            lines.append(f"- {shape}, strong scaling by nodes: communication efficiency {comm}; test share {tests}.")
        largest = max(p["ranks"] for p in points)
        at_largest = [p for p in points if p["ranks"] == largest and (largest, p["scaling"]) in base]
        fixes = [p for p in at_largest if not pop_unchanged(p)]
        if fixes:
            changes = "; ".join(
                f"{pop_change(p)} {times(base[(largest, p['scaling'])]['wall_s'] / p['wall_s'])}" for p in fixes
            )
            lines.append(f"- {shape}, at {largest} nodes, each change's speed against no change: {changes}.")
    for seed in saved["result"].get("seed_pop", []):
        rows.append(
            [
                "seed 001 (V100s)",
                f"{seed['ranks']} GPUs",
                "strong",
                "–",
                "–",
                "",
                "",
                "–",
                fixed(seed["load_balance"], 2),
                fixed(seed["communication_efficiency"], 2),
                fixed(seed["parallel_efficiency"], 2),
            ]
        )
    header = ["link", "nodes", "scaling", "change", "wall s", "vs 1 node", "vs no change", "test share", "LB", "CommE"]
    header.append("PE")
    body = table(header, ["l", "r", "l", "l"] + ["r"] * 7, rows)
    return "\n\n".join([body, "\n".join(lines), sources_line(*sweeps)])
