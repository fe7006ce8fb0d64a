"""Safety on real processes: the cluster listens on loopback only (issue 17, item 4)."""

from __future__ import annotations

import ipaddress

import psutil
import pytest

from workbench import Cluster

pytestmark = pytest.mark.mpi


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on."""
    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]


def test_controller_and_engines_listen_on_loopback_only():
    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    with Cluster(n=2) as cluster:
        started = {p.pid for p in psutil.Process().children(recursive=True)} - ours
        launchers = {p.pid for p in map(psutil.Process, started) if p.name() in ("prterun", "mpiexec", "mpirun")}
        checked: dict[int, list[tuple[str, int]]] = {}
        for pid in sorted(started - launchers):
            checked[pid] = listening(pid)
        assert set(cluster.rank_pids.values()) <= set(checked), "every rank's process is checked"
        assert any(checked.values()), "the controller listens somewhere: the check sees sockets"
        exposed = {
            pid: [a for a in addresses if not ipaddress.ip_address(a[0]).is_loopback]
            for pid, addresses in checked.items()
        }
        assert not any(exposed.values()), f"listening beyond loopback: {exposed}"
