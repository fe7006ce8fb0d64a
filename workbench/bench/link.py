"""A plain TCP stream between two nodes of the miniature cluster: what its link carries, to compare collectives with.

Why: a link rate asked of ``tc`` is not what a program gets (headers, the shaper's bucket, the
CPU share of the node). The yardstick for an allreduce across nodes is one TCP stream over the
same link, from a process inside the sending node to one inside the receiving node.

``python -m workbench.bench.link serve IP PORT`` / ``send IP PORT MEGABYTES``: the two ends,
started in the nodes by :func:`tcp_stream`.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from typing import Any

CHUNK = 1 << 20


def serve(ip: str, port: int) -> None:
    """Accept one connection, read it to the end, print the bytes per second from the first byte."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ip, port))
        listener.listen(1)
        print("listening", flush=True)
        connection, _ = listener.accept()
        received, started = 0, None
        with connection:
            while data := connection.recv(CHUNK):
                started = started or time.perf_counter()
                received += len(data)
            connection.sendall(b"k")
        elapsed = time.perf_counter() - (started or time.perf_counter())
        print(f"{received} {elapsed:.6f}", flush=True)


def send(ip: str, port: int, megabytes: float) -> None:
    payload = b"\0" * CHUNK
    total = int(megabytes * 2**20)
    with socket.create_connection((ip, port), timeout=60) as connection:
        sent = 0
        while sent < total:
            connection.sendall(payload)
            sent += CHUNK
        connection.shutdown(socket.SHUT_WR)
        connection.recv(1)


def tcp_stream(mini: Any, sender: str, receiver: str, megabytes: float = 64, port: int = 5201) -> float:
    """Bytes per second of one TCP stream from ``sender`` to ``receiver`` (nodes of a MiniCluster)."""
    import subprocess

    program = [sys.executable, "-m", "workbench.bench.link"]
    ip = mini.node_ips[receiver]
    server = mini.popen(receiver, [*program, "serve", ip, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "listening":
            raise RuntimeError(f"the TCP receiver on {receiver} did not start")
        client = mini.popen(sender, [*program, "send", ip, str(port), str(megabytes)])
        if client.wait(timeout=600) != 0:
            raise RuntimeError(f"the TCP sender on {sender} failed (exit {client.returncode})")
        received, elapsed = server.stdout.readline().split()
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    return int(received) / float(elapsed)


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("serve", "send"))
    parser.add_argument("ip")
    parser.add_argument("port", type=int)
    parser.add_argument("megabytes", type=float, nargs="?", default=64.0)
    args = parser.parse_args()
    if args.role == "serve":
        serve(args.ip, args.port)
    else:
        send(args.ip, args.port, args.megabytes)


if __name__ == "__main__":
    _main()
