"""Which rank failed first, and how: pure diagnosis from what the launcher, the engines and the store say.

Why pure functions: a rank death reaches the kernel as ipyparallel's ``CompositeError`` listing
*every* engine ("Engine 0 died … Engine 1 died"), because MPI aborts the whole job when one rank
dies. The rank that died first, and the signal or exit code, are only in the launcher's output
(Open MPI's ``prterun noticed that process rank 1 … exited on signal 9``, MPICH's ``BAD
TERMINATION``), in the engines' nanny log lines (each engine's nanny notes when its engine's
process ended, with a timestamp) and in the processes' states. These functions turn that text and
those states into one ``Failure`` (``{rank, cause, detected_after_s, last_event_ns}``), testable
without a cluster; ``workbench.cluster.Cluster`` gathers the inputs, the runner records the result.

Stalls work the same way: a rank whose process is stopped, or that records nothing and uses no
CPU while another rank spins in an MPI wait, is the stuck one (``find_stalls``); Horovod's own
stall warnings in the engines' output name ranks too (``horovod_stall_warnings``).
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

#: A rank busy-waiting in an MPI collective uses a core; a stuck rank (sleeping, blocked on I/O) does not.
BUSY_CPU_PERCENT = 20.0
IDLE_CPU_PERCENT = 5.0

_OMPI_SIGNAL = re.compile(
    r"process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?", re.IGNORECASE
)
_OMPI_EXIT = re.compile(r"Process name:\s*\[[^\]]*?,(\d+)\]\s*Exit code:\s*(-?\d+)", re.IGNORECASE)
_OMPI_EXIT_OLD = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited with status (-?\d+)", re.I)
_MPICH_BAD = re.compile(r"PID (\d+) RUNNING AT (\S+)\s*=*\s*EXIT CODE:\s*(-?\d+)", re.IGNORECASE)
_NANNY = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \[KernelNanny\.(\d+)\] (?:Pipe closed, parent|Parent) (\d+)",
    re.MULTILINE,
)
_ENGINE_DIED = re.compile(r"Engine (\d+) died")
#: Open MPI's launcher (PRRTE in 5.x, ORTE in 4.x) losing its daemon on another node: the node died or its network did
_LOST_DAEMON = re.compile(r"has lost communication with a remote daemon.*?Remote daemon:\s*\S+\s+on node\s+(\S+)", re.S)
#: an MPI rank whose TCP peer vanished without MPI_Finalize (Open MPI's TCP transport names the peer's host)
_PEER_GONE = re.compile(r"peer process has unexpectedly disconnected.*?Peer host:\s*(\S+)", re.S)
_HOROVOD_STALL = re.compile(r"(One or more tensors were submitted.*?)(?:\n\n|\Z)", re.DOTALL)
_HOROVOD_MISSING = re.compile(r"\[(?:missing ranks|ready ranks): ([\d, ]+)\]", re.IGNORECASE)


def signal_name(number: int) -> str:
    """``9`` -> ``SIGKILL``; an unknown number stays a number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class Failure:
    """Why a run failed: the first rank that failed, how, when it was seen, its last recorded event."""

    rank: int | None
    cause: str
    detected_after_s: float | None = None
    last_event_ns: int | None = None
    #: where the diagnosis comes from: "launcher", "nanny", "process", "exception", "timeout", "stall"
    source: str = ""
    #: what else was seen: the other ranks' fate, the launcher's line
    details: tuple[str, ...] = field(default_factory=tuple)
    #: the node that was lost (``source="node"``) and every rank that ran on it
    host: str = ""
    host_ranks: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """What goes into ``run.json`` as ``failure``."""
        return {**asdict(self), "details": list(self.details)}

    def message(self) -> str:
        """One line for the kernel and the dashboard: the rank first, then how."""
        if self.host:
            ranks = ", ".join(str(rank) for rank in self.host_ranks)
            who = f"node {self.host} ({'rank' if len(self.host_ranks) == 1 else 'ranks'} {ranks}) "
            seen = self.detected_after_s
            after = f" (seen {seen:.1f} s after it happened)" if seen is not None else ""
            return f"{who}{self.cause}{after}"
        who = f"rank {self.rank} " if self.rank is not None else ""
        after = f" (seen {self.detected_after_s:.1f} s after it happened)" if self.detected_after_s is not None else ""
        return f"{who}{self.cause}{after}"


class RankFailedError(RuntimeError):
    """A run failed because of one rank: the message names it; ``failure`` holds the diagnosis."""

    def __init__(self, failure: Failure, run_path: str | Path | None = None) -> None:
        self.failure = failure
        self.run_path = str(run_path) if run_path is not None else None
        where = f"; what was recorded is kept in {run_path} (status: failed)" if run_path is not None else ""
        super().__init__(f"{failure.message()}{where}")


# -- reading the launcher's and the engines' output --------------------------------------------------------
def launcher_deaths(output: str, rank_pids: Mapping[int, int] | None = None) -> list[tuple[int, str]]:
    """Ranks the MPI launcher says ended abnormally, in the order it says so: ``[(rank, cause)]``.

    Open MPI names the first rank that died (by signal or non-zero exit); MPICH's Hydra names a
    PID, mapped to a rank through ``rank_pids``.
    """
    text = re.sub(r"\s*\n\s*", " ", output or "")
    found: list[tuple[int, int, str]] = []
    for match in _OMPI_SIGNAL.finditer(text):
        number = int(match.group(4))
        found.append((match.start(), int(match.group(1)), f"was killed by signal {number} ({signal_name(number)})"))
    for match in _OMPI_EXIT.finditer(text):
        found.append((match.start(), int(match.group(1)), f"exited with code {int(match.group(2))}"))
    for match in _OMPI_EXIT_OLD.finditer(text):
        found.append((match.start(), int(match.group(1)), f"exited with code {int(match.group(4))}"))
    by_pid = {pid: rank for rank, pid in (rank_pids or {}).items()}
    for match in _MPICH_BAD.finditer(text):
        rank = by_pid.get(int(match.group(1)))
        if rank is not None:
            code = int(match.group(3))
            how = f"was killed by signal {code} ({signal_name(code)})" if 0 < code < 64 else f"exited with code {code}"
            found.append((match.start(), rank, how))
    seen: set[int] = set()
    ordered = []
    for _position, rank, cause in sorted(found):
        if rank not in seen:
            seen.add(rank)
            ordered.append((rank, cause))
    return ordered


def lost_nodes(output: str) -> list[str]:
    """Nodes the launcher lost its daemon on (first the launcher's own word, then the ranks' TCP peers), in order."""
    found = [match.group(1) for match in _LOST_DAEMON.finditer(output or "")]
    found += [match.group(1) for match in _PEER_GONE.finditer(output or "")]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class LauncherRefusal:
    """The launcher (mpiexec, salloc, srun) would not start the ranks: what it said, and what to change."""

    reason: str
    change: str
    host: str | None = None
    #: who refused, where it is not the MPI launcher itself (``Slurm``)
    by: str | None = None

    def message(self, launcher: str) -> str:
        where = f" on {self.host}" if self.host else ""
        return f"{self.by or launcher} could not start the ranks{where}: {self.reason}; {self.change}"


class _KnownRefusal(NamedTuple):
    """One way a launcher says it would not start a rank: its words, what they mean and what to change."""

    pattern: re.Pattern[str]
    reason: str
    change: str
    #: who refuses, where not the MPI launcher; the pattern's ``words`` group is then the whole reason
    by: str | None = None


_UNBIND = "the node confines the job to other cores (a cpuset: a Slurm allocation's, a container's): use --bind-to none"
_INSTALL_EVERYWHERE = "install it at the same path on every node (a shared file system), or name it by absolute path"
#: What launchers print when they refuse or fail to start a rank, read from Open MPI 5 (PRRTE) and 4 (ORTE), MPICH's
#: Hydra and Slurm. A pattern's ``host`` group names the host; elsewhere the host is found near it (``_REFUSAL_HOST``).
_REFUSALS: tuple[_KnownRefusal, ...] = (
    # hwloc's line first: PRRTE's lead-in ("tried to bind a new process") says the same in fewer facts
    _KnownRefusal(re.compile(r"hwloc_set_cpubind returned"), "binding a rank to a core was refused", _UNBIND),
    _KnownRefusal(re.compile(r"tried to bind a new process, but"), "binding a rank to a core was refused", _UNBIND),
    _KnownRefusal(
        re.compile(r"not enough slots available in the system", re.I),
        "there are not enough slots for the ranks asked for",
        "ask fewer --ranks, more slots (the hostfile's slots=, the allocation's -n), or pass --mpi-arg=--oversubscribe",
    ),
    _KnownRefusal(
        re.compile(r"was unable to find the specified executable|could not find an executable", re.I),
        "a node cannot find the program to run",
        _INSTALL_EVERYWHERE,
    ),
    _KnownRefusal(re.compile(r"execvp error on file", re.I), "a node cannot find the program", _INSTALL_EVERYWHERE),
    _KnownRefusal(
        re.compile(r"ssh: (?:Could not resolve hostname|connect to host) (?P<host>[^\s:]+)", re.I),
        "a host named by the hostfile cannot be reached by ssh",
        "check the hostfile's names and that `ssh HOST true` works without a password from here",
    ),
    _KnownRefusal(
        re.compile(r"Permission denied \(publickey", re.I),
        "ssh to a host was refused (no key accepted)",
        "set up passwordless ssh to every host of the hostfile, or pass --launch-agent",
    ),
    _KnownRefusal(
        re.compile(r"(?:PRTE|ORTE) (?:was|is) unable to reliably start one or more daemons", re.I),
        "the launcher's daemon did not start on a host",
        "check that every host can run the venv's prted at the same path and reach this host over TCP",
    ),
    _KnownRefusal(
        re.compile(r"(?:srun|salloc|sbatch): error: (?P<words>[^\n]+)"),
        "",
        "change the allocation (nodes, tasks, partition, time) as Slurm's message says",
        by="Slurm",
    ),
    _KnownRefusal(
        re.compile(r"HYDU_sock_connect[^\n]*?unable to connect", re.I),
        "a node could not call back to mpiexec on this host",
        "this host's name resolves to an address the nodes cannot reach: name the network interface they reach,"
        " --mpi-arg=-iface --mpi-arg=IFACE",
    ),
    _KnownRefusal(
        re.compile(r"Connection refused|No route to host", re.I),
        "a node could not connect back to the launcher on this host",
        "check that the nodes reach this host by its name (its address on their network) and no firewall is between",
    ),
)
#: Open MPI's and Hydra's words for the host a refusal happened on.
_REFUSAL_HOST = re.compile(r"(?:Local host|Node|host):\s*(\S+)|\[proxy:\S*?@(\S+?)\]", re.I)


def launcher_refusal(output: str) -> LauncherRefusal | None:
    """The launcher's refusal in its output (stderr), the first it printed; None when it printed none known.

    The reason carries the launcher's own words (its line, cut to ``EXCEPTION_LINE_CHARS``).
    """
    output = output or ""
    found: list[tuple[int, LauncherRefusal]] = []
    for known in _REFUSALS:
        match = known.pattern.search(output)
        if match is None or any(refusal.change == known.change for _, refusal in found):
            continue  # one refusal said two ways: the first pattern's words
        groups = match.groupdict()
        if known.by is not None:
            reason = groups["words"].strip()
        else:
            line = " ".join(_line_at(output, match.start()).split())
            reason = f"{known.reason}: {line!r}" if line else known.reason
        host = groups.get("host")
        if host is None:
            near = _REFUSAL_HOST.search(output, max(0, match.start() - 500), match.end() + 500)
            host = next((group for group in near.groups() if group), None) if near else None
        found.append((match.start(), LauncherRefusal(reason, known.change, host, known.by)))
    return min(found, key=lambda item: item[0])[1] if found else None


def _line_at(text: str, position: int) -> str:
    """The line of ``text`` holding ``position``, stripped and cut to ``EXCEPTION_LINE_CHARS``."""
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return text[start : end if end >= 0 else len(text)].strip()[:EXCEPTION_LINE_CHARS]


def nanny_exits(output: str) -> list[tuple[int, float]]:
    """``[(engine id, unix time)]`` at which each engine's nanny saw its process end, earliest first."""
    first: dict[int, float] = {}
    for match in _NANNY.finditer(output or ""):
        stamp = datetime.strptime(
            match.group(1), "%Y-%m-%d %H:%M:%S.%f" if "." in match.group(1) else "%Y-%m-%d %H:%M:%S"
        )
        first.setdefault(int(match.group(2)), stamp.timestamp())
    return sorted(first.items(), key=lambda item: item[1])


#: How much of a rank's exception the one-line cause keeps.
EXCEPTION_LINE_CHARS = 300


def exception_line(message: str) -> str:
    """The one line a person needs from a rank's exception message: its first line, and where that only
    introduces what follows ("its log ends:"), the last line too: a log's or a traceback's end names the cause.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} … {lines[-1]}"
    return lines[0]


def engine_errors(error: BaseException | None) -> list[tuple[int | None, str, str]]:
    """``[(engine id, exception name, message)]`` of ipyparallel's ``CompositeError`` / ``RemoteError``."""
    if error is None:
        return []
    elist = getattr(error, "elist", None)
    if elist is not None:
        rows = []
        for ename, evalue, _traceback, info in elist:
            engine = (info or {}).get("engine_id")
            if engine is None or engine == -1:
                died = _ENGINE_DIED.search(str(evalue))
                engine = int(died.group(1)) if died else None
            rows.append((engine, str(ename), str(evalue)))
        return rows
    ename = getattr(error, "ename", None)
    if ename is not None:
        info = getattr(error, "engine_info", None) or {}
        engine = info.get("engine_id")
        if engine is None:
            died = _ENGINE_DIED.search(str(getattr(error, "evalue", "")))
            engine = int(died.group(1)) if died else None
        return [(engine, str(ename), str(getattr(error, "evalue", "")))]
    return []


def horovod_stall_warnings(output: str) -> list[str]:
    """Horovod's stall-check warnings in the engines' output, one string each (tensors and ranks it names)."""
    return [" ".join(match.group(1).split()) for match in _HOROVOD_STALL.finditer(output or "")]


# -- the diagnosis -----------------------------------------------------------------------------------------------
def diagnose(
    *,
    launcher_output: str = "",
    exit_data: Mapping[str, Any] | None = None,
    error: BaseException | None = None,
    rank_states: Mapping[int, str] | None = None,
    rank_pids: Mapping[int, int] | None = None,
    last_event_ns: Mapping[int, int] | None = None,
    now: float | None = None,
    rank_hosts: Mapping[int, str] | None = None,
) -> Failure | None:
    """The first rank that failed and how, from everything that was seen; None when nothing points at a rank.

    Evidence, strongest first: the launcher naming a rank and its signal or exit code; the engine
    whose nanny saw its process end first; a rank whose process is gone, a zombie or stopped while
    others are not; a rank whose Python code raised (``RemoteError``). ``detected_after_s`` is the
    time from the first sign of the death (the nanny's timestamp) to ``now``.
    """
    now = time.time() if now is None else now
    states = dict(rank_states or {})
    last_events = dict(last_event_ns or {})
    details: list[str] = []
    deaths = launcher_deaths(launcher_output, rank_pids)
    exits = nanny_exits(launcher_output)
    raised = [(engine, name, value) for engine, name, value in engine_errors(error) if name != "EngineError"]
    died = [engine for engine, name, _value in engine_errors(error) if name == "EngineError"]
    ended_at = dict(exits)
    rank: int | None = None
    cause = ""
    source = ""
    if deaths:
        rank, cause = deaths[0]
        source = "launcher"
        details += [f"launcher: rank {r} {c}" for r, c in deaths]
    elif exits:
        rank = exits[0][0]
        cause = f"ended ({states.get(rank) or 'exit status not reported'})"
        source = "nanny"
    else:
        gone = [r for r, state in sorted(states.items()) if state in ("gone", "zombie", "dead", "stopped")]
        alive = [r for r, state in states.items() if state not in ("gone", "zombie", "dead", "stopped")]
        if gone and (alive or not raised):
            rank = gone[0]
            state = states[rank]
            cause = "is stopped (SIGSTOP or a debugger)" if state == "stopped" else f"ended (process {state})"
            source = "process"
        elif raised:
            rank, name, value = raised[0]
            cause = f"raised {name}: {exception_line(value)}"[:EXCEPTION_LINE_CHARS]
            source = "exception"
            details += [f"rank {rank} raised {name}: {line}" for line in value.strip().splitlines()[1:][-20:]]
    hosts = dict(rank_hosts or {})
    lost = [node for node in lost_nodes(launcher_output) if node in hosts.values()]
    # a rank the launcher saw killed on another node came first; else a whole node gone explains the rest
    killed_elsewhere = source == "launcher" and "signal" in cause and bool(lost) and hosts.get(rank) != lost[0]
    if lost and not killed_elsewhere:
        # its ranks did not fail one by one, and the other ranks' errors follow from it
        node = lost[0]
        on_node = tuple(sorted(r for r, host in hosts.items() if host == node))
        details = [*details, f"ranks on other nodes lost their peer on {node}" if len(lost) == 1 else f"lost: {lost}"]
        ended_first = [(r, t) for r, t in exits if r in on_node]
        return Failure(
            rank=on_node[0],
            cause=f"was lost: the MPI launcher lost its daemon on {node} (the node died, or its network failed)",
            detected_after_s=round(now - ended_first[0][1], 2) if ended_first else None,
            last_event_ns=last_events.get(on_node[0]),
            source="node",
            details=tuple(details),
            host=node,
            host_ranks=on_node,
        )
    if rank is None and not died:
        return None
    code = (exit_data or {}).get("exit_code")
    if source in ("nanny", "process") and isinstance(code, int) and code not in (0, 1) and "stopped" not in cause:
        # mpiexec exits with the first failed rank's status: 128 + N for a signal N
        how = f"was killed by signal {code - 128} ({signal_name(code - 128)})" if 128 < code < 193 else "exited"
        cause = f"{how} (mpiexec's exit code {code})"
    if exit_data:
        details.append(f"launcher exit data: {dict(exit_data)}")
    if died:
        details.append(f"ipyparallel: engines {', '.join(str(e) for e in sorted(set(died), key=str))} lost")
    if exits:
        details.append("engine processes ended in order: " + ", ".join(f"rank {r}" for r, _t in exits))
    if rank is None:
        cause, source = "a rank died (the launcher did not say which rank was first)", "exception"
    detected = round(now - ended_at[rank], 2) if rank in ended_at else None
    return Failure(
        rank=rank,
        cause=cause,
        detected_after_s=detected,
        last_event_ns=last_events.get(rank) if rank is not None else None,
        source=source,
        details=tuple(details),
    )


@dataclass(frozen=True)
class Stall:
    """A rank that records nothing while others wait: how long, and the evidence."""

    rank: int
    silent_s: float
    state: str
    waiting: tuple[int, ...] = ()
    #: the rank's host, set only when the run's ranks are on several hosts (a frozen node stalls all its ranks)
    host: str = ""

    def message(self) -> str:
        waiting = (
            f" while rank{'s' if len(self.waiting) != 1 else ''} {', '.join(map(str, self.waiting))} wait"
            if self.waiting
            else ""
        )
        who = f"rank {self.rank} ({self.host})" if self.host else f"rank {self.rank}"
        return f"{who} has recorded nothing for {self.silent_s:.0f} s ({self.state}){waiting}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "waiting": list(self.waiting), "message": self.message()}


def find_stalls(
    silent_s: Mapping[int, float],
    processes: Mapping[int, tuple[str, float]],
    stall_after_s: float,
    hosts: Mapping[int, str] | None = None,
) -> list[Stall]:
    """Ranks stuck for at least ``stall_after_s``: stopped, or idle while another rank spins in an MPI wait.

    ``silent_s``: seconds since each rank's last recorded event (or since the run started);
    ``processes``: each rank's process state and CPU percent. A rank silent that long whose process
    is stopped is stuck, and so is one on another host whose recorder's heartbeat stopped
    (``unresponsive``); one that uses no CPU is stuck when another rank is busy (a rank waiting in
    a collective polls, and uses a core). A silent rank that computes hard is not named. ``hosts``
    (``{rank: host}``) on more than one host gives each stall its rank's host.
    """
    from workbench.events import host_count  # this module stays light: pandas only when asked

    several_hosts = host_count(hosts) > 1
    busy = [r for r, (state, cpu) in processes.items() if state != "stopped" and cpu >= BUSY_CPU_PERCENT]
    stalls = []
    for rank, silent in sorted(silent_s.items()):
        if silent < stall_after_s or rank not in processes:
            continue
        state, cpu = processes[rank]
        others = tuple(r for r in sorted(busy) if r != rank)
        host = (hosts or {}).get(rank, "") if several_hosts else ""
        if state == "stopped":
            stalls.append(Stall(rank, silent, "process stopped", others, host))
        elif state == "unresponsive":
            stalls.append(Stall(rank, silent, "no heartbeat: frozen, or its node unreachable", others, host))
        elif cpu <= IDLE_CPU_PERCENT and others:
            stalls.append(Stall(rank, silent, f"idle, {cpu:.0f} % CPU", others, host))
    return stalls


def last_events(run_path: str | Path) -> dict[int, int]:
    """Each rank's last recorded event end (ns, aligned clock) in a run directory; ranks with none left out."""
    from workbench.store import RunData

    events = RunData.load(run_path).events
    if not len(events):
        return {}
    return {int(rank): int(end) for rank, end in events.groupby("rank")["end_ns"].max().items()}
