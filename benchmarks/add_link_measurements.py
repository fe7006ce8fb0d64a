"""Measure the link at every node count of saved node sweeps that measured it on two nodes only.

    python benchmarks/add_link_measurements.py artifacts/nodes-eval-frequency-*     # root; minutes

Sweeps made by ``workbench run CASE --nodes ...`` now measure the allreduce at each count as they end
(``allreduce_by_nodes`` in ``nodes.json``); this adds it to older ones. Sweeps with the same nodes share one
miniature cluster, brought up with those nodes' shares and links and taken down at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

from workbench.minicluster import MiniCluster, MiniClusterSpec
from workbench.node_sweep import add_link_measurements, read_nodes_file


def main(directories: list[str]) -> int:
    by_spec: dict[MiniClusterSpec, list[Path]] = {}
    for directory in directories:
        payload = read_nodes_file(directory)
        if payload is None:
            print(f"{directory}: no nodes.json, skipped", file=sys.stderr)
            continue
        if payload.get("allreduce_by_nodes"):
            print(f"{directory}: measured at each count already", file=sys.stderr)
            continue
        by_spec.setdefault(MiniClusterSpec.from_json(payload["nodes"]), []).append(Path(directory))
    for spec, found in by_spec.items():
        with MiniCluster.up(spec) as mini:
            for directory in found:
                print(f"{directory}: measuring the link at each count ...", file=sys.stderr)
                add_link_measurements(directory, mini)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
