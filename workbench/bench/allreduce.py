"""``workbench bench allreduce``: allreduce bus bandwidth, raw MPI beside Horovod, on ``--ranks`` fresh ranks.

The measurement is the product's (``workbench.allreduce.measure``); this starts the ranks that run it (this
module is also the program mpiexec starts) and prints the table the README renders.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from workbench.allreduce import DEFAULT_SIZES, measure
from workbench.config import ClusterConfig


def run(
    ranks: int = 2,
    *,
    config: ClusterConfig | None = None,
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    min_seconds: float = 0.25,
    timeout_s: float = 900,
) -> list[dict[str, Any]]:
    """Start ``ranks`` MPI processes with the cluster's settings and return rank 0's rows."""
    config = replace(config, n=ranks) if config else ClusterConfig(n=ranks)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "rows.json"
        completed = config.launch(
            [
                sys.executable,
                "-m",
                "workbench.bench.allreduce",
                "--out",
                str(out),
                "--sizes",
                ",".join(map(str, sizes)),
                "--min-seconds",
                str(min_seconds),
                *([] if config.mpi == "openmpi" else ["--no-horovod"]),
            ],
            timeout_s=timeout_s,
        )
        if completed.returncode != 0 or not out.exists():
            raise RuntimeError(f"allreduce benchmark failed (exit {completed.returncode}):\n{completed.stderr[-3000:]}")
        return json.loads(out.read_text())


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'bytes':>10} {'MPI busbw GB/s':>15} {'Horovod busbw GB/s':>19} {'Horovod/MPI':>12}"]
    for row in rows:
        lines.append(
            f"{row['bytes']:>10} {row['mpi_busbw_gbps']:>15.3f} {row['horovod_busbw_gbps']:>19.3f} "
            f"{row['horovod_over_mpi']:>12.2f}"
        )
    return "\n".join(lines)


#: Where the last ``workbench bench allreduce`` on this host keeps its rows: ``workbench project --network here``
#: is fitted to them (per host: a home directory shared by a cluster's nodes keeps each node's own).
MEASURED_HERE = Path.home() / ".cache" / "workbench" / f"allreduce-{socket.gethostname()}.json"


def _keep(rows: list[dict]) -> None:
    """Keep what was measured for ``--network here``; a cache that cannot be written is said, not raised."""
    try:
        MEASURED_HERE.parent.mkdir(parents=True, exist_ok=True)
        MEASURED_HERE.write_text(json.dumps({"result": rows}))
    except OSError as error:
        print(f"workbench: the result was not kept for --network here ({error})", file=sys.stderr)


def _main() -> None:
    parser = argparse.ArgumentParser(description="allreduce benchmark program (started by mpiexec)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--min-seconds", type=float, default=0.25)
    parser.add_argument("--no-horovod", action="store_true", help="raw MPI only (e.g. under MPICH)")
    args = parser.parse_args()
    rows = measure(tuple(int(s) for s in args.sizes.split(",")), args.min_seconds, not args.no_horovod)
    if rows:
        Path(args.out).write_text(json.dumps(rows))


def command(args: argparse.Namespace) -> int:
    """``workbench bench allreduce``."""
    from workbench.bench import print_result

    config = ClusterConfig(n=args.ranks, mpi=args.mpi, horovod_cycle_time_ms=args.cycle_time_ms, bind_to=args.bind_to)
    rows = run(args.ranks, config=config, min_seconds=args.min_seconds)
    if rows:
        _keep(rows)
    header = f"allreduce on {args.ranks} ranks ({args.mpi}); busbw = algbw * 2(n-1)/n\n"
    print_result(rows, args, lambda found: header + format_table(found))
    return 0


if __name__ == "__main__":
    _main()
