"""Each node keeps its hardware: the same 1-thread TensorFlow step takes the same time on 1, 2 and 4 busy nodes."""

from __future__ import annotations

from workbench.bench.node_step import mean_step_s

#: Nodes that keep their hardware stay well under this; nodes sharing one core would be 2-4x slower.
SLOWDOWN_BOUND = 0.5


def test_the_same_step_takes_the_same_time_on_1_2_and_4_nodes(restored):
    """Rounds of 1, 2 and 4 busy nodes, interleaved so the machine's own drift falls on every count alike.

    Each node gets 0.25 of a core, so the 4 nodes hold one of the 2 cores and a busy neighbour
    process does not take their time. Bound: a step on 2 or 4 busy nodes at most 50 % slower than on
    1, between the fastest rounds of each count: nodes that shared a core would be 2-4x slower (+100 % or
    more), so the bound tells the two apart with room for the machine's noise. Measured: 1.4 % apart
    quiet, 10.5 % with one core kept busy by another process (an idle vCPU wakes slowly; the login node's
    work lands on either core), 20.3 % in a full `make test` on this machine kind (2026-11-28: 35 ms on
    1 node, 42 and 47 ms on 4, the same test alone 0.2 % apart minutes later). The other way is the
    machine, not the nodes: on a loaded CI host a lone busy node, its vCPU idle 3/4 of each quota period,
    stepped in 45 ms where 4 busy nodes stepped in 29 ms; so only a slowdown as nodes are added fails.
    """
    mini = restored
    for node in mini.node_names:  # 4 x 0.25 = one of the 2 cores: room left for the login node and a busy neighbour
        mini.set_cpus(node, 0.25)
    with mini.cluster(4) as cluster:
        client = cluster.client
        client[:].apply_sync(mean_step_s, 1.0)  # every rank imports TF and traces once, before any timing
        rounds: dict[int, list[float]] = {1: [], 2: [], 4: []}
        for _ in range(2):
            for busy in (1, 2, 4):
                per_rank = client[list(range(busy))].apply_sync(mean_step_s, 2.0)
                rounds[busy].append(sum(per_rank) / len(per_rank))
    # the fastest round of each count, as timings are compared: noise only ever adds (one round of
    # 49 ms among 42-46 ms ones made the slower of two rounds 15.8 % apart, the faster 4.9 %)
    means = {busy: min(values) for busy, values in rounds.items()}
    spread = max(means.values()) / min(means.values()) - 1
    slowdown = max(means[2], means[4]) / means[1] - 1
    shown = {busy: [round(value * 1e3, 2) for value in values] for busy, values in rounds.items()}
    print(
        f"\nmean step (ms) per round, by busy nodes: {shown}; spread of the fastest rounds {spread:.1%}, "
        f"2 or 4 busy nodes against 1: {slowdown:+.1%}"
    )
    assert slowdown < SLOWDOWN_BOUND
