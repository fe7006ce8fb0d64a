"""The docs' part of the case study ``pop-scaling``: what is measured for it, its tables, its README clause."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docsbench.cases import CaseDocs
from docsbench.cases.common import case_text, node_cluster, node_sweep_runs, node_sweeps
from docsbench.markdown import (
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

MEASUREMENTS: tuple[Measurement, ...] = (
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

#: its sweeps on a miniature cluster's nodes the projection is checked on (`workbench run CASE --nodes ...`)
NODE_SWEEPS = ("artifacts/nodes-pop-scaling-*",)


def readme_clause(results: SavedResults) -> ReadmeClause | None:
    """The README's line on the case studies on nodes: strong scaling on the fast link's nodes, its
    communication efficiency beside the published study's, what sharding the test did."""
    name = POP_NODE_SWEEPS[1]
    if not results.has(name):
        return None
    saved = results.load(name)
    points = saved["result"]["headline"]
    strong = {p["ranks"]: p for p in points if p["scaling"] == "strong" and pop_unchanged(p)}
    most = max(strong)
    sharded = next(p for p in points if p["ranks"] == most and p["scaling"] == "strong" and p["test"] != "rank0")
    seed = max(saved["result"]["published_pop"], key=lambda row: row["ranks"])
    speedups = " and ".join(f"{times(strong[1]['wall_s'] / strong[n]['wall_s'])} on {n}" for n in sorted(strong)[1:])
    return ReadmeClause(
        "Case studies on nodes",
        f"the pop-scaling ResNet trained {speedups} nodes ({node_cluster(saved)[1]}; strong scaling, the same"
        " nodes at every count), its communication efficiency falling to"
        f" {fixed(strong[most]['communication_efficiency'], 2)} on {most} (the published study:"
        f" {fixed(seed['communication_efficiency'], 2)} on {seed['ranks']} GPUs); sharding its sequential test"
        f" made {most} nodes {times(strong[most]['wall_s'] / sharded['wall_s'])} faster",
        (name,),
    )


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
    """pop-scaling on 1, 2 and 4 nodes at each link rate, beside the published study's POP table: the claims'
    evidence."""
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
    for seed in saved["result"].get("published_pop", []):
        rows.append(
            [
                "study 001 (V100s)",
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


DOCS = CaseDocs(
    "pop-scaling",
    measurements=MEASUREMENTS,
    tables={"pop-scaling-reduced": render_pop_scaling, "pop-scaling-nodes": render_pop_scaling_nodes},
    readme_clause=readme_clause,
    node_sweeps=NODE_SWEEPS,
)
