"""``workbench minicluster up|status|down``: the miniature cluster from a shell.

``up`` prints the ``SLURM_CONF`` line to export and how to use the cluster from Python; the
cluster stays up after the command ends (its daemons are not the command's children) until
``down``.
"""

from __future__ import annotations

import argparse
import json

from workbench.minicluster import MiniCluster, MiniClusterError, MiniClusterSpec, down, running, status


def _per_node(pairs: list[str] | None, option: str) -> dict[str, str]:
    """``["node2=0.2", "node3=100mbit"]`` -> ``{"node2": "0.2", ...}``; a malformed pair is one error."""
    result = {}
    for pair in pairs or []:
        name, equals, value = pair.partition("=")
        if not equals or not name or not value:
            raise MiniClusterError(f"{option} {pair!r}: write NODE=VALUE, e.g. {option} node2=0.2")
        result[name.strip()] = value.strip()
    return result


#: ssh's options that take a value: a launcher calling its agent as ssh may pass them before the host.
_SSH_VALUE_OPTIONS = frozenset("bcDEeFIiJLlmOopQRSWw")


def ssh_words(words: list[str]) -> tuple[str, str]:
    """``[ssh options] HOST COMMAND...`` -> (host, the command as one shell line), as ssh reads its arguments."""
    position = 0
    while position < len(words) and words[position].startswith("-"):
        option = words[position]
        position += 2 if len(option) == 2 and option[1] in _SSH_VALUE_OPTIONS else 1
    if position >= len(words) - 1:
        raise ValueError("workbench minicluster exec: name a node and a command, e.g. exec node1 hostname")
    return words[position], " ".join(words[position + 1 :])


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "minicluster",
        help="a miniature cluster on this machine: nodes with their own hostname, CPU share and link, under Slurm",
    )
    actions = parser.add_subparsers(dest="minicluster_action", required=True)
    up = actions.add_parser("up", help="build it (reused when one with the same nodes is up)")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--cpus-per-node", type=float, default=0.4, help="each node's share of a core (default 0.4)")
    up.add_argument("--link", default="1gbit", help="each node's link rate as tc writes it: 800mbit, 1gbit, none")
    up.add_argument(
        "--slots-per-node",
        type=int,
        default=None,
        help="the CPUs Slurm offers on each node (default: one per started core share)",
    )
    up.add_argument(
        "--node-cpus", action="append", metavar="NODE=C", help="one node's share, e.g. node2=0.2 (a slow node)"
    )
    up.add_argument(
        "--memory-per-node",
        default=None,
        metavar="SIZE",
        help="the memory each node's processes may hold together, e.g. 1g (default: no limit beyond the machine's)",
    )
    up.add_argument(
        "--node-link", action="append", metavar="NODE=RATE", help="one node's link, e.g. node3=100mbit (a slow link)"
    )
    up.add_argument("--json", action="store_true", help="print its status as one JSON object")
    state = actions.add_parser("status", help="its nodes, links and daemons")
    state.add_argument("--json", action="store_true")
    actions.add_parser("down", help="remove it all: jobs, daemons, cgroups, links, namespaces, files")
    run_on = actions.add_parser(
        "exec",
        help="run a command on a node as ssh would (a hostfile run's --launch-agent 'workbench minicluster exec')",
    )
    run_on.add_argument("words", nargs=argparse.REMAINDER, help="[ssh's options] NODE COMMAND...")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.minicluster_action == "up":
        spec = MiniClusterSpec.make(
            args.nodes,
            cpus_per_node=args.cpus_per_node,
            link=args.link,
            node_cpus=_per_node(args.node_cpus, "--node-cpus"),  # make() reads "0.2", or names what is wrong
            node_links=_per_node(args.node_link, "--node-link"),
            slots_per_node=args.slots_per_node,
            memory_per_node=args.memory_per_node,
        )
        cluster = MiniCluster.up(spec)
        if args.json:
            print(json.dumps(cluster.status()))
            return 0
        print(cluster.status_text())
        print(
            f"\nexport SLURM_CONF={cluster.slurm_conf}\n"
            "from Python:  from workbench import minicluster; mini = minicluster.running(); "
            "cluster = mini.cluster(n=4).start_sync()\n"
            "a case:       workbench run eval-frequency --minicluster --preset ci\n"
            "take it down: workbench minicluster down"
        )
        return 0
    if args.minicluster_action == "status":
        cluster = status()
        if cluster is None:
            print("no miniature cluster is up (`workbench minicluster up --nodes 4` makes one)")
            return 1
        print(json.dumps(cluster.status()) if args.json else cluster.status_text())
        return 0
    if args.minicluster_action == "exec":
        node, command = ssh_words(args.words)
        running().exec_on(node, command)
    removed = down()
    print("miniature cluster removed" if removed else "no miniature cluster was up; nothing to remove")
    return 0
