"""A miniature cluster on this machine: nodes with their own hostname, CPU share and network link, under Slurm.

Why: the users of the workbench train on clusters, where ranks on different nodes talk over a
network and each node keeps its cores as ranks are added. One machine can show that with parts
Linux already has (like ``kind`` for Kubernetes or dask's ``LocalCluster``):

- each node is a network namespace joined to one Linux bridge by a veth pair, with a ``tbf``
  shaper on both ends of its link (rate and queueing; this kernel has no ``netem`` delay);
- each node's processes live in its own cgroups: ``cpu`` (a CFS quota, the node's share of a
  core), ``cpuset`` (the cores it may run on) and ``freezer`` (to freeze a node in fault tests);
- each node runs its own ``slurmd`` in a UTS namespace whose hostname is the node's name;
  ``slurmctld`` and ``munged`` run on this host, the login node, beside the notebook kernel and
  the ipyparallel controller (which listens on the bridge's address).

Everything it makes is named ``wbmc*`` / ``workbench-minicluster`` and written down in one state
file, so :func:`down` removes exactly that and a second :func:`up` finds the first. Root only.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import psutil

from workbench.config import ClusterConfig, physical_cores

#: Where the running cluster keeps its state, keys, logs and Slurm spool (tmpfs: gone at reboot, as the namespaces are).
STATE_DIR = Path(os.environ.get("WORKBENCH_MINICLUSTER_DIR", "/run/workbench-minicluster"))
BRIDGE = "wbmc0"
NETNS_PREFIX = "wbmc-"
CGROUP_NAME = "workbench-minicluster"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuset", "freezer", "memory")
#: What each controller gives the nodes (named when a host lacks it).
CONTROLLER_USES = {"cpu": "CPU shares", "cpuset": "CPU shares", "freezer": "freezes", "memory": "memory limits"}
#: CFS period: short enough that a 10 ms training step is throttled in small slices, not 100 ms lumps.
CPU_PERIOD_US = 5_000
#: CFS weight of each node's cgroup (the machine's other processes weigh 1024): nodes get their share first.
NODE_SHARES = 16384
#: The share of this machine the login node keeps for the kernel, the controller and slurmctld.
LOGIN_SHARE = 0.4
#: Candidate private /24s; the first one no interface of this machine uses is taken.
SUBNETS = tuple(f"10.{second}.{third}.0/24" for second in (213, 214, 215) for third in (0, 1, 2))
SLURM_TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "srun")
RATE_UNITS = {
    "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9,
    "bps": 8, "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9,
}  # fmt: skip
#: The kernel's smallest CFS quota (1 ms): a share below QUOTA_MIN_US / CPU_PERIOD_US needs a longer period.
QUOTA_MIN_US = 1_000
#: How long a yield from MPI sleeps on the nodes (see ``IDLE_SLEEP_SOURCE``), and the variable that chooses
#: (``WORKBENCH_MINICLUSTER_IDLE``: ``sleep``, the default, or ``spin``, which lets ranks poll and yield as
#: they would anywhere else).
IDLE_SLEEP_US = 50
IDLE_WAIT_VARIABLE = "WORKBENCH_MINICLUSTER_IDLE"
#: A rank waiting in MPI polls, yielding between polls (``mpi_yield_when_idle``). On a real node that spends
#: the rank's own core; here a node is a quota, and a yield with nothing else to run returns at once, so the
#: waiting spends the node's share and the kernel's network path, which every node's packets share, starves.
#: Preloaded into the ranks, this makes the yields of MPI's libraries (the caller's shared object: Open MPI's
#: and MPICH's) a short sleep; every other yield (TensorFlow's spinning locks) is left as it is. The thread
#: sleeps as SCHED_BATCH, whose wake-up does not preempt the task running on its core: a plain sleep's
#: wake-ups, thousands a second, slowed a rank working beside the waiting ones (the measurements:
#: docs/clusters.md, "Ranks waiting in MPI"; ``benchmarks/idle_wait.py``).
IDLE_SLEEP_SOURCE = f"""#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* exported so that a test can ask it: does a yield from this address sleep? */
int workbench_sleeps_for(void *caller) {{
    Dl_info info;
    if (!dladdr(caller, &info) || !info.dli_fname) return 0;
    const char *name = strrchr(info.dli_fname, '/');
    name = name ? name + 1 : info.dli_fname;
    return !strncmp(name, "libopen-pal", 11) || !strncmp(name, "libmpi", 6) || !strncmp(name, "mca_", 4);
}}

int sched_yield(void) {{
    static __thread void *last_caller;
    static __thread int last_from_mpi;
    void *caller = __builtin_return_address(0);
    if (caller != last_caller) {{
        last_from_mpi = workbench_sleeps_for(caller);
        last_caller = caller;
    }}
    if (last_from_mpi) {{
        struct timespec pause = {{0, {IDLE_SLEEP_US * 1000}}};
#ifdef WORKBENCH_SLEEP_PREEMPTS /* a plain sleep, which benchmarks/idle_wait.py measures against */
        nanosleep(&pause, 0);
#else
        /* asleep as SCHED_BATCH, whose wake-up does not preempt a rank working on the core the nodes share;
           a thread given another policy by its user keeps it */
        struct sched_param none = {{0}};
        int batch = sched_getscheduler(0) == SCHED_OTHER && sched_setscheduler(0, SCHED_BATCH, &none) == 0;
        nanosleep(&pause, 0);
        if (batch) sched_setscheduler(0, SCHED_OTHER, &none);
#endif
        return 0;
    }}
    return (int)syscall(SYS_sched_yield);
}}
"""
IDLE_SLEEP_LIBRARY = "idle-sleep.so"
#: Tools check_host needs beside Slurm, and the Debian package that has each.
HOST_TOOLS = {"ip": "iproute2", "tc": "iproute2", "nsenter": "util-linux", "unshare": "util-linux"}


class MiniClusterError(RuntimeError):
    """The miniature cluster cannot be made or used here; the message says why and what to do."""


# -- what a cluster is ------------------------------------------------------------------------------


#: Sizes as ``--memory-per-node`` takes them: bytes per unit (binary, as the kernel and Slurm count memory).
SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30}
#: Below this a node cannot hold a Python process with the workbench imported.
MIN_NODE_MEMORY = 64 * 2**20


def parse_size(text: str | int | None) -> int | None:
    """Bytes from ``512m``, ``2g``, ``1.5gb`` or a number of bytes; None (or "none"): no limit."""
    if text is None or str(text).strip().lower() in ("", "none"):
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", str(text).lower())
    if not match or match.group(2) not in SIZE_UNITS:
        raise MiniClusterError(f"memory {text!r} is not a size: write it as 512m, 2g or a number of bytes")
    size = int(float(match.group(1)) * SIZE_UNITS[match.group(2)])
    if size < MIN_NODE_MEMORY:
        raise MiniClusterError(f"memory {text!r} is below {format_size(MIN_NODE_MEMORY)}: a node's Python needs more")
    return size


def format_size(size: int | None) -> str:
    """``512 MiB``, ``2 GiB``; "unlimited" for None."""
    if size is None:
        return "unlimited"
    return f"{size / 2**30:.3g} GiB" if size >= 2**30 else f"{size / 2**20:.3g} MiB"


def parse_rate(text: str | None) -> int | None:
    """Bits per second from tc's notation ("800mbit", "1gbit", "50mbps" = megabytes); None = unshaped."""
    if text is None or str(text).strip().lower() in ("", "none", "unshaped"):
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", str(text).lower())
    if not match or match.group(2) not in RATE_UNITS:
        raise MiniClusterError(
            f"link rate {text!r} is not a rate: write it as tc does, e.g. 800mbit, 1gbit, 100mbps (megabytes/s)"
        )
    bits = float(match.group(1)) * RATE_UNITS[match.group(2)]
    if bits < 100_000:
        raise MiniClusterError(f"link rate {text!r} is below 100 kbit/s: no training traffic gets through; ask more")
    return int(bits)


def format_link_rate(bits_per_s: int | None) -> str:
    """A rate as tc writes it (what :func:`parse_rate` reads back): ``1gbit``, ``800mbit``, ``500kbit``."""
    if bits_per_s is None:
        return "unshaped"
    if bits_per_s >= 10**9 and bits_per_s % 10**8 == 0:
        return f"{bits_per_s / 10**9:g}gbit"
    if bits_per_s < 10**6:
        return f"{bits_per_s / 10**3:g}kbit"
    return f"{bits_per_s / 10**6:g}mbit"


def _share(name: str, value: Any) -> float:
    """A node's core share from a number or text ("0.2"); one error for anything else."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise MiniClusterError(f"{name} with {value!r} cores: give a share of a core as a number, e.g. 0.2") from None


@dataclass(frozen=True)
class NodeSpec:
    """One node: its name, its share of a core (0.4 = 40 % of one core), its link rate in bit/s, the
    CPUs Slurm offers on it (``slots``; None: one per started core share) and the memory its processes may
    hold together (``memory_bytes``; None: the machine's)."""

    name: str
    cpus: float
    link_bits_per_s: int | None = None
    slots: int | None = None
    memory_bytes: int | None = None

    @property
    def slurm_cpus(self) -> int:
        """CPUs Slurm offers on the node: its slots, else one rank per started core share.

        More slots than the share lets several ranks (or a rank's threads) share the node's quota, as the
        cores of a real node are shared: ranks x threads per node at a fixed node (the cpu-tuning case).
        """
        return self.slots or max(1, math.ceil(self.cpus - 1e-9))

    def describe(self) -> str:
        slots = f", {self.slots} slots" if self.slots else ""
        memory = f", {format_size(self.memory_bytes)} memory" if self.memory_bytes else ""
        return f"{self.name}: {self.cpus:g} core{slots}{memory}, link {format_link_rate(self.link_bits_per_s)}"


@dataclass(frozen=True)
class MiniClusterSpec:
    """What ``up`` builds: the nodes, in order."""

    nodes: tuple[NodeSpec, ...]

    @classmethod
    def make(
        cls,
        nodes: int = 2,
        *,
        cpus_per_node: float = 0.4,
        link: str | None = "1gbit",
        node_cpus: dict[str, float | str] | None = None,
        node_links: dict[str, str | None] | None = None,
        slots_per_node: int | None = None,
        memory_per_node: str | int | None = None,
    ) -> MiniClusterSpec:
        """``nodes`` alike, then per-node changes by name (``node_cpus={"node2": 0.2}``: one slower node).

        ``slots_per_node``: the CPUs Slurm offers on each node, whatever its share (default: one per
        started core share): 2 slots on 0.8 of a core hold 2 ranks of 1 thread or 1 rank of 2.
        """
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise MiniClusterError(f"nodes={nodes!r}: use a whole number >= 1")
        if slots_per_node is not None and (
            isinstance(slots_per_node, bool) or not isinstance(slots_per_node, int) or not 1 <= slots_per_node <= 64
        ):
            raise MiniClusterError(f"slots_per_node={slots_per_node!r}: use a whole number from 1 to 64")
        names = [f"node{index}" for index in range(1, nodes + 1)]
        for name in [*(node_cpus or {}), *(node_links or {})]:
            if name not in names:
                raise MiniClusterError(f"there is no {name!r} among {', '.join(names)}: name one of them")
        default_rate = parse_rate(link)
        specs = []
        for name in names:
            cpus = _share(name, (node_cpus or {}).get(name, cpus_per_node))
            if not 0.01 <= cpus <= physical_cores():
                raise MiniClusterError(
                    f"{name} with {cpus:g} cores: use a share between 0.01 and this machine's {physical_cores()} cores"
                )
            rate = parse_rate(node_links[name]) if node_links and name in node_links else default_rate
            specs.append(NodeSpec(name, cpus, rate, slots_per_node, parse_size(memory_per_node)))
        spec = cls(tuple(specs))
        total = sum(node.cpus for node in spec.nodes)
        if total > physical_cores() - LOGIN_SHARE + 1e-9:
            raise MiniClusterError(
                f"{nodes} nodes with {total:g} cores in all leave the login node (kernel, controller, slurmctld) "
                f"less than {LOGIN_SHARE} of this machine's {physical_cores()} cores: "
                "ask fewer nodes or less --cpus-per-node"
            )
        return spec

    def max_ranks(self, threads_per_rank: int = 1) -> int:
        """Ranks Slurm can place at ``threads_per_rank`` CPUs each: every node's whole slots, added up."""
        return sum(node.slurm_cpus // max(1, threads_per_rank) for node in self.nodes)

    def to_json(self) -> list[dict[str, Any]]:
        return [asdict(node) for node in self.nodes]

    @classmethod
    def from_json(cls, nodes: list[dict[str, Any]]) -> MiniClusterSpec:
        return cls(tuple(NodeSpec(**node) for node in nodes))


@dataclass
class MiniCluster:
    """A running miniature cluster, as its state file records it.

    Use it as a context manager (``with MiniCluster.up(nodes=4) as mini:``; leaving it takes the
    cluster down) or attach to one ``workbench minicluster up`` made (:meth:`running`).
    """

    spec: MiniClusterSpec
    directory: Path
    subnet: str
    bridge_ip: str
    node_ips: dict[str, str]
    cpusets: dict[str, str]
    pids: dict[str, int] = field(default_factory=dict)
    owned: bool = False

    @property
    def bridge(self) -> str:
        """The host's side of the nodes' links: the interface a launcher is told to use."""
        return BRIDGE

    # -- making and finding ------------------------------------------------------------------------
    @classmethod
    def up(cls, spec: MiniClusterSpec | None = None, *, reuse: bool = True, **make: Any) -> MiniCluster:
        """Build the cluster (seconds); one already up with the same nodes is reused, another is refused."""
        spec = spec or MiniClusterSpec.make(**make)
        check_host()
        with _locked():
            existing = cls._read_state()
            if existing is not None:
                if existing.spec == spec and reuse and existing.healthy():
                    existing.use()
                    return existing
                nodes = ", ".join(node.describe() for node in existing.spec.nodes)
                if existing.spec == spec and reuse:
                    raise MiniClusterError(
                        f"a miniature cluster with these nodes is up but not healthy ({nodes}): "
                        "`workbench minicluster down`, then up again"
                    )
                raise MiniClusterError(
                    f"a miniature cluster is already up ({nodes}): use it, or `workbench minicluster down` first"
                )
            if _leftovers():
                _remove_everything()
            cluster = _build(spec)
        cluster.owned = True
        cluster.use()
        return cluster

    @classmethod
    def running(cls) -> MiniCluster:
        """The cluster ``workbench minicluster up`` started, with SLURM_CONF set for this process."""
        cluster = cls._read_state()
        if cluster is None:
            raise MiniClusterError("no miniature cluster is up: run `workbench minicluster up --nodes 4` first")
        cluster.use()
        return cluster

    @classmethod
    def _read_state(cls) -> MiniCluster | None:
        path = STATE_DIR / "state.json"
        if not path.is_file():
            return None
        try:
            state = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise MiniClusterError(
                f"{path} is not valid JSON ({error.msg}): `workbench minicluster down` removes what is left"
            ) from None
        return cls(
            spec=MiniClusterSpec.from_json(state["nodes"]),
            directory=STATE_DIR,
            subnet=state["subnet"],
            bridge_ip=state["bridge_ip"],
            node_ips=state["node_ips"],
            cpusets=state["cpusets"],
            pids={name: int(pid) for name, pid in state["pids"].items()},
        )

    def _write_state(self) -> None:
        state = {
            "nodes": self.spec.to_json(),
            "subnet": self.subnet,
            "bridge_ip": self.bridge_ip,
            "node_ips": self.node_ips,
            "cpusets": self.cpusets,
            "pids": self.pids,
            "slurm_conf": str(self.slurm_conf),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        # written aside, then renamed: a reader (status, running, down) never sees half a file
        partial = self.directory / "state.json.partial"
        partial.write_text(json.dumps(state, indent=1) + "\n")
        partial.replace(self.directory / "state.json")

    # -- using -------------------------------------------------------------------------------------
    @property
    def slurm_conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [node.name for node in self.spec.nodes]

    def use(self) -> None:
        """Point this process's Slurm commands (sbatch, squeue, srun) at this cluster."""
        os.environ["SLURM_CONF"] = str(self.slurm_conf)

    def cluster_config(self, n: int | None = None, **settings: Any) -> ClusterConfig:
        """Settings for ``Cluster``/``Experiment``: Slurm engines, one rank per node, the controller on the bridge."""
        ranks = n if n is not None else len(self.spec.nodes)
        threads = settings.get("threads_per_rank") or 1
        if isinstance(ranks, int) and ranks > self.spec.max_ranks(threads):
            raise MiniClusterError(self.too_many_ranks(ranks, threads))
        defaults: dict[str, Any] = {
            "n": ranks,
            "launcher": "slurm",
            "nodes": min(ranks, len(self.spec.nodes)),
            "controller_ip": self.bridge_ip,
            "threads_per_rank": 1,
            "time_limit": "60",
            "start_timeout_s": 120.0,
        }
        env = dict(settings.pop("env", None) or {})
        if self.idle_wait == "sleep":
            preloaded = env.get("LD_PRELOAD") or os.environ.get("LD_PRELOAD")
            env["LD_PRELOAD"] = f"{self.directory / IDLE_SLEEP_LIBRARY}" + (f":{preloaded}" if preloaded else "")
        if "OMPI_MCA_mpi_yield_when_idle" not in os.environ:
            # a node here is a share of a core, not a core: a rank waiting in MPI that spins without yielding
            # spends its share and starves the kernel's network path that every node's packets go through (a
            # 1 KB allreduce on 8 nodes of 0.2 core: 62 ms spinning, 0.7 ms yielding); Open MPI yields by
            # itself only when it sees more ranks than cores, which a quota hides
            env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        return ClusterConfig(**{**defaults, **settings, "env": env})

    @property
    def idle_wait(self) -> str:
        """``sleep``, the default where the library was built (a C compiler when the cluster came up): MPI's
        yields are short sleeps (``IDLE_SLEEP_SOURCE``); ``spin`` when asked (``WORKBENCH_MINICLUSTER_IDLE=spin``)
        or without the library: ranks poll and yield."""
        if os.environ.get(IDLE_WAIT_VARIABLE, "sleep").strip().lower() == "spin":
            return "spin"
        return "sleep" if (self.directory / IDLE_SLEEP_LIBRARY).is_file() else "spin"

    def too_many_ranks(self, ranks: int, threads_per_rank: int = 1) -> str:
        """The one line for more ranks than the nodes' slots hold, naming the cluster's size."""
        slots = [node.slurm_cpus // max(1, threads_per_rank) for node in self.spec.nodes]
        if len(set(slots)) == 1:
            shape = f"{len(slots)} nodes x {slots[0]} slot{'' if slots[0] == 1 else 's'}"
        else:
            shape = f"{len(slots)} nodes with {' + '.join(map(str, slots))} slots"
        each = f" at {threads_per_rank} threads per rank" if threads_per_rank > 1 else ""
        return (
            f"{ranks} ranks do not fit the miniature cluster ({shape}{each} = {sum(slots)} ranks): ask at most "
            f"{sum(slots)}, or `workbench minicluster down` and up again with more --nodes or --cpus-per-node"
        )

    def cluster(self, n: int | None = None, **settings: Any) -> Any:
        """A (not yet started) ``workbench.Cluster`` whose engines are ranks on this cluster's nodes."""
        from workbench.cluster import Cluster

        return Cluster(config=self.cluster_config(n, **settings))

    def node_of_ip(self) -> dict[str, str]:
        return {ip: name for name, ip in self.node_ips.items()}

    # -- looking -----------------------------------------------------------------------------------
    def daemons_alive(self) -> dict[str, bool]:
        return {name: _alive(pid) for name, pid in self.pids.items()}

    def node_states(self) -> dict[str, str]:
        """Each node's state as Slurm has it (idle, alloc, down*, ...); empty when slurmctld does not answer."""
        result = _slurm(self, "sinfo", "-h", "-N", "-o", "%N %t", check=False)
        states = {}
        for line in result.stdout.splitlines():
            name, _, state = line.partition(" ")
            states[name] = state.strip()
        return states

    def healthy(self) -> bool:
        """Every daemon alive and Slurm answering with every node usable (no answer is not healthy)."""
        if not all(self.daemons_alive().values()):
            return False
        states = self.node_states()
        return set(states) == set(self.node_names) and all(
            state in ("idle", "alloc", "mix", "comp") for state in states.values()
        )

    def status(self) -> dict[str, Any]:
        """What is up: nodes with their address, share, link and Slurm state; daemons alive or not."""
        states = self.node_states()
        nodes = [
            {
                "name": node.name,
                "ip": self.node_ips[node.name],
                "cpus": node.cpus,
                "memory_bytes": node.memory_bytes,
                "cpuset": self.cpusets[node.name],
                "link": format_link_rate(node.link_bits_per_s),
                "slurm_state": states.get(node.name, "unknown"),
                "frozen": self.frozen(node.name),
                "processes": len(self.processes(node.name)),
            }
            for node in self.spec.nodes
        ]
        return {
            "slurm_conf": str(self.slurm_conf),
            "controller_ip": self.bridge_ip,
            "daemons": self.daemons_alive(),
            "idle_wait": self.idle_wait,
            "nodes": nodes,
        }

    def status_text(self) -> str:
        status = self.status()
        lines = [
            f"miniature cluster: {len(status['nodes'])} nodes on bridge {BRIDGE} ({self.subnet}); "
            f"login node {socket.gethostname()} at {self.bridge_ip}",
            f"SLURM_CONF={status['slurm_conf']}",
            "ranks waiting in MPI: "
            + (
                f"MPI's yields are {IDLE_SLEEP_US} µs sleeps ({IDLE_WAIT_VARIABLE}=spin makes them poll)"
                if status["idle_wait"] == "sleep"
                else f"poll and yield, spending their node's share ({IDLE_WAIT_VARIABLE}=spin or no C compiler)"
            ),
        ]
        for node in status["nodes"]:
            frozen = ", FROZEN" if node["frozen"] else ""
            lines.append(
                f"  {node['name']:<7} {node['ip']:<13} {node['cpus']:g} core (cpus {node['cpuset']}), "
                f"memory {format_size(node['memory_bytes'])}, link {node['link']}, slurm {node['slurm_state']}, "
                f"{node['processes']} processes{frozen}"
            )
        dead = [name for name, alive in status["daemons"].items() if not alive]
        if dead:
            lines.append(f"  not running: {', '.join(dead)} (`workbench minicluster down`, then up again)")
        return "\n".join(lines)

    def popen(self, node: str, command: list[str], **popen: Any) -> subprocess.Popen:
        """Start ``command`` on the node, outside Slurm: its network, hostname and cgroups (a benchmark's peer)."""
        self._node(node)
        wrapped = ["nsenter", f"--net=/run/netns/{_netns(node)}", "unshare", "--uts", "sh", "-c",
                   f'hostname {node} && exec "$@"', "sh", *command]  # fmt: skip
        return subprocess.Popen(wrapped, preexec_fn=lambda: _into_cgroups(node), **popen)

    def exec_on(self, node: str, shell_command: str) -> NoReturn:
        """Become ``sh -c shell_command`` on the node (its network, hostname, cgroups): what ``ssh node cmd`` does.

        Why: a hostfile run starts its launcher's daemons on the other hosts through ssh, which these nodes do
        not run; ``workbench minicluster exec`` stands in for it (``--launch-agent``).
        """
        self._node(node)
        _into_cgroups(node)
        inner = f"hostname {node} && exec sh -c {shlex.quote(shell_command)}"
        os.execvp("nsenter", ["nsenter", f"--net=/run/netns/{_netns(node)}", "unshare", "--uts", "sh", "-c", inner])

    # -- faults (tests and teaching) ---------------------------------------------------------------
    def processes(self, node: str) -> list[int]:
        """Every process in the node's cgroup: its slurmd and whatever Slurm started there."""
        return _cgroup_pids(_cgroup(CONTROLLERS[0], self._node(node)))

    def freeze(self, node: str) -> None:
        """Stop every process of the node at once (a hung node: nothing runs, nothing dies)."""
        _write(_cgroup("freezer", self._node(node)) / "freezer.state", "FROZEN")

    def thaw(self, node: str) -> None:
        _write(_cgroup("freezer", self._node(node)) / "freezer.state", "THAWED")

    def frozen(self, node: str) -> bool:
        path = _cgroup("freezer", self._node(node)) / "freezer.state"
        return path.is_file() and path.read_text().strip() != "THAWED"

    def kill_node(self, node: str) -> list[int]:
        """Kill every process of the node, slurmd included (a node that lost power); returns the pids."""
        self.thaw(node)
        return _kill_cgroup(_cgroup("cpu", self._node(node)))

    def restart_node(self, node: str, timeout_s: float = 60.0) -> None:
        """Bring a killed node back (a rebooted node): its processes gone, a new slurmd, idle in Slurm again."""
        self.thaw(self._node(node))
        _kill_cgroup(_cgroup("cpu", node))
        _start_slurmd(self, node)
        self._write_state()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.node_states().get(node, "")
            if state == "idle":
                return
            if state.startswith(("down", "drain")):
                _slurm(self, "scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
            time.sleep(0.5)
        raise MiniClusterError(
            f"{node} did not come back idle in Slurm within {timeout_s:.0f} s: see {self.directory}/log"
        )

    def set_link(self, node: str, up: bool) -> None:
        """Take the node's link down (a pulled cable) or up again."""
        _ip("link", "set", _veth(self._node(node)), "up" if up else "down")

    def shape(self, node: str, rate: str | None) -> None:
        """Change the node's link rate while it runs (both directions)."""
        bits = parse_rate(rate)
        _shape_link(self._node(node), bits)
        nodes = tuple(replace(spec, link_bits_per_s=bits) if spec.name == node else spec for spec in self.spec.nodes)
        self.spec = MiniClusterSpec(nodes)
        self._write_state()

    def link_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes each node has sent and received over its link since the cluster came up.

        Read from the bridge's end of the node's link (``/sys/class/net/<veth>/statistics``): what the
        bridge received from the node is what the node sent, and the reverse. Loopback traffic inside a
        node is not in it: only what crossed the link.
        """
        counted = {}
        for node in self.node_names:
            statistics = Path("/sys/class/net") / _veth(node) / "statistics"
            try:
                received, sent = (int((statistics / f"{way}_bytes").read_text()) for way in ("tx", "rx"))
            except (OSError, ValueError):
                continue  # the node's link is gone (the cluster being taken down): nothing to count
            counted[node] = {"sent": sent, "received": received}
        return counted

    def set_cpus(self, node: str, cpus: float) -> None:
        """Change the node's share of a core while it runs."""
        cpus = _share(node, cpus)
        if not 0.01 <= cpus <= physical_cores():
            raise MiniClusterError(
                f"{node} with {cpus:g} cores: use a share between 0.01 and this machine's {physical_cores()} cores"
            )
        _set_quota(self._node(node), cpus)
        nodes = tuple(replace(spec, cpus=cpus) if spec.name == node else spec for spec in self.spec.nodes)
        self.spec = MiniClusterSpec(nodes)
        self._write_state()

    def set_memory(self, node: str, size: str | int | None) -> None:
        """Change the memory the node's processes may hold together (None: no limit) while it runs."""
        limit = parse_size(size)
        _set_memory(self._node(node), limit)
        nodes = tuple(replace(spec, memory_bytes=limit) if spec.name == node else spec for spec in self.spec.nodes)
        self.spec = MiniClusterSpec(nodes)
        self._write_state()

    def _node(self, node: str) -> str:
        if node not in self.node_names:
            raise MiniClusterError(f"there is no node {node!r}: this cluster has {', '.join(self.node_names)}")
        return node

    # -- ending ------------------------------------------------------------------------------------
    def down(self) -> None:
        """Take the cluster down: jobs, daemons, processes, cgroups, links, namespaces and files."""
        down()

    def __enter__(self) -> MiniCluster:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.owned:
            self.down()


def up(nodes: int = 2, **settings: Any) -> MiniCluster:
    """Build (or reuse) the miniature cluster; ``settings`` as :meth:`MiniClusterSpec.make` takes them."""
    return MiniCluster.up(MiniClusterSpec.make(nodes, **settings))


def running() -> MiniCluster:
    """The cluster ``workbench minicluster up`` made, with SLURM_CONF set for this process; one error if none."""
    return MiniCluster.running()


def status() -> MiniCluster | None:
    """The running cluster, or None."""
    return MiniCluster._read_state()


def down() -> bool:
    """Remove everything a miniature cluster made; True when there was anything to remove."""
    with _locked(create=False):
        found = (STATE_DIR / "state.json").is_file() or _leftovers()
        _remove_everything()
    if os.environ.get("SLURM_CONF") == str(STATE_DIR / "slurm.conf"):
        del os.environ["SLURM_CONF"]
    return found


@contextlib.contextmanager
def minicluster(nodes: int = 2, **settings: Any) -> Iterator[MiniCluster]:
    """``with minicluster(nodes=4) as mini: ...``: up on entry, down on exit (also after an error)."""
    cluster = up(nodes, **settings)
    try:
        yield cluster
    finally:
        if cluster.owned:
            down()


# -- can it run here ----------------------------------------------------------------------------------


def check_host_for_own_cluster() -> None:
    """``check_host``, and refuse while a cluster is up: for a program that builds its own and takes it down
    (a benchmark), which must not take down someone else's."""
    check_host()
    if status() is not None:
        raise MiniClusterError(
            "a miniature cluster is already up: this program builds its own (and takes it down); "
            "`workbench minicluster down` first, when nobody is using it"
        )


def check_host() -> None:
    """One MiniClusterError naming the first missing part and what to do; nothing when all is there."""
    if os.geteuid() != 0:
        raise MiniClusterError("the miniature cluster makes network namespaces and cgroups: run it as root")
    for tool, package in HOST_TOOLS.items():
        if shutil.which(tool) is None:
            raise MiniClusterError(f"`{tool}` is not installed: apt-get install {package}")
    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None]
    if missing:
        raise MiniClusterError(f"Slurm is not installed ({', '.join(missing)} missing): run `make slurm`")
    for controller in CONTROLLERS:
        root = CGROUP_ROOT / controller
        if not (root / "cgroup.procs").is_file():
            raise MiniClusterError(
                f"no cgroup v1 `{controller}` controller at {root}: the nodes' {CONTROLLER_USES[controller]} need it "
                "(a cgroup v2-only host is not supported yet)"
            )
    if not (CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us").is_file():
        raise MiniClusterError("the cpu cgroup has no cpu.cfs_quota_us (CFS bandwidth control): the kernel lacks it")


# -- building ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(create: bool = True) -> Iterator[None]:
    """One up or down at a time on this machine (two `up` at once would make two half-clusters).

    The lock is on the state folder's parent (/run), so no lock file is left behind.
    """
    parent = STATE_DIR.parent
    if not parent.is_dir():
        if not create:
            yield
            return
        parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def _build(spec: MiniClusterSpec) -> MiniCluster:
    directory = STATE_DIR
    shutil.rmtree(directory, ignore_errors=True)
    for sub in ("munge", "state", "spool", "log", "run"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    subnet = _free_subnet()
    hosts = list(ipaddress.ip_network(subnet).hosts())
    cluster = MiniCluster(
        spec=spec,
        directory=directory,
        subnet=subnet,
        bridge_ip=str(hosts[0]),
        node_ips={node.name: str(hosts[10 + index]) for index, node in enumerate(spec.nodes)},
        cpusets=_cpusets(spec),
    )
    build_idle_sleep(directory)
    try:
        _make_network(cluster)
        for node in spec.nodes:
            _make_cgroups(node, cluster.cpusets[node.name])
        _start_slurm(cluster)
    except BaseException:
        _remove_everything()
        raise
    return cluster


def build_idle_sleep(directory: Path, *, preempting: bool = False) -> Path | None:
    """Compile ``IDLE_SLEEP_SOURCE`` into ``directory``; None (ranks spin) without a C compiler.

    ``preempting``: the plain sleep instead (its wake-ups preempt; ``idle-sleep-preempting.so``), for
    ``benchmarks/idle_wait.py`` to measure what sleeping as SCHED_BATCH spares.
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    suffix = "-preempting" if preempting else ""
    source = directory / f"idle-sleep{suffix}.c"
    library = directory / IDLE_SLEEP_LIBRARY.replace(".so", f"{suffix}.so")
    source.write_text(IDLE_SLEEP_SOURCE)
    result = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", *(["-DWORKBENCH_SLEEP_PREEMPTS"] if preempting else []), "-o",
         str(library), str(source), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )  # fmt: skip
    return library if result.returncode == 0 and library.is_file() else None


def _free_subnet() -> str:
    used = []
    for interface in psutil.net_if_addrs().values():
        for address in interface:
            if address.family == socket.AF_INET:
                used.append(ipaddress.ip_address(address.address))
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=False).stdout.split()
    networks = [ipaddress.ip_network(word, strict=False) for word in routes if re.fullmatch(r"[\d.]+/\d+", word)]
    for candidate in SUBNETS:
        network = ipaddress.ip_network(candidate)
        if not any(ip in network for ip in used) and not any(network.overlaps(other) for other in networks):
            return candidate
    raise MiniClusterError(f"every candidate subnet ({', '.join(SUBNETS)}) is in use on this machine")


def _cpusets(spec: MiniClusterSpec) -> dict[str, str]:
    """Cores per node: nodes dealt round-robin over the cores, so node k and node k+cores share one.

    Why pinned: an unpinned node's quota is spent on whichever core is free, and the scheduler
    moving it between cores (and waking idle vCPUs) makes the same step take different times.
    """
    cores = sorted(os.sched_getaffinity(0))
    result = {}
    position = 0  # the next core to deal: a node of 2 cores takes two, so the next node starts after them
    for node in spec.nodes:
        chosen = [cores[(position + offset) % len(cores)] for offset in range(node.slurm_cpus)]
        position += node.slurm_cpus
        result[node.name] = ",".join(str(core) for core in sorted(set(chosen)))
    return result


def _veth(node: str) -> str:
    return f"wbmc-{node}"[:15]


def _netns(node: str) -> str:
    return f"{NETNS_PREFIX}{node}"


def _ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise MiniClusterError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")


def _tc(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = ["tc", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        hint = " (this kernel lacks the tbf qdisc: the links cannot be shaped; use link=None)" if "tbf" in args else ""
        raise MiniClusterError(f"`{' '.join(command)}` failed: {result.stderr.strip()}{hint}")
    return result


def _make_network(cluster: MiniCluster) -> None:
    prefix = ipaddress.ip_network(cluster.subnet).prefixlen
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{cluster.bridge_ip}/{prefix}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    for node in cluster.spec.nodes:
        netns, veth = _netns(node.name), _veth(node.name)
        _ip("netns", "add", netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", veth, "master", BRIDGE)
        _ip("link", "set", veth, "up")
        _ip("link", "set", "lo", "up", netns=netns)
        _ip("addr", "add", f"{cluster.node_ips[node.name]}/{prefix}", "dev", "eth0", netns=netns)
        _ip("link", "set", "eth0", "up", netns=netns)
        _ip("route", "add", "default", "via", cluster.bridge_ip, netns=netns)
        _shape_link(node.name, node.link_bits_per_s)


def _shape_link(node: str, bits_per_s: int | None) -> None:
    """A token bucket on both ends of the node's link: out of the node (its eth0) and into it (the bridge side).

    The bucket holds 64 KiB or 2 ms at the rate, whichever is more (a GSO burst of one TCP
    send fits), and queues up to 20 ms of traffic before dropping.
    """
    for device, netns in (("eth0", _netns(node)), (_veth(node), None)):
        if bits_per_s is None:
            _tc("qdisc", "del", "dev", device, "root", netns=netns, check=False)
            continue
        burst = max(64 * 1024, int(bits_per_s / 8 * 0.002))
        _tc(
            "qdisc", "replace", "dev", device, "root", "tbf",
            "rate", f"{bits_per_s}bit", "burst", str(burst), "latency", "20ms", netns=netns,
        )  # fmt: skip


def _cgroup(controller: str, node: str | None = None) -> Path:
    path = CGROUP_ROOT / controller / CGROUP_NAME
    return path / node if node else path


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as error:
        raise MiniClusterError(f"cannot write {value!r} to {path}: {error.strerror}") from None


def _make_cgroups(node: NodeSpec, cpuset: str) -> None:
    for controller in CONTROLLERS:
        _cgroup(controller, node.name).mkdir(parents=True, exist_ok=True)
    parent = _cgroup("cpuset")
    # cpuset children start empty: the parent must hold the cores and memory nodes first
    for name in ("cpuset.cpus", "cpuset.mems"):
        _write(parent / name, (CGROUP_ROOT / "cpuset" / name).read_text().strip())
    _write(_cgroup("cpuset", node.name) / "cpuset.cpus", cpuset)
    _write(_cgroup("cpuset", node.name) / "cpuset.mems", (parent / "cpuset.mems").read_text().strip())
    _set_quota(node.name, node.cpus)
    _set_memory(node.name, node.memory_bytes)


def _set_memory(node: str, size: int | None) -> None:
    """What the node's processes may hold together; past it the kernel kills one of them (as on a real node)."""
    _write(_cgroup("memory", node) / "memory.limit_in_bytes", str(size) if size else "-1")


def cfs_bandwidth(cpus: float) -> tuple[int, int]:
    """(period, quota) in µs giving ``cpus`` of a core: CPU_PERIOD_US, longer where the quota would be under 1 ms.

    Why: the kernel refuses quotas below 1 ms, so at a 5 ms period any share under 0.2 would
    silently become 0.2 (0.1 of a core: 10 ms periods with 1 ms each).
    """
    period = max(CPU_PERIOD_US, math.ceil(QUOTA_MIN_US / cpus))
    return period, max(QUOTA_MIN_US, round(cpus * period))


def _set_quota(node: str, cpus: float) -> None:
    """The node's share: a CFS quota caps it, and a heavy weight lets it take that share first.

    A quota is only a ceiling: an unrelated busy process on the same core would take the node's
    time. The weight (``cpu.shares``, ``NODE_SHARES`` against 1024 for everything else) gives the
    node's runnable threads the core before the rest of the machine, up to its quota.
    """
    path = _cgroup("cpu", node)
    period, quota = cfs_bandwidth(cpus)
    _write(path / "cpu.cfs_period_us", str(period))
    _write(path / "cpu.cfs_quota_us", str(quota))
    _write(path / "cpu.shares", str(NODE_SHARES))


def _into_cgroups(node: str) -> None:
    """preexec_fn: the child joins the node's cgroups before it runs anything."""
    pid = str(os.getpid())
    for controller in CONTROLLERS:
        with open(_cgroup(controller, node) / "cgroup.procs", "w") as handle:
            handle.write(pid)


def _slurm_conf(cluster: MiniCluster, ports: tuple[int, int]) -> str:
    directory = cluster.directory
    memory_mb = int(psutil.virtual_memory().total / 2**20 * 0.9 / max(1, len(cluster.spec.nodes)))
    lines = [
        f"# written by workbench.minicluster: {len(cluster.spec.nodes)} nodes, everything under {directory}",
        "ClusterName=workbench-mini",
        f"SlurmctldHost={socket.gethostname()}({cluster.bridge_ip})",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={directory}/munge/munge.socket",
        f"StateSaveLocation={directory}/state",
        f"SlurmdSpoolDir={directory}/spool/%n",
        f"SlurmctldPidFile={directory}/run/slurmctld.pid",
        f"SlurmdPidFile={directory}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={directory}/log/slurmctld.log",
        f"SlurmdLogFile={directory}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerParameters=sched_interval=1",
        # a node whose slurmd stops answering is marked down within seconds, as a lost node should be
        "SlurmdTimeout=10",
        "MinJobAge=300",
        "KillWait=5",
        "InactiveLimit=0",
    ]
    for node in cluster.spec.nodes:
        lines.append(
            f"NodeName={node.name} NodeAddr={cluster.node_ips[node.name]} CPUs={node.slurm_cpus} "
            f"RealMemory={memory_mb} State=UNKNOWN"
        )
    lines.append(f"PartitionName=mini Nodes={','.join(cluster.node_names)} Default=YES MaxTime=UNLIMITED State=UP")
    return "\n".join(lines) + "\n"


def _free_port(ip: str) -> int:
    with socket.socket() as probe:
        probe.bind((ip, 0))
        return int(probe.getsockname()[1])


def _start_slurm(cluster: MiniCluster) -> None:
    directory = cluster.directory
    key = directory / "munge" / "munge.key"
    os.chmod(directory / "munge", 0o711)
    _checked(["mungekey", "--create", f"--keyfile={key}", "--force"])
    os.chmod(key, 0o400)
    munged = [
        "munged", f"--key-file={key}", f"--socket={directory}/munge/munge.socket",
        f"--pid-file={directory}/run/munged.pid", f"--log-file={directory}/log/munged.log",
        f"--seed-file={directory}/munge/munge.seed", "--force",
    ]  # fmt: skip
    _checked(munged)
    cluster.pids["munged"] = int((directory / "run" / "munged.pid").read_text())
    cluster.slurm_conf.write_text(_slurm_conf(cluster, (_free_port(cluster.bridge_ip), _free_port(cluster.bridge_ip))))
    environment = {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}
    cluster.pids["slurmctld"] = _daemon(
        ["slurmctld", "-D", "-f", str(cluster.slurm_conf)], directory / "log" / "slurmctld.out", environment
    ).pid
    for node in cluster.spec.nodes:
        _start_slurmd(cluster, node.name)
    cluster._write_state()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = cluster.node_states()
        if states and set(states) == set(cluster.node_names) and all(s == "idle" for s in states.values()):
            return
        dead = [name for name, alive in cluster.daemons_alive().items() if not alive]
        if dead:
            break
        time.sleep(0.2)
    logs = "; ".join(
        f"{path.name}: {path.read_text(errors='replace').strip().splitlines()[-1]}"
        for path in sorted((directory / "log").glob("*"))
        if path.is_file() and path.read_text(errors="replace").strip()
    )
    raise MiniClusterError(f"the nodes did not become idle in Slurm within 60 s ({cluster.node_states()}); {logs}")


def _start_slurmd(cluster: MiniCluster, node: str) -> None:
    """The node's slurmd, in its network namespace, cgroups and a UTS namespace named after it."""
    environment = {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}
    # nsenter, not `ip netns exec`: that remounts /sys, and slurmd then finds no cgroup file system
    inner = f"hostname {node} && exec slurmd -D -N {node} -f {cluster.slurm_conf}"
    command = ["nsenter", f"--net=/run/netns/{_netns(node)}", "unshare", "--uts", "sh", "-c", inner]
    process = _daemon(command, cluster.directory / "log" / f"slurmd-{node}.out", environment, node=node)
    cluster.pids[f"slurmd-{node}"] = process.pid


def _checked(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise MiniClusterError(f"`{command[0]}` failed: {(result.stderr or result.stdout).strip()}")


def _daemon(command: list[str], log: Path, environment: dict[str, str], node: str | None = None) -> subprocess.Popen:
    with open(log, "ab") as output:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,  # the kernel's Ctrl-C and its exit leave the daemons alone
            preexec_fn=(lambda: _into_cgroups(node)) if node else None,
        )


def _slurm(cluster: MiniCluster, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment, timeout=30)
    if check and result.returncode != 0:
        raise MiniClusterError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# -- removing ----------------------------------------------------------------------------------------


def _leftovers() -> bool:
    """Anything a miniature cluster makes, also from one whose state file is gone."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    return (
        any(_cgroup(controller).exists() for controller in CONTROLLERS)
        or bool(_our_netns())
        or f" {BRIDGE}:" in links
        or " wbmc-" in links
        or STATE_DIR.exists()
    )


def _our_netns() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(NETNS_PREFIX)]


def _cgroup_pids(path: Path) -> list[int]:
    procs = path / "cgroup.procs"
    if not procs.is_file():
        return []
    return [int(line) for line in procs.read_text().split()]


def _kill_cgroup(path: Path, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process in the cgroup until it is empty (new children are caught by the next pass)."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = _cgroup_pids(path)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)
    return killed


def _stop_pid(pid: int, grace_s: float = 10.0) -> None:
    try:
        process = psutil.Process(pid)
        process.terminate()
        process.wait(grace_s)
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.Error):
            process.kill()
    except psutil.Error:
        pass


def _remove_everything() -> None:
    """Down, in the order that leaves nothing behind, tolerant of a half-made or half-removed cluster."""
    cluster = None
    with contextlib.suppress(MiniClusterError, KeyError, TypeError):  # a damaged state file: remove by name
        cluster = MiniCluster._read_state()
    if cluster is not None and cluster.pids.get("slurmctld") and _alive(cluster.pids["slurmctld"]):
        jobs = _slurm(cluster, "squeue", "-h", "-o", "%i", check=False).stdout.split()
        if jobs:
            _slurm(cluster, "scancel", *jobs, check=False)
    nodes = [path.name for path in _cgroup("freezer").glob("*") if path.is_dir()] if _cgroup("freezer").exists() else []
    for node in nodes:  # a frozen node's processes cannot die until thawed
        with contextlib.suppress(OSError):
            (_cgroup("freezer", node) / "freezer.state").write_text("THAWED")
    # the nodes first (slurmd, step daemons, tasks: all in the node's cgroup), then the login node's daemons
    for node in nodes:
        for pid in _cgroup_pids(_cgroup("cpu", node)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_cgroup_pids(_cgroup("cpu", node)) for node in nodes):
        time.sleep(0.1)
    for node in nodes:
        _kill_cgroup(_cgroup("cpu", node))
    if cluster is not None:
        for name in ("slurmctld", "munged"):
            if name in cluster.pids and _alive(cluster.pids[name]):
                _stop_pid(cluster.pids[name])
    for controller in CONTROLLERS:
        root = _cgroup(controller)
        if root.exists():
            for child in root.glob("*"):
                if child.is_dir():
                    _rmdir_cgroup(child)
            _rmdir_cgroup(root)
    for netns in _our_netns():
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    for name in re.findall(r"^\d+: (wbmc[^:@]*)", links, flags=re.MULTILINE):
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
    shutil.rmtree(STATE_DIR, ignore_errors=True)


def _rmdir_cgroup(path: Path) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                stuck = _cgroup_pids(path)
                raise MiniClusterError(f"cannot remove {path}: processes {stuck} are still in it") from None
            _kill_cgroup(path, timeout_s=1.0)
            time.sleep(0.1)
