"""Each rank's TCP connections to other hosts, read with its heartbeat: which link is slow, or carries nothing.

Why: the link check at start (``workbench.links``) measures each rank's link once. A link that
drops for a while or slows mid-run is seen only in what the connections do then. Linux keeps,
for every TCP socket, what crossed it (``TCP_INFO``: bytes acknowledged, the time data waited
in flight, how long since the peer last acknowledged, retransmissions), and the rank's sockets
are its own open files: the probe reads ``TCP_INFO`` of each socket in ``/proc/self/fd`` that
is a TCP connection to another address (``getsockopt`` and ``getpeername`` from the C library on
the descriptor: nothing about the connection is changed). That is MPI's TCP transport (Open MPI's and MPICH's), Gloo and
NCCL's socket transport; InfiniBand verbs bypass the kernel and are not seen.

Per peer address and beat:

- ``bytes_per_s``: bytes the peer acknowledged over the time the connection had data in flight
  and was not held by the peer's receive window or its own send buffer (``tcpi_busy_time`` less
  ``tcpi_rwnd_limited`` and ``tcpi_sndbuf_limited``): the rate the network carried while it had
  work, not how much work there was. Only where at least ``MIN_RATE_BYTES`` crossed in the beat.
- ``unanswered_s``: the longest a connection to the peer has waited for an acknowledgement with
  data outstanding (a link down, a peer frozen or gone).

A node's interfaces up but without carrier (a pulled cable, a port down)
are read with it. The counters' names carry the peer (``net.bytes_per_s@10.0.0.3``) or the
interface (``net.no_carrier@eth0``), which a run's analysis maps to hosts with each rank's
addresses (the rank file's ``addresses``).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any

#: Counter names (``<name>@<peer address or interface>``), written with the heartbeat.
LINK_RATE = "net.bytes_per_s"
LINK_UNANSWERED = "net.unanswered_s"
NO_CARRIER = "net.no_carrier"
NET_COUNTERS = (LINK_RATE, LINK_UNANSWERED, NO_CARRIER)
#: Fewer bytes than this in a beat say nothing of a link's rate (a few small messages are latency, not bandwidth).
MIN_RATE_BYTES = 64 * 1024
#: A connection waiting this long for an acknowledgement with data outstanding is said (shorter: a busy link).
MIN_UNANSWERED_S = 1.0
#: Sockets read a beat at most (about 25 µs each): past it, the next ones at the next beat, in turn.
MAX_SOCKETS_A_BEAT = 256
#: ``struct tcp_info`` (linux/tcp.h): offsets of the fields read. ``tcpi_busy_time`` and the limits need
#: Linux 4.10; on an older kernel the struct is shorter and the rate is not read.
_UNACKED, _LAST_ACK_RECV = 24, 56
_BYTES_ACKED = 120
_BUSY, _RWND_LIMITED, _SNDBUF_LIMITED = 168, 176, 184
_TCP_INFO_LENGTH = 192


def counter_name(kind: str, target: str) -> str:
    """``net.bytes_per_s@10.0.0.3``: a counter of ``kind`` about one peer address or interface."""
    return f"{kind}@{target}"


def split_counter_name(name: str) -> tuple[str, str] | None:
    """``(kind, target)`` of a network counter's name; None for any other counter."""
    kind, at, target = name.partition("@")
    return (kind, target) if at and kind in NET_COUNTERS else None


@dataclass(frozen=True)
class TcpState:
    """What one TCP connection has done so far (cumulative counters, as ``TCP_INFO`` keeps them)."""

    peer: str
    bytes_acked: int
    network_busy_us: int
    unacked: int
    since_ack_ms: int


_SOL_SOCKET, _SO_PROTOCOL = 1, 38
_AF_INET, _AF_INET6 = int(socket.AF_INET), int(socket.AF_INET6)


@functools.cache
def _libc() -> Any:
    """The C library, for ``getsockopt``/``getpeername`` on a descriptor: a Python socket object made around
    another's descriptor could change its blocking mode (``socket.setdefaulttimeout``), this cannot."""
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _sockopt(fd: int, level: int, name: int, size: int) -> bytes | None:
    libc = _libc()
    if libc is None:
        return None
    buffer = ctypes.create_string_buffer(size)
    length = ctypes.c_uint32(size)
    if libc.getsockopt(fd, level, name, buffer, ctypes.byref(length)) != 0:
        return None
    return buffer.raw[: length.value]


def _peer_address(fd: int) -> str | None:
    """The IP address at the other end of ``fd``'s connection; None for anything else."""
    libc = _libc()
    if libc is None:
        return None
    buffer = ctypes.create_string_buffer(128)
    length = ctypes.c_uint32(128)
    if libc.getpeername(fd, buffer, ctypes.byref(length)) != 0:
        return None  # not connected, not a socket, closed since the listing
    family = struct.unpack_from("H", buffer.raw, 0)[0]
    if family == _AF_INET:
        return socket.inet_ntop(socket.AF_INET, buffer.raw[4:8])
    if family == _AF_INET6:
        address = socket.inet_ntop(socket.AF_INET6, buffer.raw[8:24])
        return address[7:] if address.startswith("::ffff:") else address
    return None


def _tcp_state(fd: int) -> TcpState | None:
    """``TCP_INFO`` of the socket behind ``fd`` when it is a TCP connection to another host, else None.

    Read with the C library on the descriptor itself: nothing about the connection is changed."""
    peer = _peer_address(fd)
    if peer is None or peer.startswith("127.") or peer == "::1":
        return None
    protocol = _sockopt(fd, _SOL_SOCKET, _SO_PROTOCOL, 4)
    if protocol is None or len(protocol) < 4 or struct.unpack_from("i", protocol)[0] != socket.IPPROTO_TCP:
        return None
    raw = _sockopt(fd, socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if raw is None or len(raw) < _LAST_ACK_RECV + 4:
        return None
    unacked, since_ack = struct.unpack_from("I", raw, _UNACKED)[0], struct.unpack_from("I", raw, _LAST_ACK_RECV)[0]
    acked, busy = struct.unpack_from("Q", raw, _BYTES_ACKED)[0] if len(raw) >= _BYTES_ACKED + 8 else 0, 0
    if len(raw) >= _TCP_INFO_LENGTH:
        busy_us, rwnd_us, sndbuf_us = struct.unpack_from("QQQ", raw, _BUSY)
        busy = max(0, busy_us - rwnd_us - sndbuf_us)
    return TcpState(peer, acked, busy, unacked, since_ack)


def socket_fds(fd_dir: str = "/proc/self/fd") -> list[int]:
    """This process's descriptors that are sockets (``socket:[inode]``)."""
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return []
    fds = []
    for name in names:
        try:
            if os.readlink(f"{fd_dir}/{name}").startswith("socket:"):
                fds.append(int(name))
        except (OSError, ValueError):
            continue  # closed since the listing
    return fds


#: ``SIOCGIFFLAGS`` and the flags read (linux/if.h)
_SIOCGIFFLAGS = 0x8913
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40


def _interface_flags() -> dict[str, int]:
    """Each interface's flags in this process's network namespace (``if_nameindex`` and one ioctl each: a few µs).

    Not ``/sys/class/net``, which shows the namespace that mounted it."""
    try:
        names = [name for _index, name in socket.if_nameindex()]
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return {}
    flags = {}
    with probe:
        for name in names:
            try:
                request = struct.pack("16sh", name.encode()[:15], 0)
                flags[name] = struct.unpack("16sh", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
            except OSError:
                continue  # gone since the listing
    return flags


def interfaces_up(flags: dict[str, int] | None = None) -> list[str]:
    """Interfaces (not loopback) administratively up, with carrier or without."""
    flags = _interface_flags() if flags is None else flags
    return sorted(name for name, value in flags.items() if value & _IFF_UP and not value & _IFF_LOOPBACK)


def interfaces_without_carrier(flags: dict[str, int] | None = None) -> list[str]:
    """Interfaces (not loopback) up but not running: no carrier, their link is down under them."""
    flags = _interface_flags() if flags is None else flags
    return [name for name in interfaces_up(flags) if not flags[name] & _IFF_RUNNING]


class LinkProbe:
    """``sample()``: the counters of this process's TCP connections and its host's carrier since the last call."""

    def __init__(self, fd_dir: str = "/proc/self/fd") -> None:
        self.fd_dir = fd_dir
        self._previous: dict[int, TcpState] = {}
        self._turn = 0
        #: interfaces that had carrier when the probe started: only their loss is news (a spare NIC never had it)
        flags = _interface_flags()
        self._had_carrier = set(interfaces_up(flags)) - set(interfaces_without_carrier(flags))

    def sample(self) -> list[tuple[str, float]]:
        """``[(counter name, value)]``: each peer's rate and unanswered wait, each lost carrier (1.0)."""
        every = sorted(socket_fds(self.fd_dir))
        fds = every
        if len(every) > MAX_SOCKETS_A_BEAT:  # a turn of them; the others keep their last reading
            self._turn = (self._turn + MAX_SOCKETS_A_BEAT) % len(every)
            fds = (every + every)[self._turn : self._turn + MAX_SOCKETS_A_BEAT]
        open_now, read_now = set(every), set(fds)
        states = {fd: state for fd, state in self._previous.items() if fd in open_now and fd not in read_now}
        for fd in fds:
            state = _tcp_state(fd)
            if state is not None:
                states[fd] = state
        acked: dict[str, int] = {}
        busy_us: dict[str, int] = {}
        unanswered: dict[str, float] = {}
        for fd, state in states.items():
            before = self._previous.get(fd)
            if before is state:
                continue  # not read this beat
            if before is not None and before.peer == state.peer and state.bytes_acked >= before.bytes_acked:
                acked[state.peer] = acked.get(state.peer, 0) + state.bytes_acked - before.bytes_acked
                busy = max(0, state.network_busy_us - before.network_busy_us)
                busy_us[state.peer] = busy_us.get(state.peer, 0) + busy
            if state.unacked and state.since_ack_ms / 1e3 >= MIN_UNANSWERED_S:
                unanswered[state.peer] = max(unanswered.get(state.peer, 0.0), state.since_ack_ms / 1e3)
        self._previous = states
        rows = [
            (counter_name(LINK_RATE, peer), acked[peer] / (busy_us[peer] / 1e6))
            for peer in sorted(acked)
            if acked[peer] >= MIN_RATE_BYTES and busy_us.get(peer, 0) > 0
        ]
        rows += [(counter_name(LINK_UNANSWERED, peer), seconds) for peer, seconds in sorted(unanswered.items())]
        rows += [
            (counter_name(NO_CARRIER, name), 1.0) for name in interfaces_without_carrier() if name in self._had_carrier
        ]
        return rows


def host_addresses() -> list[str]:
    """This host's addresses other than loopback (the rank file's ``addresses``: peers' counters name them)."""
    try:
        import psutil
    except ImportError:
        return []
    found = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6) and address.address:
                text = address.address.split("%")[0]
                if not text.startswith("127.") and text != "::1":
                    found.append(text)
    return sorted(set(found))


def suspect_link(
    pairs: list[tuple[str, str]], no_carrier: dict[str, list[str]] | None = None
) -> tuple[str | None, str]:
    """Whose link is down, from the pairs of hosts whose connections wait for an answer: ``(host or None, words)``.

    An interface without carrier names its host outright. Else the host in every waiting pair is the
    one cut off (its peers wait for it and it for them); a single pair names the link between its two
    hosts; pairs with no host in common name them all (a switch, more than one link)."""
    hosts_waiting = sorted({host for pair in pairs for host in pair})
    pair_words = ", ".join(f"{host} to {peer}" for host, peer in pairs)
    waited = f" (connections {pair_words} waited for an answer)" if pairs else ""
    if no_carrier:
        host = sorted(no_carrier)[0]
        names = ", ".join(no_carrier[host])
        more = f"; connections {pair_words} waited for an answer" if pairs else ""
        return host, f"{host}'s link was down ({names} without carrier{more})"
    if not pairs:
        return None, "a link was down"
    if len(pairs) == 1 or len({frozenset(pair) for pair in pairs}) == 1:
        first, second = pairs[0]
        return None, f"the link between {first} and {second} carried nothing{waited}"
    common = [host for host in hosts_waiting if all(host in pair for pair in pairs)]
    if len(common) == 1:
        return common[0], f"{common[0]}'s link carried nothing{waited}"
    return None, f"the links of {', '.join(hosts_waiting)} carried nothing{waited}"
