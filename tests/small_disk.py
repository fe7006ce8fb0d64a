"""A real small disk for the tests of a run folder that fills: a tmpfs mounted here (root only), and a file
that takes its last free byte, as a job's checkpoints or another user's files fill a shared disk."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """``directory`` as a tmpfs of ``size`` while the block runs; the test is skipped where it cannot be mounted."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.system(f"mount -t tmpfs -o size={size} tmpfs {directory} 2>/dev/null") != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield directory
    finally:
        os.system(f"umount -l {directory}")


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file, while others may be writing to it too."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        stat = os.statvfs(disk)
        wanted = stat.f_bavail * stat.f_frsize
        while wanted > 0:  # others write meanwhile: a little less each time until it fits
            try:
                os.posix_fallocate(handle.fileno(), 0, wanted)
                break
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                wanted -= 1 << 20
        handle.seek(0, os.SEEK_END)
        with contextlib.suppress(OSError):  # the last pages, until the disk says it is full
            while True:
                handle.write(b"\0" * 4096)
    return filler
