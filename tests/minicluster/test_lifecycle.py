"""``up`` and ``down`` as a user meets them: a second ``up`` reused or refused, and nothing left after ``down``.

Runs before the other files of this folder (they share one cluster, made when first asked for).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from workbench import minicluster
from workbench.minicluster import CGROUP_NAME, CGROUP_ROOT, CONTROLLERS, STATE_DIR, MiniClusterError


def _machine() -> dict[str, object]:
    """What a miniature cluster could leave behind: links, namespaces, cgroups, files, processes."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    processes = set()
    for process in psutil.process_iter(["cmdline"]):
        if str(STATE_DIR) in " ".join(process.info["cmdline"] or []):  # daemons name their files there
            processes.add(process.pid)
    return {
        "links": sorted(line.split(":")[1].strip() for line in links.splitlines()),
        "netns": sorted(netns.split()),
        "cgroups": sorted(str(path) for c in CONTROLLERS for path in (CGROUP_ROOT / c).glob(f"{CGROUP_NAME}*")),
        "files": sorted(str(path) for path in Path(STATE_DIR).parent.glob(f"{Path(STATE_DIR).name}*")),
        "processes": sorted(processes),
    }


def test_up_reuses_the_same_refuses_another_and_down_leaves_nothing(mini_checked_host):
    if minicluster.status() is not None:
        minicluster.down()
    before = _machine()
    cluster = minicluster.up(2, cpus_per_node=0.3, link="500mbit")
    try:
        assert cluster.node_states() == {"node1": "idle", "node2": "idle"}
        assert len(_machine()["netns"]) > len(before["netns"])
        again = minicluster.up(2, cpus_per_node=0.3, link="500mbit")
        assert again.node_ips == cluster.node_ips and again.pids == cluster.pids  # the same cluster, reused
        with pytest.raises(MiniClusterError, match=r"a miniature cluster is already up .*minicluster down"):
            minicluster.up(3)
    finally:
        assert minicluster.down() is True
    assert _machine() == before
    assert minicluster.down() is False  # nothing left to remove
