"""``benchmarks/quota_wait.py``'s measurement in a cgroup of its own: a wait on a node whose CPU is a quota."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_a_long_wait_lets_the_compute_after_it_start_on_an_unspent_period(mini_checked_host):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import quota_wait
    finally:
        sys.path.remove(str(BENCHMARKS))
    share = quota_wait.measure_share(0.4, 0.0036, repeats=9, rounds=2)
    # the miniature cluster's node of 0.4 core: 2 ms of CPU in each 5 ms period
    assert (share["period_s"], share["quota_s"]) == (0.005, 0.002)
    rows = {(row["wait"], row["wait_s"]): row for row in share["rows"]}
    assert set(rows) == {(kind, wait) for kind in quota_wait.KINDS for wait in quota_wait.WAITS_S}
    assert all(row["compute_wall_s"] >= share["cpu_s"] for row in rows.values())  # never faster than a whole core
    assert rows[("sleep", 0.04)]["wait_cpu_cores"] < 0.1  # asleep, a wait takes next to no CPU
    # 3.6 ms of CPU cannot fit in one period's 2 ms back to back; after 40 ms asleep it starts on a whole
    # period's quota (measured here: 9.6 ms against 4.8 ms)
    assert rows[("sleep", 0.04)]["compute_wall_s"] < rows[("sleep", 0.0)]["compute_wall_s"]
    assert not quota_wait.CGROUP.exists()  # its cgroup removed
