"""Whether a run's record covers the run: a job that stopped, stalled, or worked outside its recorded spans.

The breakdown and the POP metrics see only the recorded spans. A job that hung in a collective until it was
killed, or that loaded data before ``fit`` and wrote a checkpoint after it, looks short and healthy there.
Three things on disk say otherwise, and each becomes a finding here:

- the run's status (``run.json``): ``interrupted`` (``workbench profile`` was stopped) or ``failed``;
- Horovod's timeline: a collective that some ranks submitted and that never ran (``timeline_unfinished``,
  written by ``profile.import_timeline``), which names the ranks that never arrived;
- each rank's memory samples, taken by a thread from start to exit, against its recorded spans: the time
  alive after the last span, and the set-up before the first (a note: it is spent, not lost to a fault);
- the ranks' files: stretches in which the run folder refused their writes (a full disk), and what was dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from workbench import events as ev
from workbench.analysis.findings import combine_findings, missing_data_finding

#: Time alive after the last recorded span is reported from this many seconds ...
UNRECORDED_MIN_S = 1.0
#: ... and this share of the rank's sampled life (the sampler's interval and start-up stay under both).
UNRECORDED_MIN_SHARE = 0.1
NS = ev.NS_PER_S
#: A failed run's rank whose record ends this many seconds before every other rank's is named as the first.
FIRST_TO_STOP_S = 1.0
#: The set-up before a rank's first span is noted from this many seconds and this share of its sampled life.
SETUP_MIN_S = 2.0
SETUP_MIN_SHARE = 0.2


#: ``life_table``'s mark for "none" (a rank without memory samples, or without spans of its own).
NONE_NS = np.iinfo(np.int64).min
#: ``life_table`` columns: per rank, its first and last span (all; own time only) and its first and last memory sample.
LIFE_COLUMNS: tuple[str, ...] = ("rank", "first_ns", "last_ns", "first_own_ns", "last_own_ns", "first_sample_ns",
                                 "last_sample_ns")  # fmt: skip


def completion_findings(
    events: pd.DataFrame,
    memory: pd.DataFrame | None,
    meta: Mapping[str, Any] | None,
    hosts: Mapping[int, str] | None = None,
) -> pd.DataFrame:
    """The findings of this module for one run (``FINDING_COLUMNS``; empty when the record covers it)."""
    return completion_findings_of(life_table(events, memory), meta, hosts)


def life_table(events: pd.DataFrame, memory: pd.DataFrame | None) -> pd.DataFrame:
    """Per rank (``LIFE_COLUMNS``, ``NONE_NS`` where it has none): when its record starts and ends, in spans and
    in memory samples. All this module reads: rank groups' tables, concatenated, are the whole run's."""
    frames = []
    if len(events):
        rank = events["rank"].to_numpy(np.int64)
        start, end = events["start_ns"].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
        frames.append(_first_last(rank, start, end, ("first_ns", "last_ns")))
        own = ~events["phase"].isin(ev.OVERLAP_PHASES).to_numpy()
        if own.any():
            frames.append(_first_last(rank[own], start[own], end[own], ("first_own_ns", "last_own_ns")))
    if memory is not None and len(memory) and "time_ns" in memory:
        times = memory["time_ns"].to_numpy(np.int64)
        frames.append(
            _first_last(memory["rank"].to_numpy(np.int64), times, times, ("first_sample_ns", "last_sample_ns"))
        )
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in LIFE_COLUMNS})
    table = pd.concat(frames, axis=1).reindex(columns=list(LIFE_COLUMNS[1:])).fillna(NONE_NS).astype("int64")
    table.index = table.index.astype("int64")
    return table.rename_axis("rank").sort_index().reset_index()


def _first_last(rank: np.ndarray, start: np.ndarray, end: np.ndarray, names: tuple[str, str]) -> pd.DataFrame:
    """Per rank (the index): the least ``start`` and the greatest ``end``; by segments when the rows come rank by
    rank (as the store returns them), else by a group-by."""
    runs = ev.ascending_runs(rank)
    if runs is not None:
        first, last = np.minimum.reduceat(start, runs), np.maximum.reduceat(end, runs)
        return pd.DataFrame({names[0]: first, names[1]: last}, index=pd.Index(rank[runs], name="rank"))
    frame = pd.DataFrame({"rank": rank, names[0]: start, names[1]: end})
    return frame.groupby("rank").agg({names[0]: "min", names[1]: "max"})


def completion_findings_of(
    lives: pd.DataFrame, meta: Mapping[str, Any] | None, hosts: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """``completion_findings`` from the run's ``life_table``."""
    meta = meta or {}
    last_seen = _last_seen_ns(lives)
    samples = lives["last_sample_ns"][lives["last_sample_ns"] != NONE_NS]
    last_sample = int(samples.max()) if len(samples) else None
    # a job that ran to its end leaves its last negotiations open too: Horovod's writer is cut off at exit
    unfinished = meta.get("timeline_unfinished") if meta.get("status") != "finished" else None
    stalled = stalled_collective_findings(
        unfinished, meta.get("ranks"), last_seen, _origin_ns(lives), last_sample, hosts
    )
    # a stall explains the time after the last spans: the tail is named only without one
    tail = unrecorded_time_finding_of(lives_of(lives), hosts) if stalled is None else None
    setup = setup_time_finding_of(lives_of(lives), hosts)
    return combine_findings(stalled, tail, status_finding(meta, last_seen, hosts), setup)


def status_finding(
    meta: Mapping[str, Any], last_seen_ns: Mapping[int, int] | None = None, hosts: Mapping[int, str] | None = None
) -> pd.DataFrame | None:
    """A note for a run that did not end by itself: what follows is what the ranks recorded until then.

    ``last_seen_ns``: each rank's last span end or memory sample. For a failed run, a rank whose record ends
    ``FIRST_TO_STOP_S`` or more before every other rank's is named: the failure most likely began there.
    """
    status = meta.get("status")
    if status == "interrupted":
        by = meta.get("stopped_by") or "a signal"
        return missing_data_finding(
            "run_interrupted",
            f"the run was stopped ({by}) before its command ended: the analysis covers what the ranks recorded"
            " until then; a stalled collective or a rank that went quiet is named in the findings above",
        )
    if status == "failed":
        code = meta.get("exit_code")
        first = ""
        seen = sorted((last_seen_ns or {}).items(), key=lambda item: item[1])
        if len(seen) >= 2 and (seen[1][1] - seen[0][1]) / NS >= FIRST_TO_STOP_S:
            first = (
                f"; {ev.ranks_with_hosts([seen[0][0]], hosts)}'s record ends first,"
                f" {ev.format_seconds((seen[1][1] - seen[0][1]) / NS)} before any other rank's: look at its error"
                " first"
            )
        return missing_data_finding(
            "run_failed",
            f"the run's command failed{f' (exit code {code})' if code is not None else ''}: the analysis covers"
            f" what the ranks recorded until then; the error is in the command's own output{first}",
        )
    return None


def stalled_collective_findings(
    unfinished: Any,
    declared_ranks: Any,
    last_seen_ns: Mapping[int, int],
    origin_ns: int | None,
    last_sample_ns: int | None,
    hosts: Mapping[int, str] | None = None,
) -> pd.DataFrame | None:
    """The collective a stalled job waited in: submitted by some ranks, never by the others.

    ``last_seen_ns``: each rank's last span end or memory sample (its keys: the ranks that left a record).
    ``seconds_lost``: from its submission to the end of the run (the ranks' last memory sample, else the
    timeline's end): the time the job stood still.
    """
    if not unfinished:
        return None
    declared = isinstance(declared_ranks, int) and declared_ranks > 0
    everyone = set(range(int(declared_ranks))) if declared else set(last_seen_ns)
    first = min(unfinished, key=lambda record: int(record.get("since_ns", 0)))
    ready = sorted({int(r) for r in first.get("ready_ranks") or ()})
    missing = sorted(everyone - set(ready))
    since = int(first.get("since_ns", 0))
    end = max(int(first.get("file_end_ns", since)), last_sample_ns or since)
    stood = max(0.0, (end - since) / NS)
    at = f" {ev.format_seconds((since - origin_ns) / NS)} into the run" if origin_ns is not None else ""
    who = (
        f"{ev.ranks_with_hosts(ready, hosts)} submitted it{at} and {ev.ranks_with_hosts(missing, hosts)} never did"
        if ready and missing
        else f"{ev.ranks_with_hosts(ready, hosts)} submitted it{at}"
        if ready
        else f"no rank had submitted it yet{at}"
    )
    more = len(unfinished) - 1
    others = f" ({more} more collective{'s were' if more > 1 else ' was'} left open with it)" if more else ""
    cause = (
        f": look at what {ev.ranks_with_hosts(missing, hosts)} did after its last recorded span (a read that"
        " never returned, a branch only some ranks take, an exception caught without exiting)"
        if ready and missing
        else ""
    )
    text = (
        f"Horovod's {first.get('operation', 'collective')} of {first.get('tensor', '?')!r} never completed: {who};"
        f" the job stood still for {ev.format_seconds(stood)} until it ended{others}{cause}"
    )
    # the run's life: from its first span or sample to its last
    wall = (max(last_seen_ns.values()) - origin_ns) / NS if last_seen_ns and origin_ns is not None else None
    return pd.DataFrame(
        [
            {
                "kind": "stalled_collective",
                "text": text,
                "seconds_lost": stood,
                "fraction_of_wall": stood / wall if wall else np.nan,
                "ranks": ev.rank_list(missing or ready or everyone),
            }
        ]
    )


def unrecorded_time_finding(
    events: pd.DataFrame, memory: pd.DataFrame | None, hosts: Mapping[int, str] | None = None
) -> pd.DataFrame | None:
    """Time each rank was alive (sampled) after its last recorded span: work after the last recorded call
    (a checkpoint, evaluation outside Keras, a final collective) or a stall, which the breakdown and the POP
    metrics, built from the spans, do not see.

    Reported where it is at least ``UNRECORDED_MIN_S`` and ``UNRECORDED_MIN_SHARE`` of the rank's sampled
    life. ``seconds_lost``: the longest such tail.
    """
    return unrecorded_time_finding_of(sampled_lives(events, memory), hosts)


def unrecorded_time_finding_of(
    lives: pd.DataFrame | None, hosts: Mapping[int, str] | None = None
) -> pd.DataFrame | None:
    """``unrecorded_time_finding`` from ``sampled_lives``."""
    if lives is None:
        return None
    after, lived = lives["after_s"], lives["lived_s"]
    shown = (after >= UNRECORDED_MIN_S) & (after >= UNRECORDED_MIN_SHARE * lived)
    if not shown.any():
        return None
    ranks = [int(r) for r in lives.index[shown]]
    worst = int(after[shown].idxmax())
    text = (
        f"{ev.ranks_with_hosts(ranks, hosts)} went on after the last span they recorded:"
        f" {ev.ranks_with_hosts([worst], hosts)} for {ev.format_seconds(after[worst])} of the"
        f" {ev.format_seconds(lived[worst])} it lived. The breakdown and the efficiencies leave that time out: work"
        " after the last recorded call (a checkpoint, evaluation outside Keras, a final collective) or a stall;"
        " wrap the work in Recorder.phase(...) to see it"
    )
    return pd.DataFrame(
        [
            {
                "kind": "unrecorded_tail",
                "text": text,
                "seconds_lost": float(after[worst]),
                "fraction_of_wall": float(after[worst] / lived[worst]) if lived[worst] > 0 else np.nan,
                "ranks": ev.rank_list(ranks),
            }
        ]
    )


def setup_time_finding(
    events: pd.DataFrame, memory: pd.DataFrame | None, hosts: Mapping[int, str] | None = None
) -> pd.DataFrame | None:
    """A note on the time each rank was alive (sampled) before its first recorded span: imports, reading the
    data, building the model. It is part of the job's wall time that the breakdown and the efficiencies, which
    start at the first span, leave out, and that adding ranks does not shorten.

    Noted for the ranks where it is at least ``SETUP_MIN_S`` and ``SETUP_MIN_SHARE`` of the rank's sampled life;
    ``fraction_of_wall``: the longest one's share. A note (``seconds_lost`` NaN): the time is spent, not lost
    to a fault.
    """
    return setup_time_finding_of(sampled_lives(events, memory), hosts)


def setup_time_finding_of(lives: pd.DataFrame | None, hosts: Mapping[int, str] | None = None) -> pd.DataFrame | None:
    """``setup_time_finding`` from ``sampled_lives``."""
    if lives is None:
        return None
    before, lived = lives["before_s"], lives["lived_s"]
    shown = (before >= SETUP_MIN_S) & (before >= SETUP_MIN_SHARE * lived)
    if not shown.any():
        return None
    worst, shortest = int(before[shown].idxmax()), int(before.idxmin())
    others = ""
    if len(before) > 1:
        others = f"; the shortest, {ev.ranks_with_hosts([shortest], hosts)}'s, {ev.format_seconds(before[shortest])}"
    text = (
        f"Set-up before the first recorded span took {ev.format_seconds(before[worst])} on"
        f" {ev.ranks_with_hosts([worst], hosts)}, {before[worst] / lived[worst]:.0%} of the"
        f" {ev.format_seconds(lived[worst])} it lived{others}: imports, reading the data, building the model."
        " The breakdown and the efficiencies start at the first span and leave it out, and more ranks do not"
        " shorten it: it bounds the job's speedup. Code with a Recorder of its own can time the loading as a span"
        ' (rec.phase("input", "load_data")) to see it in the breakdown'
    )
    return pd.DataFrame(
        [
            {
                "kind": "setup_time",
                "text": text,
                "seconds_lost": np.nan,
                "fraction_of_wall": float(before[worst] / lived[worst]),
                "ranks": ev.rank_list([int(r) for r in lives.index[shown]]),
            }
        ]
    )


def sampled_lives(events: pd.DataFrame, memory: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per rank with spans and memory samples: ``before_s`` (first sample to first span), ``after_s`` (last span
    to last sample) and ``lived_s`` (first to last sample); None without both."""
    return lives_of(life_table(events, memory))


def lives_of(table: pd.DataFrame) -> pd.DataFrame | None:
    """``sampled_lives`` from a ``life_table``."""
    both = table[(table["first_own_ns"] != NONE_NS) & (table["first_sample_ns"] != NONE_NS)].set_index("rank")
    if both.empty:
        return None
    return pd.DataFrame(
        {
            "before_s": ((both["first_own_ns"] - both["first_sample_ns"]).clip(lower=0) / NS).astype(float),
            "after_s": ((both["last_sample_ns"] - both["last_own_ns"]).clip(lower=0) / NS).astype(float),
            "lived_s": ((both["last_sample_ns"] - both["first_sample_ns"]) / NS).astype(float),
        }
    )


def _last_seen_ns(lives: pd.DataFrame) -> dict[int, int]:
    """Each rank's last sign of life: its last span's end or its last memory sample, whichever is later."""
    seen = np.maximum(lives["last_ns"].to_numpy(np.int64), lives["last_sample_ns"].to_numpy(np.int64))
    return {int(rank): int(end) for rank, end in zip(lives["rank"], seen) if end != NONE_NS}


def _origin_ns(lives: pd.DataFrame) -> int | None:
    """The run's start: its first span or memory sample."""
    starts = [int(values.min()) for column in ("first_ns", "first_sample_ns")
              if len(values := lives[column][lives[column] != NONE_NS])]  # fmt: skip
    return min(starts) if starts else None


def write_stalls_of(rank_meta: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The stretches in which a rank's recorder could not write its run folder (the rank file's ``write_stalls``)."""
    if rank_meta is None or not len(rank_meta) or "write_stalls" not in rank_meta:
        return []
    found = []
    hosts = rank_meta["host"] if "host" in rank_meta else [""] * len(rank_meta)
    for rank, host, stalls in zip(rank_meta["rank"], hosts, rank_meta["write_stalls"]):
        if isinstance(stalls, (list, tuple)):
            found += [{**stall, "rank": int(rank), "host": str(host)} for stall in stalls if isinstance(stall, Mapping)]
    return found


def write_stall_finding(stalls: list[dict[str, Any]], origin_ns: int | None, hosts: Mapping[int, str]) -> pd.DataFrame:
    """One note for the stretches the run folder refused the ranks' writes (a full disk): when, and what was lost.

    Nothing held is lost (the recorders wrote it when there was room); rows past the recorder's limit were
    dropped, and the note says how many: the analysis reads what was written."""
    if not stalls:
        return combine_findings()
    began, ended = min(int(s.get("from_ns", 0)) for s in stalls), max(int(s.get("to_ns", 0)) for s in stalls)
    ranks = sorted({int(s["rank"]) for s in stalls})
    dropped = sum(int(s.get("dropped", 0) or 0) for s in stalls)
    at = (
        f" from {ev.format_seconds((began - origin_ns) / NS)} to {ev.format_seconds((ended - origin_ns) / NS)} into"
        " the run"
        if origin_ns is not None
        else ""
    )
    lost = (
        f"; {dropped:,} records past what a recorder holds were dropped, so the analysis lacks them"
        if dropped
        else "; they held their records meanwhile and wrote them once there was room: nothing was lost"
    )
    return missing_data_finding(
        "records_held",
        f"the run folder refused the writes of {ev.ranks_with_hosts(ranks, hosts)}{at}"
        f" ({stalls[0].get('error', 'an error')}){lost}: give the run folder a disk with room for the run",
        ev.rank_list(ranks),
    )
