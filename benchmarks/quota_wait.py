"""What a wait does to the compute after it, on a node whose CPU is a quota (a miniature cluster's node).

    sudo .venv/bin/python benchmarks/quota_wait.py --json      # root; about 2 minutes on 2 cores

A dedicated core computes at one speed whatever came before; a node given 0.2 of a core by a CFS quota gets
1 ms of CPU in each 5 ms period (``minicluster.cfs_bandwidth``), at the core's full speed until the period's
quota is spent. A rank that computes back to back is throttled in every period. A rank that first waits
(for a collective's last rank) spends less of the periods it waits through, and the compute after the wait
starts on an unspent period. So on such a node a wait is partly free: it overlaps time the rank would have
spent throttled. How much is what the projection's check on the miniature cluster needs (docs/projection.md:
the time between collectives falls with the nodes), and this measures it without MPI or a cluster.

A child process in a cgroup of its own with the node's period and quota repeats: wait, then burn a fixed CPU
time (the eval-frequency step's CPU at 0.2 and 0.4 of a core). Two kinds of wait: asleep, and waking every
50 µs to look (as the nodes' ranks wait in MPI: ``minicluster.IDLE_SLEEP_US``), which spends some of the
quota. For each wait, the compute's wall time (median), what that saves against back to back, and the CPU
the wait itself took per second (in cores). Waits of each length alternate in rounds, so a drift of the
machine falls on all of them. ``--json`` prints one object (``benchmarks/results/quota-wait.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster_options import run_measurement

#: Each share with the CPU a step burns on it: the eval-frequency step's 1-node CPU per step at that share.
STEPS_CPU_S = {0.2: 0.0048, 0.4: 0.0036}
WAITS_S = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04)
KINDS = ("sleep", "poll")
REPEATS = 30
ROUNDS = 3
CGROUP = Path("/sys/fs/cgroup/cpu/workbench-quota-wait")


# -- in the child, inside the cgroup --------------------------------------------------------------------------
def burn(cpu_s: float) -> float:
    """Wall seconds to use ``cpu_s`` of this thread's CPU."""
    started, until = time.perf_counter(), time.thread_time() + cpu_s
    while time.thread_time() < until:
        pass
    return time.perf_counter() - started


def wait(seconds: float, kind: str, poll_s: float) -> float:
    """Wait ``seconds`` asleep, or waking every ``poll_s`` to look; the CPU seconds the wait took."""
    cpu = time.thread_time()
    if kind == "sleep":
        if seconds > 0:
            time.sleep(seconds)
    else:
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            time.sleep(poll_s)
    return time.thread_time() - cpu


def child(cpu_s: float, poll_s: float, repeats: int, rounds: int) -> dict[str, Any]:
    walls: dict[tuple[str, float], list[float]] = {}
    wait_cpu: dict[tuple[str, float], float] = {}
    for _ in range(rounds):
        for kind in KINDS:
            for seconds in WAITS_S:
                key = (kind, seconds)
                for _ in range(repeats):
                    wait_cpu[key] = wait_cpu.get(key, 0.0) + wait(seconds, kind, poll_s)
                    walls.setdefault(key, []).append(burn(cpu_s))
    rows = []
    for (kind, seconds), values in walls.items():
        ordered = sorted(values)
        rows.append(
            {
                "wait": kind,
                "wait_s": seconds,
                "compute_wall_s": statistics.median(values),
                "compute_wall_p10_s": ordered[len(ordered) // 10],
                "compute_wall_p90_s": ordered[(9 * len(ordered)) // 10],
                "wait_cpu_cores": wait_cpu[(kind, seconds)] / (seconds * len(values)) if seconds else 0.0,
            }
        )
    return {"rows": rows}


# -- the parent, as root ----------------------------------------------------------------------------------------
def measure_share(share: float, cpu_s: float, repeats: int, rounds: int) -> dict[str, Any]:
    from workbench import minicluster

    period_us, quota_us = minicluster.cfs_bandwidth(share)
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "cpu.cfs_period_us").write_text(str(period_us))
    (CGROUP / "cpu.cfs_quota_us").write_text(str(quota_us))
    procs = str(CGROUP / "cgroup.procs")
    code = (
        "import json, os, sys; sys.path.insert(0, sys.argv[1]);"
        " open(sys.argv[2], 'w').write(str(os.getpid()));"
        " import quota_wait as q;"
        " print(json.dumps(q.child(*map(float, sys.argv[3:5]), *map(int, sys.argv[5:7]))))"
    )
    poll_s = minicluster.IDLE_SLEEP_US / 1e6
    arguments = [str(Path(__file__).parent), procs, str(cpu_s), str(poll_s), str(repeats), str(rounds)]
    try:
        done = subprocess.run([sys.executable, "-c", code, *arguments], check=True, capture_output=True, text=True)
    finally:
        CGROUP.rmdir()  # the child has exited: the cgroup is empty
    rows = json.loads(done.stdout)["rows"]
    back_to_back = next(r["compute_wall_s"] for r in rows if r["wait_s"] == 0 and r["wait"] == "sleep")
    for row in rows:
        row["saved_s"] = back_to_back - row["compute_wall_s"]
    return {
        "share": share,
        "period_s": period_us / 1e6,
        "quota_s": quota_us / 1e6,
        "cpu_s": cpu_s,
        "fluid_s": cpu_s / share,
        "rows": sorted(rows, key=lambda r: (r["wait"], r["wait_s"])),
    }


def measure(shares: list[float], repeats: int, rounds: int) -> dict[str, Any]:
    from workbench import minicluster

    minicluster.check_host_for_own_cluster()  # root, cgroup v1; and no cluster's nodes taking the cores
    results = [measure_share(share, STEPS_CPU_S.get(share, 0.024 * share), repeats, rounds) for share in shares]
    return {"shares": results, "repeats": repeats, "rounds": rounds}


def text(result: dict[str, Any]) -> str:
    lines = []
    for share in result["shares"]:
        lines.append(
            f"{share['share']:.2g} of a core ({share['quota_s'] * 1e3:.3g} ms each {share['period_s'] * 1e3:.3g} ms):"
            f" {share['cpu_s'] * 1e3:.3g} ms of CPU, {share['fluid_s'] * 1e3:.3g} ms at the quota's average rate"
        )
        for row in share["rows"]:
            lines.append(
                f"  {row['wait']:5s} {row['wait_s'] * 1e3:4.0f} ms: compute {row['compute_wall_s'] * 1e3:5.1f} ms"
                f" (p10 {row['compute_wall_p10_s'] * 1e3:5.1f}, p90 {row['compute_wall_p90_s'] * 1e3:5.1f}),"
                f" saved {row['saved_s'] * 1e3:+5.1f} ms, wait's CPU {row['wait_cpu_cores']:.2f} core"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="0.2,0.4", help="a node's share of a core, each (default 0.2,0.4)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"waits of each length a round ({REPEATS})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds ({ROUNDS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        shares = [float(s) for s in args.shares.split(",")]
    except ValueError:
        parser.error(f"--shares {args.shares}: give shares of a core, e.g. 0.2,0.4")
    if not all(0 < s <= 1 for s in shares):
        parser.error(f"--shares {args.shares}: each share must be above 0 and at most 1 core")
    return run_measurement(
        "benchmarks/quota_wait.py", lambda: measure(shares, args.repeats, args.rounds), text, as_json=args.json
    )


if __name__ == "__main__":
    sys.exit(main())
