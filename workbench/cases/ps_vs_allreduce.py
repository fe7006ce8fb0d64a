"""Case study "parameter servers vs allreduce": InceptionV3, synthetic vs real data.

The published study benchmarked distributed TensorFlow with parameter servers (between-graph replication) on
InceptionV3, in images/s, with a method: for each number of workers search the number of PS tasks
on synthetic data (no I/O), run the best on real data; 10 warm-up steps, the next 100 averaged, 5
runs. It found 99.6 % scaling efficiency at 8 GPUs in one DGX-1, 80 % (synthetic) / 72 % (real) at
64 and 52 % at 128 nodes of Piz Daint, 51 % at 64 and 28 % at 128 on p2.xlarge, and an I/O
overhead from ~1 % to 17 %.

The sweep here, per number of workers: parameter servers (``ParameterServerStrategy``, 1..P PS
tasks) and Horovod allreduce, on synthetic and on real data; each point measured with one
``BenchmarkMethod``. Each worker runs on its rank's host, the PS tasks dealt over the ranks' hosts and
the chief on rank 0's. On one machine they all share its cores (the findings say by how much); on a
cluster's nodes (``workbench run ps-vs-allreduce --nodes 1,2,4 --link RATE``) the PS traffic crosses the
links, as in the published study.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from workbench import analysis
from workbench.analysis import ps_load
from workbench.analysis.benchmark_method import BenchmarkMethod
from workbench.config import physical_cores
from workbench.events import BYTES_PER_MB, NS_PER_S
from workbench.experiment import Case, CaseOption, ExperimentResult, Point, parse_counts, parse_yes_no
from workbench.formatting import format_interval
from workbench.store import RunData
from workbench.workloads.ps_vs_allreduce import InceptionSettings, train_on_rank

#: The published study's scaling efficiency (InceptionV3, TF 1.1, parameter servers): (system, GPUs, data) ->
#: efficiency.
PUBLISHED_EFFICIENCY: tuple[dict[str, Any], ...] = (
    {"system": "NVIDIA DGX-1 (P100, NVLink)", "gpus": 8, "data": "synthetic", "efficiency": 0.9956},
    {"system": "Piz Daint (P100, Aries)", "gpus": 8, "data": "synthetic", "efficiency": 0.9207},
    {"system": "Piz Daint (P100, Aries)", "gpus": 64, "data": "synthetic", "efficiency": 0.8046},
    {"system": "Piz Daint (P100, Aries)", "gpus": 64, "data": "real", "efficiency": 0.7239},
    {"system": "Piz Daint (P100, Aries)", "gpus": 128, "data": "synthetic", "efficiency": 0.5211},
    {"system": "Piz Daint (P100, Aries)", "gpus": 128, "data": "real", "efficiency": 0.5163},
    {"system": "p2.xlarge (K80, 1 per node)", "gpus": 64, "data": "synthetic", "efficiency": 0.5096},
    {"system": "p2.xlarge (K80, 1 per node)", "gpus": 128, "data": "synthetic", "efficiency": 0.2756},
    {"system": "p2.8xlarge (8 K80 per node)", "gpus": 64, "data": "synthetic", "efficiency": 0.8855},
    {"system": "p2.8xlarge (8 K80 per node)", "gpus": 128, "data": "synthetic", "efficiency": 0.8524},
)
PUBLISHED_IO_OVERHEAD = (
    "17 % with 8 GPUs per node (p2.8xlarge, local SSD), 11 % on Piz Daint at 8–64 GPUs, ~1 % on p2.xlarge"
)
#: The published study's systems as the projection's named networks, and the worker counts projected.
PROJECTION_NETWORKS: tuple[tuple[str, str, int], ...] = (
    ("Piz Daint (P100, Aries)", "aries", 1),
    ("p2.xlarge (K80, 1 per node)", "aws-high", 1),
    ("p2.8xlarge (8 K80 per node)", "aws-10g-8gpu", 8),
)
PROJECTED_WORKERS: tuple[int, ...] = (1, 8, 16, 32, 64, 128)
EFFICIENCY_KEYS = ["scheme", "data", "ps", "placement"]


@dataclass(frozen=True)
class PsVsAllreduceSettings:
    """A preset: the model's size, the method, and the sweep's axes."""

    image_size: int = 75
    classes: int = 10
    batch: int = 8
    warmup_steps: int = 10
    measured_steps: int = 100
    repetitions: int = 5
    ps_counts: tuple[int, ...] = (1, 2)
    schemes: tuple[str, ...] = ("allreduce", "ps")
    data: tuple[str, ...] = ("synthetic", "real")
    real_at_largest_only: bool = False  # the ci preset: real data only at the most workers
    sharded_point: bool = True  # one more PS point with the variables sharded (largest workers, most PS)
    images: str = ""

    @property
    def method(self) -> BenchmarkMethod:
        return BenchmarkMethod(self.warmup_steps, self.measured_steps, self.repetitions)

    def workload(self, point: Point) -> InceptionSettings:
        params = point.as_dict()
        return InceptionSettings(
            scheme=params["scheme"],
            data=params["data"],
            ps=int(params.get("ps", 1)),
            placement=params.get("placement", "round-robin"),
            image_size=self.image_size,
            classes=self.classes,
            batch=self.batch,
            warmup_steps=self.warmup_steps,
            measured_steps=self.measured_steps,
            repetitions=self.repetitions,
            images=self.images,
        )


def parse_data(text: str) -> tuple[str, ...]:
    """``--data both`` (or ``synthetic,real``) -> the data kinds to sweep, checked."""
    from workbench.workloads.inception import DATA_KINDS

    chosen = tuple(DATA_KINDS) if text == "both" else tuple(d.strip() for d in text.split(",") if d.strip())
    unknown = [d for d in chosen if d not in DATA_KINDS]
    if unknown or not chosen:
        raise ValueError(f"data {text!r} is unknown: use one of {', '.join(DATA_KINDS)} or both")
    return chosen


def round_seconds(row: Mapping[str, Any], batch: int) -> float:
    """Seconds per round of a ps-vs-allreduce run: one step of every worker at its measured images/s."""
    return float(row["workers"]) * batch / float(row["images_per_s"])


def allreduce_twin(runs: pd.DataFrame, ps_run: pd.Series) -> pd.Series | None:
    """The allreduce run of a sweep with the PS run's data and workers (None: not in the sweep)."""
    same = runs[(runs["scheme"] == "allreduce") & (runs["data"] == ps_run["data"]) & (runs["ranks"] == ps_run["ranks"])]
    return None if same.empty else same.iloc[0]


class PsVsAllreduce(Case):
    name = "ps-vs-allreduce"
    title = "Parameter servers vs allreduce: InceptionV3, synthetic vs real data"
    about = (
        "InceptionV3 with ParameterServerStrategy (1..P PS) and Horovod allreduce; efficiency, I/O overhead"
    )
    presets: Mapping[str, PsVsAllreduceSettings] = {
        "ci": PsVsAllreduceSettings(
            batch=4,
            warmup_steps=1,
            measured_steps=2,
            repetitions=2,
            ps_counts=(1,),
            real_at_largest_only=True,
            sharded_point=False,
        ),
        "reduced": PsVsAllreduceSettings(warmup_steps=3, measured_steps=12, repetitions=3),
        "full": PsVsAllreduceSettings(image_size=299, classes=1000, batch=32, ps_counts=(1, 2, 4)),
    }
    options = (
        CaseOption("--ps", "ps_counts", "parameter-server task counts to search, e.g. 1,2", parse_counts),
        CaseOption("--data", "data", "data to train on: synthetic, real or both", parse_data),
        CaseOption(
            "--sharded",
            "sharded_point",
            "yes: one more PS point at the most workers, the variables sharded over the most PS tasks",
            parse_yes_no,
        ),
        CaseOption("--measured-steps", "measured_steps", "steps timed per repetition (after warm-up)", int),
        CaseOption("--repetitions", "repetitions", "repetitions of each measurement", int),
        CaseOption("--warmup-steps", "warmup_steps", "steps left out before timing", int),
    )
    workload = staticmethod(train_on_rank)

    def projection_base(
        self, runs: pd.DataFrame, row: Any, base: pd.Series
    ) -> tuple[pd.Series | None, Callable[[Any], dict[str, Any]]]:
        """A PS row's model is the same workload's allreduce run on as few nodes, plus what the PS run's step took
        beyond it there: the pulls and pushes through the RPCs on that node (``server_exchange_s``)."""
        if row.scheme != "ps":
            return base, lambda run: {}
        twin = allreduce_twin(runs, base)

        def exchange(run: RunData) -> dict[str, Any]:
            batch = int(((run.meta.get("config") or {}).get("settings") or {}).get("batch", 1))
            return {"server_exchange_s": max(round_seconds(base, batch) - round_seconds(twin, batch), 0.0)}

        return twin, exchange

    def projection_inputs(self, run: RunData, row: Any) -> tuple[dict[str, Any], float, str]:
        """A step of every worker: workers x batch images at the measured images/s; the PS tasks sit on the workers'
        nodes (task j beside worker j mod workers, as the workload places them) holding the shares TensorFlow
        dealt; measured: the round."""
        settings = (run.meta.get("config") or {}).get("settings") or {}
        batch = int(settings.get("batch", 1))
        kwargs: dict[str, Any] = {
            "step_costs": {"gradient_bytes": float(row.gradient_mb) * BYTES_PER_MB, "batch_per_rank": batch},
            "no_horovod": row.scheme != "allreduce",
        }
        if row.scheme == "ps":
            shares = [float(share) for share in row.placed_shares] if len(row.placed_shares) else None
            kwargs.update(
                scheme="ps",
                servers=int(row.ps),
                server_shares=tuple(shares) if shares else None,
                servers_colocated=True,
                servers_asynchronous=True,
            )
        return kwargs, round_seconds(row._asdict(), batch), "step_s"

    def points(self, settings: PsVsAllreduceSettings, max_ranks: int) -> list[Point]:
        points = []
        for workers in range(1, max_ranks + 1):
            kinds = [
                d for d in settings.data if d != "real" or not settings.real_at_largest_only or workers == max_ranks
            ]
            for data in kinds:
                if "allreduce" in settings.schemes:
                    points.append(Point.of(workers, {"scheme": "allreduce", "data": data}))
                if "ps" in settings.schemes:
                    points += [
                        Point.of(workers, {"scheme": "ps", "data": data, "ps": p, "placement": "round-robin"})
                        for p in settings.ps_counts
                    ]
        most = max(settings.ps_counts)
        if "ps" in settings.schemes and settings.sharded_point and most > 1:
            points.append(
                Point.of(max_ranks, {"scheme": "ps", "data": "synthetic", "ps": most, "placement": "sharded"})
            )
        return points

    def workload_kwargs(self, settings: PsVsAllreduceSettings, point: Point) -> dict[str, Any]:
        return {"settings_dict": asdict(settings.workload(point))}

    def row(self, run: RunData, point: Point, settings: PsVsAllreduceSettings) -> dict[str, Any]:
        results = run.meta.get("rank_results") or []
        first = next((r for r in results if r.get("rank") == 0), results[0] if results else {})
        params = point.as_dict()
        method = settings.method
        rates = first.get("images_per_s") or []
        steps = phase_per_step(run.events, settings.warmup_steps)
        step_s = analysis.measured_step_seconds(run.events, method) if rates and len(rates) == 1 else None
        measured = (
            method.summarise(rates, step_seconds=step_s, samples_per_step=settings.batch * point.ranks) if rates else {}
        )
        workers, ps = point.ranks, int(params.get("ps", 0)) if params["scheme"] == "ps" else 0
        threads = int(first.get("threads", 0))
        return {
            "run_id": run.run_id,
            "scheme": params["scheme"],
            "data": params["data"],
            "workers": workers,
            "ps": ps,
            "placement": params.get("placement", "") if ps else "",
            "images_per_s": measured.get("value", float("nan")),
            "ci_low": measured.get("ci_low", float("nan")),
            "ci_high": measured.get("ci_high", float("nan")),
            "repetitions": measured.get("repetitions", 0),
            "interval_basis": measured.get("basis", ""),
            **steps,
            "gradient_mb": first.get("gradient_bytes", 0) / BYTES_PER_MB,
            "parameters": first.get("parameters", 0),
            "threads_per_worker": threads,
            "processes": workers + ps + (1 if ps else 0),
            "threads_total": workers * threads + ps + (1 if ps else 0),
            **busiest_host(results),
            "placed_shares": placed_shares(first.get("placement") or [], ps),
            # the coordinator hands a step to whichever worker is free: under PS they differ
            "steps_per_worker": first.get("steps_per_worker") or [first.get("steps", 0)] * workers,
            "path": str(run.path),
        }

    def tables(
        self, rows: pd.DataFrame, runs: Mapping[str, RunData], settings: PsVsAllreduceSettings
    ) -> dict[str, Any]:
        table = rows.sort_values(["scheme", "data", "ps", "placement", "workers"]).reset_index(drop=True)
        measured = table[np.isfinite(table["images_per_s"])]
        efficiency = analysis.scaling_efficiency(measured, by=EFFICIENCY_KEYS) if len(measured) else measured
        placement_rows, sizes_run = [], None
        for row in table[table["scheme"] == "ps"].itertuples():
            result = next((r for r in runs[row.point].meta.get("rank_results") or [] if r.get("rank") == 0), {})
            placed = [p for p in result.get("placement") or [] if p["trainable"]]
            if not placed:
                continue
            tasks, sizes = [p["ps"] for p in placed], [p["bytes"] for p in placed]
            load = ps_load.load_table(tasks, sizes, row.ps, f"measured: {row.placement}")
            placement_rows.append(load.assign(point=row.point, workers=row.workers, data=row.data))
            if row.placement == "round-robin" and (sizes_run is None or row.ps > sizes_run[1]):
                # the round-robin row is what TensorFlow dealt (see ps_load.placements), the others computed
                whole: dict[str, int] = {}
                dealt: dict[str, int] = {}
                for p in placed:
                    whole[p["variable"]] = whole.get(p["variable"], 0) + p["bytes"]
                    dealt.setdefault(p["variable"], p["ps"])
                sizes_run = (list(whole.values()), row.ps, list(dealt.values()))
        load = pd.concat(placement_rows, ignore_index=True) if placement_rows else pd.DataFrame()
        compared = ps_load.placements(*sizes_run) if sizes_run else pd.DataFrame()
        return {
            "runs": table,
            "efficiency": efficiency,
            "io_overhead": io_overhead_table(efficiency),
            "ps_load": load,
            "placements": compared,
            "projection": project_published_systems(table, runs),
        }

    def summary(
        self, rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame], settings: PsVsAllreduceSettings
    ) -> dict[str, Any]:
        efficiency = tables["efficiency"]
        columns = [
            "scheme",
            "data",
            "workers",
            "ps",
            "placement",
            "images_per_s",
            "ci_low",
            "ci_high",
            "efficiency",
            "efficiency_low",
            "efficiency_high",
        ]
        largest = int(rows["workers"].max())
        search = best_configurations(efficiency)
        at_largest = search[search["workers"] == largest]
        comparison = None
        if set(at_largest["scheme"]) >= {"ps", "allreduce"}:
            ps_row = at_largest[at_largest["scheme"] == "ps"].iloc[0]
            ar_row = at_largest[at_largest["scheme"] == "allreduce"].iloc[0]
            comparison = {
                "workers": largest,
                "allreduce_over_ps": float(ar_row["images_per_s"] / ps_row["images_per_s"]),
                "intervals_overlap": bool(
                    ar_row["ci_low"] <= ps_row["ci_high"] and ps_row["ci_low"] <= ar_row["ci_high"]
                ),
                "best_ps": int(ps_row["ps"]),
            }
        oversubscribed = rows[rows["threads_busiest_host"] > rows["cores_per_host"]]
        step_parts = step_decomposition(tables["runs"], search)
        imbalance = ps_load.imbalance(tables["placements"]) if len(tables["placements"]) else pd.DataFrame()
        return {
            "method": settings.method.as_dict(),
            "method_text": settings.method.describe(),
            "efficiency": analysis.json_records(efficiency, columns),
            "best_on_synthetic": analysis.json_records(
                search, ["scheme", "workers", "ps", "placement", "images_per_s", "ci_low", "ci_high"]
            ),
            "confirmed_on_real": analysis.json_records(
                confirmed_on_real(efficiency, search),
                ["scheme", "workers", "ps", "placement", "images_per_s", "ci_low", "ci_high"],
            ),
            "io_overhead": analysis.json_records(tables["io_overhead"]),
            "comparison": comparison,
            "placement_imbalance": analysis.json_records(imbalance),
            "step_parts": analysis.json_records(step_parts),
            "points": analysis.json_records(
                tables["runs"],
                [
                    "point",
                    "scheme",
                    "data",
                    "workers",
                    "ps",
                    "placement",
                    "images_per_s",
                    "train_step_ms",
                    "comm_ms",
                    "input_ms",
                    "processes",
                    "threads_total",
                    "hosts",
                    "gradient_mb",
                    "placed_shares",
                    "steps_per_worker",
                ],
            ),
            "cores": int(rows["cores_per_host"].min()) if len(rows) else physical_cores(),
            "hosts": int(rows["hosts"].max()) if len(rows) else 1,
            "oversubscribed_points": analysis.json_records(
                oversubscribed, ["point", "processes", "threads_total", "threads_busiest_host"]
            ),
            "projection": analysis.json_records(tables["projection"]),
            "published_efficiency": list(PUBLISHED_EFFICIENCY),
            "model": {
                "image_size": settings.image_size,
                "classes": settings.classes,
                "batch_per_worker": settings.batch,
                "parameters": int(rows["parameters"].max()) if len(rows) else 0,
                "gradient_mb": float(rows["gradient_mb"].max()) if len(rows) else 0.0,
            },
        }

    def text(self, summary: Mapping[str, Any]) -> str:
        lines = [f"- {summary['method_text']}"]
        model = summary["model"]
        lines.append(
            f"- Model: InceptionV3, {model['parameters'] / 1e6:.3g} M parameters, {model['image_size']}x"
            f"{model['image_size']} images, {model['classes']} classes, batch {model['batch_per_worker']} per worker."
        )
        for best in summary["best_on_synthetic"]:
            if best["scheme"] == "ps":
                lines.append(
                    f"- Search on synthetic data, {best['workers']} worker(s): best with **{best['ps']} PS** "
                    f"({best['placement']}), {fmt_rate(best)}."
                )
        comparison = summary.get("comparison")
        if comparison:
            verdict = (
                "the intervals overlap: no difference this measurement can resolve"
                if comparison["intervals_overlap"]
                else "the intervals do not overlap"
            )
            lines.append(
                f"- At {comparison['workers']} workers allreduce gives **{comparison['allreduce_over_ps']:.2f}x** the "
                f"images/s of the best PS setup ({comparison['best_ps']} PS); {verdict}."
            )
        for row in summary["efficiency"]:
            if row["workers"] > 1 and row["efficiency"] is not None and row["data"] == "synthetic":
                where = "allreduce" if row["scheme"] == "allreduce" else f"PS ({row['ps']} PS, {row['placement']})"
                low, high = row["efficiency_low"], row["efficiency_high"]
                interval = (
                    f"[{low:.0%}, {high:.0%}]"
                    if low is not None and high is not None and high - low < row["efficiency"]
                    else "(interval wider than the value: add repetitions or measured steps)"
                )
                lines.append(
                    f"- Scaling efficiency at {row['workers']} workers, {where}: "
                    f"**{row['efficiency']:.0%}** {interval}."
                )
        lines += [step_parts_text(row) for row in summary.get("step_parts") or []]
        for row in summary["confirmed_on_real"]:
            lines.append(f"- Confirmed on real data ({row['scheme']}, {row['workers']} worker(s)): {fmt_rate(row)}.")
        for row in summary["io_overhead"]:
            where = "allreduce" if row["scheme"] == "allreduce" else f"PS ({row['ps']} PS)"
            if row["overhead"] >= 0:
                cost = f"**{row['overhead']:.0%}** of the synthetic throughput lost to reading and decoding images"
            else:
                cost = (
                    f"real data ran {-row['overhead']:.0%} faster than synthetic: no I/O cost this measurement can show"
                )
            lines.append(f"- I/O overhead, {where}, {row['workers']} worker(s): {cost}.")
        if summary["io_overhead"]:
            lines.append(f"- The published study's I/O overhead: {PUBLISHED_IO_OVERHEAD}.")
        for row in summary["placement_imbalance"]:
            if row["ps"] > 1:
                lines.append(
                    f"- Placement over {row['ps']} PS tasks, {row['placement']}: the busiest task holds "
                    f"{row['imbalance']:.2f}x the mean bytes (1.00x = an even split)."
                )
        over = summary["oversubscribed_points"]
        if over:
            worst = max(over, key=lambda r: r["threads_busiest_host"])
            where = "this machine's" if summary.get("hosts", 1) == 1 else "a host's"
            cores = f"{summary['cores']} core{'' if summary['cores'] == 1 else 's'}"
            lines.append(
                f"- **Oversubscribed**: {len(over)} point(s) ran more threads on one host than {where} {cores} "
                f"(up to {worst['threads_busiest_host']} threads on one host, "
                f"{worst['processes']} processes in all, at `{worst['point']}`): workers, PS tasks and the chief "
                "took turns on the cores, so PS points are slower here than on separate machines, and efficiency "
                "above 1 worker mostly measures the cores."
            )
        projection = summary.get("projection") or []
        if projection:
            lines.append(
                "- Projected from the 1-worker run to networks like the published study's (PS scheme, one PS"
                " task per node): "
                + "; ".join(
                    f"{row['system']}: {row['efficiency']:.0%} at {row['workers']}"
                    for row in projection
                    if row["workers"] in (64, 128)
                )
                + ". The published study measured Piz Daint 80 % / 52 %, p2.xlarge 51 % / 28 %, p2.8xlarge 89 % / 85 %"
                " at 64 / 128."
                " With one PS task per node the busiest card carries the same bytes at any size, so the model's"
                " efficiency flattens; the published study's fall past 64 nodes (the network's capacity, in its"
                " words) is"
                " contention this latency-bandwidth model does not have."
            )
        return "\n".join(lines)

    def headline(self, result: ExperimentResult) -> pd.DataFrame:
        columns = ["scheme", "data", "workers", "ps", "placement", "images_per_s", "ci_low", "ci_high", "efficiency"]
        table = result.tables["efficiency"]
        return table[[c for c in [*columns, "comm_ms", "processes"] if c in table]]

    def stall_after_s(self, point: Point) -> float | None:
        """A PS point's engines wait by design while the job runs in processes of its own."""
        return None if point["scheme"] == "ps" else 30.0

    def healthy(self, summary: Mapping[str, Any]) -> bool:
        return bool(summary["efficiency"])

    def report_sections(self, result: ExperimentResult) -> list[tuple[str, Any]]:
        from workbench import figures
        from workbench.report import REPORT_MAX_SPANS, REPORT_WIDTH_PX, Details

        sections: list[tuple[str, Any]] = [("Summary", result.text())]
        efficiency = result.tables["efficiency"]
        if len(efficiency):
            sections.append(("Throughput and efficiency", figures.efficiency_figure(efficiency)))
        sections.append(("How each point was measured", result.summary["method_text"]))
        sections.append(("Efficiency table", self.headline(result)))
        if len(result.tables["io_overhead"]):
            sections.append(("I/O overhead (1 − real / synthetic)", result.tables["io_overhead"]))
        runs = result.tables["runs"]
        largest = runs[runs["workers"] == runs["workers"].max()]
        for scheme in ("ps", "allreduce"):
            chosen = largest[(largest["scheme"] == scheme) & (largest["data"] == "synthetic")]
            if len(chosen):
                point = chosen.sort_values("ps").iloc[0]["point"]
                sections.append(
                    (
                        f"Timeline of the workers, {point}",
                        figures.timeline_figure(
                            result.run(point).events, max_spans=REPORT_MAX_SPANS, width_px=REPORT_WIDTH_PX
                        ),
                    )
                )
        if len(result.tables["placements"]):
            sections.append(("Load of the PS tasks by placement", figures.ps_load_figure(result.tables["placements"])))
        if len(result.tables["projection"]):
            sections.append(("Projected to the published study's systems", result.tables["projection"]))
        sections.append(("The published study's efficiency", pd.DataFrame(PUBLISHED_EFFICIENCY)))
        sections.append(("Runs: every column", Details(runs.drop(columns=["path", "run_id"]), "show every column")))
        return sections


# -- helpers (pure) ----------------------------------------------------------------------------------------------
def phase_per_step(events: pd.DataFrame, warmup_steps: int) -> dict[str, float]:
    """Mean ms per step per worker in input, compute, ``train_step`` (forward and backward) and
    communication, after the warm-up steps."""
    keys = ["input_ms", "compute_ms", "train_step_ms", "comm_ms", "comm_share"]
    if events.empty:
        return dict.fromkeys(keys, float("nan"))
    steady = events[events["step"] >= warmup_steps]
    steps = steady.groupby("rank")["step"].nunique().sum()
    durations = (steady["end_ns"] - steady["start_ns"]) * 1e3 / NS_PER_S  # ms
    selections = {
        "input_ms": steady["phase"] == "input",
        "compute_ms": steady["phase"] == "compute",
        "train_step_ms": (steady["phase"] == "compute") & (steady["name"] == "train_step"),
        "comm_ms": steady["phase"] == "communication",
    }
    out = {key: float(durations[chosen].sum() / steps) if steps else float("nan") for key, chosen in selections.items()}
    total = out["input_ms"] + out["compute_ms"] + out["comm_ms"]
    out["comm_share"] = out["comm_ms"] / total if total > 0 else float("nan")
    return out


def busiest_host(rank_results: list[Mapping[str, Any]]) -> dict[str, int]:
    """The threads the point ran on its busiest host, that host's cores, and how many hosts it used.

    Each rank says its host, its cores and the threads of the processes it started (under PS: its
    worker's intra-op threads, one per PS task and one for the chief); results without a host
    (saved before hosts were recorded) count as one host with every thread on it.
    """
    threads: dict[str, int] = {}
    cores: dict[str, int] = {}
    for result in rank_results:
        host = str(result.get("host") or "")
        threads[host] = threads.get(host, 0) + int(result.get("threads_here") or result.get("threads") or 1)
        cores[host] = int(result.get("cores") or physical_cores())
    if not threads:
        return {"threads_busiest_host": 0, "cores_per_host": physical_cores(), "hosts": 0}
    busiest = max(threads, key=lambda host: threads[host])
    return {"threads_busiest_host": threads[busiest], "cores_per_host": cores[busiest], "hosts": len(threads)}


def placed_shares(placement: list[Mapping[str, Any]], ps: int) -> list[float]:
    """Each PS task's share of the trainable bytes, in task order ([] without PS tasks)."""
    held = [0] * ps
    for variable in placement:
        if variable["trainable"] and 0 <= variable["ps"] < ps:
            held[variable["ps"]] += variable["bytes"]
    total = sum(held)
    return [round(bytes_ / total, 4) for bytes_ in held] if total else []


def io_overhead_table(efficiency: pd.DataFrame) -> pd.DataFrame:
    """``1 − real / synthetic`` images/s for every configuration measured with both."""
    columns = ["scheme", "workers", "ps", "placement", "synthetic_images_per_s", "real_images_per_s", "overhead"]
    rows = []
    if len(efficiency):
        keys = ["scheme", "workers", "ps", "placement"]
        for key, group in efficiency.groupby(keys, sort=True):
            by_data = group.set_index("data")["images_per_s"]
            if {"synthetic", "real"} <= set(by_data.index):
                cost = analysis.io_overhead(by_data["synthetic"], by_data["real"])
                rows.append(
                    {
                        **dict(zip(keys, key)),
                        "synthetic_images_per_s": cost.synthetic_throughput,
                        "real_images_per_s": cost.real_throughput,
                        "overhead": cost.overhead,
                    }
                )
    return pd.DataFrame(rows, columns=columns)


def efficiency_over_repetitions(sweeps: Sequence[tuple[str, Mapping[str, Any]]]) -> pd.DataFrame:
    """Each synthetic-data point's efficiency and seconds per round over repeated sweeps of the same points.

    ``sweeps``: ``(cluster, summary)`` pairs, the summary as ``summary.json`` saves it. One sweep's ci-sized
    point moves by 10–20 % between repetitions, so a claim such as "PS falls faster than allreduce" stands on
    the median and the range over the repetitions, not on one sweep. A round is one step of every worker
    (workers × batch / images/s): the two schemes' time for the same work; ``over_allreduce`` is a round over
    the same sweep's allreduce round at as many workers (each scheme's efficiency is against its own 1 worker).
    """
    columns = [
        "cluster", "scheme", "ps", "placement", "workers", "repetitions",
        "efficiency", "efficiency_min", "efficiency_max", "efficiency_each",
        "round_s", "round_s_min", "round_s_max", "round_s_each",
        "over_allreduce", "over_allreduce_min", "over_allreduce_max", "over_allreduce_each",
    ]  # fmt: skip
    found: dict[tuple[Any, ...], dict[str, list[float]]] = {}
    for cluster, summary in sweeps:
        batch = float((summary.get("model") or {}).get("batch_per_worker") or 0)
        listed = summary.get("efficiency") or []
        measured = [r for r in listed if r.get("data") == "synthetic" and r.get("images_per_s")]
        allreduce = {int(r["workers"]): r["images_per_s"] for r in measured if r["scheme"] == "allreduce"}
        for row in measured:
            key = (cluster, row["scheme"], int(row["ps"]), row["placement"], int(row["workers"]))
            each = found.setdefault(key, {"efficiency": [], "round_s": [], "over_allreduce": []})
            if row.get("efficiency") is not None and np.isfinite(row["efficiency"]):
                each["efficiency"].append(float(row["efficiency"]))
            if batch:
                each["round_s"].append(float(row["workers"] * batch / row["images_per_s"]))
            if int(row["workers"]) in allreduce:
                each["over_allreduce"].append(float(allreduce[int(row["workers"])] / row["images_per_s"]))
    rows = []
    for key, each in found.items():
        row = dict(zip(columns[:5], key))
        row["repetitions"] = max(len(each["efficiency"]), len(each["round_s"]))
        for name, values in each.items():
            row[name] = float(np.median(values)) if values else None
            row[f"{name}_min"] = min(values) if values else None
            row[f"{name}_max"] = max(values) if values else None
            row[f"{name}_each"] = values
        rows.append(row)
    table = pd.DataFrame(rows, columns=columns)
    order = table.assign(allreduce_first=table["scheme"] != "allreduce")
    return table.loc[order.sort_values(["cluster", "workers", "allreduce_first", "ps", "placement"]).index].reset_index(
        drop=True
    )


def best_configurations(efficiency: pd.DataFrame) -> pd.DataFrame:
    """The published study's search: per scheme and workers, the fastest configuration on synthetic data."""
    synthetic = efficiency[efficiency["data"] == "synthetic"] if len(efficiency) else efficiency
    if synthetic.empty:
        return synthetic
    best = synthetic.loc[synthetic.groupby(["scheme", "workers"])["images_per_s"].idxmax()]
    return best.sort_values(["scheme", "workers"]).reset_index(drop=True)


def confirmed_on_real(efficiency: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """The real-data rows of the configurations the synthetic search chose."""
    if best.empty:
        return best
    keys = ["scheme", "workers", "ps", "placement"]
    real = efficiency[efficiency["data"] == "real"]
    return real.merge(best[keys], on=keys).sort_values(["scheme", "workers"]).reset_index(drop=True)


def project_published_systems(table: pd.DataFrame, runs: Mapping[str, RunData]) -> pd.DataFrame:
    """The 1-worker allreduce run (pure compute) projected with the PS scheme onto the published study's networks."""
    from workbench.analysis import projection

    one = table[(table["scheme"] == "allreduce") & (table["workers"] == 1) & (table["data"] == "synthetic")]
    if one.empty:
        return pd.DataFrame()
    run = runs[one["point"].iloc[0]]
    try:
        costs = projection.step_costs(run.events, run.meta, run.memory)
    except ValueError:
        return pd.DataFrame()  # too few steps recorded: nothing to project
    frames = []
    for system, name, per_node in PROJECTION_NETWORKS:
        net = projection.network(name, ranks_per_node=per_node)
        projected = projection.project(
            costs, list(PROJECTED_WORKERS), net, kind="weak", changes=projection.Changes(scheme="ps"), bootstrap=0
        )
        frames.append(
            projected.table[["ranks", "efficiency", "limiter"]]
            .rename(columns={"ranks": "workers"})
            .assign(system=system, network=name)
        )
    return pd.concat(frames, ignore_index=True)[["system", "network", "workers", "efficiency", "limiter"]]


def step_decomposition(runs: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Per workers: allreduce's step beside the best PS setup's, the PS pull estimated as the extra compute.

    Under PS the forward pass reads every variable from the PS tasks, so its ``train_step`` span holds
    the pull; the same step under allreduce (same workers, synthetic data) holds none.
    """
    columns = ["workers", "ps", "allreduce_compute_ms", "allreduce_comm_ms", "ps_compute_ms", "pull_ms", "push_ms"]
    # compute_ms here is the train_step span (forward and backward) only: under PS the update runs on the PS
    rows = []
    synthetic = runs[runs["data"] == "synthetic"]
    for workers, group in synthetic.groupby("workers"):
        chosen = best[(best["scheme"] == "ps") & (best["workers"] == workers)] if len(best) else best
        allreduce = group[group["scheme"] == "allreduce"]
        if chosen.empty or allreduce.empty:
            continue
        ps = group[
            (group["scheme"] == "ps")
            & (group["ps"] == chosen["ps"].iloc[0])
            & (group["placement"] == chosen["placement"].iloc[0])
        ]
        if ps.empty:
            continue
        a, p = allreduce.iloc[0], ps.iloc[0]
        rows.append(
            [
                int(workers),
                int(p["ps"]),
                a["train_step_ms"],
                a["comm_ms"],
                p["train_step_ms"],
                max(p["train_step_ms"] - a["train_step_ms"], 0.0),
                p["comm_ms"],
            ]
        )
    return pd.DataFrame(rows, columns=columns)


def step_parts_text(row: Mapping[str, Any]) -> str:
    """One line: a step under allreduce beside the same step under PS, the pull and the push."""
    workers = row["workers"]
    allreduce = f"{row['allreduce_compute_ms']:.3g} ms without PS"
    if workers > 1:
        allreduce += f" (then {row['allreduce_comm_ms']:.3g} ms of allreduce)"
    under_ps = f"{row['ps_compute_ms']:.3g} ms under PS ({row['ps']} PS)"
    if row["pull_ms"] > 0:
        pull = f"so ~{row['pull_ms']:.3g} ms reading the variables from the PS"
    else:
        pull = "no slower: reading the variables from the PS does not show in this measurement"
    return (
        f"- Per step at {workers} worker(s), forward and backward: {allreduce}; {under_ps}, {pull}; "
        f"then {row['push_ms']:.3g} ms pushing the gradients."
    )


def fmt_rate(row: Mapping[str, Any]) -> str:
    """``26 images/s [0.525, 51.5]``: the throughput and, when known, its interval."""
    return format_interval(row["images_per_s"], row.get("ci_low"), row.get("ci_high"), "images/s")


CASE = PsVsAllreduce()

__all__ = ["CASE", "PUBLISHED_EFFICIENCY", "PsVsAllreduce", "PsVsAllreduceSettings", "phase_per_step"]
