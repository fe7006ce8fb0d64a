"""How fast this machine's cores are while a sweep runs, sampled so any run's window can be read back.

Why: on a shared virtual machine the same work takes up to ~1.5x longer a few minutes later (other
tenants on the physical cores; a fixed pure-Python loop on this idle 2-vCPU machine took 0.123-0.192 s).
A miniature cluster's node gets its CPU quota as *time*, so its ranks' compute follows that speed, and a
projection from a 1-node run to an 8-node run made minutes later carries the change as error. A small
process times one fixed piece of work on each core in turn, in the CPU time it took (time spent waiting
for the core is not counted, so the nodes' load does not read as a slow machine), and appends each sample
to a text file beside the sweep (``host-speed.txt``: ``time_ns core cpu_ns`` a line). ``speed_in_window``
reads back the speed of the window a run covered; only ratios between windows mean anything.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: The file a sweep's samples go to, beside its ``runs.parquet``.
SAMPLES_FILE = "host-speed.txt"
#: Seconds between rounds of samples (one per core a round): ~1-2 % of a core on this machine.
INTERVAL_S = 0.1
#: Iterations of the work unit: about 1.5 ms of pure Python here, long against the clock's resolution.
UNIT_ITERATIONS = 20_000
#: Fewest samples in a window for its speed to be read (fewer: None, the window is not judged).
MIN_SAMPLES = 5


def work_unit(iterations: int = UNIT_ITERATIONS) -> int:
    """Fixed interpreter work (the ranks' step is Python and TF dispatch as much as arithmetic)."""
    total = 0
    for i in range(iterations):
        total += (i * i) % 7
    return total


def sample(
    path: str | Path, interval_s: float = INTERVAL_S, rounds: int | None = None, parent: int | None = None
) -> None:
    """Append ``time_ns core cpu_ns`` lines to ``path``: each round one work unit pinned to each core in turn.

    ``parent``: stop once that process is gone (this one handed to another parent), so a sweep killed
    without the chance to stop its probe does not leave it sampling for ever.
    """
    allowed = os.sched_getaffinity(0)
    done = 0
    try:
        with open(path, "a", buffering=1) as out:
            while (rounds is None or done < rounds) and (parent is None or os.getppid() == parent):
                for core in sorted(allowed):
                    os.sched_setaffinity(0, {core})
                    started = time.thread_time_ns()
                    work_unit()
                    cpu_ns = time.thread_time_ns() - started
                    out.write(f"{time.time_ns()} {core} {cpu_ns}\n")
                done += 1
                time.sleep(interval_s)
    finally:
        os.sched_setaffinity(0, allowed)  # the caller's thread may run anywhere it could before


class HostSpeedProbe:
    """``with HostSpeedProbe(directory):`` samples the cores' speed into ``directory/host-speed.txt`` meanwhile."""

    def __init__(self, directory: str | Path, interval_s: float = INTERVAL_S) -> None:
        self.path = Path(directory) / SAMPLES_FILE
        self.interval_s = interval_s
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> HostSpeedProbe:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "workbench.hostspeed",
            str(self.path),
            "--interval",
            str(self.interval_s),
            "--parent",
            str(os.getpid()),
        ]
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


def read_samples(path: str | Path) -> np.ndarray:
    """The samples as an (n, 3) int64 array: time_ns, core, cpu_ns (a torn last line is skipped)."""
    rows = []
    with open(path) as handle:
        for line in handle:
            parts = line.split()
            if len(parts) == 3 and all(part.isdigit() for part in parts):
                rows.append([int(part) for part in parts])
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def speed_in_window(samples: np.ndarray, start_ns: int, end_ns: int, cores: set[int] | None = None) -> float | None:
    """Work units per CPU second in ``[start_ns, end_ns]`` (median over the samples; None: too few)."""
    inside = (samples[:, 0] >= start_ns) & (samples[:, 0] <= end_ns) & (samples[:, 2] > 0)
    if cores is not None:
        inside &= np.isin(samples[:, 1], sorted(cores))
    if int(inside.sum()) < MIN_SAMPLES:
        return None
    return float(1e9 / np.median(samples[inside, 2]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.hostspeed", description=__doc__.splitlines()[0])
    parser.add_argument("path", help="the samples file to append to")
    parser.add_argument("--interval", type=float, default=INTERVAL_S, help="seconds between rounds")
    parser.add_argument("--rounds", type=int, default=None, help="stop after this many rounds (default: never)")
    parser.add_argument("--parent", type=int, default=None, help="stop once this process is gone (the sweep's)")
    args = parser.parse_args(argv)
    try:
        sample(args.path, args.interval, args.rounds, args.parent)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
