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
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from workbench.events import EVENT_COLUMNS, EVENT_SCHEMA
from workbench.formats.horovod_timeline import TimelineError, iter_horovod_timeline
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
    """Append imported events to the run, one part per rank; returns how many.

    Each column becomes one Arrow array for the whole batch (categoricals stay dictionaries: no
    string per row), and each rank's part is a slice of it: an import's batches come sorted
    by rank, so no rows are copied per rank (3 M events: 0.27 s, where a group-by of the frame and its
    strings took 1.25 s).
    """
    if events.empty:
        return 0
    ranks = events["rank"].to_numpy()
    if (np.diff(ranks) < 0).any():
        events = events.sort_values("rank", kind="stable")
        ranks = events["rank"].to_numpy()
    columns = {name: _arrow_column(events[name], EVENT_SCHEMA.field(name).type) for name in EVENT_COLUMNS}
    bounds = [0, *(np.flatnonzero(ranks[1:] != ranks[:-1]) + 1).tolist(), len(ranks)]
    for first, end in itertools.pairwise(bounds):
        # batches of an import are large already: merging them would hold several at once
        writer = StreamWriter(run_path, "events", int(ranks[first]), merge_fanout=0)
        writer.write({name: array.slice(first, end - first) for name, array in columns.items()})
    return len(events)


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
    imported, error = _write_beside_parsing(run_path, iter_horovod_timeline(path, run_id=run_path.name))
    if error is not None:
        if imported:
            return imported, f"Horovod timeline: not imported whole ({error}); the {imported} spans before it are kept"
        return 0, f"Horovod timeline: not imported ({error})"
    return imported, f"Horovod timeline: {imported} spans of collectives in flight"


def _write_beside_parsing(run_path: Path, batches: Iterator[pd.DataFrame]) -> tuple[int, TimelineError | None]:
    """Each batch written on a thread while the next is parsed: (events written, the error that stopped it).

    Batch by batch keeps memory bounded. Parquet's writer releases the GIL, so the write overlaps
    the parse (5 GB: 1.15-1.2x the MB/s of writing in turn, and a lower peak); the batches written
    before a damaged record are kept.
    """
    imported, failure = 0, None
    with ThreadPoolExecutor(max_workers=1) as writer:
        pending: Future[int] | None = None
        try:
            for events in batches:
                if pending is not None:
                    imported += pending.result()
                pending = writer.submit(write_events, run_path, events)
                del events
        except TimelineError as error:
            failure = error
        if pending is not None:
            imported += pending.result()
    return imported, failure


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
