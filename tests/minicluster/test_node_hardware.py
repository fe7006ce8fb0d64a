"""Each node keeps its hardware: the same 1-thread TensorFlow step takes the same time on 1, 2 and 4 busy nodes."""

from __future__ import annotations

from workbench.bench.node_step import mean_step_s


def test_the_same_step_takes_the_same_time_on_1_2_and_4_nodes(mini):
    """Rounds of 1, 2 and 4 busy nodes, interleaved so the machine's own drift falls on every count alike.

    Bound: 15 %. On this 2-core VM, two rounds of the same count already differ by up to ~10 %
    (an idle vCPU wakes slowly; the login node's work lands on one core or the other); the
    spread measured is printed and reported by benchmarks/minicluster.py.
    """
    with mini.cluster(4) as cluster:
        client = cluster.client
        client[:].apply_sync(mean_step_s, 1.0)  # every rank imports TF and traces once, before any timing
        rounds: dict[int, list[float]] = {1: [], 2: [], 4: []}
        for _ in range(2):
            for busy in (1, 2, 4):
                per_rank = client[list(range(busy))].apply_sync(mean_step_s, 2.0)
                rounds[busy].append(sum(per_rank) / len(per_rank))
    means = {busy: sorted(values)[len(values) // 2] for busy, values in rounds.items()}
    spread = max(means.values()) / min(means.values()) - 1
    shown = {busy: [round(value * 1e3, 2) for value in values] for busy, values in rounds.items()}
    print(f"\nmean step (ms) per round, by busy nodes: {shown}; spread of the medians {spread:.1%}")
    assert spread < 0.15
