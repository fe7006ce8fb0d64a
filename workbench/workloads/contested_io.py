"""Contested storage, modelled honestly: shared bandwidth that every reader on the machine draws from.

The published study (003) trained on an HPC system where ~16 jobs shared the file system: each read waited for
its share of the bandwidth. ``TokenBucket`` is that share as a cross-process token bucket: its state
(tokens, last refill) lives in a small file under ``/dev/shm`` and every process that opens the same
name draws from it under ``fcntl.flock``. A read of *n* bytes reserves *n* tokens at once and sleeps
until the bucket has refilled past them, so concurrent readers queue in arrival order and each gets
roughly an equal share per request, as on a fair file server.

``ContestedStorage`` stacks two buckets and a fixed latency per read:

- the **file system**, shared by this job's readers on every rank *and* by ``other_jobs`` competing
  readers (threads that read the same chunk size in a loop, standing in for the other jobs);
- the **node link**, shared by this job's readers on this machine only: more enqueue threads get a
  larger share of the file system, but never more than the link carries — so more threads delay the
  queue running dry without curing it, as the published study found;
- **latency** per read (metadata, seek): one thread alone cannot reach the bandwidth.

All ranks of a run on one machine share the buckets (named after the run; the node link after the run and
the host's name, so the nodes of a miniature cluster, which share this machine's ``/dev/shm``, share the
file system and each have a link of their own); across real machines the file system's bucket would need
a shared lock service, which this machine does not have. Say so wherever results are shown.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_STATE = struct.Struct("dd")  # tokens (bytes), last refill (time.monotonic(), shared by every process)
SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


class TokenBucket:
    """Bandwidth shared by every process that opens the same ``name``: ``acquire(n)`` waits for n bytes."""

    def __init__(self, name: str, rate_bytes_per_s: float, burst_bytes: float | None = None) -> None:
        if rate_bytes_per_s <= 0:
            raise ValueError(f"bucket {name!r}: rate {rate_bytes_per_s} B/s must be positive")
        self.name = name
        self.rate = float(rate_bytes_per_s)
        self.burst = float(burst_bytes if burst_bytes is not None else rate_bytes_per_s * 0.05)
        self.path = SHM_DIR / f"workbench-bucket-{name}"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with self._locked():
            if os.fstat(self._fd).st_size < _STATE.size:
                os.pwrite(self._fd, _STATE.pack(self.burst, time.monotonic()), 0)

    @contextlib.contextmanager
    def _locked(self):  # type: ignore[no-untyped-def]
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def reserve(self, nbytes: int) -> float:
        """Take ``nbytes`` tokens now (the balance may go negative); return seconds until they exist."""
        with self._locked():
            tokens, last = _STATE.unpack(os.pread(self._fd, _STATE.size, 0))
            now = time.monotonic()
            tokens = min(self.burst, tokens + (now - last) * self.rate) - nbytes
            os.pwrite(self._fd, _STATE.pack(tokens, now), 0)
        return max(0.0, -tokens / self.rate)

    def acquire(self, nbytes: int) -> float:
        """Wait until ``nbytes`` may be read; returns the seconds waited."""
        wait = self.reserve(nbytes)
        if wait > 0:
            time.sleep(wait)
        return wait

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def remove(self) -> None:
        """Delete the shared state (once every user is done)."""
        self.close()
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class StorageModel:
    """The contested storage of a preset: bandwidths in MB/s, latency per read, competing jobs."""

    filesystem_mb_s: float = 16.0
    node_link_mb_s: float = 4.0
    latency_ms: float = 4.0
    other_jobs: int = 15


class ContestedStorage:
    """Reads that pay latency and draw from the node-link and file-system buckets (see module doc)."""

    def __init__(self, name: str, model: StorageModel) -> None:
        self.model = model
        self.filesystem = TokenBucket(f"{name}-fs", model.filesystem_mb_s * 1e6)
        # one link per node: ranks on a miniature cluster's nodes share /dev/shm (the file system) but not a link
        self.node_link = TokenBucket(f"{name}-node-{socket.gethostname()}", model.node_link_mb_s * 1e6)
        self._stop = threading.Event()
        self._others: list[threading.Thread] = []

    def charge(self, nbytes: int) -> float:
        """Pay for reading ``nbytes``: latency, then both bandwidth shares; returns seconds waited."""
        latency = self.model.latency_ms / 1e3
        wait = max(self.filesystem.reserve(nbytes), self.node_link.reserve(nbytes))
        time.sleep(latency + wait)
        return latency + wait

    def start_other_jobs(self, chunk_bytes: int) -> None:
        """Competing readers on the file system only (other nodes' jobs), until ``stop_other_jobs``."""

        def other_job() -> None:
            latency = self.model.latency_ms / 1e3
            while not self._stop.is_set():
                wait = self.filesystem.reserve(chunk_bytes)
                self._stop.wait(latency + wait)

        for index in range(self.model.other_jobs):
            thread = threading.Thread(target=other_job, name=f"other-job-{index}", daemon=True)
            thread.start()
            self._others.append(thread)

    def stop_other_jobs(self) -> None:
        self._stop.set()
        for thread in self._others:
            thread.join(timeout=5)
        self._others.clear()

    def close(self) -> None:
        self.stop_other_jobs()
        self.filesystem.close()
        self.node_link.close()
