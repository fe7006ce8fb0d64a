"""A case's sweep over node counts on a miniature cluster: ``workbench run CASE --nodes 1,2,4,8 --link 10mbit``.

Scaling is measured the way the projection assumes and the published studies measured it only when each node keeps its
hardware as nodes are added: the same share of a core and the same link at every count. This brings up one
miniature cluster with the largest count (or uses the one that is up, if it is the same), runs the case's
sweep at the given counts only (one rank per node), then measures the link on two of its nodes
(``workbench.allreduce.measure``: MPI and Horovod allreduce by size, Horovod's background thread) and
writes ``nodes.json`` beside the sweep: the nodes' shares and links and that measurement, what
``workbench bench projection`` fits the network to when it predicts the larger counts from the 1-node run.
While the sweep runs, ``workbench.hostspeed`` samples how fast this machine's cores are (``host-speed.txt``):
a node's quota is time, so a shared machine's drift between two runs moves their compute, and the
projection's check divides it out beside the raw comparison.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Each node's share of a core and link when ``--nodes`` is given without them: 8 nodes fit beside the
#: login node's share on 2 cores.
DEFAULT_CPUS_PER_NODE = 0.2
DEFAULT_LINK = "1gbit"
#: The files written beside the sweep's runs: the nodes and their link; the bytes each point sent over each link.
NODES_FILE = "nodes.json"
LINK_BYTES_FILE = "link-bytes.json"
#: Message sizes measured on the cluster's link: small ones for latency, >= 1 MiB ones for bandwidth
#: (``fit_network`` needs two); sizes that would take longer than ``LONGEST_CALL_S`` on the link are left out.
SMALL_SIZES = (1024, 4096, 16384, 65536)
LARGE_SIZES = (1 << 20, 2 << 20, 4 << 20, 16 << 20)
LONGEST_CALL_S = 2.0
MIN_SECONDS = 0.05
#: Steps per round when measuring what collectives take from the compute beside them.
STEPS_BESIDE = 40


def link_sizes(bits_per_s: int | None) -> tuple[int, ...]:
    """The message sizes to measure on a link of this rate (the two smallest large ones always)."""
    large = [
        size
        for index, size in enumerate(LARGE_SIZES)
        if index < 2 or bits_per_s is None or size * 8 / bits_per_s <= LONGEST_CALL_S
    ]
    return (*SMALL_SIZES, *large)


def node_sweep(
    case: Any,
    counts: Sequence[int],
    *,
    cpus_per_node: float | None = None,
    link: str | None = None,
    preset: str | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    timeout_s: float | None = None,
    progress: bool = True,
    on_point: Any = None,
    overrides: Mapping[str, Any] | None = None,
    mini: Any = None,
    measure_link: bool = True,
    slots_per_node: int | None = None,
) -> Any:
    """Run ``case`` at ``counts`` nodes of one miniature cluster; returns the ``ExperimentResult``.

    ``mini``: a running ``MiniCluster`` to use as it is (at least ``max(counts)`` nodes; ``cpus_per_node``,
    ``link`` and ``slots_per_node`` must then be None). Without it one is brought up, and taken down at the
    end. ``measure_link=False`` skips measuring the link afterwards (``nodes.json``, which the projection
    across nodes needs): a sweep only looked at, or a test of the case itself.

    One rank per node, so the counts are the sweep's rank counts; a case that places several ranks on a
    node (``Case.places_ranks_per_node``: cpu-tuning's ranks x threads per node) is given the counts as
    its ``nodes`` setting instead, and each of its points says on how many nodes it runs.
    """
    from workbench import minicluster
    from workbench.experiment import Experiment, get_case
    from workbench.hostspeed import HostSpeedProbe

    counts = tuple(sorted({int(n) for n in counts}))
    given = mini is not None
    if mini is None:
        spec = minicluster.MiniClusterSpec.make(
            counts[-1],
            cpus_per_node=DEFAULT_CPUS_PER_NODE if cpus_per_node is None else cpus_per_node,
            link=link or DEFAULT_LINK,
            slots_per_node=slots_per_node,
        )
        mini = minicluster.MiniCluster.up(spec, reuse=True)
    elif (
        cpus_per_node is not None or link is not None or slots_per_node is not None or len(mini.node_names) < counts[-1]
    ):
        raise ValueError(
            f"a running miniature cluster ({len(mini.node_names)} nodes) is used as it is: give no cpus_per_node,"
            f" link or slots_per_node, and at most {len(mini.node_names)} nodes"
        )
    try:
        case = get_case(case)
        overrides = dict(overrides or {})
        ranks, rank_counts = counts[-1], counts
        if case.places_ranks_per_node:
            overrides.setdefault("nodes", counts)
            settings = case.settings(preset or case.default_preset, overrides)
            ranks, rank_counts = max(point.ranks for point in case.points(settings, counts[-1])), None
        experiment = Experiment(
            case,
            preset=preset,
            ranks=ranks,
            out=out,
            cluster_config=mini.cluster_config(ranks),
            rank_counts=rank_counts,
            **overrides,
        )
        counter = LinkBytes(mini, experiment.out, then=on_point)
        # the host's speed over the sweep (host-speed.txt): each run's window read back, the machine's drift divided out
        with HostSpeedProbe(experiment.out):
            result = experiment.run(resume=resume, progress=progress, on_point=counter, timeout_s=timeout_s)
        if counts[-1] >= 2 and measure_link:
            write_nodes_file(experiment.out, mini, counts, step=one_node_step(result.tables["runs"]))
        return result
    finally:
        if mini.owned and not given:  # only the cluster this call brought up; a caller's stays up
            mini.down()


class LinkBytes:
    """``on_point`` for a node sweep: the bytes each node of a point sent and received over its link.

    Counted from the point's start to its end (``MiniCluster.link_bytes``) and written to
    ``link-bytes.json`` beside the runs, keyed by point: the traffic a scheme puts on the links (a
    parameter server's pulls and pushes, a ring's chunks), measured, not inferred from the model.
    The count includes the engines starting when the point's cluster is new: a few kB.
    """

    def __init__(self, mini: Any, directory: str | Path, then: Any = None) -> None:
        self.mini, self.path, self.then = mini, Path(directory) / LINK_BYTES_FILE, then
        self.counted: dict[str, Any] = read_link_bytes(directory)
        self.started: dict[str, dict[str, int]] = {}

    def __call__(self, point: Any, status: str) -> None:
        from workbench.store import write_json_atomic

        if status == "start":
            self.started = self.mini.link_bytes()
        elif status == "done" and self.started:
            now = self.mini.link_bytes()
            # one rank per node, unless the point says on how many nodes its ranks run
            nodes = self.mini.node_names[: int(point.as_dict().get("nodes", point.ranks))]
            self.counted[point.key] = {
                node: {way: now[node][way] - self.started[node][way] for way in ("sent", "received")}
                for node in nodes
                if node in now and node in self.started
            }
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path, self.counted)
        if self.then is not None:
            self.then(point, status)


def read_link_bytes(directory: str | Path) -> dict[str, Any]:
    """A node sweep's ``link-bytes.json``: point key -> node -> bytes sent and received ({} when none)."""
    path = Path(directory) / LINK_BYTES_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error.msg}): delete it and run the sweep again") from None


def measure_link(mini: Any, nodes: int = 2) -> list[dict[str, Any]]:
    """``bench allreduce`` rows measured on ``nodes`` nodes of the cluster (its shares and links as they are).

    A sweep measures on two nodes: each node's link, what the projection assumes every node keeps. On this
    machine the nodes share one kernel's network path, so a ring's bandwidth per link falls as nodes join
    (50 Mbit/s links at 0.2 core: 5.8 MB/s on 2 nodes, 4.1 on 4, 3.8 on 8): the larger counts then run
    slower than the two-node link says, which the node rows of ``bench projection --nodes`` show.
    """
    with mini.cluster(nodes) as cluster:
        return link_rows(mini, cluster.view)


def link_rows(mini: Any, view: Any) -> list[dict[str, Any]]:
    """``measure_link`` on engines already started on ``mini``'s nodes (``view``: all of them)."""
    from workbench.allreduce import measure

    rate = mini.spec.nodes[0].link_bits_per_s
    results = view.apply_sync(measure, link_sizes(rate), MIN_SECONDS, True)
    rows = [row for rank_rows in results for row in rank_rows]
    if not rows:
        raise RuntimeError("the allreduce measurement on the miniature cluster returned no rows")
    return rows


def one_node_step(runs: Any) -> tuple[float, float] | None:
    """(compute seconds per step, gradient bytes) of the sweep's 1-node run with the most steps (None: none)."""
    from workbench.analysis import projection as pj
    from workbench.store import RunData

    ranks = next((runs[column] for column in ("ranks", "workers") if column in runs), None)  # ps-vs-allreduce: workers
    single = runs[ranks == 1] if len(runs) and ranks is not None else runs.iloc[:0]
    best: tuple[int, float, float] | None = None
    for path in single.get("path", []):
        run = RunData.load(path)
        costs = pj.step_costs(run.events, run.meta)
        if len(costs.compute_s) and costs.gradient_bytes > 0 and (best is None or len(costs.compute_s) > best[0]):
            best = (len(costs.compute_s), float(costs.compute_s.mean()), float(costs.gradient_bytes))
    return None if best is None else best[1:]


def compute_beside_collective(cpu_s: float, nbytes: int, steps: int = STEPS_BESIDE, rounds: int = 3) -> dict[str, Any]:
    """On every rank: wall seconds of ``cpu_s`` of CPU work per step alone, and split around an allreduce.

    The step the projection models: compute, the gradients' allreduce, compute again. Rounds of each kind
    alternate, so a drift falls on both; medians of the compute's wall time per step.
    """
    import statistics
    import time

    import numpy as np
    from mpi4py import MPI

    from workbench.workloads.training import stop_idle_horovod

    stop_idle_horovod()  # an earlier measurement's (``link_rows``): its idle thread would take compute
    comm = MPI.COMM_WORLD
    send = np.ones(max(1, int(nbytes) // 4), dtype=np.float32)
    receive = np.empty_like(send)

    def spin(seconds: float) -> float:
        started, until = time.perf_counter(), time.thread_time() + seconds
        while time.thread_time() < until:
            pass
        return time.perf_counter() - started

    alone: list[float] = []
    beside: list[float] = []
    for _ in range(rounds):
        comm.Barrier()
        alone += [spin(cpu_s / 2) + spin(cpu_s / 2) for _ in range(steps)]
        comm.Barrier()
        for _ in range(steps):
            first = spin(cpu_s / 2)
            comm.Allreduce(send, receive, op=MPI.SUM)
            beside.append(first + spin(cpu_s / 2))
    return {"alone_s": statistics.median(alone), "beside_s": statistics.median(beside)}


def measure_compute_beside(mini: Any, view: Any, compute_s: float, nbytes: float) -> dict[str, Any]:
    """The factor by which a rank's compute slows with the step's allreduce between it, on the engines of
    ``view`` (started on ``mini``'s nodes).

    The compute is the 1-node run's per step, as CPU time at the node's share (``compute_s`` × share).
    """
    share = min(mini.spec.nodes[0].cpus, 1.0)
    cpu_s = compute_s * share
    results = view.apply_sync(compute_beside_collective, cpu_s, int(nbytes))
    alone = max(r["alone_s"] for r in results)
    beside = max(r["beside_s"] for r in results)
    return {
        "compute_s": compute_s,
        "cpu_s": cpu_s,
        "bytes": int(nbytes),
        "alone_s": alone,
        "beside_s": beside,
        "factor": beside / alone if alone > 0 else 1.0,
    }


def write_nodes_file(
    directory: str | Path, mini: Any, counts: Sequence[int], *, step: tuple[float, float] | None = None
) -> Path:
    """``nodes.json`` beside a sweep: the nodes it used (share, link), the counts run, the link measured, and
    (given the 1-node run's ``step``: compute seconds, gradient bytes) what collectives take from the compute."""
    from workbench.store import write_json_atomic

    path = Path(directory) / NODES_FILE
    with mini.cluster(2) as cluster:  # one start of two engines for both (a start costs a Slurm job and imports)
        two_nodes = link_rows(mini, cluster.view)
        beside = measure_compute_beside(mini, cluster.view, *step) if step else None
    payload = {
        "nodes": mini.spec.to_json()[: max(counts)],
        "counts": list(counts),
        "allreduce": two_nodes,
        "allreduce_by_nodes": measure_links_at_counts(mini, counts, two_nodes),
        "compute_beside_collectives": beside,
        "idle_wait": mini.idle_wait,
        "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json_atomic(path, payload)
    return path


def measure_links_at_counts(
    mini: Any, counts: Sequence[int], two_nodes: list[dict[str, Any]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``bench allreduce`` rows at each count of 2 or more nodes, keyed by the count as text.

    Why: the nodes share one kernel's network path, so a ring's bandwidth per link falls as nodes join
    (see ``measure_link``); a real cluster's switch does not do that. Measured at each count, the network
    the projection is given is the one the runs had, and its error is the model's, not the bridge's.
    """
    measured = {}
    for count in sorted({int(c) for c in counts if int(c) >= 2}):
        measured[str(count)] = two_nodes if count == 2 and two_nodes else measure_link(mini, count)
    return measured


def add_link_measurements(directory: str | Path, mini: Any) -> Path:
    """Measure the link at each count of a saved node sweep on ``mini`` (its nodes' shares and links) and add
    them to its ``nodes.json``: for sweeps measured before ``allreduce_by_nodes`` existed."""
    from workbench.minicluster import MiniClusterSpec
    from workbench.store import write_json_atomic

    path = Path(directory) / NODES_FILE
    payload = read_nodes_file(directory)
    if payload is None:
        raise ValueError(f"{directory} has no {NODES_FILE}: it is not a sweep on a miniature cluster's nodes")
    swept = MiniClusterSpec.from_json(payload["nodes"]).nodes
    if swept != mini.spec.nodes[: len(swept)]:
        raise ValueError(f"{directory} ran on other nodes than the cluster that is up: bring up the sweep's own")
    payload["allreduce_by_nodes"] = measure_links_at_counts(mini, payload["counts"], payload["allreduce"])
    payload["allreduce_by_nodes_measured"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json_atomic(path, payload)
    return path


def read_nodes_file(directory: str | Path) -> dict[str, Any] | None:
    """A sweep's ``nodes.json`` (None when the sweep did not run on a miniature cluster's nodes)."""
    path = Path(directory) / NODES_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error.msg}): run the sweep again to measure its link") from None


def describe_sweep_cluster(payload: Mapping[str, Any]) -> str:
    """``8 nodes: 0.2 core, 1 Gbit/s per node, idle ranks sleep`` from a sweep's ``nodes.json``: the last part
    only for sweeps whose waiting ranks slept (``MiniCluster.idle_wait``), since that changes the timings."""
    sleeping = ", idle ranks sleep" if payload.get("idle_wait") == "sleep" else ""
    return f"{len(payload['nodes'])} nodes: {describe_nodes(payload['nodes'])}{sleeping}"


def describe_nodes(nodes: Sequence[Mapping[str, Any]]) -> str:
    """``0.2 core, 1 Gbit/s per node`` (or each node's, when they differ)."""
    from workbench.minicluster import format_link_rate

    def slots(node: Mapping[str, Any]) -> str:
        return f" ({node['slots']} slots)" if node.get("slots") else ""

    shapes = {(node["cpus"], node.get("link_bits_per_s"), slots(node)) for node in nodes}
    if len(shapes) == 1:
        cpus, rate, offered = shapes.pop()
        return f"{cpus:g} core{offered}, {format_link_rate(rate)} per node"
    return "; ".join(
        f"{n['name']} {n['cpus']:g} core{slots(n)}, {format_link_rate(n.get('link_bits_per_s'))}" for n in nodes
    )
