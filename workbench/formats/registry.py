"""The trace formats ``workbench import`` reads: each is one ``TraceReader``, registered by its own module.

Why a registry: a format used to be a string in five places of the importer (its file names, its sniff, the
profile list, the readability check, the read). Now a format is its module and one ``register_reader`` call;
the importer walks ``readers()`` for the names a folder is searched for, to tell a file's format, to refuse a
format it recognises but does not read, and to read it.

Which reader claims a file: the first, by ``precedence`` (then registration order), whose ``sniff`` says yes.
A sniff looks at the name and the first bytes only (``FileStart``): formats told by their name come first,
then those told by content, a narrower content test before a broader one (Kineto's ``{`` with
``distributedInfo`` before the trace viewer's plain ``{``).
"""

from __future__ import annotations

import gzip
import importlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal

if TYPE_CHECKING:
    from workbench.formats.gpu_trace import DeviceTrace

#: Bytes a sniff sees of a file (decompressed when it is gzip).
HEAD_BYTES = 4096
#: A reader's kind: a per-host GPU-activity profile (read into a ``DeviceTrace``, one at a time), or a Horovod
#: timeline (the importer streams it into the run itself, all of a job's fragments together).
ReaderKind = Literal["activity", "timeline"]


class TraceFormatError(ValueError):
    """A file of a known format that cannot be read: the message is the import's one line."""


@dataclass
class FileStart:
    """What a sniff may look at: the file's name and its first bytes, read once however many readers ask."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @cached_property
    def head(self) -> bytes | None:
        """The first ``HEAD_BYTES`` (decompressed), leading whitespace stripped; None when they cannot be read
        (damaged gzip, no permission): the format's reader, if its name claims it, says what is wrong."""
        try:
            with open_maybe_compressed(self.path) as handle:
                return handle.read(HEAD_BYTES).lstrip()
        except (OSError, EOFError, zlib.error):
            return None


def open_maybe_compressed(path: Path) -> BinaryIO:
    """The file's bytes, decompressed as they are read when it is gzip (``.gz`` or not: by its magic bytes)."""
    handle = path.open("rb")
    if handle.read(2) == b"\x1f\x8b":
        handle.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    handle.seek(0)
    return handle


@dataclass(frozen=True)
class TraceReader:
    """One format: how its files are found and told apart, and how it is read (or why it is refused)."""

    #: As run.json's ``import.sources`` and ``importer.sniff`` name it: ``xplane``, ``kineto`` ...
    name: str
    #: Globs a folder is searched with (``*.xplane.pb``); a file given by itself is sniffed whatever its name.
    patterns: tuple[str, ...]
    #: Is the file of this format? Cheap: its name and first bytes.
    sniff: Callable[[FileStart], bool]
    #: A profile's reader (one file, one host's activity); None for a timeline and for a refused format.
    read: Callable[[Path], DeviceTrace] | None = None
    kind: ReaderKind = "activity"
    #: A format recognised but not read: the one line (``{path}`` is the file) that refuses it before anything
    #: is written, saying what to pass instead.
    refusal: str = ""
    #: The exceptions of ``read`` that are the file's fault: their message becomes the import's one line.
    errors: tuple[type[BaseException], ...] = (TraceFormatError, OSError)
    #: Lower is asked first: a format told by name before those told by content, a narrow test before a broad one.
    precedence: int = 50


_READERS: dict[str, TraceReader] = {}
#: The package's own reader modules, imported (and so registered) when the readers are first asked for.
BUILT_IN = ("workbench.formats.gpu_trace", "workbench.formats.kineto", "workbench.formats.horovod_timeline")


def register_reader(reader: TraceReader) -> TraceReader:
    """Add a format (one of the same name is replaced: a module imported again registers again)."""
    _READERS[reader.name] = reader
    return reader


def unregister_reader(name: str) -> None:
    """Remove a format (a test's own, when it is done)."""
    _READERS.pop(name, None)


def readers() -> tuple[TraceReader, ...]:
    """Every registered format, in the order a file is sniffed."""
    for module in BUILT_IN:
        importlib.import_module(module)
    return tuple(sorted(_READERS.values(), key=lambda reader: reader.precedence))


def sniff_reader(path: Path) -> TraceReader | None:
    """The format that claims the file, or None."""
    start = FileStart(Path(path))
    return next((reader for reader in readers() if reader.sniff(start)), None)


def file_patterns() -> tuple[str, ...]:
    """Every registered format's globs, each once, in registration order."""
    return tuple(dict.fromkeys(pattern for reader in readers() for pattern in reader.patterns))
