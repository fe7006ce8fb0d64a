"""Recording user code on every rank, as ``workbench profile`` and ``workbench.profile_function`` do.

``profiled_call`` runs a function on an ipyparallel engine with the recorder on (steps, host work,
memory, Horovod's timeline); ``finish_run`` then imports the timeline into the run and marks it
ended. The command that launches a script under mpiexec with the same recording is
``workbench.commands.profile``; both share the timeline and TF-profiler import here.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.events import EVENT_COLUMNS, EVENT_SCHEMA
from workbench.formats.horovod_timeline import TimelineError, iter_horovod_timeline, timeline_tensor_bytes
from workbench.store import StreamWriter, update_run_meta

BOOT_DIR = Path(__file__).parent / "_profile_boot"
TIMELINE_FILE = "horovod_timeline.json"
#: What ranks started by a notebook need for ``profiled_call``: a timeline that can be switched on
#: at run time, and the response cache off (see ``RESPONSE_CACHE``). ``Cluster(n, env=PROFILE_ENVIRONMENT)``.
PROFILE_ENVIRONMENT: dict[str, str] = {"HOROVOD_TIMELINE": "DYNAMIC", "HOROVOD_CACHE_CAPACITY": "0"}
#: Horovod's response cache: off while profiling (unless set), so that every step's negotiation
#: marks every rank's readiness in the timeline, which per-step lateness is read from.
RESPONSE_CACHE = "HOROVOD_CACHE_CAPACITY"


def write_events(run_path: Path, events: pd.DataFrame) -> int:
    """Append imported events to the run, one part per rank; returns how many."""
    writer = ImportWriter(run_path)
    writer.add(events)
    writer.flush()
    return writer.written


#: An import holds a rank's rows back until they fill a part this large...
PART_ROWS = 65_536
#: ...or until the rows held for all ranks reach this many (about 180 MB: only the columns that vary
#: are held, 22 bytes a row for a timeline's); then every rank's are written.
HELD_ROWS = 8_000_000


class _Held(NamedTuple):
    """Some of one rank's rows: the columns that vary (a slice of its batch's table) and the others' one value."""

    varying: pa.Table
    constants: dict[str, Any]

    def table(self) -> pa.Table:
        """Every column of the store's schema, the constant ones repeated."""
        n = self.varying.num_rows
        columns = {}
        for field in EVENT_SCHEMA:
            if field.name in self.constants:
                columns[field.name] = _repeated(self.constants[field.name], field.type, n)
            else:
                columns[field.name] = self.varying.column(field.name)
        return pa.table(columns)


class ImportWriter:
    """Imported events into the run, a part per rank, in few parts however many ranks there are.

    A batch of a 1 024-rank timeline holds about a thousand rows per rank: a part each would make
    35 000 files of 2 GB (about 1 ms each to create and write here, and as many for every later load
    to open). So a rank's rows are held until it has ``part_rows`` of them, or until all ranks hold
    ``held_rows``; a rank with a large share of a batch (rank 0 of a 2-rank job) is written at once.
    Each column becomes one Arrow array per batch (categoricals stay dictionaries: no string per row)
    and each rank's rows are a slice of it (3 M events: 0.27 s, where a group-by of the frame and its
    strings took 1.25 s); columns with one value in the batch (run, host, phase, step) are not held.
    """

    def __init__(self, run_path: Path, *, part_rows: int = PART_ROWS, held_rows: int = HELD_ROWS) -> None:
        self.run_path = run_path
        self.part_rows = part_rows
        self.held_rows = held_rows
        #: Rows written so far.
        self.written = 0
        self._held: dict[int, list[_Held]] = {}
        self._held_rows = 0
        self._writers: dict[int, StreamWriter] = {}

    def add(self, events: pd.DataFrame) -> int:
        """Take a batch (any order); returns its rows. They are written now or by a later ``add`` or ``flush``."""
        for rank, rows in _rank_slices(events):
            held = self._held.setdefault(rank, [])
            held.append(rows)
            self._held_rows += rows.varying.num_rows
            if sum(part.varying.num_rows for part in held) >= self.part_rows:
                self._write(rank)
        if self._held_rows >= self.held_rows:
            self.flush()
        return len(events)

    def flush(self) -> None:
        """Write every rank's held rows."""
        for rank in sorted(self._held):
            self._write(rank)

    def _write(self, rank: int) -> None:
        tables = [part.table() for part in self._held.pop(rank)]
        if len({table.schema for table in tables}) > 1:  # a column a dictionary in one batch, plain in another
            tables = [table.cast(EVENT_SCHEMA) for table in tables]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        self._held_rows -= table.num_rows
        writer = self._writers.get(rank)
        if writer is None:
            # an import's parts are large or many: merging them would hold several at once
            writer = self._writers[rank] = StreamWriter(self.run_path, "events", rank, merge_fanout=0)
        writer.write({name: table.column(name) for name in table.column_names})
        self.written += table.num_rows


def _rank_slices(events: pd.DataFrame) -> list[tuple[int, _Held]]:
    """Each rank's rows of ``events`` as a slice of one Arrow table (sorted by rank first if they are not)."""
    if events.empty:
        return []
    ranks = events["rank"].to_numpy()
    if (np.diff(ranks) < 0).any():
        events = events.sort_values("rank", kind="stable")
        ranks = events["rank"].to_numpy()
    # the times always vary (and carry the row count, whatever else is one value: a batch of one row)
    maybe_constant = [name for name in EVENT_COLUMNS if name not in ("start_ns", "end_ns")]
    constants = {name: value for name in maybe_constant if (value := _one_value(events[name])) is not None}
    varying = [name for name in EVENT_COLUMNS if name not in constants and name != "rank"]
    table = pa.table({name: _arrow_column(events[name], EVENT_SCHEMA.field(name).type) for name in varying})
    bounds = [0, *(np.flatnonzero(ranks[1:] != ranks[:-1]) + 1).tolist(), len(ranks)]
    return [
        (int(ranks[first]), _Held(table.slice(first, end - first), {**constants, "rank": int(ranks[first])}))
        for first, end in itertools.pairwise(bounds)
    ]


def _one_value(values: pd.Series) -> Any:
    """The column's only value, if every row holds the same one (not missing); else None."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = values.cat.codes.to_numpy()
        if len(values.cat.categories) == 1 and len(codes) and codes.min() == 0:
            return str(values.cat.categories[0])
        return None
    if values.dtype.kind in "iu" and len(values):
        array = values.to_numpy()
        low = array.min()
        return int(low) if low == array.max() else None
    return None


def _repeated(value: Any, kind: pa.DataType, count: int) -> pa.Array:
    """``value`` ``count`` times: strings as a dictionary of one (no string per row)."""
    if pa.types.is_string(kind):
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, np.int8)), pa.array([value], kind))
    return pa.array(np.full(count, value, dtype=kind.to_pandas_dtype()))


def _arrow_column(values: pd.Series, kind: pa.DataType) -> pa.Array:
    """One column as the store's Arrow type, or a categorical as a dictionary of it (no string per row)."""
    array = pa.Array.from_pandas(values)
    if pa.types.is_dictionary(array.type) and array.type.value_type == kind:
        return array
    return array if array.type == kind else array.cast(kind)


def import_timeline(run_path: Path, *, enabled: bool) -> tuple[int, str]:
    """Horovod's timeline into the run: (events imported, one line saying what happened)."""
    path = run_path / TIMELINE_FILE
    if not enabled:
        return 0, "Horovod timeline: switched off (--no-timeline)"
    if not path.exists() or path.stat().st_size == 0:
        return 0, (
            "Horovod timeline: none written — the script never initialised Horovod (hvd.init()) or ran no"
            " collective; steps and host work are still recorded per rank"
        )
    unfinished: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    batches = iter_horovod_timeline(path, run_id=run_path.name, unfinished=unfinished, info=info)
    imported, error = _write_beside_parsing(run_path, batches)
    if error is not None:
        if imported:
            return imported, f"Horovod timeline: not imported whole ({error}); the {imported} spans before it are kept"
        return 0, f"Horovod timeline: not imported ({error})"
    # kept in the run's metadata: the analysis names the collective a stalled or stopped job was waiting in,
    # and the projection takes the bytes each step allreduces from the tensors' shapes
    tensors = timeline_tensor_bytes(path)
    update_run_meta(
        run_path,
        timeline_unfinished=unfinished,
        timeline_tensor_bytes=list(tensors.values()),
        timeline_tensors=tensors,
        timeline_gradient_bytes=sum(tensors.values()),
    )
    skipped = info.get("skipped_records", 0)
    damaged = f"; {skipped} damaged records left out, the rest read" if skipped else ""
    return imported, f"Horovod timeline: {imported} spans of collectives in flight{damaged}"


def _write_beside_parsing(run_path: Path, batches: Iterator[pd.DataFrame]) -> tuple[int, TimelineError | None]:
    """Each batch written on a thread while the next is parsed: (events written, the error that stopped it).

    Batch by batch keeps memory bounded. Parquet's writer releases the GIL, so the write overlaps
    the parse (5 GB: 1.15-1.2x the MB/s of writing in turn, and a lower peak); the batches paired
    before a damaged record are kept.
    """
    failure = None
    writer = ImportWriter(run_path)
    with ThreadPoolExecutor(max_workers=1) as thread:
        pending: Future[int] | None = None
        try:
            for events in batches:
                if pending is not None:
                    pending.result()
                pending = thread.submit(writer.add, events)
                del events
        except TimelineError as error:
            failure = error
        if pending is not None:
            pending.result()
        thread.submit(writer.flush).result()
    return writer.written, failure


def import_tf_profiles(run_path: Path) -> tuple[int, str]:
    """TF profiler traces of every rank into the run: (events imported, one line)."""
    from workbench.formats.tf_profile import TfProfileError, read_tf_profiles

    try:
        events = read_tf_profiles(run_path)
    except TfProfileError as error:
        return 0, f"TF profiler: not imported ({error})"
    ranks = sorted(int(r) for r in events["rank"].unique())
    return write_events(run_path, events), f"TF profiler: {len(events)} allreduce waits from ranks {ranks}"


def profiled_call(run_path: str | Path, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """On a rank (an ipyparallel engine): run ``function`` recorded as ``workbench profile`` records a script.

    Steps (top-level ``tf.function`` calls that train), Keras calls, the time between them and memory go
    into this rank's part of ``run_path``; if Horovod is initialised, its timeline too (rank 0
    writes it). The recording stops when the function returns or raises.
    """
    from workbench import autorecord
    from workbench.recorder import Recorder

    recorder = Recorder(run_path, memory_interval_s=0.2)
    autorecord.instrument(recorder)
    horovod = _initialised_horovod()
    if horovod is not None:
        try:
            horovod.start_timeline(str(Path(run_path).resolve() / TIMELINE_FILE))
        except ValueError as error:  # no timeline must never stop the training
            print(f"workbench: no Horovod timeline ({error}): start the ranks with env=PROFILE_ENVIRONMENT")
            horovod = None
    try:
        return function(*args, **kwargs)
    finally:
        if horovod is not None:
            horovod.stop_timeline()
        autorecord.close()


def _initialised_horovod() -> Any:
    """``horovod.tensorflow`` if this process imported and initialised it, else None."""
    module = sys.modules.get("horovod.tensorflow")
    try:
        return module if module is not None and module.is_initialized() else None
    except Exception:
        return None


def finish_run(run_path: str | Path, *, failed: bool = False) -> list[str]:
    """In the kernel, after ``profiled_call`` ran on every rank: import the timeline, mark the run ended."""
    run_path = Path(run_path)
    imported, line = import_timeline(run_path, enabled=True)
    update_run_meta(run_path, status="failed" if failed else "finished", timeline_events=imported)
    return [line]
