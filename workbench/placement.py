"""Where ``workbench profile`` puts its ranks: this machine, a hostfile, the Slurm allocation it runs in,
or the miniature cluster; and which GPU each rank sees.

Why one module: the launcher's flags follow from where the ranks run, and the wrong guess stops a job
before its script runs. Inside ``salloc``/``sbatch`` the nodes confine the job to the cores the
allocation holds (Slurm's cgroup cpusets), so ``--bind-to core`` chosen for this machine made Open MPI
bind rank 1 to a core its node withholds (``hwloc_set_cpubind returned "Error"``). So: inside an
allocation the allocation's tasks are the ranks and nothing is bound; from a hostfile the file's slots
are; on this machine alone, as before.

Pure where it can be: the Slurm variables, node lists and hostfiles are parsed from text
(``allocation_from_environment``, ``expand_nodelist``, ``read_hostfile``), testable without Slurm.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.config import ClusterConfig, ConfigError

#: The variables an MPI launcher or Slurm sets for a rank's index on its node (Open MPI, MPICH's Hydra, srun).
LOCAL_RANK_VARIABLES: tuple[str, ...] = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
#: How the minicluster's own allocation is asked for: minutes, as sbatch's --time.
MINICLUSTER_TIME_LIMIT = "60"


class PlacementError(ConfigError):
    """Ranks that cannot be placed as asked; the message names what and what to change."""


# -- Slurm ---------------------------------------------------------------------------------------------


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list as names: ``gpu[01-03,7],login`` -> gpu01 gpu02 gpu03 gpu7 login.

    Several bracket groups in one name multiply (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2); a range keeps
    its zero padding. What ``scontrol show hostnames`` prints, without needing scontrol.
    """
    names: list[str] = []
    for item in _split_outside_brackets(text.strip()):
        if item:
            names.extend(_expand_one(item))
    return names


def _split_outside_brackets(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for character in text:
        if character == "[":
            depth += 1
        elif character == "]":
            depth -= 1
        if character == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(character)
    parts.append("".join(current))
    if depth != 0:
        raise PlacementError(f"Slurm node list {text!r} has an unclosed '[': check SLURM_JOB_NODELIST")
    return parts


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    names = []
    for span in match.group(1).split(","):
        first, _, last = span.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise PlacementError(f"Slurm node list item {item!r} has a range {span!r} that is not numbers")
        width = len(first)
        for number in range(int(first), int(last or first) + 1):
            names.extend(_expand_one(f"{head}{number:0{width}d}{tail}"))
    return names


def expand_counts(text: str) -> list[int]:
    """Slurm's per-node counts: ``2(x3),1`` -> [2, 2, 2, 1] (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE)."""
    counts: list[int] = []
    for item in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if match is None:
            raise PlacementError(f"Slurm count list {text!r} is not of the form 2(x3),1")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


@dataclass(frozen=True)
class SlurmAllocation:
    """The Slurm allocation this process runs in (``salloc``, an ``sbatch`` script), from its variables."""

    job_id: str
    nodes: tuple[str, ...]
    #: tasks Slurm gives each node (``-n``, ``--ntasks-per-node``): Open MPI's slots there
    tasks_per_node: tuple[int, ...]
    #: ``--cpus-per-task`` when asked
    cpus_per_task: int | None = None
    #: GPUs on each node as the allocation grants them (``--gpus-per-node``), when Slurm says
    gpus_per_node: int | None = None

    @property
    def tasks(self) -> int:
        return sum(self.tasks_per_node)

    def describe(self) -> str:
        shape = ", ".join(f"{node} x{tasks}" for node, tasks in zip(self.nodes, self.tasks_per_node))
        return f"Slurm job {self.job_id}: {len(self.nodes)} node{'s' * (len(self.nodes) != 1)} ({shape})"


def allocation_from_environment(environment: Mapping[str, str] | None = None) -> SlurmAllocation | None:
    """The allocation named by Slurm's variables, or None outside one.

    Refuses (one line) to run as one task of a multi-task ``srun`` step: every task would start its own
    job of N ranks.
    """
    environment = os.environ if environment is None else environment
    job_id = environment.get("SLURM_JOB_ID") or environment.get("SLURM_JOBID")
    nodelist = environment.get("SLURM_JOB_NODELIST") or environment.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        return None
    step_tasks = environment.get("SLURM_STEP_NUM_TASKS")
    if step_tasks and step_tasks.isdigit() and int(step_tasks) > 1 and "SLURM_PROCID" in environment:
        raise PlacementError(
            f"workbench profile runs as one of {step_tasks} tasks of an srun step: run it once in the allocation "
            "(salloc ... workbench profile, or in the sbatch script without srun); it starts the ranks itself"
        )
    nodes = tuple(expand_nodelist(nodelist))
    tasks_text = environment.get("SLURM_TASKS_PER_NODE") or environment.get("SLURM_STEP_TASKS_PER_NODE")
    tasks = expand_counts(tasks_text) if tasks_text else [1] * len(nodes)
    if len(tasks) != len(nodes):
        tasks = (tasks + [tasks[-1]] * len(nodes))[: len(nodes)]
    cpus = environment.get("SLURM_CPUS_PER_TASK", "")
    gpus = environment.get("SLURM_GPUS_ON_NODE") or environment.get("SLURM_GPUS_PER_NODE", "")
    gpus = gpus.rsplit(":", 1)[-1]  # --gpus-per-node=a100:4
    return SlurmAllocation(
        job_id=job_id,
        nodes=nodes,
        tasks_per_node=tuple(tasks),
        cpus_per_task=int(cpus) if cpus.isdigit() else None,
        gpus_per_node=int(gpus) if gpus.isdigit() else None,
    )


# -- hostfiles -----------------------------------------------------------------------------------------


def read_hostfile(path: str | Path) -> list[tuple[str, int | None]]:
    """An MPI hostfile's hosts and slots: Open MPI's ``node1 slots=2``, MPICH's ``node1:2`` or a bare name.

    Comments and blank lines are skipped; a host named twice adds its slots. One line names what is wrong.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise PlacementError(
            f"hostfile {str(path)!r} cannot be read ({error.strerror}): pass an MPI hostfile"
        ) from None
    hosts: dict[str, int | None] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        name, _, colon_slots = words[0].partition(":")
        slots: int | None = int(colon_slots) if colon_slots.isdigit() else None
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key in ("slots", "max_slots", "max-slots") and value.isdigit():
                slots = int(value) if key == "slots" or slots is None else slots
        if not name or (colon_slots and slots is None):
            raise PlacementError(f"{path}:{number}: {line!r} is not a hostfile line: use 'node1 slots=2' or 'node1:2'")
        if name in hosts:
            hosts[name] = None if hosts[name] is None or slots is None else hosts[name] + slots
        else:
            hosts[name] = slots
    if not hosts:
        raise PlacementError(f"hostfile {str(path)!r} names no host: one line per machine, e.g. 'node1 slots=2'")
    return list(hosts.items())


# -- GPUs ------------------------------------------------------------------------------------------------


def local_rank(environment: Mapping[str, str] | None = None) -> int | None:
    """This rank's index on its node as its launcher set it; None when not launched by one."""
    environment = os.environ if environment is None else environment
    for name in LOCAL_RANK_VARIABLES:
        value = environment.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def node_gpus(environment: Mapping[str, str] | None = None, device_dir: str | Path = "/dev") -> list[str]:
    """The GPUs this rank's node lets it see, as CUDA_VISIBLE_DEVICES entries.

    ``CUDA_VISIBLE_DEVICES`` when set (Slurm's ``--gpus`` sets it to the allocation's GPUs), else the
    NVIDIA device files (``/dev/nvidia0`` ...): no CUDA library is loaded to find them.
    """
    environment = os.environ if environment is None else environment
    visible = environment.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [entry.strip() for entry in visible.split(",") if entry.strip() and entry.strip() != "-1"]
    try:
        names = os.listdir(device_dir)
    except OSError:
        return []
    return sorted((name[len("nvidia") :] for name in names if re.fullmatch(r"nvidia\d+", name)), key=int)


#: A script that chooses its GPU itself by its local rank, as Horovod's examples do
#: (``gpus[hvd.local_rank()]``, ``visible_device_list = str(hvd.local_rank())``): narrowing what it sees
#: to one GPU first would make its ``gpus[1]`` an IndexError.
_SCRIPT_PINS = re.compile(r"visible_device|set_visible_devices|CUDA_VISIBLE_DEVICES|torch\.cuda\.set_device")


#: ``--pin-gpus``: ``auto`` narrows each rank to its local rank's GPU unless the script chooses its GPU itself.
PIN_GPUS: tuple[str, ...] = ("auto", "yes", "no")


def script_pins_gpus(script: str | Path | None) -> bool:
    """Whether the script's own text chooses its GPU (``_SCRIPT_PINS``); False where it cannot be read."""
    if script is None:
        return False
    try:
        return bool(_SCRIPT_PINS.search(Path(script).read_text(errors="replace")))
    except OSError:
        return False


def gpu_for_rank(environment: Mapping[str, str], pin: str, device_dir: str | Path = "/dev") -> dict[str, Any]:
    """Which GPU this rank gets: ``{local_rank, gpus_on_node, cuda_visible_devices, pinned_by}``.

    ``pin``: ``workbench`` narrows CUDA_VISIBLE_DEVICES to the local rank's GPU (one rank per GPU, as
    Horovod asks); ``script`` leaves them (the script chooses, by its local rank); ``off`` leaves them too.
    The caller sets ``cuda_visible_devices`` in the rank's environment before CUDA starts.
    """
    rank_on_node = local_rank(environment)
    gpus = node_gpus(environment, device_dir)
    facts: dict[str, Any] = {"local_rank": rank_on_node, "gpus_on_node": len(gpus), "pinned_by": None}
    if not gpus:
        return {**facts, "cuda_visible_devices": None}
    if pin == "workbench":
        chosen = gpus[(rank_on_node or 0) % len(gpus)]
        shared = (rank_on_node or 0) >= len(gpus)
        return {**facts, "cuda_visible_devices": chosen, "pinned_by": "workbench", "gpu_shared": shared}
    return {**facts, "cuda_visible_devices": ",".join(gpus), "pinned_by": pin if pin == "script" else None}


# -- the placement ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where a profiled job's ranks run and how they are launched (``config.launch_command`` after ``prefix``)."""

    #: ``local`` (this machine), ``hostfile``, ``allocation`` (the Slurm job this runs in), ``minicluster``
    kind: str
    config: ClusterConfig
    #: the hosts the ranks may run on, as the launcher knows them (empty: this machine)
    hosts: tuple[str, ...] = ()
    #: what runs the launcher: ``salloc ...`` on the miniature cluster
    prefix: tuple[str, ...] = ()
    #: what the ranks' environment needs beyond the config's (the miniature cluster's SLURM_CONF)
    environment: dict[str, str] = field(default_factory=dict)
    allocation: SlurmAllocation | None = None

    @property
    def ranks(self) -> int:
        return self.config.ranks

    def describe(self) -> str:
        """One line: ranks, launcher and hosts."""
        launcher = f"{Path(self.config.mpiexec_command()[0]).name} ({self.config.mpi})"
        where = {
            "local": "this machine",
            "hostfile": f"the hostfile's {len(self.hosts)} hosts ({', '.join(self.hosts)})",
            "allocation": self.allocation.describe() if self.allocation else "the Slurm allocation",
            "minicluster": f"the miniature cluster's nodes ({', '.join(self.hosts)}) through salloc",
        }[self.kind]
        return f"{self.ranks} ranks by {launcher} on {where}"

    def command(self, program: list[str], environment: dict[str, str]) -> list[str]:
        """The whole command line: the prefix, mpiexec and its flags, the program."""
        return [*self.prefix, *self.config.launch_command(program, environment)]

    def as_dict(self) -> dict[str, Any]:
        """For the run's metadata."""
        return {
            "kind": self.kind,
            "hosts": list(self.hosts),
            "prefix": list(self.prefix),
            "slurm_job": self.allocation.job_id if self.allocation else None,
        }


def place(
    *,
    ranks: int | None = None,
    hostfile: str | None = None,
    ranks_per_node: int | None = None,
    minicluster: Any = None,
    mpi: str = "openmpi",
    bind_to: str | None = None,
    launch_agent: str | None = None,
    mpi_args: tuple[str, ...] = (),
    environment: Mapping[str, str] | None = None,
) -> Placement:
    """Decide where ``workbench profile``'s ranks run; one line (``PlacementError``) for what cannot work.

    ``minicluster``: the running miniature cluster (``MiniCluster.running()``) to run on, given by the
    caller so that this module stays below the cluster modules (no import circle through them).
    """
    environment = os.environ if environment is None else environment
    if ranks is not None and ranks < 1:
        raise PlacementError(f"--ranks {ranks}: profile on at least 1 rank")
    if ranks_per_node is not None and ranks_per_node < 1:
        raise PlacementError(f"--ranks-per-node {ranks_per_node}: use at least 1")
    if minicluster is not None and hostfile:
        raise PlacementError("--minicluster and --hostfile both name the hosts: pass one")
    allocation = None if minicluster is not None else allocation_from_environment(environment)
    args = list(mpi_args)
    if launch_agent:
        args += _launch_agent_args(mpi, launch_agent)
    common: dict[str, Any] = {"mpi": mpi, "bind_to": bind_to, "mpi_args": tuple(args), "ranks_per_node": ranks_per_node}
    if minicluster is not None:
        return _minicluster_placement(minicluster, ranks, common)
    if hostfile:
        hosts = read_hostfile(hostfile)
        slots = [count for _, count in hosts]
        if ranks is None:
            if ranks_per_node is not None:
                ranks = ranks_per_node * len(hosts)
            elif all(count is not None for count in slots):
                ranks = sum(count or 0 for count in slots)
            else:
                ranks = len(hosts)
        config = ClusterConfig(n=ranks, hostfile=hostfile, threads_per_rank=1, **common)
        return Placement("hostfile", config, hosts=tuple(name for name, _ in hosts), allocation=allocation)
    if allocation is not None:
        if ranks is None:
            ranks = allocation.tasks if ranks_per_node is None else ranks_per_node * len(allocation.nodes)
        if ranks > allocation.tasks and not any("oversubscribe" in arg for arg in args):
            raise PlacementError(
                f"--ranks {ranks} is more than the {allocation.tasks} tasks of {allocation.describe()}: ask the "
                f"allocation for {ranks} tasks (salloc -n {ranks}), or profile on at most {allocation.tasks} ranks"
            )
        config = ClusterConfig(
            n=ranks, allocation_nodes=len(allocation.nodes), threads_per_rank=allocation.cpus_per_task or 1, **common
        )
        return Placement("allocation", config, hosts=allocation.nodes, allocation=allocation)
    config = ClusterConfig(n=ranks if ranks is not None else 2, **common)
    return Placement("local", config)


def _launch_agent_args(mpi: str, agent: str) -> list[str]:
    """What replaces ssh for starting the launcher's daemons on other hosts (a site's ``rsh`` wrapper, ...)."""
    if mpi == "openmpi":
        return ["--prtemca", "plm_ssh_agent", agent]
    # Hydra runs the agent as `agent [ssh's flags] host command`: one executable, no arguments of its own
    if len(shlex.split(agent)) != 1:
        raise PlacementError(
            f"--launch-agent {agent!r}: MPICH takes one executable as its launcher (no arguments); wrap it in a script"
        )
    return ["-launcher", "ssh", "-launcher-exec", agent]


def _minicluster_placement(mini: Any, ranks: int | None, common: dict[str, Any]) -> Placement:
    """The miniature cluster that ``workbench minicluster up`` made: its own allocation through ``salloc``."""
    ranks = ranks if ranks is not None else len(mini.node_names)
    if ranks > mini.spec.max_ranks(1):
        raise PlacementError(mini.too_many_ranks(ranks))
    settings = mini.cluster_config(ranks)  # the nodes' own needs: yields in MPI that sleep, the node count
    nodes = settings.nodes or 1
    if common["mpi"] == "mpich":
        # Hydra's proxies call back to this host by its name, which resolves to a loopback address inside the
        # nodes' namespaces: the bridge's address is the one they reach
        common = {**common, "mpi_args": ("-iface", mini.bridge, *common["mpi_args"])}
    config = ClusterConfig(n=ranks, allocation_nodes=nodes, threads_per_rank=1, env=dict(settings.env), **common)
    prefix = ("salloc", f"--nodes={nodes}", f"--ntasks={ranks}", f"--time={MINICLUSTER_TIME_LIMIT}", "--quiet")
    return Placement(
        "minicluster",
        config,
        hosts=tuple(mini.node_names[:nodes]),
        prefix=prefix,
        environment={"SLURM_CONF": str(mini.slurm_conf)},
    )
