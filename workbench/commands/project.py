"""``workbench project RUN_DIR... --ranks 8,16,32,64``: what N ranks would give, from runs on a few.

The model is ``analysis.projection``; this module only loads runs, picks the one to build the
model from (the fewest ranks), puts the other runs beside the projection as measured points, and
lays the result out as text (2–3 significant figures with units), JSON or an HTML report.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.analysis import json_ready
from workbench.analysis import projection as pj
from workbench.events import BYTES_PER_MB
from workbench.formatting import format_percent, format_rate, format_ratio, format_seconds, text_table
from workbench.gradients import gradient_layout, read_layout_file
from workbench.store import RunData

#: Network used when none is named: the commonest cluster link.
DEFAULT_NETWORK = "10gbe"
#: ``--network here``: the α–β fitted to this project's machine (README, allreduce bench).
HERE = "here"
#: The reference system whose allreduce ships with the package (``projection.REFERENCE_VM_ALLREDUCE``).
REFERENCE_VM = "reference-vm"


#: Node counts ``workbench project`` projects a described system to when ``--nodes`` is not given.
DEFAULT_NODES = "1,2,4,8,16,32,64"
_SUFFIXES = {"k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}


def parse_count(text: str | float, what: str = "--parameters") -> float:
    """``23.8M`` / ``25e6`` / ``1.2G`` -> a number; one clear error otherwise."""
    if isinstance(text, (int, float)):
        return float(text)
    value = str(text).strip().replace(",", "").replace("_", "")
    scale = _SUFFIXES.get(value[-1:].lower(), 1.0)
    if scale != 1.0:
        value = value[:-1]
    try:
        number = float(value) * scale
    except ValueError:
        raise ValueError(f"{what} {text!r}: give a number, e.g. 23.8M or 25e6") from None
    if not number > 0:
        raise ValueError(f"{what} {text!r}: must be > 0")
    return number


def system_from_arguments(args: Any) -> pj.SystemSpec | None:
    """A described system from ``workbench project``'s flags and/or ``--system FILE`` (flags win); None if none."""
    flags = {
        "parameters": args.parameters,
        "gradient_bytes": args.gradient_mb * BYTES_PER_MB if args.gradient_mb else None,
        "step_s": args.step_time,
        "samples_per_s": args.throughput,
        "batch": args.batch,
        "devices_per_node": args.devices_per_node,
        "input_period_s": args.input_period,
        "step_spread": args.step_spread,
        "samples_per_epoch": args.samples_per_epoch,
        "epochs": args.epochs,
        "evaluation_s": args.eval_seconds,
        "gradients": layout_from_arguments(args),
    }
    given = {k: v for k, v in flags.items() if v is not None}
    if args.system is None and not given:
        return None
    values: dict[str, Any] = read_system_file(args.system) if args.system else {}
    for either in ({"parameters", "gradient_bytes"}, {"step_s", "samples_per_s"}):
        if given.keys() & either:  # a flag replaces the file's value of the same quantity, in either form
            for name in either:
                values.pop(name, None)
    values.update(given)
    if "parameters" in values:
        values["parameters"] = parse_count(values["parameters"])
    if isinstance(values.get("gradients"), str):  # a file's "gradients": a model's name or a layout file
        values["gradients"] = gradient_layout(values["gradients"])
    if args.network or "network" not in values:
        values["network"] = resolve_network(args.network)
    if "batch" not in values:
        raise ValueError("a described system needs --batch: the samples each device takes per step")
    spec = pj.system_from_mapping(values)
    changes: dict[str, Any] = {}
    if args.bandwidth_gbs:
        changes["bandwidth_bytes_per_s"] = args.bandwidth_gbs * pj.BYTES_PER_GB
    if args.latency_us is not None:
        changes["latency_s"] = args.latency_us * 1e-6
    if changes:
        base = spec.resolved_network()
        spec = replace(spec, network=pj.network(base, name=f"{base.name}, changed on the command line", **changes))
    return spec


def layout_from_arguments(args: Any) -> pj.GradientLayout | None:
    """The gradients' layout ``--model`` or ``--gradients`` names (None: neither given)."""
    model, path = getattr(args, "model", None), getattr(args, "gradients", None)
    if model and path:
        raise ValueError("give --model or --gradients, not both: --model names a known model, --gradients a file")
    if path:
        return read_layout_file(path)
    return gradient_layout(model) if model else None


def read_system_file(path: str | Path) -> dict[str, Any]:
    """A system description from a JSON or YAML file (a mapping of ``SystemSpec`` fields)."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(
            f"--system {path}: no such file; write a JSON or YAML mapping (parameters, step_s, batch, ...)"
        )
    text = file.read_text()
    try:
        if file.suffix.lower() in (".yaml", ".yml"):
            import yaml

            loaded = yaml.safe_load(text)
        else:
            loaded = json.loads(text)
    except Exception as error:
        raise ValueError(f"--system {path}: not valid {file.suffix.lstrip('.') or 'JSON'} ({error})") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"--system {path}: expected a mapping of fields (parameters, step_s, batch, ...)")
    return loaded


def parse_ranks(text: str) -> list[int]:
    """``8,16,32,64`` -> [8, 16, 32, 64]; every count >= 1."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--ranks {text!r}: give whole numbers separated by commas, e.g. 8,16,32,64") from None
    if not values or min(values) < 1:
        raise ValueError(f"--ranks {text!r}: every rank count must be >= 1")
    return values


def parse_shares(text: str) -> tuple[float, ...]:
    """``0.999,0.001`` -> each parameter server's share of the variables (normalised by the model)."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"--server-shares {text!r}: give numbers separated by commas, e.g. 0.5,0.5") from None
    if not values or min(values) < 0 or sum(values) <= 0:
        raise ValueError(f"--server-shares {text!r}: give each server's share, none negative, e.g. 0.5,0.5")
    return values


def read_allreduce_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of ``workbench bench allreduce --json``, also as saved in ``benchmarks/results`` (``{"result": rows}``)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        hint = "pass what `workbench bench allreduce --json` printed"
        raise ValueError(f"{path} cannot be read as JSON ({error}): {hint}") from None
    rows = data.get("result") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) and {"bytes", "mpi_seconds"} <= set(r) for r in rows):
        raise ValueError(f"{path} holds no allreduce rows: pass what `workbench bench allreduce --json` printed")
    return rows


def resolve_network(
    name: str | None, *, ranks_per_node: int | None = None, allreduce_json: str | Path | None = None
) -> pj.Network:
    """A named network; ``here``: fitted to what ``workbench bench allreduce`` measured on this machine;
    ``reference-vm``: the documented reference system; or a bench JSON file fitted on the spot."""
    changes = {"ranks_per_node": ranks_per_node} if ranks_per_node else {}
    if allreduce_json is not None:
        rows = read_allreduce_rows(allreduce_json)
        return pj.network(pj.fit_network(rows, name=f"fitted to {Path(allreduce_json).name}"), **changes)
    chosen = (name or "").lower()
    if chosen == HERE:
        from workbench.bench.allreduce import MEASURED_HERE

        if not MEASURED_HERE.exists():
            raise ValueError(
                "--network here: no allreduce measured on this machine yet: run `workbench bench allreduce --ranks 2`"
                " once (it keeps its result), or pass --allreduce FILE or a named --network"
            )
        rows = read_allreduce_rows(MEASURED_HERE)
        from workbench.config import physical_cores

        here = pj.fit_network(rows, name="here (measured on this machine)", cores_per_node=physical_cores())
        return pj.network(here, **changes)
    if chosen == REFERENCE_VM:
        reference = pj.fit_network(
            pj.reference_vm_allreduce_rows(), name="reference-vm (2-core VM, shared memory)", cores_per_node=2
        )
        return pj.network(reference, **changes)
    return pj.network(name or DEFAULT_NETWORK, **changes)


def measured_points(runs: Sequence[RunData]) -> pd.DataFrame:
    """One row per run: ranks, wall_s and mean step_s, to mark beside the projection."""
    rows = []
    for run in runs:
        costs = pj.step_costs(run.events, run.meta, run.memory)
        rows.append(
            {"run": str(run.path), "ranks": costs.ranks, "wall_s": costs.wall_s, "step_s": costs.step_period_s}
        )
    return pd.DataFrame(rows, columns=["run", "ranks", "wall_s", "step_s"])


def project_runs(
    run_dirs: Sequence[str | Path],
    ranks: Sequence[int],
    *,
    net: pj.Network,
    kind: str = "weak",
    changes: pj.Changes | None = None,
    gradient_bytes: float | None = None,
    batch_per_rank: int | None = None,
    gradient_layout: pj.GradientLayout | None = None,
) -> tuple[pj.Projection, pd.DataFrame]:
    """Projection from the run with the fewest ranks, and every run's measured point beside it.

    ``gradient_bytes`` and ``batch_per_rank`` replace what the run recorded (or add what it did not);
    ``gradient_layout`` (the model's gradients in backprop order) lets Horovod's overlap be played, its bytes
    the gradient bytes unless ``gradient_bytes`` is given.
    """
    if gradient_layout is not None and gradient_bytes is None:
        gradient_bytes = gradient_layout.total_bytes
    runs = [RunData.load(path) for path in run_dirs]
    if not runs:
        raise ValueError("name at least one run directory")
    points = measured_points(runs)
    base = runs[int(points["ranks"].to_numpy().argmin())]
    costs = pj.step_costs(
        base.events, base.meta, base.memory, gradient_bytes=gradient_bytes, batch_per_rank=batch_per_rank
    )
    if gradient_layout is not None:
        costs = replace(costs, gradient_layout=gradient_layout)
    if changes is not None and changes.epoch_samples and not costs.batch_per_rank:
        raise ValueError(
            f"--epoch-samples needs the batch per rank, which {base.path.name} did not record: add --batch N"
        )
    counts = sorted({*ranks, *points["ranks"].tolist()})
    result = pj.project(costs, counts, net, kind=kind, changes=changes)
    predicted = result.table.set_index("ranks")
    points["predicted_wall_s"] = [predicted["wall_s"].get(n, math.nan) for n in points["ranks"]]
    points["predicted_step_s"] = [predicted["step_s"].get(n, math.nan) for n in points["ranks"]]
    points["error_wall"] = points["predicted_wall_s"] / points["wall_s"] - 1
    points["error_step"] = points["predicted_step_s"] / points["step_s"] - 1
    points["base"] = points["run"] == str(base.path)
    return result, points


def format_projection(result: pj.Projection, points: pd.DataFrame | None = None) -> str:
    """The projection as text: one row per rank count, what limits it, measured points, notes."""
    table = result.table
    lines = [f"{result.kind} scaling, {result.scheme}, what-ifs: {result.changes.describe()}", ""]
    played = bool(table["hidden_share"].notna().any()) and result.changes.overlap == 0
    header = ["ranks", "nodes", "step", "±", "epoch", "throughput", "speedup", "efficiency", "PE", "limit"]
    header += ["hidden"] if played else []
    rows = []
    for row in table.itertuples():
        half = (row.step_s_high - row.step_s_low) / 2
        rows.append(
            [
                str(row.ranks),
                str(row.nodes),
                format_seconds(row.step_s),
                format_seconds(half),
                format_seconds(row.epoch_s),
                format_rate(row.throughput, row.unit),
                f"{row.speedup:.3g}x" if math.isfinite(row.speedup) else "–",
                format_percent(row.efficiency),
                format_ratio(row.parallel_efficiency),
                str(row.limiter),
                *([format_percent(row.hidden_share) if math.isfinite(row.hidden_share) else "–"] if played else []),
            ]
        )
    lines += text_table(header, rows)
    if played:
        lines += ["", *hidden_lines(table)]
    if len(table):
        largest = int(table["ranks"].max())
        at = result.limits[(result.limits["ranks"] == largest) & (result.limits["seconds"] > 0)]
        ordered = at.sort_values("seconds", ascending=False).itertuples()
        parts = [f"{r.limit} {format_percent(r.share)}" for r in ordered]
        lines += ["", f"where an epoch goes at {largest} ranks: " + ", ".join(parts)]
    if points is not None and len(points):
        lines += ["", "measured runs beside the projection (the fewest ranks built the model):"]
        for row in points.itertuples():
            lines.append(
                f"  {row.ranks} rank(s): step {format_seconds(row.step_s)} measured,"
                f" {format_seconds(row.predicted_step_s)} projected ({_signed_share(row.error_step)});"
                f" wall {format_seconds(row.wall_s)} measured, {format_seconds(row.predicted_wall_s)} projected"
                f" ({_signed_share(row.error_wall)})"
                f"{'  [model built from this run]' if row.base else ''}"
            )
    lines += ["", "assumptions:"] + [f"  - {a}" for a in result.assumptions]
    if result.notes:
        lines += ["notes:"] + [f"  - {n}" for n in result.notes]
    return "\n".join(lines)


def hidden_lines(table: pd.DataFrame) -> list[str]:
    """How much communication hid behind the backward pass at the largest count, and what stayed exposed."""
    last = table.dropna(subset=["hidden_share"]).tail(1)
    if last.empty:
        return []
    row = last.iloc[0]
    exposed = row["communication_s"] + row["per_call_s"]
    return [
        f"hidden behind backprop at {int(row['ranks'])} ranks: {format_percent(row['hidden_share'])} of the allreduce"
        f" ({format_seconds(row['hidden_s'])} an epoch hidden, {format_seconds(exposed)} exposed after the backward"
        " pass): Horovod's loop played over each step from the gradients' layout (assumptions)"
    ]


def _signed_share(value: float) -> str:
    return f"{value:+.1%}" if math.isfinite(value) else "–"


def changes_from_arguments(args: argparse.Namespace) -> pj.Changes:
    """The what-ifs ``workbench project`` was given (``projection.Changes``); parameter-server options only with
    ``--scheme ps``."""
    ps_only = {
        "--servers": args.servers is not None,
        "--server-shares": bool(args.server_shares),
        "--servers-on-workers": args.servers_on_workers,
        "--asynchronous": args.asynchronous,
        "--server-exchange": bool(args.server_exchange),
    }
    given = [flag for flag, used in ps_only.items() if used]
    if args.scheme != "ps" and given:
        raise ValueError(f"{', '.join(given)} describe parameter servers: add --scheme ps, or drop them")
    fusion_mb = args.fusion_threshold_mb
    cycle_ms = getattr(args, "cycle_ms", None)
    if cycle_ms is not None and not cycle_ms > 0:
        raise ValueError(f"--cycle-ms {cycle_ms}: Horovod's cycle in milliseconds, > 0 (its default is 1)")
    return pj.Changes(
        cycle_s=cycle_ms / 1e3 if cycle_ms else pj.HOROVOD_CYCLE_S,
        eval_interval=args.eval_interval,
        shard_evaluation=args.shard_evaluation,
        batch_scale=args.batch_scale,
        fusion_threshold_bytes=int(fusion_mb * BYTES_PER_MB) if fusion_mb else pj.HOROVOD_FUSION_THRESHOLD_BYTES,
        epoch_samples=args.epoch_samples,
        scheme=args.scheme,
        servers=args.servers,
        server_shares=parse_shares(args.server_shares) if args.server_shares else None,
        servers_colocated=args.servers_on_workers,
        servers_asynchronous=args.asynchronous,
        server_exchange_s=args.server_exchange,
        overlap=args.overlap,
    )


def project_command(
    run_dirs: Sequence[str],
    *,
    changes: pj.Changes | None = None,
    ranks: str = "8,16,32,64",
    network_name: str | None = None,
    ranks_per_node: int | None = None,
    allreduce_json: str | None = None,
    kind: str = "weak",
    system: pj.SystemSpec | None = None,
    nodes: str | None = None,
    gradient_bytes: float | None = None,
    batch_per_rank: int | None = None,
    gradient_layout: pj.GradientLayout | None = None,
    as_json: bool = False,
    html: str | None = None,
) -> int:
    """``workbench project``: print the projection (text or JSON) under ``changes`` (the what-ifs; none by
    default); optionally write an HTML report.

    With ``system`` (a described cluster) instead of run directories, the projection is built from the
    description at ``nodes`` node counts (``DEFAULT_NODES``).
    """
    changes = changes if changes is not None else pj.Changes()
    if system is not None:
        result = pj.project_system(system, parse_ranks(nodes or DEFAULT_NODES), kind=kind, changes=changes)
        points = None
    else:
        net = resolve_network(network_name, ranks_per_node=ranks_per_node, allreduce_json=allreduce_json)
        result, points = project_runs(
            run_dirs,
            parse_ranks(ranks),
            net=net,
            kind=kind,
            changes=changes,
            gradient_bytes=gradient_bytes,
            batch_per_rank=batch_per_rank,
            gradient_layout=gradient_layout,
        )
    if html:
        from workbench.figures.projection import limits_figure, projection_figure
        from workbench.report import write_report

        write_report(
            Path(html),
            title="Scaling projection",
            sections=[
                ("Projection", format_projection(result, points)),
                ("Projected and measured", projection_figure(result.table, points)),
                ("What limits scaling", limits_figure(result.limits)),
                ("Table", result.table.round(4)),
            ],
        )
    if as_json:
        payload: dict[str, Any] = {
            **result.to_dict(),
            "measured": points.to_dict("records") if points is not None else [],
        }
        print(json.dumps(json_ready(payload), indent=2, allow_nan=False, default=str))
    else:
        print(format_projection(result, points))
        if html:
            print(f"\nreport: {html}")
    return 0
