"""The docs' part of the case study ``eval-frequency``: what is measured for it, its tables, its README clause."""

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
    number,
    source_line,
    sources_line,
    table,
    times,
    varied,
)

MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "eval-frequency-reduced",
        "workbench run eval-frequency --preset reduced --ranks 2 --out artifacts/eval-frequency-reduced --json",
        "the case study's table on this machine's cores",
    ),
    *varied(
        Measurement(
            "projection-sweeps",
            "workbench run eval-frequency --preset reduced --ranks 2 --threads-per-rank 1"
            " --out artifacts/eval-frequency-reduced-1thread{repetition} --json",
            "the projection checked on this machine: one core per rank at every rank count",
            sweep=True,
        ),
        repetition=("", "-r2", "-r3"),
    ),
    *varied(
        Measurement(
            "eval-frequency-nodes-{link}",
            "workbench run eval-frequency --preset ci --backend mpi4py --nodes 1,2,4 --cpus-per-node 0.4"
            " --link {link} --out artifacts/nodes-eval-frequency-0.4core-{link} --json",
            "the case study on 1, 2 and 4 nodes of 0.4 core, where the link is the limit and where it is not",
            root=True,
        ),
        link=("50mbit", "1gbit"),
    ),
    *node_sweep_runs(
        "projection-nodes-sweeps",
        "eval-frequency --preset ci --backend mpi4py",
        "nodes-eval-frequency-{link}-r{repetition}",
        "1,2,4,8",
        0.2,
        ("1gbit", "50mbit"),
        "the projection across nodes: 1-8 nodes of 0.2 core",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "eval-frequency --preset ci --backend mpi4py",
        "sleepbatch/nodes-eval-frequency-{link}-r{repetition}",
        "1,2,4,8",
        0.2,
        ("1gbit", "50mbit"),
        "ranks waiting in MPI asleep",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "eval-frequency --preset ci --backend mpi4py",
        "sleepbatch/nodes-eval-frequency-0.4core-{link}-r{repetition}",
        "1,2,4",
        0.4,
        ("1gbit", "50mbit"),
        "ranks waiting in MPI asleep, nodes of 0.4 core",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "eval-frequency --preset ci --backend mpi4py",
        "lightrec/nodes-eval-frequency-{link}-r{repetition}",
        "1,2,4,8",
        0.2,
        ("1gbit",),
        "the lighter recorder",
    ),
    *node_sweep_runs(
        "projection-nodes-sleeping-sweeps",
        "eval-frequency --preset ci --backend mpi4py",
        "lightrec/nodes-eval-frequency-0.4core-{link}-r{repetition}",
        "1,2,4",
        0.4,
        ("1gbit", "50mbit"),
        "the lighter recorder, nodes of 0.4 core",
    ),
    *node_sweep_runs(
        "projection-nodes-reduced-preset-sweeps",
        "eval-frequency --preset reduced --backend mpi4py",
        "lightrec/nodes-eval-frequency-reduced-0.4core-{link}-r{repetition}",
        "1,2,4",
        0.4,
        ("1gbit",),
        "does a longer run narrow the repetitions' scatter?",
    ),
    *node_sweep_runs(
        "projection-nodes-cpu-wait-sweeps",
        "eval-frequency --preset ci --backend mpi4py",
        "cpuwait/nodes-eval-frequency-{link}-r{repetition}",
        "1,2,4,8",
        0.2,
        ("1gbit",),
        "each rank's threads' wait for a core read with its heartbeat",
    ),
)

#: its sweeps the projection is checked on (`workbench run CASE --preset reduced [--threads-per-rank 1]
#: --out DIR`, three times: -1thread, -1thread-r2, -1thread-r3), and on a miniature cluster's nodes
PROJECTION_SWEEPS = ("artifacts/eval-frequency-reduced-1thread*", "artifacts/eval-frequency-reduced")

NODE_SWEEPS = ("artifacts/nodes-eval-frequency-*",)


def readme_clause(results: SavedResults) -> ReadmeClause | None:
    """The README's line on the case studies on nodes: what evaluating less often did on the fast link's nodes."""
    name = EVAL_NODE_SWEEPS[1]
    if not results.has(name):
        return None
    saved = results.load(name)
    result = saved["result"]
    fix = max((r for r in result["headline"] if times(r.get("speedup_eval_fix"))), key=lambda r: r["ranks"])
    return ReadmeClause(
        "Case studies on nodes",
        f"evaluating every {max(result['intervals'])} epochs instead of every epoch made {fix['ranks']} nodes"
        f" ({node_cluster(saved)[1]}) train {times(fix['speedup_eval_fix'])} faster (the published study:"
        f" {result['published_speedup_eval_fix']}×)",
        (name,),
    )


#: The eval-frequency sweeps on the same nodes.
EVAL_NODE_SWEEPS = ("eval-frequency-nodes-50mbit", "eval-frequency-nodes-1gbit")


def render_eval_frequency(saved: Mapping[str, Any], results: SavedResults) -> str:
    """Every point of the sweep, then the headline: the fix's speedup and the what-if estimate."""
    result = saved["result"]
    rows = [
        [
            r["backend"],
            str(r["ranks"]),
            str(r["eval_interval"]),
            fixed(r["wall_s"], 2),
            times(r.get("speedup_eval_fix")),
            fixed(r.get("whatif_estimated_wall_s"), 2) if r.get("whatif_estimated_wall_s") is not None else "",
            number(r["train_samples_per_s"]),
            times(r.get("wall_speedup_vs_1_rank")),
            fixed(r.get("parallel_efficiency"), 2),
        ]
        for r in sorted(result["headline"], key=lambda r: (r["ranks"], r["backend"] != "mpi4py", r["eval_interval"]))
    ]
    header = [
        "backend", "ranks", "eval every", "wall s", "fix speedup", "what-if estimate s", "train samples/s",
        "wall speedup vs 1 rank", "PE",
    ]  # fmt: skip
    return table(header, ["l"] + ["r"] * 8, rows) + "\n\n" + case_text(saved) + "\n\n" + source_line(saved)


def render_eval_frequency_nodes(saved: Mapping[str, Any], results: SavedResults) -> str:
    """eval-frequency on 1, 2 and 4 nodes at each link rate: what per-epoch evaluation costs as nodes are added."""
    sweeps = node_sweeps(saved, EVAL_NODE_SWEEPS, results)
    rows, lines = [], []
    for one in sweeps:
        link, shape = node_cluster(one)
        points = sorted(one["result"]["headline"], key=lambda r: (r["ranks"], r["eval_interval"]))
        for r in points:
            rows.append(
                [
                    link,
                    str(r["ranks"]),
                    str(r["eval_interval"]),
                    fixed(r["wall_s"], 2),
                    times(r.get("speedup_eval_fix")),
                    fixed(r.get("whatif_estimated_wall_s"), 2) if r.get("whatif_estimated_wall_s") is not None else "",
                    times(r.get("wall_speedup_vs_1_rank")),
                    fixed(r.get("parallel_efficiency"), 2),
                ]
            )
        fix = [r for r in points if times(r.get("speedup_eval_fix"))]
        if fix:
            each = ", ".join(f"{times(r['speedup_eval_fix'])} ({r['ranks']})" for r in fix)
            every = max(r["eval_interval"] for r in points)
            lines.append(f"- {shape}: evaluating every {every} epochs instead of every epoch, by nodes: {each}.")
    seed = saved["result"].get("published_speedup_eval_fix")
    if seed:
        rows.append(["study 000 (MPI + TF, MNIST)", "–", "1 → 30", "–", times(seed), "", "", "–"])
    header = ["link", "nodes", "eval every", "wall s", "fix speedup", "what-if estimate s", "vs 1 node", "PE"]
    body = table(header, ["l"] + ["r"] * 7, rows)
    return "\n\n".join([body, "\n".join(lines), sources_line(*sweeps)])


DOCS = CaseDocs(
    "eval-frequency",
    measurements=MEASUREMENTS,
    tables={"eval-frequency-reduced": render_eval_frequency, "eval-frequency-nodes": render_eval_frequency_nodes},
    readme_clause=readme_clause,
    projection_sweeps=PROJECTION_SWEEPS,
    node_sweeps=NODE_SWEEPS,
)
