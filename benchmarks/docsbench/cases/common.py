"""What the cases' docs tables share: a case's own text from its saved summary, a node sweep's cluster in words,
a node sweep with its sibling sweeps (the same case at another link), and the repeated sweeps on a miniature
cluster's nodes that the projection's node rows are measured again from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from docsbench.markdown import REPETITIONS, Measurement, SavedResults, varied


def case_text(saved: Mapping[str, Any]) -> str:
    """The case's own plain-language result (``Case.text``) from its saved summary: one wording, in the
    notebook, the report, ``workbench run`` and here. The case is found through the registry
    (``workbench.experiment.get_case``: the package's cases, registered ones, entry points) by the name its
    summary carries."""
    from workbench.experiment import get_case

    result = saved["result"]
    return get_case(result["case"]).text(result).strip()


def node_cluster(saved: Mapping[str, Any]) -> tuple[str, str]:
    """(the link, ``0.4 core per node``) of a node sweep: from its ``cluster``, else from its command's options."""
    from workbench.minicluster import format_link_rate, parse_rate
    from workbench.node_sweep import describe_nodes

    nodes = saved["result"].get("cluster", {}).get("nodes")
    if nodes:
        return format_link_rate(nodes[0].get("link_bits_per_s")), describe_nodes(nodes)
    words = saved["command"].split()
    cpus, link = words[words.index("--cpus-per-node") + 1], words[words.index("--link") + 1]
    return format_link_rate(parse_rate(link)), f"{float(cpus):g} core, {format_link_rate(parse_rate(link))} per node"


def node_sweeps(saved: Mapping[str, Any], names: Sequence[str], results: SavedResults) -> list[Mapping[str, Any]]:
    """``saved`` (the first of ``names``) and those of the others measured so far."""
    return [saved] + [results.load(name) for name in names[1:] if results.has(name)]


def node_sweep_runs(
    group: str,
    case_options: str,
    out: str,
    nodes: str,
    cpus_per_node: float,
    links: Sequence[str],
    about: str,
    repetitions: Sequence[str] = REPETITIONS,
) -> tuple[Measurement, ...]:
    """The sweep ``group``'s runs of ``workbench run CASE_OPTIONS`` on ``nodes`` of a miniature cluster (root), one per
    repetition and link (``{repetition}`` and ``{link}`` in ``out``, under ``artifacts/``), repetitions outermost."""
    command = (
        f"workbench run {case_options} --nodes {nodes} --cpus-per-node {cpus_per_node:g} --link {{link}}"
        f" --out artifacts/{out} --json"
    )
    return varied(Measurement(group, command, about, sweep=True, root=True), repetition=repetitions, link=links)
