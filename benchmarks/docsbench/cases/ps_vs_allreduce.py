"""The docs' part of the case study ``ps-vs-allreduce``: what is measured for it, its tables, its README clause."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from docsbench.cases import CaseDocs
from docsbench.cases.common import node_cluster, node_sweep_runs, node_sweeps
from docsbench.markdown import (
    Measurement,
    ReadmeClause,
    SavedResults,
    duration,
    number,
    percent,
    rate_words,
    share,
    source_line,
    sources_line,
    table,
    times,
    varied,
)
from workbench.events import BYTES_PER_MB

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "ps-vs-allreduce-reduced",
        "workbench run ps-vs-allreduce --preset reduced --ranks 2 --json",
        "the case study's table on this machine's cores",
    ),
    *varied(
        Measurement(
            "ps-vs-allreduce-nodes-{link}",
            "workbench run ps-vs-allreduce --preset ci --data synthetic --ps 1,2 --sharded yes --nodes 1,2,4"
            " --cpus-per-node 0.4 --link {link} --out artifacts/nodes-ps-vs-allreduce-{link} --json",
            "each worker on a node of its own, 1 and 2 PS tasks (2 sharded at 4 workers) and allreduce",
            root=True,
        ),
        link=("1gbit", "unshaped"),
    ),
    *node_sweep_runs(
        "projection-nodes-sweeps",
        "ps-vs-allreduce --preset ci --data synthetic --ps 1 --sharded no --measured-steps 6 --repetitions 2",
        "nodes-ps-vs-allreduce-{link}-r{repetition}",
        "1,2,4",
        0.4,
        ("1gbit", "unshaped"),
        "allreduce and one PS task for the projection",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "ps-vs-allreduce --preset ci --data synthetic --ps 1 --sharded no --measured-steps 6 --repetitions 2",
        "sleepbatch/nodes-ps-vs-allreduce-{link}-r{repetition}",
        "1,2,4",
        0.4,
        ("unshaped", "1gbit"),
        "ranks waiting in MPI asleep",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "ps-vs-allreduce --preset ci --data synthetic --ps 1 --sharded no --measured-steps 6 --repetitions 2",
        "lightrec/nodes-ps-vs-allreduce-{link}-r{repetition}",
        "1,2,4",
        0.4,
        ("unshaped",),
        "the lighter recorder",
    ),
)

#: the repetitions for the projection (-r1..-r3: allreduce and one PS task), not the case study's single sweeps
NODE_SWEEPS = ("artifacts/nodes-ps-vs-allreduce-*-r[0-9]",)


def readme_clause(results: SavedResults) -> ReadmeClause | None:
    """The README's line on the schemes on nodes: each scheme's efficiency on fast and slow links at the most
    workers beside the published study's, and one PS task's traffic counted against the model's."""
    slow_name, fast_name = PS_NODE_SWEEPS
    if not (results.has(slow_name) and results.has(fast_name)):
        return None
    slow, fast = results.load(slow_name)["result"], results.load(fast_name)["result"]
    ps_fast, ps_slow = _at_most_workers(fast, "ps"), _at_most_workers(slow, "ps")
    ring_fast, ring_slow = _at_most_workers(fast, "allreduce"), _at_most_workers(slow, "allreduce")
    one_ps = next(
        p
        for p in slow["points"]
        if (p["scheme"], p["workers"], p["ps"], p["data"]) == ("ps", ps_slow["workers"], 1, "synthetic")
    )
    counted, modelled = ps_link_traffic(slow, one_ps)
    seeds = slow["published_efficiency"]
    seed = {r["system"]: r["efficiency"] for r in seeds if (r["gpus"], r["data"]) == (64, "synthetic")}
    return ReadmeClause(
        "Parameter servers and CPU tuning on nodes",
        f"on {ps_slow['workers']} nodes the efficiency of parameter servers fell from"
        f" {percent(ps_fast['efficiency'])} on fast links (unshaped) to {percent(ps_slow['efficiency'])} on"
        " 1 Gbit/s ones, allreduce's from"
        f" {percent(ring_fast['efficiency'])} to {percent(ring_slow['efficiency'])} (the published study at 64 GPUs:"
        f" {percent(seed[PS_SEED_SYSTEMS[0]])} on Piz Daint, {percent(seed[PS_SEED_SYSTEMS[1]])} on p2.xlarge);"
        f" one PS task's node carried {number(counted)} MB a step each way ({number(modelled)} MB modelled)",
        (slow_name, fast_name),
    )


#: The ps-vs-allreduce sweeps on the same nodes: a slow link first, then the kernel's own (unshaped).
PS_NODE_SWEEPS = ("ps-vs-allreduce-nodes-1gbit", "ps-vs-allreduce-nodes-unshaped")


#: The published study's systems with one GPU per node, like a node here: its fast network and its slow one.
PS_SEED_SYSTEMS = ("Piz Daint (P100, Aries)", "p2.xlarge (K80, 1 per node)")


def _at_most_workers(result: Mapping[str, Any], scheme: str) -> Mapping[str, Any]:
    """The scheme's row of a node sweep at the most workers on synthetic data (the fewest PS tasks, round-robin)."""
    rows = [r for r in result["efficiency"] if r["scheme"] == scheme and r["data"] == "synthetic"]
    most = [r for r in rows if r["workers"] == max(r["workers"] for r in rows) and r["placement"] != "sharded"]
    return min(most, key=lambda r: r["ps"])


def ps_link_traffic(result: Mapping[str, Any], point: Mapping[str, Any]) -> tuple[float | None, float]:
    """(measured, modelled) MB per step each way on a point's busiest link: the bytes counted on every
    node's link over the point (``link-bytes.json``; its start included) per step of each worker, and
    ``ps_load.link_bytes_per_step`` from the gradients' size and the PS tasks' shares."""
    from workbench.analysis.ps_load import link_bytes_per_step

    method = result["method"]
    steps = (method["warmup_steps"] + method["measured_steps"]) * method["repetitions"]
    counted = (result.get("link_bytes") or {}).get(point["point"])
    measured = max((max(node["sent"], node["received"]) for node in counted.values()), default=0) if counted else None
    shares = point.get("placed_shares") or []
    gradient_bytes = point["gradient_mb"] * BYTES_PER_MB
    ran = point.get("steps_per_worker") if point["scheme"] == "ps" else None
    modelled = max(link_bytes_per_step(point["scheme"], point["workers"], gradient_bytes, shares, ran))
    return (measured / steps / BYTES_PER_MB if measured is not None else None), modelled / BYTES_PER_MB


def ps_label(point: Mapping[str, Any]) -> str:
    """``allreduce``, ``PS × 2``, ``PS × 2, sharded``."""
    if point["scheme"] == "allreduce":
        return "allreduce"
    return f"PS × {point['ps']}" + (", sharded" if point["placement"] == "sharded" else "")


# -- one renderer per saved result ---------------------------------------------------------------------------
def render_ps_vs_allreduce(saved: Mapping[str, Any], results: SavedResults) -> str:
    """The PS-vs-allreduce sweep: throughput with its interval, efficiency, the step's parts."""
    result = saved["result"]
    efficiency = {(r["scheme"], r["data"], r["workers"], r["ps"], r["placement"]): r for r in result["efficiency"]}
    rows = []
    order = {"allreduce": 0, "ps": 1}
    points = sorted(
        result["points"],
        key=lambda p: (
            p["data"] != "synthetic",
            order[p["scheme"]],
            p["placement"] == "sharded",
            p["workers"],
            p["ps"],
        ),
    )
    for point in points:
        key = (point["scheme"], point["data"], point["workers"], point["ps"], point["placement"])
        row = efficiency.get(key, {})
        scheme = (
            "allreduce"
            if point["scheme"] == "allreduce"
            else "PS" + (", sharded" if point["placement"] == "sharded" else "")
        )
        interval = (
            f"{number(row.get('images_per_s'))} [{number(row.get('ci_low'))}, {number(row.get('ci_high'))}]"
            if row
            else "–"
        )
        rows.append(
            [
                scheme,
                point["data"],
                str(point["workers"]),
                str(point["ps"]) if point["ps"] else "–",
                interval,
                percent(row.get("efficiency")),
                f"{number(point['train_step_ms'])} ms",
                f"{number(point['comm_ms'])} ms" if point["workers"] > 1 or point["ps"] else "–",
                str(point["processes"]),
            ]
        )
    header = [
        "scheme",
        "data",
        "workers",
        "PS",
        "images/s [95 % interval]",
        "efficiency",
        "forward+backward / step",
        "push or allreduce / step",
        "processes",
    ]
    return table(header, ["l", "l", "r", "r", "l", "r", "r", "r", "r"], rows) + "\n\n" + source_line(saved)


def render_ps_vs_allreduce_nodes(saved: Mapping[str, Any], results: SavedResults) -> str:
    """ps-vs-allreduce on 1, 2 and 4 nodes at each link: efficiency by workers for both schemes, and the
    busiest link's bytes per step (measured and modelled) against the step: the PS bottleneck."""
    sweeps = node_sweeps(saved, PS_NODE_SWEEPS, results)
    rows, lines = [], []
    for one in sweeps:
        result = one["result"]
        link, shape = node_cluster(one)
        nodes = result.get("cluster", {}).get("nodes") or [{}]
        rate = nodes[0].get("link_bits_per_s")
        efficiency = {
            (r["scheme"], r["workers"], r["ps"], r["placement"]): r
            for r in result["efficiency"]
            if r["data"] == "synthetic"
        }
        batch = result["model"]["batch_per_worker"]
        points = sorted(
            (p for p in result["points"] if p["data"] == "synthetic"),
            key=lambda p: (p["workers"], p["scheme"] != "allreduce", p["ps"], p["placement"] == "sharded"),
        )
        by_key = {}
        for point in points:
            key = (point["scheme"], point["workers"], point["ps"], point["placement"])
            row = efficiency.get(key, {})
            measured, modelled = ps_link_traffic(result, point)
            step_s = point["workers"] * batch / row["images_per_s"] if row.get("images_per_s") else None
            link_s = modelled * BYTES_PER_MB * 8 / rate if rate and point["workers"] > 1 else None
            by_key[key] = (row, measured, modelled, step_s, link_s)
            rows.append(
                [
                    rate_words(link),
                    str(point["workers"]),
                    ps_label(point),
                    f"{number(row.get('images_per_s'))} [{number(row.get('ci_low'))}, {number(row.get('ci_high'))}]"
                    if row
                    else "–",
                    percent(row.get("efficiency")),
                    f"{number(step_s)} s" if step_s else "–",
                    f"{number(point['comm_ms'])} ms" if point["workers"] > 1 or point["ps"] else "–",
                    number(measured) if measured is not None else "–",
                    number(modelled),
                    f"{number(link_s)} s" if link_s else "–",
                ]
            )
        most = max(p["workers"] for p in points)
        by_scheme = ", ".join(
            f"{ps_label({'scheme': scheme, 'ps': ps, 'placement': placement})} {percent(value[0].get('efficiency'))}"
            for (scheme, workers, ps, placement), value in by_key.items()
            if workers == most and placement != "sharded"
        )
        lines.append(f"- {shape}: efficiency at {most} nodes, {by_scheme}.")
        one_ps = by_key.get(("ps", most, 1, "round-robin"))
        if one_ps and rate and one_ps[4] and one_ps[3]:
            lines.append(
                f"- {shape}: with one PS task at {most} nodes its node's link carries {number(one_ps[2])} MB each way"
                f" per step ({number(one_ps[1])} MB counted), {number(one_ps[4])} s at {rate_words(link)} of a"
                f" {number(one_ps[3])} s step."
            )
    seeds = [r for r in saved["result"].get("published_efficiency", []) if r["system"] in PS_SEED_SYSTEMS]
    for seed in sorted(seeds, key=lambda r: (PS_SEED_SYSTEMS.index(r["system"]), r["gpus"], r["data"])):
        rows.append(
            [f"study 004: {seed['system']}", f"{seed['gpus']} GPUs", f"PS ({seed['data']})", "–"]
            + [percent(seed["efficiency"])]
            + ["–"] * 5
        )
    header = [
        "link",
        "nodes",
        "scheme",
        "images/s [95 % interval]",
        "efficiency",
        "step",
        "push or allreduce / step",
        "busiest link, MB/step each way: counted",
        "modelled",
        "modelled on the link",
    ]
    body = table(header, ["l", "r", "l", "l"] + ["r"] * 6, rows)
    return "\n\n".join([body, "\n".join(lines), sources_line(*sweeps)])


def spread_of(row: Mapping[str, Any], name: str, shown: Callable[[float], str]) -> str:
    """``median [min–max]`` of a quantity over repetitions (the median alone from one; ``–`` without one)."""
    median = row.get(name)
    if median is None or median != median:
        return "–"
    if row.get("repetitions", 1) < 2 or row[f"{name}_min"] == row[f"{name}_max"]:
        return shown(median)
    return f"{shown(median)} [{shown(row[f'{name}_min'])}–{shown(row[f'{name}_max'])}]"


def render_ps_vs_allreduce_repeated(saved: Mapping[str, Any], results: SavedResults) -> str:
    """The case's efficiency by workers for both schemes over the projection's repeated node sweeps: each
    point's median and range, and a PS round against the allreduce round of the same sweep."""
    result = saved["result"]
    rows, lines = [], []
    found = result.get("ps_vs_allreduce_repetitions") or []
    for r in found:
        link = re.search(r"(\S+) per node", r["cluster"])
        rows.append(
            [
                rate_words(link[1]) if link else r["cluster"],
                str(r["workers"]),
                ps_label(r),
                str(r["repetitions"]),
                spread_of(r, "efficiency", share),
                spread_of(r, "round_s", duration),
                spread_of(r, "over_allreduce", times) if r["scheme"] == "ps" else "–",
            ]
        )
    for cluster in dict.fromkeys(r["cluster"] for r in found):
        here = [r for r in found if r["cluster"] == cluster]
        most = max(r["workers"] for r in here)
        at_most = [r for r in here if r["workers"] == most]
        efficiencies = ", ".join(f"{ps_label(r)} {spread_of(r, 'efficiency', share)}" for r in at_most)
        slower = ", ".join(
            f"{ps_label(r)} {spread_of(r, 'over_allreduce', times)}" for r in at_most if r["scheme"] == "ps"
        )
        lines.append(
            f"- {cluster.split(': ', 1)[-1]}: efficiency at {most} nodes, {efficiencies}; a round against"
            f" allreduce's: {slower}."
        )
    header = [
        "link",
        "nodes",
        "scheme",
        "repetitions",
        "efficiency",
        "round: one step of every worker",
        "PS over allreduce",
    ]
    body = table(header, ["l", "r", "l", "r", "r", "r", "r"], rows)
    return "\n\n".join([body, "\n".join(lines), source_line(saved)])


DOCS = CaseDocs(
    "ps-vs-allreduce",
    measurements=MEASUREMENTS,
    tables={
        "ps-vs-allreduce-reduced": render_ps_vs_allreduce,
        "ps-vs-allreduce-nodes": render_ps_vs_allreduce_nodes,
        "ps-vs-allreduce-nodes-repeated": render_ps_vs_allreduce_repeated,
    },
    readme_clause=readme_clause,
    node_sweeps=NODE_SWEEPS,
)
