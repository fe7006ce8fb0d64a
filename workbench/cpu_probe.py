"""How long a rank's threads were ready to run with no core to run on, and whether a CPU quota held them.

A rank's CPU % says how much it ran, not how much it wanted to: TensorFlow sizes its thread pools
to the cores it sees, so a rank in a container with a CPU limit (Kubernetes, a Slurm job with a
quota) or beside other ranks on too few cores has threads ready to run that wait for a core. Linux
counts that wait per thread (``/proc/self/task/*/schedstat``: time on a CPU, time runnable and
waiting, in ns), and a cgroup with a CFS quota counts the periods in which the quota ran out
(``cpu.stat``: ``nr_periods``, ``nr_throttled``). Throttled time is part of the wait: a throttled
thread is runnable and off the CPU.

``CpuWaitProbe.sample()`` returns both since its last call, read in the recorder's background
thread with the heartbeat. A read costs about 10 µs of CPU a thread: under 1 ms a second for a rank
of 100 threads (``benchmarks/cpu_probe_cost.py``). Where a file is missing (not Linux, no quota) the
probe says so with ``None``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

#: cgroup v1 names the cpu controller's mount these ways, by distribution
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def thread_run_delays(task_dir: Path) -> dict[str, int]:
    """Each thread's time runnable but not running so far (ns), by thread id; empty where not readable.

    ``os.open``/``os.read``, not ``open()``: a third of the CPU a thread (about 6 µs against 20 µs here),
    which a rank of 100 threads reads each second."""
    try:
        threads = os.listdir(task_dir)
    except OSError:
        return {}
    delays: dict[str, int] = {}
    for thread in threads:
        try:
            handle = os.open(f"{task_dir}/{thread}/schedstat", os.O_RDONLY)
            try:
                fields = os.read(handle, 128).split()
            finally:
                os.close(handle)
            delays[thread] = int(fields[1])
        except (OSError, IndexError, ValueError):  # the thread ended between the listing and the read
            continue
    return delays


def find_cpu_quota(
    cgroup_file: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> tuple[Path, float] | None:
    """The ``cpu.stat`` of the nearest cgroup (this process's or an ancestor) with a CFS quota, and the
    quota in cores; None when there is none (or no cgroup file system to read)."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1].split(","), parts[2].lstrip("/")
        if parts[0] == "0" and parts[1] == "":  # cgroup v2 (unified): cpu.max in the same tree
            found = _nearest_quota(root, root / path, _v2_quota)
        elif "cpu" in controllers:
            mounts = [root / name for name in V1_CPU_MOUNTS if (root / name).is_dir()]
            found = next((q for m in mounts if (q := _nearest_quota(m, m / path, _v1_quota)) is not None), None)
        else:
            continue
        if found is not None:
            return found
    return None


def _nearest_quota(mount: Path, directory: Path, quota_of: Callable[[Path], float | None]) -> tuple[Path, float] | None:
    """Walk from ``directory`` up to ``mount`` for the first cgroup whose quota is set."""
    while True:
        cores = quota_of(directory)
        if cores is not None:
            return directory / "cpu.stat", cores
        if directory == mount or mount not in directory.parents:
            return None
        directory = directory.parent


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
        return int(quota) / int(period) if int(period) > 0 else None
    except (OSError, ValueError):  # "max 100000": no quota
        return None


def throttled_periods(stat_file: Path) -> tuple[int, int] | None:
    """(CFS periods so far, periods in which the quota ran out) from a cgroup's ``cpu.stat``."""
    try:
        fields = dict(line.split()[:2] for line in stat_file.read_text().splitlines() if line.strip())
        return int(fields["nr_periods"]), int(fields["nr_throttled"])
    except (OSError, KeyError, ValueError):
        return None


class CpuWaitProbe:
    """This process's threads' wait for a core, and its cgroup's throttling, each since the last ``sample()``."""

    def __init__(self, proc: Path = Path("/proc/self"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> None:
        self._task_dir = proc / "task"
        quota = find_cpu_quota(proc / "cgroup", cgroup_root)
        self._stat_file = quota[0] if quota else None
        #: the CFS quota of the rank's cgroup in cores (0.4: 40 ms each 100 ms), None without one
        self.quota_cores: float | None = quota[1] if quota else None
        self._delays = thread_run_delays(self._task_dir)
        self._periods = throttled_periods(self._stat_file) if self._stat_file else None
        self._last = time.monotonic()

    def sample(self) -> tuple[float | None, float | None]:
        """(cores' worth of threads waiting for a core, share of the quota's periods throttled) since the
        last call: 0.5 means on average half a thread was ready with no core. None for what cannot be read;
        the share is None too when no period passed (the cgroup ran nothing)."""
        now = time.monotonic()
        elapsed, self._last = now - self._last, now
        delays = thread_run_delays(self._task_dir)
        waiting = None
        if delays and elapsed > 0:
            # a thread new since the last read waited all its life since then; an ended one's last part is lost
            waited_ns = sum(max(0, delay - self._delays.get(thread, 0)) for thread, delay in delays.items())
            waiting = waited_ns / 1e9 / elapsed
        self._delays = delays
        throttled = None
        periods = throttled_periods(self._stat_file) if self._stat_file else None
        if periods is not None and self._periods is not None and periods[0] > self._periods[0]:
            throttled = (periods[1] - self._periods[1]) / (periods[0] - self._periods[0])
        self._periods = periods
        return waiting, throttled


def cpus_allowed() -> int | None:
    """The cores this process may run on (its affinity: a Slurm step's or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
