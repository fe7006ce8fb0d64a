"""The run store: one directory per run, durable per-rank columnar files, a live tail.

Layout of a run directory::

    <root>/<run_id>/
        run.json                        metadata: config, environment, versions, ranks, status
        ranks/rank-00000.json           per-rank facts: host, pid, clock offset and its precision
        events/rank-00000/<a>-<b>.parquet   event rows of flush batches a..b (append-only)
        memory/rank-00000/<a>-<b>.parquet   memory samples, same scheme
        counters/rank-00000/<a>-<b>.parquet counter values (queue depth, ...), same scheme

Why part files: each flush writes a new small Parquet file under a temporary name and renames it
into place, which is atomic. A rank killed mid-run therefore leaves every batch it flushed
readable and nothing half-written. ``compact()`` merges a rank's parts into one file named by the
batch range it covers; readers skip any file whose range another file covers, so a crash during
compaction loses nothing either.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from workbench.config import physical_cores
from workbench.events import COUNTER_SCHEMA, EVENT_SCHEMA, MEMORY_SCHEMA

RUN_FILE = "run.json"
STREAMS: dict[str, pa.Schema] = {"events": EVENT_SCHEMA, "memory": MEMORY_SCHEMA, "counters": COUNTER_SCHEMA}
_PART = re.compile(r"^(\d{8})-(\d{8})\.parquet$")
#: Environment variables that change how training performs; recorded with every run.
RECORDED_ENV_PREFIXES = ("OMP_", "KMP_", "HOROVOD_", "TF_", "OMPI_MCA", "I_MPI_", "MPICH_", "CUDA_", "NCCL_")
_VERSIONED_PACKAGES = ("tensorflow-cpu", "tensorflow", "horovod", "mpi4py", "numpy", "pandas", "ipyparallel")


class NotARunError(ValueError):
    """A directory that is not a workbench run."""


def default_root() -> Path:
    """Where runs go unless told otherwise: ``$WORKBENCH_RUNS`` or ``./runs``."""
    return Path(os.environ.get("WORKBENCH_RUNS", "runs"))


def recorded_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables that matter for performance (threads, Horovod, MPI, TF)."""
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in sorted(environ.items()) if k.startswith(RECORDED_ENV_PREFIXES)}


def package_versions() -> dict[str, str]:
    """Versions of the packages that shape a run, without importing them (fast, no TF start-up)."""
    versions = {"python": sys.version.split()[0]}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return versions


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON under a temporary name and rename it into place: readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def new_run_id(name: str) -> str:
    """A sortable, unique, filesystem-safe run id: ``20261122-101500-eval-k1-3f9a``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}-{uuid.uuid4().hex[:4]}"


def create_run(
    root: str | Path | None = None,
    name: str = "run",
    *,
    config: dict[str, Any] | None = None,
    ranks: int | None = None,
    run_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Make a new run directory with its metadata and return its path."""
    root = Path(root) if root is not None else default_root()
    run_id = run_id or new_run_id(name)
    path = root / run_id
    path.mkdir(parents=True, exist_ok=False)
    meta = {
        "run_id": run_id,
        "name": name,
        "created": time.time(),
        "created_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        # the cores of the host that made the run: what ranks x threads is checked against later
        "cores": physical_cores(),
        "ranks": ranks,
        "config": config or {},
        "environment": recorded_environment(),
        "versions": package_versions(),
        "status": "running",
        **(extra or {}),
    }
    write_json_atomic(path / RUN_FILE, meta)
    return path


def update_run_meta(path: str | Path, **changes: Any) -> dict[str, Any]:
    """Merge ``changes`` into a run's metadata (e.g. ``status="finished"``)."""
    path = Path(path)
    meta = read_run_meta(path)
    meta.update(changes)
    write_json_atomic(path / RUN_FILE, meta)
    return meta


def read_run_meta(path: str | Path) -> dict[str, Any]:
    """The metadata of a run directory, or a clear error if it is not one."""
    path = Path(path)
    meta_file = path / RUN_FILE
    if not path.is_dir():
        raise NotARunError(f"{path} does not exist or is not a directory: pass a run directory such as runs/<run_id>")
    if not meta_file.is_file():
        raise NotARunError(
            f"{path} is not a workbench run (no {RUN_FILE}): pass a directory made by workbench, "
            "or list runs with workbench.store.list_runs()"
        )
    try:
        return json.loads(meta_file.read_text())
    except json.JSONDecodeError as error:
        raise NotARunError(f"{meta_file} is not valid JSON ({error.msg}): restore it or remove the run") from None


def write_rank_meta(path: str | Path, rank: int, **facts: Any) -> None:
    """Per-rank facts (host, pid, clock offset); one file per rank so ranks never contend."""
    rank_dir = Path(path) / "ranks"
    rank_dir.mkdir(exist_ok=True)
    write_json_atomic(rank_dir / f"rank-{rank:05d}.json", {"rank": rank, **facts})


def _rank_dir(path: Path, stream: str, rank: int) -> Path:
    return path / stream / f"rank-{rank:05d}"


def _parts(directory: Path) -> list[tuple[int, int, Path]]:
    """Part files of one rank's stream as (first batch, last batch, path), superseded ones removed."""
    found = []
    for entry in directory.iterdir() if directory.is_dir() else ():
        match = _PART.match(entry.name)
        if match:
            found.append((int(match.group(1)), int(match.group(2)), entry))
    # A file whose batch range lies inside another file's range was merged by compact(): skip it.
    found.sort(key=lambda part: (part[0], -part[1]))
    kept: list[tuple[int, int, Path]] = []
    for first, last, entry in found:
        if kept and first >= kept[-1][0] and last <= kept[-1][1]:
            continue
        kept.append((first, last, entry))
    return kept


def _read_parts(parts: list[tuple[int, int, Path]], schema: pa.Schema) -> pd.DataFrame:
    tables = []
    for _first, _last, entry in parts:
        try:
            tables.append(pq.read_table(entry, schema=schema))
        except (OSError, pa.ArrowInvalid):
            continue  # only complete files are renamed into place; tolerate foreign junk
    if not tables:
        return schema.empty_table().to_pandas()
    return pa.concat_tables(tables).to_pandas()


class StreamWriter:
    """Append-only writer of one rank's stream: rows are buffered and flushed as part files."""

    def __init__(self, run_path: str | Path, stream: str, rank: int) -> None:
        self.schema = STREAMS[stream]
        self.directory = _rank_dir(Path(run_path), stream, rank)
        self.directory.mkdir(parents=True, exist_ok=True)
        existing = _parts(self.directory)
        self._next_batch = (max(last for _f, last, _p in existing) + 1) if existing else 1

    def write(self, columns: dict[str, list[Any]]) -> Path | None:
        """Write one batch of rows (column name -> values) as a new part file."""
        table = pa.table(columns, schema=self.schema)
        if table.num_rows == 0:
            return None
        batch = self._next_batch
        self._next_batch += 1
        final = self.directory / f"{batch:08d}-{batch:08d}.parquet"
        tmp = self.directory / f".{final.name}.tmp"
        pq.write_table(table, tmp, compression="lz4")
        os.replace(tmp, final)
        return final


def compact(run_path: str | Path) -> None:
    """Merge each rank's part files into one file per stream (fewer files, faster loads)."""
    run_path = Path(run_path)
    for stream, schema in STREAMS.items():
        stream_dir = run_path / stream
        for rank_dir in sorted(stream_dir.iterdir()) if stream_dir.is_dir() else ():
            parts = _parts(rank_dir)
            if len(parts) < 2:
                continue
            table = pa.Table.from_pandas(_read_parts(parts, schema), schema=schema, preserve_index=False)
            final = rank_dir / f"{parts[0][0]:08d}-{parts[-1][1]:08d}.parquet"
            tmp = rank_dir / f".{final.name}.tmp"
            pq.write_table(table, tmp, compression="lz4")
            os.replace(tmp, final)
            for _first, _last, entry in parts:
                entry.unlink(missing_ok=True)


def _read_stream(path: Path, stream: str) -> pd.DataFrame:
    schema = STREAMS[stream]
    stream_dir = path / stream
    frames = [
        _read_parts(_parts(rank_dir), schema)
        for rank_dir in (sorted(stream_dir.iterdir()) if stream_dir.is_dir() else ())
    ]
    frames = [frame for frame in frames if len(frame)]
    if not frames:
        return schema.empty_table().to_pandas()
    sort_key = "start_ns" if stream == "events" else "time_ns"
    return pd.concat(frames, ignore_index=True).sort_values(["rank", sort_key], kind="stable", ignore_index=True)


@dataclass
class Run:
    """A recorded run, loaded from its directory (also after a kernel restart)."""

    path: Path
    meta: dict[str, Any]
    events: pd.DataFrame
    memory: pd.DataFrame
    rank_meta: pd.DataFrame = field(default_factory=pd.DataFrame)
    counters: pd.DataFrame = field(default_factory=lambda: COUNTER_SCHEMA.empty_table().to_pandas())

    @classmethod
    def load(cls, path: str | Path) -> Run:
        path = Path(path)
        meta = read_run_meta(path)
        rank_rows = []
        for rank_file in sorted((path / "ranks").glob("rank-*.json")):
            try:
                rank_rows.append(json.loads(rank_file.read_text()))
            except json.JSONDecodeError:
                continue
        return cls(
            path=path,
            meta=meta,
            events=_read_stream(path, "events"),
            memory=_read_stream(path, "memory"),
            counters=_read_stream(path, "counters"),
            rank_meta=pd.DataFrame(rank_rows),
        )

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id", self.path.name))

    @property
    def ranks(self) -> list[int]:
        """Ranks of the run: from the metadata when it says, else those that recorded anything."""
        declared = self.meta.get("ranks")
        if isinstance(declared, int) and declared > 0:
            return list(range(declared))
        seen = set(self.events["rank"].unique()) | set(self.memory["rank"].unique())
        return sorted(int(rank) for rank in seen)

    def __repr__(self) -> str:
        return (
            f"Run({self.run_id!r}, ranks={len(self.ranks)}, events={len(self.events)}, "
            f"memory_samples={len(self.memory)}, status={self.meta.get('status')!r})"
        )


def list_runs(root: str | Path | None = None) -> pd.DataFrame:
    """A table of the runs under ``root``, newest first, for picking runs to compare."""
    root = Path(root) if root is not None else default_root()
    rows = []
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        if not (entry / RUN_FILE).is_file():
            continue
        try:
            meta = read_run_meta(entry)
        except NotARunError:
            continue
        rows.append(
            {
                "run_id": meta.get("run_id", entry.name),
                "name": meta.get("name"),
                "created": pd.to_datetime(meta.get("created", 0), unit="s"),
                "ranks": meta.get("ranks"),
                "status": meta.get("status"),
                "path": str(entry),
            }
        )
    columns = ["run_id", "name", "created", "ranks", "status", "path"]
    return pd.DataFrame(rows, columns=columns).sort_values("created", ascending=False, ignore_index=True)


class RunTail:
    """The live feed: new events and memory samples of a run since the last ``poll()``.

    Part files are immutable once renamed into place, so remembering which batches were read is
    enough to deliver every row exactly once, from any number of ranks, without blocking them.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        read_run_meta(self.path)  # fail early on a directory that is not a run
        self._seen: dict[tuple[str, str], tuple[int, int]] = {}

    def poll(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Rows written since the previous call: (events, memory)."""
        return self._poll_stream("events"), self._poll_stream("memory")

    def poll_counters(self) -> pd.DataFrame:
        """Counter values written since the previous call (e.g. queue depth over time)."""
        return self._poll_stream("counters")

    def _poll_stream(self, stream: str) -> pd.DataFrame:
        schema = STREAMS[stream]
        stream_dir = self.path / stream
        frames = []
        for rank_dir in sorted(stream_dir.iterdir()) if stream_dir.is_dir() else ():
            key = (stream, rank_dir.name)
            seen, rows_read = self._seen.get(key, (0, 0))
            for first, last, entry in _parts(rank_dir):
                if last <= seen:
                    continue
                frame = _read_parts([(first, last, entry)], schema)
                if first <= seen:
                    # compact() merged batches 1..last, some of which we read already: they are the
                    # file's first rows, in batch order, so skip exactly as many rows as we read.
                    frame = frame.iloc[rows_read:]
                frames.append(frame)
                rows_read += len(frame)
                seen = last
            self._seen[key] = (seen, rows_read)
        frames = [frame for frame in frames if len(frame)]
        if not frames:
            return schema.empty_table().to_pandas()
        return pd.concat(frames, ignore_index=True)

    @property
    def finished(self) -> bool:
        """True once the run's metadata says it ended (finished or failed)."""
        return read_run_meta(self.path).get("status") in {"finished", "failed"}
