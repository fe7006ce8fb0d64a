"""What the benchmarks that build their own miniature cluster share: its options (nodes, share, link, bytes) and
how a measurement is run and printed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any


def add_cluster_options(
    parser: argparse.ArgumentParser, *, nodes: int, cpus_per_node: float, link: str, nbytes: int
) -> None:
    """``--nodes --cpus-per-node --link --bytes``, each with the benchmark's own default."""
    parser.add_argument("--nodes", type=int, default=nodes, help=f"nodes, a rank each (default {nodes})")
    parser.add_argument(
        "--cpus-per-node",
        type=float,
        default=cpus_per_node,
        help=f"each node's share of a core (default {cpus_per_node})",
    )
    parser.add_argument("--link", default=link, help=f"each node's link, e.g. 50mbit, or unshaped (default {link})")
    parser.add_argument("--bytes", type=float, default=nbytes, help=f"bytes an allreduce sums (default {nbytes})")


def run_measurement(
    script: str, measure: Callable[[], dict[str, Any]], text: Callable[[dict[str, Any]], str], *, as_json: bool
) -> int:
    """``measure()`` with its seconds added, printed as one JSON object or as ``text``; one error line naming
    ``script`` (exit 1) when the miniature cluster cannot be had (one already up, not root, no Slurm)."""
    from workbench.minicluster import MiniClusterError

    started = time.perf_counter()
    try:
        result = measure()
    except MiniClusterError as error:
        print(f"{script}: {error}", file=sys.stderr)
        return 1
    result["seconds"] = time.perf_counter() - started
    print(json.dumps(result, indent=1) if as_json else text(result))
    return 0


def engines_split(results: list[dict[str, Any]], warmup_steps: int) -> dict[str, float]:
    """The step split (``analysis.collective_summary``) of engines' results, each ``{"rank", "between_s",
    "collective_s"}`` with a value per step; the first ``warmup_steps`` steps of each rank left out."""
    import pandas as pd

    from workbench.analysis import collective_summary

    intervals = pd.DataFrame(
        [
            {"rank": r["rank"], "epoch": 0, "step": i, "between_s": b, "collective_s": c}
            for r in results
            for i, (b, c) in enumerate(zip(r["between_s"], r["collective_s"]))
            if i >= warmup_steps
        ]
    )
    return collective_summary(intervals)
