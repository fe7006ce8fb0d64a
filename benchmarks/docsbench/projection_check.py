"""``workbench bench projection``: is the scaling projection right? Measured runs and the published studies.

Two checks, both reported in the README ("Scaling projection"):

1. **Measured here.** Every recorded run with ≥ 2 ranks in a saved sweep (``artifacts/*/``) is
   predicted from the run with the same parameters on fewer ranks, with the network fitted to this
   machine's allreduce bench, and the error is ``predicted / measured - 1``. The input-pipeline case
   is compared on its step time, the eval-frequency case on its wall time. Two kinds of sweep: with
   the same cores per rank at every rank count (``--threads-per-rank 1``: what a projection to more
   nodes assumes, each rank keeping its hardware; the goal is judged on these), and with the
   machine's cores shared out (1 rank on 2 cores, then 1 core each), which adds a prediction of how
   a rank's compute slows with fewer cores.
2. **On paper.** Seed 000's 2.18x beside the model built from this machine's 1-rank eval-frequency run.
   Seeds 004 (InceptionV3 efficiencies) and 001 (POP table) are checked by ``--seeds``
   (``bench.seed_systems``): their clusters described, not run, with every input sourced and nothing fitted.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from docsbench.cases import case_docs
from workbench.analysis import projection as pj
from workbench.analysis.straggler import SPLIT_PARTS
from workbench.experiment import case_names, get_case
from workbench.hostspeed import SAMPLES_FILE, read_samples, speed_in_window


def case_sweeps(kind: str) -> tuple[tuple[str, str], ...]:
    """``(case, glob)`` of every case's saved sweeps (``CaseDocs.projection_sweeps`` or ``CaseDocs.node_sweeps``): each
    directory a glob matches is one repetition. On this host each run with more ranks is predicted from the same
    sweep's run on fewer; on a miniature cluster's nodes each run with 2 or more nodes from the 1-node run, the
    network fitted to the link measured on the same cluster (``nodes.json``). artifacts/ is not in git: the
    sweeps on disk are checked."""
    return tuple((name, pattern) for name in case_names() for pattern in getattr(case_docs(name), kind))


#: The ``cores`` value of a row whose ranks had the cores of the run it is predicted from.
SAME_CORES = "same"
#: The ``cluster`` value of a row whose ranks all ran on this host (not on a miniature cluster's nodes).
HOST_CLUSTER = "this host"
# --------------------------------------------------------------------------------------------
# 1. Measured sweeps
# --------------------------------------------------------------------------------------------


#: Thread-scaling exponents tried when calibrating on the other runs of a case (leave one out).
THREAD_SCALING_GRID = tuple(round(x, 2) for x in np.arange(-0.5, 2.51, 0.1))


def validation_table(
    sweeps: Sequence[tuple[str, str | Path]] | None = None,
    *,
    net: pj.Network | None = None,
    thread_scaling: float = 1.0,
) -> pd.DataFrame:
    """One row per point with ≥ 2 ranks: ``case, point, ranks, from_ranks, cores, measured_s, predicted_s, error``.

    A sweep is a glob: every directory it matches is one repetition of the sweep. Each repetition's
    run is predicted from the same repetition's run on fewer ranks; ``measured_s`` and ``predicted_s``
    are the medians over the repetitions (``repetitions``; ``measured_spread``: largest / smallest
    measured - 1, how far this machine's repetitions disagree; ``errors_each``: each repetition's
    prediction against its own measurement).

    ``cores`` is ``"same"`` when each rank had as many threads as the rank of the run it is predicted
    from, else ``"2 -> 1"`` (threads per rank, from -> to).

    ``predicted_s`` uses ``thread_scaling`` (how compute slows when a rank gets fewer cores; 1 =
    linear). The one unknown this machine adds is that exponent, so ``error_calibrated`` repeats
    each prediction with the exponent that fits the *other* points of the same case and sweep best
    (leave-one-out, ``thread_scaling_fitted``): the model's error once that single number is known.
    """
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    sweeps = case_sweeps("projection_sweeps") if sweeps is None else sweeps
    for entry in _validation_entries(sweeps, net):
        entry["by_scaling"] = {g: _predict(entry, g)[0] for g in THREAD_SCALING_GRID}
        groups.setdefault((entry["case"], entry["sweep"], entry["cluster"], entry["point"]), []).append(entry)

    def median_prediction(members: list[dict[str, Any]], g: float) -> float:
        return float(np.median([m["by_scaling"][g] for m in members]))

    rows = []
    for key, members in groups.items():
        measured = float(np.median([m["measured_s"] for m in members]))
        projected = [_projected_row(m, thread_scaling) for m in members]
        predictions = [_quantity(m, row) for m, row in zip(members, projected)]
        predicted = float(np.median([p for p, _ in predictions]))
        limiter = min(predictions, key=lambda p: abs(p[0] - predicted))[1]
        others = [(group, other) for other, group in groups.items() if other[:3] == key[:3] and other != key]
        fitted, calibrated = math.nan, math.nan
        if others:

            def spread(g: float, others: list[tuple[list[dict[str, Any]], Any]] = others) -> float:
                return float(
                    np.median(
                        [
                            abs(median_prediction(group, g) / np.median([m["measured_s"] for m in group]) - 1)
                            for group, _ in others
                        ]
                    )
                )

            fitted = min(THREAD_SCALING_GRID, key=spread)
            calibrated = median_prediction(members, fitted)
        first = members[0]
        values = [m["measured_s"] for m in members]
        at_speed = [_predict(m, thread_scaling, at_target_speed=True)[0] for m in members]
        slowdowns = [m["host_slowdown"] for m in members if m.get("host_slowdown") is not None]
        rows.append(
            {
                "case": first["case"],
                "point": first["point"],
                "ranks": first["ranks"],
                "from_ranks": first["from_ranks"],
                "cores": first["cores"],
                "cluster": first["cluster"],
                "repetitions": len(members),
                "quantity": first["quantity"],
                "measured_s": measured,
                "measured_spread": max(values) / min(values) - 1.0 if min(values) > 0 else math.nan,
                "predicted_s": predicted,
                "error": predicted / measured - 1.0 if measured > 0 else math.nan,
                # each repetition predicted on its own: what one run against one run would have said
                "errors_each": [p / m["measured_s"] - 1.0 for (p, _), m in zip(predictions, members)],
                "measured_each": values,
                "predicted_each": [p for p, _ in predictions],
                "limiter": limiter,
                "thread_scaling_fitted": fitted,
                "predicted_calibrated_s": calibrated,
                "error_calibrated": calibrated / measured - 1.0 if measured > 0 else math.nan,
                # the host's drift divided out: each base run's CPU work at the speed its target run had
                "host_slowdown": float(np.median(slowdowns)) if slowdowns else math.nan,
                "predicted_at_host_speed_s": float(np.median(at_speed)),
                "error_at_host_speed": float(np.median(at_speed)) / measured - 1.0 if measured > 0 else math.nan,
                "errors_each_at_host_speed": [p / m["measured_s"] - 1.0 for p, m in zip(at_speed, members)],
                # a rank's compute per step (per sample, strong scaling) in the predicted run over the base run's:
                # 1 where each rank kept its hardware as the model assumes
                "compute_growth": _median_or_nan([m["compute_growth"] for m in members]),
                # where a step's time went, measured and as the model has it (medians over the repetitions)
                "measured_step_split": _median_split([m["measured_split"] for m in members]),
                "predicted_step_split": _median_split([_predicted_split(m, row) for m, row in zip(members, projected)]),
                # the ranks' CPU use, wait for a core and quota throttling in the base run and in this one (medians
                # over the repetitions; None: the runs' recorder did not read them)
                "cpu_base": _median_split([m["cpu_base"] for m in members]),
                "cpu_target": _median_split([m["cpu_target"] for m in members]),
            }
        )
    return pd.DataFrame(rows, columns=VALIDATION_COLUMNS)


def _median_split(splits: Sequence[Mapping[str, float] | None]) -> dict[str, float] | None:
    """Each part's median over the repetitions that have a split (None: none has)."""
    found = [split for split in splits if split]
    return {name: _median_or_nan([split[name] for split in found]) for name in found[0]} if found else None


def _predicted_split(entry: Mapping[str, Any], row: pd.Series) -> dict[str, float] | None:
    """The model's step (``row``, its projection at the entry's count) in ``collective_split``'s parts: the
    collective and the wait per step, the rest of the step between (None: the model has no training steps
    there, or the scheme meets in no collective)."""
    if entry["kwargs"].get("scheme", "allreduce") == "ps":
        return None
    training = row["epoch_s"] - row["evaluation_s"] - row["checkpoint_s"]
    steps = training / row["step_s"] if row["step_s"] > 0 else math.nan
    if not steps > 0:
        return None
    wait, collective = row["waiting_s"] / steps, (row["communication_s"] + row["per_call_s"]) / steps
    return {"between_s": row["step_s"] - wait - collective, "wait_s": wait, "collective_s": collective}


def _median_or_nan(values: Any) -> float:
    """The median of the finite values (NaN where there are none: a run without compute spans)."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if finite.size else math.nan


VALIDATION_COLUMNS = (
    "case",
    "point",
    "ranks",
    "from_ranks",
    "cores",
    "cluster",
    "repetitions",
    "quantity",
    "measured_s",
    "measured_spread",
    "predicted_s",
    "error",
    "errors_each",
    "measured_each",
    "predicted_each",
    "limiter",
    "thread_scaling_fitted",
    "predicted_calibrated_s",
    "error_calibrated",
    "host_slowdown",
    "predicted_at_host_speed_s",
    "error_at_host_speed",
    "errors_each_at_host_speed",
    "compute_growth",
    "measured_step_split",
    "predicted_step_split",
    "cpu_base",
    "cpu_target",
)
#: What ``ranks_cpu`` reads of a run's ranks (medians over them, ``analysis.cpu_wait_table``).
CPU_PARTS = ("cpu_cores", "waiting_cores", "throttled_share")


def ranks_cpu(run: Any) -> dict[str, float] | None:
    """A run's ranks' CPU cores used, cores' worth of threads waiting for one, and the share of their node's quota
    periods that ran out (medians over the ranks); None where its recorder did not read them."""
    from workbench.analysis import cpu_wait_table

    table = cpu_wait_table(run.counters, run.rank_meta)
    if table.empty:
        return None
    return {part: _median_or_nan(table[part]) for part in CPU_PARTS}


def _row_network(
    nodes: Mapping[str, Any] | None,
    cluster: str,
    ranks: int,
    costs: pj.StepCosts,
    meta: Mapping[str, Any],
    net: pj.Network | None,
) -> pj.Network:
    """The network a row is predicted on: on a miniature cluster's nodes the link as the step uses it, else this
    machine's allreduce (or ``net``)."""
    if not nodes:
        return net or pj.fit_network(pj.reference_vm_allreduce_rows(), cores_per_node=int(meta.get("cores") or 2))
    # β at the gradient bytes the 1-node run sends per step, measured at this count where the sweep did (the
    # nodes' shared kernel path slows a ring as nodes join). nodes.json's compute_beside_collectives (a spin split
    # around an allreduce) is not applied: it measures where the CFS periods fall for that spin (0.73 at 1 Gbit/s,
    # 1.00 at 50 Mbit/s), and the workload's own compute beside its collectives did not follow it (docs/projection.md)
    at_count = (nodes.get("allreduce_by_nodes") or {}).get(str(ranks))
    return pj.fit_network(
        at_count or nodes["allreduce"],
        name=f"measured on the miniature cluster ({cluster}) at {ranks if at_count else 2} nodes",
        ranks_per_node=1,
        at_bytes=costs.gradient_bytes or None,
    )


def _validation_entries(sweeps: Sequence[tuple[str, str | Path]], net: pj.Network | None) -> list[dict[str, Any]]:
    """Each ≥ 2-rank run with the costs of its same-parameter run on the fewest ranks, loaded once.

    A sweep run on a miniature cluster's nodes (``nodes.json`` beside it, ``workbench run CASE --nodes``)
    is predicted with the network fitted to the link measured on that cluster, one rank per node.
    """
    from workbench.analysis.straggler import collective_intervals, collective_summary
    from workbench.node_sweep import describe_sweep_cluster, read_nodes_file
    from workbench.store import RunData

    entries = []
    loaded: dict[str, Any] = {}  # base run by path: a 1-node run predicts every larger count of its sweep
    base_cpu: dict[str, dict[str, float] | None] = {}  # and its ranks' CPU (``ranks_cpu``), read once
    costs_of: dict[tuple[str, tuple[tuple[str, Any], ...]], pj.StepCosts] = {}
    for case, pattern, out in _sweep_directories(sweeps):
        runs = pd.read_parquet(out / "runs.parquet")
        runs["params"] = [point.split("/", 1)[1] if "/" in point else "" for point in runs["point"]]
        if "ranks" not in runs and "workers" in runs:  # ps-vs-allreduce counts workers (one per rank)
            runs["ranks"] = runs["workers"]
        nodes = read_nodes_file(out)
        cluster = describe_sweep_cluster(nodes) if nodes else HOST_CLUSTER
        speeds = out / SAMPLES_FILE
        samples = read_samples(speeds) if speeds.is_file() else None
        for row in runs[runs["ranks"] >= 2].itertuples():
            smaller = runs[(runs["params"] == row.params) & (runs["ranks"] < row.ranks)]
            if smaller.empty:
                continue
            base, extra = get_case(case).projection_base(runs, row, smaller.loc[smaller["ranks"].idxmin()])
            if base is None:
                continue
            if base["path"] not in loaded:
                loaded[base["path"]] = RunData.load(base["path"])
                base_cpu[base["path"]] = ranks_cpu(loaded[base["path"]])
            run = loaded[base["path"]]
            kwargs, measured, quantity = get_case(case).projection_inputs(run, row)
            kwargs.update(extra(run))
            inputs = kwargs.pop("step_costs", {})
            key = (str(base["path"]), tuple(sorted(inputs.items())))
            if key not in costs_of:
                costs_of[key] = pj.step_costs(run.events, run.meta, run.memory, **inputs)
            costs = costs_of[key]
            network = _row_network(nodes, cluster, int(row.ranks), costs, run.meta, net)
            kind = kwargs.pop("kind", "weak")
            if kwargs.pop("no_horovod", False):
                network = replace(network, per_call_s=0.0, horovod_thread_cores=0.0)
            target = RunData.load(row.path)
            threads = (_run_threads(run.meta), _run_threads(target.meta))
            # what the model holds constant, as the target ran it: a rank's compute per step (a real node's
            # stays; here the nodes share one machine's cores and kernel, and theirs can grow with the count)
            target_costs = pj.step_costs(target.events, target.meta, target.memory, **inputs)
            base_compute = _median_or_nan(costs.compute_s)
            growth = _median_or_nan(target_costs.compute_s) / base_compute if base_compute > 0 else math.nan
            if kind == "strong":  # each rank's share of the global batch shrinks, and its step's compute with it
                growth *= int(row.ranks) / int(base["ranks"])
            # how much slower the host's cores were during this run than during the base run (None: not sampled)
            slower = _host_slowdown(samples, run.events, target.events) if samples is not None else None
            # the parameter servers' workers meet in no collective: their steps have no such split
            barrier = kwargs.get("scheme", "allreduce") != "ps"
            intervals = collective_intervals(target.events, warmup_steps=pj.WARMUP_STEPS) if barrier else None
            measured_split = collective_summary(intervals) if intervals is not None else None
            entries.append(
                {
                    "case": case,
                    "sweep": pattern,
                    "cluster": cluster,
                    "point": row.point,
                    "ranks": int(row.ranks),
                    "from_ranks": int(base["ranks"]),
                    "cores": SAME_CORES if threads[0] == threads[1] else f"{threads[0]} -> {threads[1]}",
                    "quantity": quantity,
                    "measured_s": measured,
                    "costs": costs,
                    "host_slowdown": slower,
                    "compute_growth": growth,
                    # per step, means over the steps: the ranks' time between collectives, the wait for the last,
                    # the collective after it (None: the run's ranks met in no blocking collective it recorded)
                    "measured_split": measured_split,
                    # the ranks' CPU in each run (the model's constant compute assumes a node keeps its own)
                    "cpu_base": base_cpu[base["path"]],
                    "cpu_target": ranks_cpu(target),
                    "network": network,
                    "kind": kind,
                    "kwargs": kwargs,
                }
            )
    return entries


def sweeps_of(patterns: Sequence[str | Path]) -> list[tuple[str, str]]:
    """``(case, pattern)`` for ``run_nodes`` from globs of sweep directories, each case read from its ``sweep.json``.

    One glob is one sweep's repetitions, so it must match sweeps of one case (one clear error otherwise).
    """
    from workbench.config import ConfigError

    sweeps = []
    for pattern in patterns:
        cases = set()
        for _case, _pattern, directory in _sweep_directories([("", pattern)]):
            try:
                cases.add(str(json.loads((directory / "sweep.json").read_text())["case"]))
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise ConfigError(
                    f"{directory}/sweep.json does not name its case ({error}): pass a directory `workbench run --out`"
                    " wrote"
                ) from error
        if not cases:
            raise ConfigError(
                f"no sweep matches {pattern}: give a directory (or a glob of them) that `workbench run CASE --nodes"
                " ... --out DIR` wrote, with runs.parquet inside"
            )
        if len(cases) > 1:
            raise ConfigError(
                f"{pattern} matches sweeps of {len(cases)} cases ({', '.join(sorted(cases))}): give one glob per case,"
                " each matching the repetitions of one sweep"
            )
        sweeps.append((cases.pop(), str(pattern)))
    return sweeps


def _sweep_directories(sweeps: Sequence[tuple[str, str | Path]]) -> list[tuple[str, str, Path]]:
    """``(case, pattern, directory)`` for every saved sweep each pattern matches (a glob, or one path)."""
    import glob

    found = []
    for case, pattern in sweeps:
        for directory in sorted(glob.glob(str(pattern))):
            if (Path(directory) / "runs.parquet").is_file():
                found.append((case, str(pattern), Path(directory)))
    return found


def _host_slowdown(samples: np.ndarray, base_events: pd.DataFrame, target_events: pd.DataFrame) -> float | None:
    """The host's speed in the base run's window over its speed in the target run's (None: a window unsampled)."""

    def speed(events: pd.DataFrame) -> float | None:
        if events.empty:
            return None
        return speed_in_window(samples, int(events["start_ns"].min()), int(events["end_ns"].max()))

    base, target = speed(base_events), speed(target_events)
    return base / target if base and target else None


def _run_threads(meta: Mapping[str, Any]) -> int | None:
    """Threads per rank a run's cluster had (its metadata's resolved cluster settings)."""
    cluster = (meta.get("config") or {}).get("cluster") or {}
    return cluster.get("threads")


def _predict(entry: Mapping[str, Any], thread_scaling: float, at_target_speed: bool = False) -> tuple[float, str]:
    """The entry's quantity projected from its base run; ``at_target_speed``: with the base run's CPU work
    scaled by the host's slowdown between the two runs (NaN where it was not sampled)."""
    costs = entry["costs"]
    if at_target_speed:
        if entry.get("host_slowdown") is None:
            return math.nan, ""
        costs = costs.on_slower_cores(entry["host_slowdown"])
    return _quantity(entry, _projected_row(entry, thread_scaling, costs))


def _quantity(entry: Mapping[str, Any], row: pd.Series) -> tuple[float, str]:
    """The entry's quantity in its projected ``row``, and what limits it there."""
    return float(row[entry["quantity"]]), str(row["limiter"])


def _projected_row(entry: Mapping[str, Any], thread_scaling: float, costs: pj.StepCosts | None = None) -> pd.Series:
    """The model's row at the entry's rank count, from its base run's costs (or ``costs``)."""
    return pj.project(
        costs or entry["costs"],
        [entry["ranks"]],
        entry["network"],
        kind=entry.get("kind", "weak"),
        changes=pj.Changes(**entry["kwargs"]),
        thread_scaling=thread_scaling,
        bootstrap=0,
    ).table.iloc[0]


def validation_summary(table: pd.DataFrame, column: str = "error") -> dict[str, Any]:
    """``median_error`` and ``max_error`` of |``column``|, and how many runs were predicted."""
    errors = pd.to_numeric(table[column], errors="coerce").abs().dropna()
    return {
        "runs": len(errors),
        "median_error": float(errors.median()) if len(errors) else None,
        "max_error": float(errors.max()) if len(errors) else None,
        "within_5_percent": int((errors <= 0.05).sum()),
        "within_10_percent": int((errors <= 0.10).sum()),
    }


#: Simulated sets of repetitions for the noise floor (enough for its median and 95th percentile to settle).
NOISE_FLOOR_DRAWS = 4000
#: Repetitions per point at which the noise floor is also given (how many a max of 10 % would take).
NOISE_FLOOR_REPETITIONS = (5, 9, 15, 25)


def noise_floor(table: pd.DataFrame, draws: int = NOISE_FLOOR_DRAWS, seed: int = 0) -> dict[str, Any]:
    """The median and max |error| a model without error would get on these repetitions: their scatter alone.

    Why: a point's measured median and its predicted median (each repetition predicted from its own 1-node
    run) both move from one repetition to the next; with three repetitions that disagree by 30 %, the two
    medians differ by several percent with no model error at all, and the largest of 48 such differences is
    large. Each (case, cluster) group's scatter is pooled over its points: the covariance of the logs of each
    repetition's measured value and its prediction about the point's means (an exact model's predictions
    scatter as its 1-node runs do; a repetition whose machine ran slow moves both, which the covariance
    keeps). Sets of the same repetitions are drawn around the truth (log-normal with that covariance), each
    point's two medians compared, and the median and max |error| of each set kept. Points without two
    repetitions give no scatter; they take their group's.
    """
    if table.empty:
        return {"points": 0}
    groups = [f"{case}, {cluster}" for case, cluster in zip(table["case"], table["cluster"])]
    covariances: dict[str, list[np.ndarray]] = {}
    for group, measured, predicted in zip(groups, table["measured_each"], table["predicted_each"]):
        logs = np.log(np.asarray([measured, predicted], dtype=float))  # 2 x repetitions
        if logs.shape[1] >= 2 and np.isfinite(logs).all():
            covariances.setdefault(group, []).append(np.cov(logs, ddof=1))
    pooled = {group: np.mean(found, axis=0) for group, found in covariances.items()}
    rng = np.random.default_rng(seed)
    errors = np.empty((draws, len(table)))
    for column, (group, repetitions) in enumerate(zip(groups, table["repetitions"])):
        covariance = pooled.get(group, np.zeros((2, 2)))
        logs = rng.multivariate_normal([0.0, 0.0], covariance, size=(draws, max(1, int(repetitions))))
        medians = np.median(np.exp(logs), axis=1)  # draws x (measured, predicted)
        errors[:, column] = np.abs(medians[:, 1] / medians[:, 0] - 1.0)
    medians, maxima = np.median(errors, axis=1), errors.max(axis=1)

    def scatter(group: str) -> dict[str, float | None]:
        c = pooled.get(group)
        if c is None:
            return {"measured": None, "predicted": None, "correlation": None}
        both = math.sqrt(c[0, 0] * c[1, 1])
        return {
            "measured": math.sqrt(c[0, 0]),
            "predicted": math.sqrt(c[1, 1]),
            "correlation": float(c[0, 1] / both) if both > 0 else None,
        }

    return {
        "points": len(table),
        "median_error": float(np.median(medians)),
        "max_error": float(np.median(maxima)),
        "max_error_p95": float(np.percentile(maxima, 95)),
        "within_10_percent_max": float(np.mean(maxima <= 0.10)),
        "scatter": {group: scatter(group) for group in dict.fromkeys(groups)},
    }


# --------------------------------------------------------------------------------------------
# 2. The published studies, on paper
# --------------------------------------------------------------------------------------------

#: Seed 000's speedup from evaluating every 30 epochs instead of every epoch.
PUBLISHED_000_SPEEDUP = 2.18


def seed_000_table(ranks: int = 32) -> pd.DataFrame:
    """Seed 000's 2.18x (evaluate every 30 epochs instead of every epoch, 32 nodes) beside the model.

    The published study publishes no per-step times, so the model starts from this machine's own eval-frequency
    run on 1 rank (the published study's workload in miniature) and projects it to 32 nodes on 10 GbE.
    """
    from workbench.store import RunData

    path = Path("artifacts/eval-frequency-reduced/runs.parquet")
    if not path.is_file():
        return pd.DataFrame()
    runs = pd.read_parquet(path)
    rows = []
    for backend, group in runs[runs["ranks"] == 1].groupby("backend"):
        slow = group[group["eval_interval"] == group["eval_interval"].min()]
        if slow.empty:
            continue
        run = RunData.load(slow["path"].iloc[0])
        costs = pj.step_costs(run.events, run.meta)
        net = pj.network("10gbe")
        fixed = int(group["eval_interval"].max())
        base = pj.project(costs, [ranks], net, bootstrap=0).table.iloc[0]
        fix = pj.project(costs, [ranks], net, changes=pj.Changes(eval_interval=fixed), bootstrap=0).table.iloc[0]
        shard = pj.project(costs, [ranks], net, changes=pj.Changes(shard_evaluation=True), bootstrap=0).table.iloc[0]
        rows.append(
            {
                "backend": backend,
                "ranks": ranks,
                "seed_speedup": PUBLISHED_000_SPEEDUP,
                "projected_speedup": float(base["wall_s"] / fix["wall_s"]),
                "projected_speedup_sharded": float(base["wall_s"] / shard["wall_s"]),
                "evaluation_share_before": float(base["evaluation_s"] / base["epoch_s"]),
                # the share the published study's 2.18x implies: 1 / (1 - e (1 - 1/k)) = 2.18
                "seed_evaluation_share": (1 - 1 / PUBLISHED_000_SPEEDUP) / (1 - 1 / fixed),
                "fixed_interval": fixed,
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# The bench
# --------------------------------------------------------------------------------------------


#: The rule a node row must pass to count as nodes of their share, fixed for every case and sweep: the quota bound
#: the row's ranks as it bound the 1-node run's, running out in at least this share of the periods it ran out in
#: there. A rank whose quota no longer runs out computes its bursts at the host core's speed (faster than its
#: share), and threads queued for the host's shared cores then wait for those, not for the quota: either way the
#: node is no longer a node of its share, which a real cluster's node stays.
QUOTA_BINDING_SHARE = 0.9


def nodes_of_their_share(row: Mapping[str, Any]) -> bool | None:
    """Whether a node row's nodes behaved as nodes of their share (``QUOTA_BINDING_SHARE``); None where the runs'
    recorder read no CPU (sweeps before 2026-11-27), or the 1-node run's quota never ran out (no quota)."""
    target, base = row.get("cpu_target"), row.get("cpu_base")
    if not target or not base:
        return None
    bound, reference = target.get("throttled_share"), base.get("throttled_share")
    if bound is None or reference is None or not (reference > 0) or bound != bound:
        return None
    return bool(bound >= QUOTA_BINDING_SHARE * reference)


def nodes_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The goal judged on the rows whose nodes were nodes of their share, the others counted apart."""
    judged = {True: [], False: [], None: []}
    for row in rows:
        judged[nodes_of_their_share(row)].append(row)

    def summary(group: list[Mapping[str, Any]]) -> dict[str, Any]:
        errors = [abs(float(r["error"])) for r in group if r.get("error") == r.get("error")]
        return {
            "rows": len(group),
            "median_error": float(np.median(errors)) if errors else None,
            "max_error": float(max(errors)) if errors else None,
            "sizes": sorted({int(r["ranks"]) for r in group}),
        }

    return {
        "rule": f"the quota ran out in at least {QUOTA_BINDING_SHARE:.0%} of the share of periods it ran out in on"
        " 1 node",
        "nodes": summary(judged[True]),
        "not_nodes": summary(judged[False]),
        "unread": summary(judged[None]),
    }


def run_nodes(sweeps: Sequence[tuple[str, str | Path]] | None = None) -> dict[str, Any]:
    """The node rows alone: each sweep on a miniature cluster's nodes, its larger counts from its 1-node run.

    Summaries per cluster (nodes, share of a core, link) and over all of them; the goal, as on this host:
    median |error| <= 5 %, max <= 10 % on the medians of the repetitions, single runs beside them.
    """
    sweeps = case_sweeps("node_sweeps") if sweeps is None else sweeps
    table = validation_table(sweeps)
    table = table[table["cluster"] != HOST_CLUSTER]
    by_cluster = {
        f"{case}, {cluster}": {
            "strict": validation_summary(group),
            "single_repetitions": validation_summary(group.explode("errors_each"), "errors_each"),
            "at_host_speed": validation_summary(group, "error_at_host_speed"),
        }
        for (case, cluster), group in table.groupby(["case", "cluster"], sort=False)
    }
    records = table.to_dict("records")
    for record in records:
        record["nodes_of_their_share"] = nodes_of_their_share(record)
    return {
        "validation": records,
        **validation_summary(table),
        "node_rows": nodes_summary(records),
        "single_repetitions": validation_summary(table.explode("errors_each"), "errors_each"),
        # the same, with the host's measured drift between each base run and its target divided out
        "at_host_speed": validation_summary(table, "error_at_host_speed"),
        "single_repetitions_at_host_speed": validation_summary(
            table.explode("errors_each_at_host_speed"), "errors_each_at_host_speed"
        ),
        "by_cluster": by_cluster,
        # what an exact model would score on these repetitions (their scatter alone), and with more of them
        "noise_floor": {
            **noise_floor(table),
            "max_error_by_repetitions": {
                str(count): noise_floor(table.assign(repetitions=count))["max_error"] if len(table) else None
                for count in NOISE_FLOOR_REPETITIONS
            },
        },
        "missing_sweeps": [str(p) for c, p in sweeps if not _sweep_directories([(c, p)])],
        # the case study's claims (efficiency by workers, both schemes) on the same repeated sweeps
        "ps_vs_allreduce_repetitions": ps_vs_allreduce_repetitions(sweeps).to_dict("records"),
    }


def ps_vs_allreduce_repetitions(sweeps: Sequence[tuple[str, str | Path]]) -> pd.DataFrame:
    """Efficiency and seconds per round of every ps-vs-allreduce point over the repeated node sweeps, per cluster."""
    from workbench.cases.ps_vs_allreduce import efficiency_over_repetitions
    from workbench.node_sweep import describe_sweep_cluster, read_nodes_file

    found = []
    for _case, _pattern, out in _sweep_directories([(c, p) for c, p in sweeps if c == "ps-vs-allreduce"]):
        nodes, summary = read_nodes_file(out), out / "summary.json"
        if nodes and summary.is_file():
            cluster = describe_sweep_cluster(nodes)
            found.append((cluster, json.loads(summary.read_text())))
    return efficiency_over_repetitions(found)


def run(*, allreduce_rows: Sequence[Mapping[str, Any]] | None = None, thread_scaling: float = 1.0) -> dict[str, Any]:
    """The validation table (measured sweeps), its errors, and the published study comparisons."""
    import time

    started = time.perf_counter()
    net = pj.fit_network(allreduce_rows or pj.reference_vm_allreduce_rows(), cores_per_node=2)
    table = validation_table(net=net, thread_scaling=thread_scaling)
    validation_s = time.perf_counter() - started
    table = table[table["cluster"] == HOST_CLUSTER]  # the nodes' rows: run_nodes (bench projection --nodes)
    same = table[table["cores"] == SAME_CORES]
    shared = table[table["cores"] != SAME_CORES]
    by_case = {
        f"{case}, {'same cores' if cores == SAME_CORES else 'cores shared'}": {
            "strict": validation_summary(group),
            "calibrated": validation_summary(group, "error_calibrated"),
        }
        for (case, cores), group in table.groupby(["case", "cores"], sort=False)
    }
    return {
        "network": net.describe(),
        "thread_scaling": thread_scaling,
        "validation": table.to_dict("records"),
        # the goal is judged where each rank keeps its cores, as a projection to more nodes assumes
        **validation_summary(same),
        "calibrated": validation_summary(same, "error_calibrated"),
        "single_repetitions": validation_summary(same.explode("errors_each"), "errors_each"),
        "shared_cores": {
            "strict": validation_summary(shared),
            "calibrated": validation_summary(shared, "error_calibrated"),
        },
        "by_case": by_case,
        "validation_seconds": validation_s,
        "seed_000": seed_000_table().to_dict("records"),
        "missing_sweeps": [
            str(p) for c, p in case_sweeps("projection_sweeps") if not _sweep_directories([(c, p)])
        ],
    }


def format_result(result: Mapping[str, Any]) -> str:
    """The validation table and the published studies, as text (2–3 significant figures)."""
    lines = [f"network: {result['network']}", ""]
    table = pd.DataFrame(result["validation"])
    if len(table):
        lines.append(
            f"{'case':<15} {'point':<36} {'cores':>6} {'reps':>4} {'measured s':>10} {'spread':>6}"
            f" {'predicted s':>11} {'error':>7} {'calibrated':>10} {'γ':>5}"
        )
        for row in table.itertuples():
            lines.append(
                f"{row.case:<15} {row.point:<36} {row.cores:>6} {row.repetitions:>4} {row.measured_s:>10.3g}"
                f" {row.measured_spread:>6.0%} {row.predicted_s:>11.3g} {row.error:>+7.1%}"
                f" {row.error_calibrated:>+10.1%} {row.thread_scaling_fitted:>5.2g}"
            )
        for title, strict, calibrated in (
            ("same cores per rank", result, result["calibrated"]),
            ("cores shared out", result["shared_cores"]["strict"], result["shared_cores"]["calibrated"]),
        ):
            if strict["median_error"] is None:
                continue
            lines.append(
                f"{title}: median |error| {strict['median_error']:.1%}, max {strict['max_error']:.1%} over"
                f" {strict['runs']} points; thread_scaling fitted leaving each point out: median"
                f" {calibrated['median_error']:.1%}, max {calibrated['max_error']:.1%}"
            )
        single = result.get("single_repetitions") or {}
        if single.get("median_error") is not None:
            lines.append(
                f"same cores, each repetition alone: median |error| {single['median_error']:.1%},"
                f" max {single['max_error']:.1%} over {single['runs']} runs"
            )
        lines.append(f"(thread_scaling {result['thread_scaling']:g}; goal, same cores: median <= 5 %, max <= 10 %)")
        for case, summary in result["by_case"].items():
            strict, fitted = summary["strict"], summary["calibrated"]
            lines.append(
                f"  {case}: median {strict['median_error']:.1%} / max {strict['max_error']:.1%};"
                f" calibrated median {fitted['median_error']:.1%} / max {fitted['max_error']:.1%}"
            )
    else:
        lines.append(
            "no saved sweep found: run `workbench run input-pipeline --preset reduced --ranks 2"
            " --threads-per-rank 1 --out artifacts/input-pipeline-reduced-1thread` first"
        )
    for name, title in (("seed_000", "study 000, evaluation every 30 epochs at 32 nodes"),):
        frame = pd.DataFrame(result[name])
        if len(frame):
            lines += ["", title, frame.round(3).to_string(index=False)]
    return "\n".join(lines)


def format_nodes(result: Mapping[str, Any]) -> str:
    """The node rows as text: each point's measured and predicted medians, then the summaries per cluster."""
    table = pd.DataFrame(result["validation"])
    if table.empty:
        missing = ", ".join(result.get("missing_sweeps") or []) or "artifacts/nodes-*"
        return (
            f"no sweep on a miniature cluster's nodes found ({missing}): run `workbench run eval-frequency --nodes"
            " 1,2,4,8 --link 10mbit --out artifacts/nodes-eval-frequency-10mbit-r1` first (as root)"
        )
    lines = [
        f"{'cluster':<36} {'point':<28} {'reps':>4} {'measured s':>10} {'spread':>6} {'predicted s':>11} {'error':>7}"
        f" {'host slower':>11} {'error at host speed':>19} {'compute/step':>12}"
    ]
    for row in table.itertuples():
        lines.append(
            f"{row.cluster:<36} {row.point:<28} {row.repetitions:>4} {row.measured_s:>10.3g}"
            f" {row.measured_spread:>6.0%} {row.predicted_s:>11.3g} {row.error:>+7.1%}"
            + (
                f" {row.host_slowdown:>10.2f}x {row.error_at_host_speed:>+19.1%}"
                if math.isfinite(row.host_slowdown) and math.isfinite(row.error_at_host_speed)
                else f" {'–':>11} {'–':>19}"  # the host's speed was not sampled beside this sweep
            )
            + (
                f" {growth:>11.2f}x"
                if math.isfinite(growth := getattr(row, "compute_growth", math.nan))
                else f" {'–':>12}"
            )
        )
    lines.append(
        "compute/step: a rank's compute per step in the predicted run over the 1-node run's (medians, warm-up"
        " left out; per sample of its batch under strong scaling); the model holds it at 1"
    )
    lines.append(
        f"across nodes: median |error| {result['median_error']:.1%}, max {result['max_error']:.1%} over"
        f" {result['runs']} points (goal: median <= 5 %, max <= 10 %)"
    )
    judged = result.get("node_rows") or {}
    for key, label in (("nodes", "rows whose nodes were nodes of their share"), ("not_nodes", "the others")):
        group = judged.get(key) or {}
        if group.get("rows"):
            lines.append(
                f"{label} ({judged['rule']}): {group['rows']} on {group['sizes']} nodes, median"
                f" {group['median_error']:.1%}, max {group['max_error']:.1%}"
            )
    if (judged.get("unread") or {}).get("rows"):
        lines.append(f"{judged['unread']['rows']} rows without the ranks' CPU read: not judged by the rule")
    single = result["single_repetitions"]
    if single.get("median_error") is not None:
        lines.append(f"each repetition alone: median {single['median_error']:.1%}, max {single['max_error']:.1%}")
    at_speed = result.get("at_host_speed") or {}
    if at_speed.get("median_error") is not None:
        alone = result["single_repetitions_at_host_speed"]
        lines.append(
            f"at the host's measured speed (its drift between the two runs divided out): median"
            f" {at_speed['median_error']:.1%}, max {at_speed['max_error']:.1%} over {at_speed['runs']} points;"
            f" each repetition alone: median {alone['median_error']:.1%}, max {alone['max_error']:.1%}"
        )
    floor = result.get("noise_floor") or {}
    if floor.get("points"):
        lines.append(
            f"an exact model on these repetitions (their scatter alone, {NOISE_FLOOR_DRAWS} simulated sets):"
            f" median {floor['median_error']:.1%}, max {floor['max_error']:.1%} (95th percentile"
            f" {floor['max_error_p95']:.1%}); max within 10 % in {floor['within_10_percent_max']:.0%} of the sets"
        )
        more = floor.get("max_error_by_repetitions") or {}
        if more:
            lines.append(
                "  its max with more repetitions a point: "
                + ", ".join(f"{count}: {value:.1%}" for count, value in more.items() if value is not None)
            )
    for name, summary in result["by_cluster"].items():
        strict, speed = summary["strict"], summary.get("at_host_speed") or {}
        line = f"  {name}: median {strict['median_error']:.1%} / max {strict['max_error']:.1%}"
        if speed.get("median_error") is not None:
            line += f"; at host speed median {speed['median_error']:.1%} / max {speed['max_error']:.1%}"
        lines.append(line)
    lines += step_split_lines(table)
    lines += cpu_lines(table)
    return "\n".join(lines)


def _rows_with(table: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The rows that have every one of ``columns`` (none where the table lacks one: a result saved before it)."""
    if not set(columns) <= set(table.columns):
        return table.iloc[:0]
    return table[np.logical_and.reduce([table[column].notna().to_numpy() for column in columns])]


def cpu_lines(table: pd.DataFrame) -> list[str]:
    """Each point's ranks' CPU beside its 1-node run's: cores used, threads' worth waiting for a core, the share of
    the node's quota periods that ran out ([] where no run's recorder read them)."""
    read = _rows_with(table, "cpu_target", "cpu_base")
    if read.empty:
        return []
    lines = [
        "",
        "the ranks' CPU, this run / the run it is predicted from (medians over ranks and repetitions): cores used,"
        " cores' worth of threads waiting for a core, the node's quota periods that ran out:",
        f"{'cluster':<36} {'point':<28} {'nodes':>5} {'used':>13} {'waiting':>13} {'quota ran out':>13}",
    ]
    for row in read.itertuples():
        target, base = row.cpu_target, row.cpu_base
        used, waiting = (f"{target[p]:>6.3g}/{base[p]:<6.3g}" for p in ("cpu_cores", "waiting_cores"))
        throttled = f"{target['throttled_share']:>6.0%}/{base['throttled_share']:<6.0%}".replace("nan%", "–")
        lines.append(f"{row.cluster:<36} {row.point:<28} {row.ranks:>5} {used} {waiting} {throttled}")
    return lines


def step_split_lines(table: pd.DataFrame) -> list[str]:
    """Where each point's step went, measured / predicted in ms: the time between collectives, the wait for
    the last rank, the collective after it (points whose ranks met in a collective; [] when none did)."""
    split = _rows_with(table, "measured_step_split", "predicted_step_split")
    if split.empty:
        return []
    lines = [
        "",
        "a step, measured / predicted (ms; means over the steps, medians over the repetitions), and how the"
        " ranks' steps varied together (the model: not at all):",
        f"{'cluster':<36} {'point':<28} {'nodes':>5} {'between':>13} {'wait':>13} {'collective':>13}"
        f" {'correlation':>11}",
    ]
    for row in split.itertuples():
        measured, predicted = row.measured_step_split, row.predicted_step_split
        parts = " ".join(f"{measured[name] * 1e3:>6.3g}/{predicted[name] * 1e3:<6.3g}" for name in SPLIT_PARTS)
        correlation = measured.get("correlation", math.nan)
        shown = f"{correlation:>11.2f}" if math.isfinite(correlation) else f"{'–':>11}"
        lines.append(f"{row.cluster:<36} {row.point:<28} {row.ranks:>5} {parts} {shown}")
    return lines


def main(
    as_json: bool = False,
    allreduce_json: str | None = None,
    seeds: bool = False,
    nodes: bool = False,
    sweeps: Sequence[str] | None = None,
    published: bool = False,
) -> int:
    """``workbench bench projection [--json] [--allreduce FILE] [--seeds | --published | --nodes [--sweeps ...]]``.

    ``--seeds``: the projection from a system description beside studies 004 and 001 (``bench.seed_systems``);
    ``--published``: the same beside published results at 64-512 GPUs (``bench.published_systems``);
    ``--nodes``: the sweeps on a miniature cluster's nodes, each count predicted from 1 node (``run_nodes``),
    those under ``artifacts/nodes-*`` or the globs ``sweeps`` names (one glob a sweep's repetitions).
    """
    from workbench.analysis import json_ready
    from workbench.commands.project import read_allreduce_rows as read_rows

    if nodes:
        result, text = run_nodes(sweeps_of(sweeps) if sweeps else None), format_nodes
    elif seeds:
        from docsbench import seed_systems

        result, text = seed_systems.run(), seed_systems.format_result
    elif published:
        from docsbench import published_systems

        result, text = published_systems.run(), published_systems.format_result
    else:
        result, text = run(allreduce_rows=read_rows(allreduce_json) if allreduce_json else None), format_result
    print(json.dumps(json_ready(result), indent=2, default=str) if as_json else text(result))
    return 1 if nodes and not result["runs"] else 0  # no node sweep on disk: nothing was checked


def command(args: argparse.Namespace) -> int:
    """``workbench bench projection``."""
    from workbench.config import ConfigError

    if args.sweeps and not args.nodes:
        raise ConfigError("--sweeps names sweeps on a miniature cluster's nodes: give it with --nodes")
    sweeps = args.sweeps
    return main(
        as_json=args.json,
        allreduce_json=args.allreduce,
        seeds=args.seeds,
        nodes=args.nodes,
        sweeps=sweeps,
        published=args.published,
    )
