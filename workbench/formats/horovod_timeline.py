"""Import Horovod's timeline (Chrome-trace JSON written by rank 0) into workbench events.

What the file holds (Horovod 0.28): a JSON array whose first record carries
``start_time_since_epoch_in_micros``; every other ``ts`` is µs after it. Each tensor is a
"process" (``pid``) named by a ``process_name`` record. Activities are ``B``/``E`` pairs that
nest per pid (``ALLREDUCE`` around ``MEMCPY_IN_FUSION_BUFFER``, ``MPI_ALLREDUCE``, ...). Inside a
``NEGOTIATE_*`` activity, a zero-length ``X`` event named by a rank number marks the moment that
rank was ready to reduce the tensor.

How it maps: negotiation becomes one span *per rank*, from that rank's readiness to the end of
the negotiation — the time the rank waited for the others (phase communication, a wait
activity). All other activities are rank 0's view (the file's writer) unless
``replicate_collectives`` copies them to every rank that took part, a fair approximation since
the collectives are synchronous.

The writer appends while training runs and only closes the array at ``stop_timeline()``; a file
being written or cut off mid-record is read up to its last complete record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.events import COMMUNICATION, events_frame

_DECODER = json.JSONDecoder()


class TimelineError(ValueError):
    """A file that is not a Horovod timeline."""


def _records(text: str, source: str) -> tuple[list[dict[str, Any]], bool]:
    """Every complete JSON record of a possibly unfinished array; and whether the file was complete."""
    stripped = text.lstrip()
    if not stripped.startswith("["):
        raise TimelineError(f"{source} is not a Horovod timeline (it does not start with '['): pass the file "
                            "written by HOROVOD_TIMELINE or hvd.start_timeline()")
    try:
        records = json.loads(stripped)
        if isinstance(records, list):
            return [r for r in records if isinstance(r, dict)], True
    except json.JSONDecodeError:
        pass
    records, position = [], 1
    while True:
        while position < len(stripped) and stripped[position] in " \t\r\n,":
            position += 1
        if position >= len(stripped) or stripped[position] == "]":
            break
        try:
            record, position = _DECODER.raw_decode(stripped, position)
        except json.JSONDecodeError:
            break  # cut mid-record: keep what came before
        if isinstance(record, dict):
            records.append(record)
    return records, False


def read_horovod_timeline(
    path: str | Path,
    *,
    run_id: str = "",
    host: str = "",
    replicate_collectives: bool = False,
    ranks: int | None = None,
) -> pd.DataFrame:
    """Events (``workbench.events`` schema) from a Horovod timeline file, complete or not."""
    path = Path(path)
    if not path.is_file():
        raise TimelineError(f"{path} does not exist: pass the path given to HOROVOD_TIMELINE or hvd.start_timeline()")
    records, _complete = _records(path.read_text(errors="replace"), str(path))
    origin_us = None
    tensor_names: dict[int, str] = {}
    for record in records:
        if record.get("ph") == "M" and record.get("name") == "process_name":
            args = record.get("args") or {}
            if "start_time_since_epoch_in_micros" in args:
                origin_us = int(args["start_time_since_epoch_in_micros"])
            elif "name" in args:
                tensor_names[int(record.get("pid", -1))] = str(args["name"])
    if records and origin_us is None:
        raise TimelineError(f"{path} has no start_time_since_epoch_in_micros record: it is not a Horovod "
                            "0.2x timeline (or its first line is damaged)")
    origin_ns = (origin_us or 0) * 1000

    rows: list[dict[str, Any]] = []
    open_spans: dict[int, list[dict[str, Any]]] = {}
    ready: dict[int, list[tuple[int, int]]] = {}
    seen_ranks: set[int] = {0}
    for record in records:
        phase_type = record.get("ph")
        pid = int(record.get("pid", -1))
        if phase_type == "B":
            open_spans.setdefault(pid, []).append(record)
            if str(record.get("name", "")).startswith("NEGOTIATE"):
                ready[pid] = []
        elif phase_type == "X" and str(record.get("name", "")).isdigit():
            rank = int(record["name"])
            seen_ranks.add(rank)
            ready.setdefault(pid, []).append((rank, int(record["ts"])))
        elif phase_type == "E" and open_spans.get(pid):
            begin = open_spans[pid].pop()
            activity = str(begin.get("name", ""))
            tensor = tensor_names.get(pid, f"tensor-{pid}")
            start_ns, end_ns = origin_ns + int(begin["ts"]) * 1000, origin_ns + int(record["ts"]) * 1000
            if activity.startswith("NEGOTIATE") and ready.get(pid):
                for rank, ready_us in ready.pop(pid):
                    rows.append(_row(rank, activity, tensor, origin_ns + ready_us * 1000, end_ns, run_id, host))
            else:
                rows.append(_row(0, activity, tensor, start_ns, end_ns, run_id, host))
    if not rows:
        return events_frame(pd.DataFrame(columns=["rank", "phase", "start_ns", "end_ns"]))
    frame = pd.DataFrame(rows)
    if replicate_collectives:
        all_ranks = range(ranks) if ranks else sorted(seen_ranks)
        negotiation = frame["name"].str.startswith("NEGOTIATE")
        collectives = frame[~negotiation]
        copies = [collectives.assign(rank=rank) for rank in all_ranks if rank != 0]
        frame = pd.concat([frame, *copies], ignore_index=True)
    return events_frame(frame.sort_values(["rank", "start_ns"], kind="stable", ignore_index=True))


def _row(rank: int, activity: str, tensor: str, start_ns: int, end_ns: int, run_id: str, host: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "rank": rank,
        "host": host,
        "phase": COMMUNICATION,
        "name": activity,
        "detail": tensor,
        "start_ns": start_ns,
        "end_ns": max(end_ns, start_ns),
    }
