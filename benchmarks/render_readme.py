"""README tables rendered from saved results, so that a figure and its source cannot disagree.

Each measured table in README.md sits between two markers::

    <!-- table: NAME -->
    ...generated...
    <!-- /table -->

and is rendered from ``benchmarks/results/NAME.json``, which holds what a command printed with
``--json`` plus the command itself and when it ran (``save`` writes that file). ``--check`` (what
the tests run) fails when a block differs from what its JSON renders; ``--write`` rewrites them.

    workbench run ps-vs-allreduce --preset reduced --ranks 2 --json > out.json
    python benchmarks/render_readme.py save ps-vs-allreduce-reduced out.json \\
        --command "workbench run ps-vs-allreduce --preset reduced --ranks 2 --json"
    python benchmarks/render_readme.py --write
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.inspection import format_amount as number

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- table: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}".replace("%", " %")


def table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def source_line(saved: Mapping[str, Any]) -> str:
    where = f"`benchmarks/results/{saved['name']}.json`"
    return f"*From `{saved['command']}`, {saved['measured']} on {saved['machine']} ({where}).*"


# -- one renderer per saved result ---------------------------------------------------------------------------
def render_ps_vs_allreduce(saved: Mapping[str, Any]) -> str:
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


def render_cpu_tuning(saved: Mapping[str, Any]) -> str:
    """The CPU-tuning sweeps: threads on one rank, runtime sets, MPI A/B, the evaluation schedule."""
    result = saved["result"]
    threads = result["threads"]
    intra = sorted({r["intra"] for r in threads})
    grid = {(r["inter"], r["intra"]): r["images_per_s"] for r in threads}
    parts = [
        "images/s on 1 rank, intra-op (columns) × inter-op (rows) threads:",
        "",
        table(
            ["inter \\ intra", *map(str, intra)],
            ["l", *["r"] * len(intra)],
            [
                [str(inter), *(number(grid.get((inter, i))) for i in intra)]
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


RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "ps-vs-allreduce-reduced": render_ps_vs_allreduce,
    "cpu-tuning-reduced": render_cpu_tuning,
}


# -- the README ---------------------------------------------------------------------------------------------
def load(name: str) -> dict[str, Any]:
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: save the command's --json output there (render_readme.py save)")
    return json.loads(path.read_text())


def rendered(text: str) -> tuple[str, list[str]]:
    """README text with every block rendered from its JSON, and the names of the blocks that changed."""
    changed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise SystemExit(f"README block {name!r} has no renderer in benchmarks/render_readme.py")
        body = RENDERERS[name](load(name)) + "\n"
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, text), changed


def save(name: str, output: Path, command: str) -> Path:
    """Wrap a command's ``--json`` output with the command, the date and the machine, as ``results/NAME.json``."""
    result = json.loads(output.read_text())
    from workbench.config import physical_cores

    saved = {
        "name": name,
        "command": command,
        "measured": time.strftime("%Y-%m-%d"),
        "machine": f"{socket.gethostname()}, {physical_cores()} cores",
        "result": result,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(saved, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a README table differs from its JSON")
    parser.add_argument("--write", action="store_true", help="rewrite the README tables from their JSON")
    sub = parser.add_subparsers(dest="action")
    saver = sub.add_parser("save", help="store a command's --json output as benchmarks/results/NAME.json")
    saver.add_argument("name")
    saver.add_argument("output", type=Path)
    saver.add_argument("--command", required=True)
    args = parser.parse_args(argv)
    if args.action == "save":
        print(save(args.name, args.output, args.command))
        return 0
    text = README.read_text()
    new, changed = rendered(text)
    if args.write and changed:
        README.write_text(new)
    if changed:
        print(("rewrote: " if args.write else "out of date: ") + ", ".join(changed))
        return 0 if args.write else 1
    print("README tables match benchmarks/results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
