"""Links that drop or slow mid-run: the rank's probe of its TCP connections, and the findings made of it.

Hand-made counters of four hosts in a ring (as a ring allreduce uses them): the numbers in each test
are what the rows say, worked out by hand.
"""

from __future__ import annotations

import os
import socket
import threading

import pandas as pd
import pytest

from workbench import events as ev
from workbench.analysis import analyse_run
from workbench.analysis.network import network_episodes, network_findings, reduce_network
from workbench.net_probe import (
    LINK_RATE,
    LINK_UNANSWERED,
    NO_CARRIER,
    LinkProbe,
    _tcp_state,
    counter_name,
    socket_fds,
    split_counter_name,
    suspect_link,
)

NS = 1_000_000_000
MB = ev.BYTES_PER_MB
HOSTS = {0: "node1", 1: "node2", 2: "node3", 3: "node4"}
ADDRESS = {rank: f"10.0.0.{rank + 1}" for rank in HOSTS}


def _rank_meta() -> pd.DataFrame:
    return pd.DataFrame(
        [{"rank": rank, "host": host, "addresses": [ADDRESS[rank], f"fe80::{rank}"]} for rank, host in HOSTS.items()]
    )


def _counters(rows: list[tuple[int, float, str, str, float]]) -> pd.DataFrame:
    """``(rank, second, kind, peer rank or interface, value)`` as a run's counters, half a second into each second."""
    return pd.DataFrame(
        {
            "rank": [rank for rank, *_ in rows],
            "host": [HOSTS[rank] for rank, *_ in rows],
            "time_ns": [int((second + 0.5) * NS) for _r, second, *_ in rows],
            "name": [
                counter_name(kind, ADDRESS[target] if isinstance(target, int) else target)
                for _r, _s, kind, target, _v in rows
            ],
            "value": [float(value) for *_, value in rows],
        }
    )


def _communication(seconds: int, share: float = 0.5) -> pd.DataFrame:
    """Every rank: a compute span then ``share`` of each second in an allreduce span."""
    rows = []
    for rank, host in HOSTS.items():
        for second in range(seconds):
            start = second * NS
            middle = start + int((1 - share) * NS)
            rows.append((rank, host, ev.COMPUTE, "train_step", start, middle))
            rows.append((rank, host, ev.COMMUNICATION, "allreduce", middle, start + NS))
    frame = pd.DataFrame(rows, columns=["rank", "host", "phase", "name", "start_ns", "end_ns"])
    return frame.assign(run_id="net", step=frame["start_ns"] // NS, epoch=0, nbytes=0)


def _ring(seconds: int, slow: range = range(0), slow_rate: float = 5 * MB) -> list[tuple]:
    """A ring 1 -> 2 -> 3 -> 4 -> 1 at 100 MB/s; in the ``slow`` seconds node3's link (2 -> 3 and 3 -> 4) slowed."""
    rows = []
    for second in range(seconds):
        for rank in HOSTS:
            peer = (rank + 1) % 4
            through_node3 = 2 in (rank, peer)
            rate = slow_rate if second in slow and through_node3 else 100 * MB
            rows.append((rank, second, LINK_RATE, peer, rate))
    return rows


def test_counter_names_carry_the_peer_or_the_interface():
    assert split_counter_name(counter_name(LINK_RATE, "10.0.0.3")) == (LINK_RATE, "10.0.0.3")
    assert split_counter_name(counter_name(NO_CARRIER, "eth0")) == (NO_CARRIER, "eth0")
    assert split_counter_name("rank.cpu_percent") is None
    assert split_counter_name("queue@depth") is None


def test_the_host_in_every_waiting_pair_is_the_one_cut_off():
    assert suspect_link([("node3", "node1"), ("node4", "node3")])[0] == "node3"
    host, words = suspect_link([("node1", "node2")])
    assert host is None and words.startswith("the link between node1 and node2 carried nothing")
    assert suspect_link([("node1", "node2"), ("node3", "node4")])[0] is None
    host, words = suspect_link([("node4", "node3")], {"node3": ["eth0"]})
    assert host == "node3" and "(eth0 without carrier; connections node4 to node3 waited for an answer)" in words


def test_a_link_slowed_mid_run_is_named_with_when_and_its_speed():
    """node3's link at 5 MB/s from second 10 to 19 of 30, the ring's other links at 100 MB/s.

    By hand: node3's usual rate is 100 MB/s (its 75th percentile: 20 of its 30 seconds at 100); each rank
    spends 0.5 s a second in communication, 5 s in the 10 slowed seconds, 5 x (1 - 5/100) = 4.75 s of it
    because of the link. node2 and node4 each keep a fast pair (1 -> 2, 4 -> 1): not named."""
    counters = _counters(_ring(30, slow=range(10, 20)))
    part = reduce_network(counters, _rank_meta(), _communication(30))
    episodes = network_episodes([part])
    assert [(e["kind"], e["host"]) for e in episodes] == [("slowed_link", "node3")]
    slowed = episodes[0]
    assert (slowed["began_ns"], slowed["ended_ns"]) == (10 * NS, 20 * NS)
    assert slowed["seconds_lost"] == pytest.approx(4.75)
    assert slowed["ranks"] == "2"
    text = slowed["text"]
    assert "node3's link slowed from 10 s to 20 s into the run" in text and "5 MB/s, against 100 MB/s" in text


def test_rank_groups_give_the_same_finding_as_the_whole_run():
    counters = _counters(_ring(30, slow=range(10, 20)))
    events = _communication(30)
    meta = _rank_meta()
    whole = network_findings([reduce_network(counters, meta, events)], wall_s=30.0)
    groups = [
        reduce_network(
            counters[counters["rank"].isin(ranks)], meta[meta["rank"].isin(ranks)], events[events["rank"].isin(ranks)]
        )
        for ranks in ([0], [1, 2], [3])
    ]
    assert network_findings(groups, wall_s=30.0).equals(whole)
    assert whole["fraction_of_wall"].iloc[0] == pytest.approx(4.75 / 30)


def test_a_steady_ring_and_a_whole_network_slowdown_name_no_link():
    steady = reduce_network(_counters(_ring(30)), _rank_meta(), _communication(30))
    assert network_episodes([steady]) == []
    everyone = [(rank, second, kind, peer, value / 20 if 10 <= second < 20 else value) for rank, second, kind, peer,
                value in _ring(30)]  # fmt: skip
    assert network_episodes([reduce_network(_counters(everyone), _rank_meta(), _communication(30))]) == []


def test_a_link_down_names_the_host_its_peers_waited_for():
    """From second 30 to 40 node3's connection to node1 and node4's to node3 wait for an answer (1 s, 2 s, ...)."""
    rows = _ring(30)
    rows += [(2, 30 + waited, LINK_UNANSWERED, 0, waited) for waited in range(1, 11)]
    rows += [(3, 30 + waited, LINK_UNANSWERED, 2, waited) for waited in range(1, 11)]
    part = reduce_network(_counters(rows), _rank_meta(), _communication(41))
    episodes = network_episodes([part])
    assert [(e["kind"], e["host"]) for e in episodes] == [("link_down", "node3")]
    down = episodes[0]
    assert down["seconds_lost"] == pytest.approx(10.0)
    assert down["ranks"] == "2"
    assert down["text"].startswith("node3's link carried nothing (connections node3 to node1, node4 to node3 waited")
    assert "for 10.0 s, from 30.5 s to 40.5 s into the run" in down["text"]


def test_a_congested_links_retransmission_waits_are_no_link_down():
    """node3's connections wait 1-3 s for an answer now and then (TCP's timeouts on a link dropping packets): under
    the 5 s a link down needs where no interface lost its carrier."""
    rows = _ring(20)
    rows += [(2, 5 + waited, LINK_UNANSWERED, 3, waited) for waited in (1.0, 2.0, 3.0)]
    assert network_episodes([reduce_network(_counters(rows), _rank_meta(), _communication(20))]) == []


def test_an_interface_without_carrier_is_said():
    rows = [*_ring(10), (2, 10, NO_CARRIER, "eth0", 1.0), (2, 11, NO_CARRIER, "eth0", 1.0)]
    rows += [(3, 11, LINK_UNANSWERED, 2, 1.5)]
    episodes = network_episodes([reduce_network(_counters(rows), _rank_meta(), _communication(12))])
    assert [(e["kind"], e["host"]) for e in episodes] == [("link_down", "node3")]
    assert "node3's link was down (eth0 without carrier; connections node4 to node3 waited" in episodes[0]["text"]


def test_a_run_without_network_counters_has_no_network_finding():
    analysis = analyse_run(_communication(5))
    assert not analysis.findings["kind"].isin(["link_down", "slowed_link"]).any()


def _own_address() -> str | None:
    """An address of this machine other than loopback (the probe leaves loopback out)."""
    from workbench.net_probe import host_addresses

    return next((address for address in host_addresses() if "." in address), None)


def test_the_probe_reads_this_process_tcp_connections_and_leaves_them_working():
    address = _own_address()
    if address is None:
        pytest.skip("this machine has no IPv4 address but loopback")
    server = socket.create_server((address, 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    client.setblocking(True)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(5.0)  # a library's default: a socket object made around the descriptor would take it
    try:
        probe = LinkProbe()
        probe.sample()
        assert client.fileno() in socket_fds()
        received = bytearray()

        def read(count: int) -> None:
            while len(received) < count:
                received.extend(accepted.recv(1 << 20))

        reader = threading.Thread(target=read, args=(4 << 20,))
        reader.start()
        client.sendall(b"x" * (4 << 20))
        reader.join(10)
        state = _tcp_state(client.fileno())
        assert state is not None and state.peer == address and state.bytes_acked >= 4 << 20
        probe.sample()  # reads every socket of the process, this one included
        client.sendall(b"after")  # still open and working
        read((4 << 20) + 5)
        assert bytes(received[-5:]) == b"after"
        assert client.getblocking() and os.get_blocking(client.fileno())  # its mode is as it was
    finally:
        socket.setdefaulttimeout(previous)
        for sock in (client, accepted, server):
            sock.close()
