"""The docs' part of the case study ``cpu-tuning``: what is measured for it, its tables, its README clause."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docsbench.cases import CaseDocs
from docsbench.cases.common import case_text, node_cluster
from docsbench.markdown import (
    Measurement,
    ReadmeClause,
    SavedResults,
    fixed,
    number,
    percent,
    share,
    source_line,
    sources_line,
    table,
    times,
)

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "cpu-tuning-reduced",
        "workbench run cpu-tuning --preset reduced --ranks 2 --json",
        "the case study's tables on this machine's cores",
    ),
    Measurement(
        "cpu-tuning-nodes",
        "workbench run cpu-tuning --preset reduced --nodes 1,2 --cpus-per-node 0.8 --slots-per-node 2 --link 1gbit"
        " --out artifacts/nodes-cpu-tuning-cpuwait --json",
        "nodes of 0.8 core offering Slurm 2 slots each: 1 rank x 2 threads or 2 ranks x 1 thread per node",
        root=True,
    ),
)


def readme_clause(results: SavedResults) -> ReadmeClause | None:
    """The README's line on the schemes and CPU tuning on nodes: the faster split of a node's cores into ranks x
    threads, and what evaluating less often kept of the node count's speedup."""
    name = CPU_NODE_SWEEPS[0]
    if not results.has(name):
        return None
    saved = results.load(name)
    per_node = saved["result"]["per_node"]
    rate = {(r["nodes"], r["ranks_per_node"]): r["images_per_s"] for r in per_node if r["eval"] == "fixed"}
    most = max(r["nodes"] for r in per_node)
    scaling = {r["eval"]: r["time_speedup"] for r in saved["result"]["schedule_scaling"] if r["nodes"] == most}
    every = max(r["eval_interval"] for r in per_node)
    node = node_cluster(saved)[1].split(" (")[0]
    splits = {1: "1 rank × 2 threads", 2: "2 ranks × 1 thread"}  # ranks per node -> the split's words
    faster = max(splits, key=lambda ranks: rate[(1, ranks)])
    slower = 3 - faster
    return ReadmeClause(
        "Parameter servers and CPU tuning on nodes",
        f"on a node of {node}, {splits[faster]} trained {times(rate[(1, faster)] / rate[(1, slower)])} the images/s"
        f" of {splits[slower]}, and evaluating every {every} iterations kept {most} nodes' wall-time speedup with"
        f" their images/s ({times(scaling['fixed'])}, against {times(scaling['per_epoch'])} evaluating once per"
        " epoch)",
        (name,),
    )


#: The cpu-tuning sweep on nodes whose share is split into ranks x threads (``measure_readme.sh``).
CPU_NODE_SWEEPS = ("cpu-tuning-nodes",)


def render_cpu_tuning(saved: Mapping[str, Any], results: SavedResults) -> str:
    """The CPU-tuning sweeps: threads on one rank, runtime sets, MPI A/B, the evaluation schedule."""
    result = saved["result"]
    threads = result["threads"]
    intra = sorted({r["intra"] for r in threads})
    grid = {(r["inter"], r["intra"]): r["images_per_s"] for r in threads}
    # each cell's threads' wait for a core, as a share of their ready time (results saved before 2026-11-27 lack it)
    waits = {(r["inter"], r["intra"]): r.get("cpu_wait_share") for r in threads}
    waited = any(value is not None for value in waits.values())
    parts = [
        "images/s on 1 rank, intra-op (columns) × inter-op (rows) threads"
        + (" (in brackets: the share of their ready time its threads waited for a core):" if waited else ":"),
        "",
        table(
            ["inter \\ intra", *map(str, intra)],
            ["l", *["r"] * len(intra)],
            [
                [
                    str(inter),
                    *(
                        number(grid.get((inter, i))) + (f" ({share(waits.get((inter, i)))})" if waited else "")
                        for i in intra
                    ),
                ]
                for inter in sorted({r["inter"] for r in threads})
            ],
        ),
        "",
        table(
            ["runtime set (2 ranks)", "images/s [95 % interval]", "change vs default", "effect"],
            ["l", "l", "r", "l"],
            [
                [
                    f"`{r['set']}`",
                    f"{number(r['images_per_s'])} [{number(r['ci_low'])}, {number(r['ci_high'])}]",
                    f"{r['change']:+.0%}".replace("%", " %"),
                    "none within the interval" if r["no_effect"] else "yes",
                ]
                for r in result["runtime_sets"]
            ],
        ),
        "",
        table(
            ["Horovod over", "controller", "images/s [95 % interval]", "ranks in Horovod's world"],
            ["l", "l", "l", "r"],
            [
                [
                    r["mpi"],
                    r["controller"],
                    f"{number(r['images_per_s'])} [{number(r['ci_low'])}, {number(r['ci_high'])}]",
                    str(r["horovod_size"]) + ("" if r["valid"] else " (each rank alone: invalid)"),
                ]
                for r in result["mpi_ab"]
            ],
        ),
        "",
        table(
            ["ranks", "evaluate every (per epoch / fixed)", "evaluation share", "wall s", "fix speedup"],
            ["r", "l", "l", "l", "r"],
            [
                [
                    str(r["ranks"]),
                    f"{r['interval_per_epoch']} / {r['interval_fixed']} iterations",
                    f"{percent(r['eval_share_per_epoch'])} / {percent(r['eval_share_fixed'])}",
                    f"{number(r['wall_s_per_epoch'])} / {number(r['wall_s_fixed'])}",
                    f"{r['speedup_eval_fix']:.2f}×",
                ]
                for r in result["evaluation"]
            ],
        ),
    ]
    return "\n".join(parts) + "\n\n" + source_line(saved)


def render_cpu_tuning_nodes(saved: Mapping[str, Any], results: SavedResults) -> str:
    """cpu-tuning on 1 and 2 nodes: ranks x threads per node with the node's share fixed, each evaluation schedule,
    and the speedup over 1 node in training images/s and in wall time (the published study's "linear in
    images/s, not time")."""
    result = saved["result"]
    _link, shape = node_cluster(saved)
    scaling = {(r["nodes"], r["eval"]): r for r in result.get("schedule_scaling") or []}
    tuned = {(r["ranks"] // max(r["nodes"], 1), r["ranks"]) for r in result.get("schedule_scaling") or []}
    waited = any("cpu_wait_share" in r for r in result["per_node"])
    rows = []
    for r in result["per_node"]:
        speedup = scaling.get((r["nodes"], r["eval"])) if (r["ranks_per_node"], r["ranks"]) in tuned else None
        rows.append(
            [
                str(r["nodes"]),
                f"{r['ranks_per_node']} × {r['intra']}",
                r["eval"].replace("_", " "),
                f"{number(r['images_per_s'])} [{number(r['ci_low'])}, {number(r['ci_high'])}]",
                fixed(r["wall_s"], 2),
                share(r["eval_share"]),
                str(r["eval_interval"]),
                f"{times(speedup['train_speedup'])} / {times(speedup['time_speedup'])}" if speedup else "",
                # the ranks' threads' wait for a core and the node's quota (results saved before 2026-11-27 lack it)
                *([f"{share(r.get('cpu_wait_share'))} / {share(r.get('throttled_share'))}"] if waited else []),
            ]
        )
    seed = result["published_study"]
    rows.append(
        [
            "study 002: 1 (Xeon 8260L)",
            seed["ranks_x_threads_best"].replace(" ranks x ", " × ").replace(" threads", ""),
            "–",
            f"{number(seed['ranks_x_threads_images_per_s'])} (256×256 images)",
            "–",
            "–",
            "–",
            "",
            *(["too many threads (VTune)"] if waited else []),
        ]
    )
    rows.append(
        [
            "study 002: 8 (Omni-Path)",
            "–",
            "every epoch → every 15",
            "–",
            "–",
            "–",
            "–",
            "linear / sublinear → 8×",
            *(["–"] if waited else []),
        ]
    )
    header = [
        "nodes",
        "ranks × threads per node",
        "evaluation",
        "images/s [95 % interval]",
        "wall s",
        "evaluation share",
        "evaluate every",
        "vs 1 node: images/s while training / wall time",
        *(["threads waiting for a core / node's quota ran out"] if waited else []),
    ]
    lines = [line for line in case_text(saved).splitlines() if "node" in line]
    body = table(header, ["r", "l", "l", "l", "r", "r", "r", "r", *(["r"] if waited else [])], rows)
    return "\n\n".join([f"{shape}:", body, "\n".join(lines), sources_line(saved)])


DOCS = CaseDocs(
    "cpu-tuning",
    measurements=MEASUREMENTS,
    tables={"cpu-tuning-reduced": render_cpu_tuning, "cpu-tuning-nodes": render_cpu_tuning_nodes},
    readme_clause=readme_clause,
)
