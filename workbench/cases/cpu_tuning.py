"""Case study "CPU tuning of an S-GAN with Horovod": threads, ranks x threads, runtime settings, MPI A/B,
evaluation tied to the rank count.

The published study tuned an S-GAN on Xeon nodes: too many OpenMP + Eigen threads oversubscribed the cores; it
swept ``OMP_NUM_THREADS``, TensorFlow's inter x intra-op threads (a heatmap with failed runs in
white), ranks per node x threads, six sets of ``KMP_*`` / pinning settings and Intel MPI vs Open MPI,
then found that images/s scaled with the nodes but time did not: rank 0 evaluated more often as the
nodes grew while the others waited, fixed by evaluating every 15 iterations. 2x from tuning one
node, 8x more from scaling: 16x.

Each configuration here is one point (a rank count, intra- and inter-op threads, a named set of
runtime settings, the evaluation schedule and the MPI build), started on a cluster of its own
(``Case.cluster_overrides``); a point can belong to several of the published study's sweeps, which are views of
the same table. Throughput is measured with ``analysis.benchmark_method`` (warm-up iterations left out; the
interval from the measured iterations).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from workbench import analysis
from workbench.analysis.benchmark_method import BenchmarkMethod
from workbench.analysis.cpu_wait import finite_median
from workbench.config import mpich_horovod_prefix, physical_cores
from workbench.events import NS_PER_S, is_finite_number
from workbench.experiment import Case, CaseOption, ExperimentResult, Point, parse_counts
from workbench.formatting import format_amount, format_interval
from workbench.store import RunData
from workbench.workloads.sgan import SganSettings, train_on_rank

#: Named sets of runtime settings: ClusterConfig fields each set changes (the published study's Figure 7).
RUNTIME_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "bind-none": {"bind_to": "none"},
    "bind-socket": {"bind_to": "socket"},
    "map-by-socket": {"mpi_args": ("--map-by", "socket")},
    "kmp-blocktime-200": {"env": {"KMP_BLOCKTIME": "200"}},
    "kmp-affinity-compact": {"env": {"KMP_AFFINITY": "granularity=fine,compact,1,0"}},
    "tf-default-threads": {"env": {"TF_NUM_INTRAOP_THREADS": "0", "TF_NUM_INTEROP_THREADS": "0"}},
    "omp-threads-x4": {"env": {"OMP_NUM_THREADS": str(4 * physical_cores())}},
    # Horovod's background thread negotiates every cycle and, on CPU ranks, takes that time from compute
    "horovod-cycle-5ms": {"horovod_cycle_time_ms": 5.0},
}
#: Per point, medians over its ranks (``analysis.cpu_wait_table``): the share of their threads' ready time spent
#: waiting for a core, and of their node's CPU-quota periods that ran out (NaN without a quota or a recorder
#: that reads them)
POINT_CPU_COLUMNS = ("cpu_wait_share", "throttled_share")
#: The MPI builds of Horovod: (mpi implementation, controller) -> ClusterConfig fields.
MPI_BUILDS: dict[str, dict[str, Any]] = {
    "openmpi": {},
    "mpich": {"mpi": "mpich"},
    "gloo": {"env": {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}},
}
PUBLISHED_STUDY = {
    "omp_best_threads": 50,
    "omp_best_images_per_s": 19.67,
    "tf_best_images_per_s": 12.34,
    "ranks_x_threads_best": "8 ranks x 9 threads",
    "ranks_x_threads_images_per_s": 26.3,
    "intel_over_openmpi": "up to 27 % on one node, 18 % on eight",
    "total_speedup": 16.0,
}


@dataclass(frozen=True)
class CpuTuningSettings:
    """A preset: the model's size, the sweeps' axes and the method."""

    batch: int = 64
    width: int = 64
    #: pixels a side: the digits' own 28 here; the published study tuned on 256 x 256 images (``full``)
    image_size: int = 28
    iterations: int = 60
    warmup_iterations: int = 5
    eval_every: int = 15
    intra: tuple[int, ...] = (1, 2, 4)
    inter: tuple[int, ...] = (1, 2)
    runtime_sets: tuple[str, ...] = (
        "default",
        "bind-none",
        "bind-socket",
        "map-by-socket",
        "kmp-blocktime-200",
        "kmp-affinity-compact",
        "tf-default-threads",
        "omp-threads-x4",
        "horovod-cycle-5ms",
    )
    mpi: tuple[str, ...] = ("openmpi", "mpich", "gloo")
    #: On a miniature cluster's nodes (``--nodes``): the node counts, and the ranks x threads per node swept
    #: at each with the node's share fixed; both evaluation schedules at every point. Empty: one machine.
    nodes: tuple[int, ...] = ()
    per_node: tuple[tuple[int, int], ...] = ((1, 2), (2, 1))

    def __post_init__(self) -> None:
        self.workload(config(1, 1))  # one clear error for a bad size or count, before any rank starts
        if any(ranks < 1 or threads < 1 for ranks, threads in self.per_node) or not self.per_node:
            raise ValueError(f"per_node={self.per_node!r}: give ranks x threads per node, each >= 1, e.g. 1x2,2x1")

    def workload(self, point: Point) -> SganSettings:
        return SganSettings(
            batch=self.batch,
            width=self.width,
            image_size=self.image_size,
            iterations=self.iterations,
            warmup_iterations=self.warmup_iterations,
            eval_schedule=point["eval"],
            eval_every=self.eval_every,
        )

    @property
    def method(self) -> BenchmarkMethod:
        return BenchmarkMethod(self.warmup_iterations, self.iterations - self.warmup_iterations, 1)


def config(
    ranks: int, intra: int, inter: int = 1, runtime: str = "default", evaluation: str = "fixed", mpi: str = "openmpi"
) -> Point:
    return Point.of(ranks, {"intra": intra, "inter": inter, "set": runtime, "eval": evaluation, "mpi": mpi})


def node_config(nodes: int, ranks_per_node: int, threads: int, evaluation: str) -> Point:
    """A point on ``nodes`` nodes of a miniature cluster, ``ranks_per_node`` ranks of ``threads`` threads on each."""
    params = {"intra": threads, "inter": 1, "set": "default", "eval": evaluation, "mpi": "openmpi", "nodes": nodes}
    return Point.of(nodes * ranks_per_node, params)


def parse_per_node(text: str) -> tuple[tuple[int, int], ...]:
    """``--per-node 1x2,2x1`` -> ((1, 2), (2, 1)): ranks x threads per node, checked."""
    pairs = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        match = re.fullmatch(r"(\d+)\s*[xX*]\s*(\d+)", item)
        if not match or int(match[1]) < 1 or int(match[2]) < 1:
            raise ValueError(f"--per-node {text!r}: write ranks x threads per node, e.g. 1x2,2x1")
        pairs.append((int(match[1]), int(match[2])))
    if not pairs:
        raise ValueError(f"--per-node {text!r}: write ranks x threads per node, e.g. 1x2,2x1")
    return tuple(pairs)


class CpuTuning(Case):
    name = "cpu-tuning"
    title = "CPU tuning of an S-GAN with Horovod: threads, ranks, runtime settings, MPI, evaluation"
    about = (
        "S-GAN with Horovod: threads, inter x intra, ranks x threads, KMP/binding sets, MPI A/B, eval fix"
    )
    presets: Mapping[str, CpuTuningSettings] = {
        "ci": CpuTuningSettings(
            batch=32,
            width=32,
            iterations=20,
            warmup_iterations=3,
            intra=(1, 4),
            inter=(1,),
            runtime_sets=("default", "bind-none"),
            mpi=("openmpi", "mpich"),
        ),
        "reduced": CpuTuningSettings(),
        "full": CpuTuningSettings(
            batch=32,
            width=64,
            image_size=256,
            iterations=200,
            warmup_iterations=10,
            intra=(1, 2, 4, 8),
            inter=(1, 2, 4),
        ),
    }
    options = (
        CaseOption("--intra", "intra", "intra-op (and OpenMP) threads per rank to sweep, e.g. 1,2,4", parse_counts),
        CaseOption("--inter", "inter", "inter-op threads to sweep, e.g. 1,2", parse_counts),
        CaseOption("--iterations", "iterations", "training iterations per point", int),
        CaseOption("--image-size", "image_size", "pixels a side of the images (28, or a multiple of 4 above)", int),
        CaseOption(
            "--per-node", "per_node", "with --nodes: ranks x threads per node to sweep, e.g. 1x2,2x1", parse_per_node
        ),
    )
    workload = staticmethod(train_on_rank)
    failures_are_results = True  # a thread setting that crashes or hangs is a grey heatmap cell, with why
    places_ranks_per_node = True  # on nodes: ranks x threads per node at each node count

    def points(self, settings: CpuTuningSettings, max_ranks: int) -> list[Point]:
        if settings.nodes:  # on a cluster's nodes: the node's share fixed, split into ranks x threads
            return [
                node_config(nodes, ranks, threads, evaluation)
                for nodes in settings.nodes
                for ranks, threads in settings.per_node
                for evaluation in ("per_epoch", "fixed")
            ]
        cores = physical_cores()
        per_rank = max(1, cores // max_ranks)
        wanted = [config(1, intra, inter) for inter in settings.inter for intra in settings.intra]  # the heatmap
        wanted += [config(n, intra) for n in range(2, max_ranks + 1) for intra in settings.intra if intra <= cores]
        wanted += [config(max_ranks, per_rank, runtime=name) for name in settings.runtime_sets]
        wanted += [
            config(n, max(1, cores // n), evaluation=e) for n in range(1, max_ranks + 1) for e in ("per_epoch", "fixed")
        ]
        wanted += [config(max_ranks, per_rank, mpi=m) for m in settings.mpi if m != "mpich" or mpich_built()]
        unique: dict[str, Point] = {}
        for point in wanted:
            unique.setdefault(point.key, point)
        return list(unique.values())

    def workload_kwargs(self, settings: CpuTuningSettings, point: Point) -> dict[str, Any]:
        return {"settings_dict": asdict(settings.workload(point))}

    def cluster_overrides(self, settings: CpuTuningSettings, point: Point) -> dict[str, Any]:
        fields: dict[str, Any] = {"threads_per_rank": point["intra"], "inter_op_threads": point["inter"]}
        env: dict[str, str] = {}
        for extra in (RUNTIME_SETS[point["set"]], MPI_BUILDS[point["mpi"]]):
            env.update(extra.get("env", {}))
            fields.update({k: v for k, v in extra.items() if k != "env"})
        if point["mpi"] == "mpich":
            env["PYTHONPATH"] = str(mpich_horovod_prefix())
        if env:
            fields["env"] = env
        if "nodes" in point.as_dict():
            fields["nodes"] = point["nodes"]  # the point's ranks on these nodes only, ranks_per_node each
        return fields

    def row(self, run: RunData, point: Point, settings: CpuTuningSettings) -> dict[str, Any]:
        results = run.meta.get("rank_results") or []
        first = next((r for r in results if r.get("rank") == 0), results[0] if results else {})
        per_iteration = iteration_seconds(run.events, settings.warmup_iterations)
        samples = settings.batch * point.ranks
        # the value and its interval from the same measured iterations (start to start, evaluation included)
        rates = [samples / float(np.mean(per_iteration))] if len(per_iteration) else []
        if not rates and first:
            rates = [float(first["images_per_s"])]
        measured = (
            settings.method.summarise(rates, step_seconds=per_iteration, samples_per_step=samples) if rates else {}
        )
        wall = float(first.get("wall_s", float("nan")))
        eval_s = float(first.get("eval_s", 0.0))
        # the published study's oversubscription measured: how long the ranks' threads were ready with no core free, and
        # (on a node with a quota) in how many of its periods the quota ran out; medians over the ranks
        waited = analysis.cpu_wait_table(run.counters, run.rank_meta)
        on_nodes = "nodes" in point.as_dict()  # a point of a sweep over a miniature cluster's nodes
        nodes = int(point["nodes"]) if on_nodes else 1
        return {
            "run_id": run.run_id,
            "ranks": point.ranks,
            "on_nodes": on_nodes,
            "nodes": nodes,
            "ranks_per_node": point.ranks // nodes,
            "intra": point["intra"],
            "inter": point["inter"],
            "set": point["set"],
            "eval": point["eval"],
            "mpi": point["mpi"],
            "threads_total": point.ranks * (point["intra"] + point["inter"]),
            "images_per_s": measured.get("value", float("nan")),
            "ci_low": measured.get("ci_low", float("nan")),
            "ci_high": measured.get("ci_high", float("nan")),
            "train_images_per_s": samples * first.get("measured_iterations", 0) / max(wall - eval_s, 1e-9)
            if first
            else float("nan"),
            "wall_s": wall,
            "eval_s": eval_s,
            "eval_share": eval_s / wall if wall > 0 else float("nan"),
            "evaluations": first.get("evaluations", 0),
            "eval_interval": first.get("eval_interval", 0),
            "horovod_size": first.get("horovod_size", point.ranks),
            "tf_threads": first.get("threads", 0),
            "accuracy": first.get("accuracy", float("nan")),
            "cpu_wait_share": finite_median(waited["wait_share"]),
            "throttled_share": finite_median(waited["throttled_share"]),
            "path": str(run.path),
        }

    def tables(self, rows: pd.DataFrame, runs: Mapping[str, RunData], settings: CpuTuningSettings) -> dict[str, Any]:
        table = rows.sort_values(["ranks", "mpi", "set", "eval", "inter", "intra"]).reset_index(drop=True)
        table = table.reindex(columns=[*table.columns, *(c for c in POINT_CPU_COLUMNS if c not in table)])
        table["valid"] = table["horovod_size"] == table["ranks"]
        base = (table["set"] == "default") & (table["mpi"] == "openmpi")
        fixed = table["eval"] == "fixed"
        return {
            "runs": table,
            "threads": table[base & fixed & (table["ranks"] == 1)][
                ["intra", "inter", "images_per_s", "ci_low", "ci_high", "tf_threads", "cpu_wait_share"]
            ],
            "ranks_threads": table[base & fixed & (table["inter"] == 1)][
                ["ranks", "intra", "images_per_s", "ci_low", "ci_high", "threads_total", "cpu_wait_share"]
            ],
            "runtime_sets": runtime_effects(table),
            "mpi_ab": mpi_ab(table),
            "evaluation": evaluation_fix(table),
            "schedule_scaling": schedule_scaling(table),
            "speedup_steps": speedup_steps(table),
            "per_node": per_node_table(table),
        }

    def summary(self, rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame], settings: CpuTuningSettings) -> dict:
        table = tables["runs"]
        valid = table[table["valid"] & (table["eval"] == "fixed")]
        one = valid[valid["ranks"] == 1]
        default = one[(one["set"] == "default") & (one["mpi"] == "openmpi")]
        untuned = table[(table["ranks"] == table["ranks"].max()) & (table["set"] == "tf-default-threads")]
        best_one = one.loc[one["images_per_s"].idxmax()] if len(one) else None
        best = valid.loc[valid["images_per_s"].idxmax()] if len(valid) else None
        evaluation = tables["evaluation"]
        largest = evaluation[evaluation["ranks"] == evaluation["ranks"].max()] if len(evaluation) else evaluation
        baseline = default[(default["intra"] == default["intra"].max()) & (default["inter"] == default["inter"].max())]
        return {
            "method": settings.method.as_dict(),
            "method_text": settings.method.describe().replace("steps", "iterations"),
            "cores": physical_cores(),
            "image_size": settings.image_size,
            "best": None
            if best is None
            else {
                **{
                    k: (int(best[k]) if k in ("ranks", "intra", "inter") else str(best[k]))
                    for k in ("ranks", "intra", "inter", "set", "mpi")
                },
                "images_per_s": float(best["images_per_s"]),
            },
            "best_one_rank": None
            if best_one is None
            else {
                "intra": int(best_one["intra"]),
                "inter": int(best_one["inter"]),
                "images_per_s": float(best_one["images_per_s"]),
            },
            "baseline_one_rank": None
            if baseline.empty
            else {
                "intra": int(baseline["intra"].iloc[0]),
                "inter": int(baseline["inter"].iloc[0]),
                "images_per_s": float(baseline["images_per_s"].iloc[0]),
            },
            "speedup_tuned_vs_default": (
                float(best_one["images_per_s"] / baseline["images_per_s"].iloc[0])
                if best_one is not None and not baseline.empty
                else None
            ),
            "speedup_total": (
                float(best["images_per_s"] / baseline["images_per_s"].iloc[0])
                if best is not None and not baseline.empty
                else None
            ),
            "tf_default_threads": analysis.json_records(untuned, ["ranks", "images_per_s", "ci_low", "ci_high"]),
            "threads": analysis.json_records(tables["threads"]),
            "runtime_sets": analysis.json_records(tables["runtime_sets"]),
            "mpi_ab": analysis.json_records(tables["mpi_ab"]),
            "evaluation": analysis.json_records(evaluation),
            "speedup_eval_fix": float(largest["speedup_eval_fix"].iloc[0]) if len(largest) else None,
            "per_node": analysis.json_records(tables["per_node"]),
            "cpu_wait": cpu_wait_extremes(valid[(valid["set"] == "default") & (valid["mpi"] == "openmpi")]),
            "schedule_scaling": analysis.json_records(tables["schedule_scaling"]),
            "published_study": PUBLISHED_STUDY,
            "mpich_missing": None if mpich_built() else "Horovod for MPICH is not built: run make horovod-mpich",
        }

    def text(self, summary: Mapping[str, Any]) -> str:
        lines = [f"- {summary['method_text']}"]
        for key, reason in (summary.get("failed_points") or {}).items():
            lines.append(f"- Point `{key}` failed (a grey cell in the heatmaps): {reason}")
        base, tuned = summary.get("baseline_one_rank"), summary.get("best_one_rank")
        if base and tuned and not summary.get("per_node"):  # on nodes the per-node lines say it, per node's share
            lines.append(
                f"- One rank: {tuned['intra']} intra-op x {tuned['inter']} inter-op threads give "
                f"**{format_amount(tuned['images_per_s'])} images/s**, {summary['speedup_tuned_vs_default']:.2f}x the "
                f"{base['intra']} x {base['inter']} threads of the sweep's most threaded point, the untuned "
                f"oversubscription of the published study ({format_amount(base['images_per_s'])}); this machine has "
                f"{summary['cores']} cores."
            )
        best = summary.get("best")
        if best:
            total = summary.get("speedup_total")  # None without a one-rank point to compare with
            against = f"{total:.2f}x the one-rank baseline; " if total is not None else "no one-rank point to compare; "
            lines.append(
                f"- Best overall: {best['ranks']} rank(s) x {best['intra']} thread(s), set `{best['set']}`, "
                f"{best['mpi']}: **{format_amount(best['images_per_s'])} images/s** "
                f"({against}the published study: 16x on 8 nodes)."
            )
        for row in summary["runtime_sets"]:
            verdict = (
                "no effect within the interval: this build does not act on it here"
                if row["no_effect"]
                else f"{row['change']:+.0%} images/s against `default`"
            )
            lines.append(f"- Runtime set `{row['set']}`: {format_amount(row['images_per_s'])} images/s, {verdict}.")
        for row in summary["mpi_ab"]:
            if row["valid"]:
                lines.append(
                    f"- Horovod over {row['mpi']} ({row['controller']} controller): "
                    f"{format_interval(row['images_per_s'], row['ci_low'], row['ci_high'], 'images/s')}."
                )
            else:
                lines.append(
                    f"- Horovod with the {row['controller']} controller under mpiexec: each rank saw a world of "
                    f"{row['horovod_size']} rank(s), so the ranks trained alone (no gradient exchange): not a "
                    "valid comparison; Gloo needs horovodrun --gloo."
                )
        lines += per_node_text(summary.get("per_node") or [], summary.get("schedule_scaling") or [])
        lines += cpu_wait_text(summary.get("cpu_wait"))
        for row in summary["evaluation"]:
            where = f"{row['ranks']} rank(s)" + (f" on {row['nodes']} nodes" if row.get("nodes", 1) > 1 else "")
            if row["interval_per_epoch"] == row["interval_fixed"]:
                lines.append(
                    f"- {where}: once per epoch is every {row['interval_fixed']} iterations, the same "
                    f"schedule as the fix; the two runs differ by {abs(row['speedup_eval_fix'] - 1):.0%} in wall "
                    "time: the noise between identical runs here."
                )
                continue
            lines.append(
                f"- {where}: evaluating once per epoch (every {row['interval_per_epoch']} iterations) "
                f"took {row['eval_share_per_epoch']:.0%} of the time; every {row['interval_fixed']} iterations "
                f"{row['eval_share_fixed']:.0%}: **{row['speedup_eval_fix']:.2f}x** faster, while training "
                f"images/s changed {row['train_change']:+.0%} (images/s scale, time does not)."
            )
        return "\n".join(lines)

    def headline(self, result: ExperimentResult) -> pd.DataFrame:
        columns = ["ranks", "intra", "inter", "set", "eval", "mpi", "images_per_s", "ci_low", "ci_high", "eval_share"]
        return result.tables["runs"][columns]

    def report_sections(self, result: ExperimentResult) -> list[tuple[str, Any]]:
        from workbench import figures
        from workbench.report import Details

        tables = result.tables
        sections: list[tuple[str, Any]] = [("Summary", result.text())]
        threads = tables["threads"]
        if len(threads):
            sections.append(
                (
                    "Images/s by inter x intra-op threads, 1 rank",
                    figures.heatmap_figure(
                        threads,
                        "intra",
                        "inter",
                        "images_per_s",
                        title="images/s, 1 rank (x: intra-op, y: inter-op; grey: failed)",
                        failed=failed_cells(tables, ranks=1),
                    ),
                )
            )
        ranks_threads = tables["ranks_threads"]
        if len(ranks_threads):
            sections.append(
                (
                    "Images/s by ranks x threads per rank",
                    figures.heatmap_figure(
                        ranks_threads,
                        "intra",
                        "ranks",
                        "images_per_s",
                        title="images/s (x: threads per rank, y: ranks; grey: failed)",
                        failed=failed_cells(tables, inter=1),
                    ),
                )
            )
        if len(tables["speedup_steps"]):
            sections.append(("Cumulative speedup", figures.speedup_bars_figure(tables["speedup_steps"])))
        if len(tables["schedule_scaling"]):
            sections.append(("Images/s vs time", figures.rate_vs_time_figure(tables["schedule_scaling"])))
        if "failed" in tables:
            sections.append(("Points that failed", tables["failed"]))
        sections.append(("Runtime settings", tables["runtime_sets"]))
        sections.append(("MPI A/B for Horovod", tables["mpi_ab"]))
        sections.append(("Evaluation schedule", tables["evaluation"]))
        runs = tables["runs"]
        sections.append(("Runs", self.headline(result)))
        sections.append(("Runs: every column", Details(runs.drop(columns=["path", "run_id"]), "show every column")))
        return sections


def mpich_built() -> bool:
    """True when ``make horovod-mpich`` installed Horovod compiled against MPICH."""
    return (mpich_horovod_prefix() / "horovod" / "tensorflow").is_dir()


# -- helpers (pure) ------------------------------------------------------------------------------------------
def failed_cells(tables: Mapping[str, pd.DataFrame], **where: Any) -> pd.DataFrame | None:
    """The failed points of a heatmap's slice (default set, Open MPI, fixed evaluation, and ``where``)."""
    failed = tables.get("failed")
    if failed is None or failed.empty:
        return None
    keep = (failed["set"] == "default") & (failed["mpi"] == "openmpi") & (failed["eval"] == "fixed")
    for column, value in where.items():
        keep &= failed[column] == value
    return failed[keep]


def iteration_seconds(events: pd.DataFrame, warmup: int) -> np.ndarray:
    """Seconds from one iteration's start to the next (over all ranks), after the warm-up."""
    steps = events[(events["phase"] == "compute") & (events["name"] == "train_step") & (events["step"] >= warmup)]
    starts = steps.groupby("step")["start_ns"].min().sort_index().to_numpy()
    return np.diff(starts) / NS_PER_S


def runtime_effects(table: pd.DataFrame) -> pd.DataFrame:
    """Each named set against ``default`` at the same ranks and threads: change, and whether it is within noise."""
    columns = ["set", "ranks", "images_per_s", "ci_low", "ci_high", "change", "no_effect"]
    sets = table[(table["mpi"] == "openmpi") & (table["eval"] == "fixed")]
    rows = []
    for ranks, group in sets.groupby("ranks"):
        default = group[group["set"] == "default"]
        others = group[group["set"] != "default"]
        if default.empty or others.empty:
            continue
        for row in others.itertuples():
            ref = default[default["intra"] == row.intra]
            if ref.empty:
                continue
            ref = ref.iloc[0]
            overlap = row.ci_low <= ref["ci_high"] and ref["ci_low"] <= row.ci_high
            rows.append(
                [
                    row.set,
                    int(ranks),
                    row.images_per_s,
                    row.ci_low,
                    row.ci_high,
                    row.images_per_s / ref["images_per_s"] - 1,
                    bool(overlap),
                ]
            )
    return pd.DataFrame(rows, columns=columns)


def mpi_ab(table: pd.DataFrame) -> pd.DataFrame:
    """Horovod over each MPI build (and Gloo), same ranks and threads: images/s with its interval."""
    columns = ["mpi", "controller", "ranks", "images_per_s", "ci_low", "ci_high", "horovod_size", "valid"]
    chosen = table[(table["set"] == "default") & (table["eval"] == "fixed")]
    largest = chosen[chosen["ranks"] == chosen["ranks"].max()] if len(chosen) else chosen
    with_builds = largest[largest["mpi"] != "openmpi"]
    if with_builds.empty:
        return pd.DataFrame(columns=columns)
    threads = with_builds["intra"].iloc[0]
    rows = []
    for row in largest[largest["intra"] == threads].itertuples():
        mpi, controller = ("openmpi", "gloo") if row.mpi == "gloo" else (row.mpi, "mpi")
        rows.append(
            [mpi, controller, row.ranks, row.images_per_s, row.ci_low, row.ci_high, row.horovod_size, bool(row.valid)]
        )
    return pd.DataFrame(rows, columns=columns)


def speedup_steps(table: pd.DataFrame) -> pd.DataFrame:
    """The published study's Figure 11: the most threaded 1-rank point, the best 1-rank point, the best valid
    point overall."""
    columns = ["label", "images_per_s"]
    valid = table[table["valid"] & (table["eval"] == "fixed")]
    one = valid[(valid["ranks"] == 1) & (valid["set"] == "default") & (valid["mpi"] == "openmpi")]
    if one.empty:
        return pd.DataFrame(columns=columns)
    baseline = one.sort_values(["intra", "inter"]).iloc[-1]
    tuned = one.loc[one["images_per_s"].idxmax()]
    best = valid.loc[valid["images_per_s"].idxmax()]
    rows = [
        [f"baseline: 1 rank, {baseline['intra']}x{baseline['inter']} threads", baseline["images_per_s"]],
        [f"tuned: 1 rank, {tuned['intra']}x{tuned['inter']} threads", tuned["images_per_s"]],
        [f"scaled: {best['ranks']} ranks x {best['intra']}, {best['set']}, {best['mpi']}", best["images_per_s"]],
    ]
    return pd.DataFrame(rows, columns=columns)


def schedule_scaling(table: pd.DataFrame) -> pd.DataFrame:
    """Per evaluation schedule: speedup over 1 rank in images/s while training and in images per second of wall time.

    On nodes (``on_nodes``): the published study's order, the node tuned first, then scaled. The
    ranks x threads per node fastest on one node (fixed evaluation), at every node count, over its 1-node run.
    """
    columns = ["ranks", "nodes", "eval", "train_speedup", "time_speedup"]
    chosen = table[(table["set"] == "default") & (table["mpi"] == "openmpi") & (table["inter"] == 1)]
    if "on_nodes" in chosen and chosen["on_nodes"].any():
        tuned = chosen[(chosen["nodes"] == 1) & (chosen["eval"] == "fixed")].dropna(subset=["images_per_s"])
        if tuned.empty:
            return pd.DataFrame(columns=columns)
        best = tuned.loc[tuned["images_per_s"].idxmax()]
        chosen = chosen[(chosen["ranks_per_node"] == best["ranks_per_node"]) & (chosen["intra"] == best["intra"])]
        baseline = chosen["nodes"] == 1
    else:
        chosen = chosen[chosen["intra"] == (physical_cores() // chosen["ranks"]).clip(lower=1)]
        baseline = chosen["ranks"] == 1
    rows = []
    for schedule, group in chosen.groupby("eval", sort=True):
        one = group[baseline.loc[group.index]]
        if one.empty:
            continue
        one = one.iloc[0]
        for row in group.sort_values("ranks").itertuples():
            rows.append(
                [
                    int(row.ranks),
                    int(getattr(row, "nodes", 1)),
                    schedule,
                    row.train_images_per_s / one["train_images_per_s"],
                    row.images_per_s / one["images_per_s"],
                ]
            )
    return pd.DataFrame(rows, columns=columns)


def per_node_table(table: pd.DataFrame) -> pd.DataFrame:
    """On nodes: each node count's ranks x threads per node, both schedules (empty on one machine)."""
    columns = [
        "nodes",
        "ranks_per_node",
        "intra",
        "eval",
        "ranks",
        "images_per_s",
        "ci_low",
        "ci_high",
        "wall_s",
        "eval_share",
        "eval_interval",
        *POINT_CPU_COLUMNS,
    ]
    if "on_nodes" not in table or not table["on_nodes"].any():
        return pd.DataFrame(columns=columns)
    rows = table[table["on_nodes"] & (table["set"] == "default") & (table["mpi"] == "openmpi")]
    return rows.sort_values(["nodes", "ranks_per_node", "eval"]).reindex(columns=columns).reset_index(drop=True)


def per_node_text(per_node: list[Mapping[str, Any]], scaling: list[Mapping[str, Any]]) -> list[str]:
    """The node sweep's lines: the best split of each node count, and time against images/s as nodes are added."""
    lines = []
    for nodes in sorted({row["nodes"] for row in per_node}):
        fixed = [r for r in per_node if r["nodes"] == nodes and r["eval"] == "fixed" and r["images_per_s"]]
        if len(fixed) < 2:
            continue
        ranked = sorted(fixed, key=lambda r: -r["images_per_s"])
        best, other = ranked[0], ranked[-1]
        lines.append(
            f"- {nodes} node(s), the node's share fixed: {best['ranks_per_node']} rank(s) x {best['intra']} thread(s) "
            f"per node give {format_interval(best['images_per_s'], best['ci_low'], best['ci_high'], 'images/s')}, "
            f"{best['images_per_s'] / other['images_per_s']:.2f}x {other['ranks_per_node']} x {other['intra']}."
        )
    largest = max((row["nodes"] for row in scaling), default=1)
    for row in scaling:
        if row["nodes"] == largest and largest > 1:
            lines.append(
                f"- {largest} nodes over 1, evaluation {row['eval'].replace('_', ' ')}: **{row['train_speedup']:.2f}x**"
                f" the images/s while training, {row['time_speedup']:.2f}x in wall time."
            )
    return lines


def cpu_wait_extremes(points: pd.DataFrame) -> dict[str, Any] | None:
    """The points whose ranks' threads waited most and least for a core (``cpu_wait_share``); None unmeasured."""
    if "cpu_wait_share" not in points or len(points) < 2:
        return None
    shares = pd.to_numeric(points["cpu_wait_share"], errors="coerce").dropna()
    if len(shares) < 2:
        return None
    fields = ["ranks", "nodes", "intra", "inter", "images_per_s", *POINT_CPU_COLUMNS]
    most, least = (points.loc[index].reindex(fields) for index in (shares.idxmax(), shares.idxmin()))
    return {"most": analysis.json_ready(most.to_dict()), "least": analysis.json_ready(least.to_dict())}


def cpu_wait_text(extremes: Mapping[str, Any] | None) -> list[str]:
    """The published study's oversubscription, measured: the points whose threads waited most and least for a core."""
    if not extremes:
        return []

    def point(row: Mapping[str, Any]) -> str:
        nodes = row.get("nodes") or 1
        where = f" on {nodes} nodes" if nodes > 1 else ""
        return f"{row['ranks']} rank(s) x {row['intra']} intra-op x {row['inter']} inter-op thread(s){where}"

    def outcome(row: Mapping[str, Any]) -> str:
        throttled = row.get("throttled_share")
        quota = f"; the node's quota ran out in {throttled:.0%} of its periods" if is_finite_number(throttled) else ""
        return f"{row['cpu_wait_share']:.0%} ({format_amount(row['images_per_s'])} images/s{quota})"

    most, least = extremes["most"], extremes["least"]
    return [
        "- Threads waiting for a core, measured on each rank (the published study found too many threads in a"
        " profile): at"
        f" {point(most)} they waited {outcome(most)} of the time they were ready to run; at {point(least)}"
        f" {outcome(least)}."
    ]


def evaluation_fix(table: pd.DataFrame) -> pd.DataFrame:
    """Per rank count (and node count, with its ranks x threads): per-epoch evaluation (grows with ranks) vs
    fixed, in wall time and evaluation share."""
    columns = [
        "ranks",
        "nodes",
        "interval_per_epoch",
        "interval_fixed",
        "eval_share_per_epoch",
        "eval_share_fixed",
        "wall_s_per_epoch",
        "wall_s_fixed",
        "speedup_eval_fix",
        "train_change",
    ]
    chosen = table[(table["set"] == "default") & (table["mpi"] == "openmpi")]
    if "nodes" not in chosen:
        chosen = chosen.assign(nodes=1)
    rows = []
    for (ranks, nodes), group in chosen.groupby(["ranks", "nodes"]):
        before = group[group["eval"] == "per_epoch"]
        if before.empty:
            continue
        before = before.iloc[0]
        after = group[
            (group["eval"] == "fixed") & (group["intra"] == before["intra"]) & (group["inter"] == before["inter"])
        ]
        if after.empty:
            continue
        after = after.iloc[0]
        rows.append(
            [
                int(ranks),
                int(nodes),
                int(before["eval_interval"]),
                int(after["eval_interval"]),
                before["eval_share"],
                after["eval_share"],
                before["wall_s"],
                after["wall_s"],
                before["wall_s"] / after["wall_s"],
                after["train_images_per_s"] / before["train_images_per_s"] - 1,
            ]
        )
    return pd.DataFrame(rows, columns=columns)


CASE = CpuTuning()

__all__ = [
    "CASE",
    "MPI_BUILDS",
    "RUNTIME_SETS",
    "CpuTuning",
    "CpuTuningSettings",
    "evaluation_fix",
    "mpi_ab",
    "runtime_effects",
]
