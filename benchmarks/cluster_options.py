"""The miniature-cluster options the benchmarks that build their own cluster share (nodes, share, link, bytes)."""

from __future__ import annotations

import argparse


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
