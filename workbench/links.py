"""Each rank's network link, measured once when a job spans hosts: which rank sits behind a slow link.

Run on every rank after MPI is up (the notebook ``Cluster`` and ``workbench profile`` both call it): pairs of
ranks exchange a few megabytes at once, one pair at a time, and rank 0 gathers each rank's speed, which the
run records (``run.json`` ``links``) for the slow-link finding. ``bench.link`` is the yardstick apart from it:
one TCP stream between two nodes of the miniature cluster.
"""

from __future__ import annotations

import time
from typing import Any

#: Largest cluster the start-up link check measures (it exchanges with two partners per rank, one pair at a time).
LINK_CHECK_MAX_RANKS = 64


def rank_links(speeds: dict[int, float], host_of: Any) -> dict[int, dict[str, Any]]:
    """``link_bandwidth``'s answer as a run records it (``run.json`` ``links``): ``{rank: {host, bytes_per_s}}``."""
    return {int(rank): {"host": host_of(int(rank)), "bytes_per_s": float(speed)} for rank, speed in speeds.items()}


def link_bandwidth(megabytes: float = 4.0) -> dict[int, float] | None:
    """Run on every rank (MPI): each rank's link in bytes/s, rank 0 gets ``{rank: bytes/s}``.

    Pairs exchange ``megabytes`` both ways at once (``Sendrecv``), one pair at a time. A rank is
    paired with rank 0 and with one other rank; its link is the faster of the two exchanges, so a
    slow partner does not make it look slow (rank 0's link: the fastest of its exchanges).
    """
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        return {0: float("nan")} if rank == 0 else None
    pairs = [(0, other) for other in range(1, size)]
    pairs += [(other, other % (size - 1) + 1) for other in range(1, size) if size > 2]
    send = np.zeros(int(megabytes * 2**20), dtype=np.uint8)
    receive = np.empty_like(send)
    measured: dict[tuple[int, int], float] = {}
    for first, second in pairs:
        comm.Barrier()
        if rank in (first, second):
            peer = second if rank == first else first
            started = time.perf_counter()
            comm.Sendrecv(send, dest=peer, sendtag=17, recvbuf=receive, source=peer, recvtag=17)
            measured[(first, second)] = send.nbytes / (time.perf_counter() - started)
    gathered = comm.gather(measured, root=0)
    if rank != 0:
        return None
    speeds: dict[tuple[int, int], float] = {}
    for part in gathered:
        for pair, speed in part.items():
            speeds[pair] = min(speed, speeds.get(pair, speed))  # the pair's slower side timed the exchange
    return {r: max(speed for pair, speed in speeds.items() if r in pair) for r in range(size)}
