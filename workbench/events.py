"""The event schema: one place that names every column, phase and colour, and the shared facts.

Every layer reads these definitions: the recorder writes rows with exactly these columns, the
store persists them, analysis groups by them and figures colour by them. Keeping them here means
a new phase or column is one edit, not a hunt. The facts several layers share live here too, each
defined once: units (``NS_PER_S``, ``BYTES_PER_MB``), the phases' display order (``phase_order``),
POP's efficiency bands (``GOOD_EFFICIENCY``) and how a set of ranks is written (``rank_list``; with
their hosts, ``ranks_with_hosts`` and ``hosts_summary``).

Events (one row per span a rank spent in a phase)
-------------------------------------------------
run_id    str    the run the span belongs to
rank      int32  MPI rank (== ipyparallel engine id)
host      str    host name of the rank
phase     str    one of ``PHASES`` or a user's own name (validated by ``check_phase``)
name      str    what ran: ``train_step``, ``allreduce``, a Horovod activity such as ``MPI_ALLREDUCE``
detail    str    extra label, e.g. the Horovod tensor name ("" when none)
step      int64  global training step (-1 when not known)
epoch     int64  epoch (-1 when not known)
start_ns  int64  start, ns since the Unix epoch on rank 0's clock (see ``recorder.align_clocks``)
end_ns    int64  end, same clock; ``end_ns >= start_ns``
bytes     int64  payload size where known (-1 otherwise)

Memory samples (one row per sample)
-----------------------------------
run_id, rank, host   as above
time_ns    int64  sample time on the aligned clock
rss_bytes  int64  resident set size of the rank's process
gpu_bytes  int64  GPU memory in use by the rank (-1 when no GPU or unknown)
cpu_percent float64 process CPU use since the previous sample (NaN for the first)
label      str    what triggered the sample: ``interval`` or a call site such as ``predict``
iteration  int64  call / iteration index for call-site samples (-1 for interval samples)

Counters (one row per value of a named quantity over time, like HTA's queue-length tracks)
-------------------------------------------------------------------------------------------
run_id, rank, host   as above
name       str    what is counted, e.g. ``queue_depth``
time_ns    int64  when it had this value, on the aligned clock
value      float64 the value
"""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

#: Nanoseconds per second: every ``*_ns`` column is divided by this to give seconds.
NS_PER_S = 1_000_000_000
#: Microseconds per second: every ``*_us`` column is seconds times this.
US_PER_S = 1_000_000
#: Bytes per megabyte (SI) in every ``*_mb`` column and memory axis.
BYTES_PER_MB = 1_000_000
#: POP's traffic-light bands for efficiencies (0..1): at least GOOD is good, below FAIR is poor.
#: Findings flag efficiencies below GOOD; the POP table and the scaling figure draw both bands.
GOOD_EFFICIENCY = 0.8
FAIR_EFFICIENCY = 0.6

#: The phases every tool in the project knows, in display order.
COMPUTE = "compute"
COMMUNICATION = "communication"
EVALUATION = "evaluation"
INPUT = "input"
CHECKPOINT = "checkpoint"
IDLE = "idle"
#: Derived in analysis only: communication spans that are waiting (negotiation, waiting for other
#: ranks' data) rather than moving bytes.
COMMUNICATION_WAIT = "communication_wait"
#: Host work between training steps: time a rank spends outside any step (Python between the
#: calls of the step function, callbacks, logging), recorded by ``workbench profile``.
HOST = "host"
#: Collectives in flight on Horovod's background thread (its timeline, TF's profiler): they run
#: *while* the ranks compute, so they overlap the other phases and never take time from them.
IN_FLIGHT = "in_flight"
#: Span names ``workbench profile`` gives, which analysis reads back: a Keras call is
#: ``keras.<method>`` (its memory samples are labelled alike), and the time between two recorded
#: calls is ``between_calls`` (host) when the rank's main thread ran, else ``off_cpu`` (idle).
KERAS_PREFIX = "keras."
BETWEEN_CALLS = "between_calls"
OFF_CPU = "off_cpu"
#: Counters ``workbench profile`` writes of a rank's Python generators behind ``tf.data.Dataset.from_generator``:
#: the seconds spent in their ``next`` outside evaluation, and the elements they made.
PYTHON_INPUT_BUSY = "python_input_busy_s"
PYTHON_INPUT_ELEMENTS = "python_input_elements"
#: Phases that overlap a rank's other spans: left out of the breakdown's one-span-per-instant sum
#: and shown on their own lane.
OVERLAP_PHASES: frozenset[str] = frozenset({IN_FLIGHT})

PHASES: tuple[str, ...] = (COMPUTE, COMMUNICATION, EVALUATION, INPUT, CHECKPOINT, IDLE)
#: Display order of the known phases in every table, legend and stack: waiting sits next to the
#: transfer it splits from, idle (time in no span) comes last, after any user phase.
PHASE_ORDER: tuple[str, ...] = (
    COMPUTE,
    COMMUNICATION,
    COMMUNICATION_WAIT,
    EVALUATION,
    INPUT,
    CHECKPOINT,
    HOST,
    IN_FLIGHT,
    IDLE,
)

#: One colour per phase, used by every figure (Okabe-Ito palette: safe for colour blindness).
PHASE_COLOURS: dict[str, str] = {
    COMPUTE: "#0072B2",
    COMMUNICATION: "#D55E00",
    COMMUNICATION_WAIT: "#F0A875",
    EVALUATION: "#CC79A7",
    INPUT: "#E69F00",
    CHECKPOINT: "#009E73",
    HOST: "#8C6D31",
    IN_FLIGHT: "#999933",
    IDLE: "#BBBBBB",
}
#: Colours handed out, in order, to user-named phases.
EXTRA_COLOURS: tuple[str, ...] = ("#56B4E9", "#F0E442", "#000000", "#7F3C8D", "#11A579", "#3969AC")

#: Horovod timeline activities that are waiting for other ranks, not transferring data.
COMMUNICATION_WAIT_ACTIVITIES: frozenset[str] = frozenset(
    {
        "NEGOTIATE_ALLREDUCE",
        "NEGOTIATE_ALLGATHER",
        "NEGOTIATE_BROADCAST",
        "NEGOTIATE_ALLTOALL",
        "NEGOTIATE_REDUCESCATTER",
        "WAIT_FOR_DATA",
        "WAIT_FOR_OTHER_TENSOR_DATA",
        "QUEUE",
    }
)

EVENT_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("phase", pa.string()),
        ("name", pa.string()),
        ("detail", pa.string()),
        ("step", pa.int64()),
        ("epoch", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("bytes", pa.int64()),
    ]
)
EVENT_COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA.names)

MEMORY_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("time_ns", pa.int64()),
        ("rss_bytes", pa.int64()),
        ("gpu_bytes", pa.int64()),
        ("cpu_percent", pa.float64()),
        ("label", pa.string()),
        ("iteration", pa.int64()),
    ]
)
MEMORY_COLUMNS: tuple[str, ...] = tuple(MEMORY_SCHEMA.names)

COUNTER_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("name", pa.string()),
        ("time_ns", pa.int64()),
        ("value", pa.float64()),
    ]
)
COUNTER_COLUMNS: tuple[str, ...] = tuple(COUNTER_SCHEMA.names)

#: Device activity (one row per kernel, copy or step marker on a GPU's stream), from imported traces.
#: ``rank`` owns the device; ``device`` is ``GPU:0`` (``CPU`` for the host's step markers); ``stream`` the
#: CUDA stream or lane; ``kind`` one of ``DEVICE_KINDS``; ``step`` from the host's step markers (-1 outside).
DEVICE_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("device", pa.string()),
        ("stream", pa.string()),
        ("kind", pa.string()),
        ("name", pa.string()),
        ("step", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("bytes", pa.int64()),
        # ties a GPU activity to the host's runtime call that launched it (PyTorch traces; -1 where unknown)
        ("correlation", pa.int64()),
    ]
)
DEVICE_COLUMNS: tuple[str, ...] = tuple(DEVICE_SCHEMA.names)
#: Kinds of device activity: compute kernels, collective kernels (NCCL's), copies by direction, memsets, and
#: the host's step markers (``step``).
KERNEL, COLLECTIVE, MEMSET, STEP_MARKER = "kernel", "collective", "memset", "step"
COPY_KINDS: tuple[str, ...] = ("memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memcpy_p2p")
#: What ran on a GPU (the rest is the host's: step markers, and a PyTorch trace's operators and runtime calls).
GPU_KINDS: tuple[str, ...] = (KERNEL, COLLECTIVE, *COPY_KINDS, MEMSET)
#: The host's side of a PyTorch (Kineto) trace: CPU operators and annotations, CUDA runtime calls.
CPU_OP, RUNTIME = "cpu_op", "runtime"
DEVICE_KINDS: tuple[str, ...] = (*GPU_KINDS, STEP_MARKER, CPU_OP, RUNTIME)
#: Name of the spans ``formats.tf_profile`` makes of a TF profile (one per Horovod kernel, start to done); the
#: straggler analysis reads them as collectives in flight.
TF_PROFILER_SPAN = "tf_horovod_wait"
#: Counters every rank's recorder writes with its heartbeat (about once a second), each since the last beat:
#: the process's CPU % (all its threads; 150 = one and a half cores)
CPU_PERCENT = "rank.cpu_percent"
#: its threads' time ready to run with no core free, in % of a core (``workbench.cpu_probe``)
CPU_WAIT_PERCENT = "rank.cpu_wait_percent"
#: the % of its cgroup's CFS periods in which the CPU quota ran out (only where a quota is set)
CPU_THROTTLED_PERCENT = "rank.cpu_throttled_percent"

_USER_PHASE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class UnknownPhaseError(ValueError):
    """A phase name that is neither a known phase nor a valid user phase name."""


def check_phase(phase: str) -> str:
    """Return ``phase`` if it is a known phase or a well-formed user phase, else raise.

    User phases are lower-case identifiers (``data_augmentation``), so that a typo such as
    ``"Compute "`` is caught at the call site instead of becoming a silent extra colour.
    """
    if phase in PHASES:
        return phase
    if phase == COMMUNICATION_WAIT or not isinstance(phase, str) or not _USER_PHASE.match(phase):
        known = ", ".join(PHASES)
        raise UnknownPhaseError(f"unknown phase {phase!r}: use one of {known}, or a lower-case name such as 'augment'")
    return phase


def phase_colour(phase: str, order: list[str] | None = None) -> str:
    """Colour of ``phase``; user phases get a stable colour from their position in ``order``."""
    if phase in PHASE_COLOURS:
        return PHASE_COLOURS[phase]
    extras = [p for p in (order or [phase]) if p not in PHASE_COLOURS]
    index = extras.index(phase) if phase in extras else zlib.crc32(phase.encode())  # stable across processes
    return EXTRA_COLOURS[index % len(EXTRA_COLOURS)]


def phase_order(phases: Iterable[str] = ()) -> list[str]:
    """The phases in ``phases`` in display order: known phases, user phases as first seen, idle.

    User phases keep their order of first appearance (not sorted) so that a phase that appears
    later in a live run is added at the end and the colours of the others stay put.
    """
    present = list(dict.fromkeys(str(p) for p in phases))
    user = [p for p in present if p not in PHASE_ORDER]
    known = [p for p in PHASE_ORDER if p in present and p != IDLE]
    return known + user + ([IDLE] if IDLE in present else [])


def rank_list(ranks: Iterable[int]) -> str:
    """Compact rank list for sentences and status lines: ``[1, 2, 3, 5]`` -> ``"1–3, 5"``."""
    values = sorted({int(r) for r in ranks})
    parts: list[str] = []
    start = previous = None
    for value in [*values, None]:
        if start is not None and (value is None or value != previous + 1):
            parts.append(str(start) if start == previous else f"{start}–{previous}")
            start = None
        if value is not None and start is None:
            start = value
        previous = value
    return ", ".join(parts)


#: How a rank whose host is not known is grouped in text.
UNKNOWN_HOST = "unknown host"
#: More hosts than this among the ranks a sentence names, and it counts them instead of naming each.
MAX_NAMED_HOSTS = 4
#: ``hosts_summary`` names every host while its line stays within this many characters.
HOSTS_LINE_CHARS = 100


def rank_hosts(*frames: pd.DataFrame | None) -> dict[int, str]:
    """Each rank's host (``{rank: host}``), from the first frame that names one for it.

    Frames with ``rank`` and ``host`` columns (events, memory samples, rank meta): rows with an empty
    host are skipped, a rank keeps the host of its first such row. Missing columns give nothing,
    never an error. No loop over rows, and the rows of ranks named by their first row are not hashed:
    it runs on live redraws and on rank groups of millions of events too.
    """
    hosts: dict[int, str] = {}
    for frame in frames:
        if frame is None or len(frame) == 0 or "rank" not in frame or "host" not in frame:
            continue
        # a rank's rows usually come together (as the store returns them): the first row of each run
        # of one rank names its host; only ranks whose first row names none need all their rows
        rank = frame["rank"].to_numpy()
        starts = np.flatnonzero(np.concatenate([[True], rank[1:] != rank[:-1]]))
        firsts = frame.iloc[starts][["rank", "host"]].drop_duplicates("rank")
        named = firsts["host"].notna().to_numpy() & (firsts["host"].astype(str).to_numpy() != "")
        for first_rank, name in zip(firsts["rank"].to_numpy()[named], firsts["host"].astype(str).to_numpy()[named]):
            hosts.setdefault(int(first_rank), str(name))
        if named.all():
            continue
        unnamed = firsts["rank"].to_numpy()[~named]
        pairs = frame.loc[np.isin(rank, unnamed), ["rank", "host"]].drop_duplicates()
        pairs = pairs[pairs["host"].notna().to_numpy() & (pairs["host"].astype(str).to_numpy() != "")]
        for pair_rank, name in zip(pairs["rank"].to_numpy(), pairs["host"].astype(str).to_numpy(), strict=True):
            hosts.setdefault(int(pair_rank), str(name))
    return hosts


def host_count(hosts: Mapping[int, str] | None) -> int:
    """How many distinct known hosts ``hosts`` (``{rank: host}``) names."""
    return len({h for h in (hosts or {}).values() if h})


def _ranks_by_host(ranks: Iterable[int], hosts: Mapping[int, str]) -> dict[str, list[int]]:
    """``ranks`` grouped by host, hosts in the order of their lowest rank; unknown ones as ``UNKNOWN_HOST``."""
    groups: dict[str, list[int]] = {}
    for rank in sorted({int(r) for r in ranks}):
        groups.setdefault(hosts.get(rank) or UNKNOWN_HOST, []).append(rank)
    return groups


def ranks_with_hosts(ranks: Iterable[int], hosts: Mapping[int, str] | None = None) -> str:
    """Ranks for a sentence, with their hosts when the run's ranks ran on more than one.

    One host (or none known): ``"rank 2"``, ``"ranks 1–3, 5"``. Several: ``"rank 2 (node3)"``,
    ``"ranks 0–1 (node1), rank 4 (node2)"``; ranks that are all of one host's ranks (``hosts``
    lists every rank of the run) name the host first, ``"node3 (ranks 4–5)"``, because then the
    host is the likelier cause. Named ranks on more than ``MAX_NAMED_HOSTS`` hosts are counted:
    ``"ranks 0–511 on 64 hosts"``.
    """
    values = sorted({int(r) for r in ranks})
    word = "rank" if len(values) == 1 else "ranks"
    if host_count(hosts) < 2:
        return f"{word} {rank_list(values)}"
    assert hosts is not None
    groups = _ranks_by_host(values, hosts)
    if len(groups) > MAX_NAMED_HOSTS:
        return f"{word} {rank_list(values)} on {len(groups)} hosts"
    everyone = _ranks_by_host(hosts, hosts)
    parts = []
    for host, members in groups.items():
        noun = "rank" if len(members) == 1 else "ranks"
        whole_host = host != UNKNOWN_HOST and len(members) > 1 and members == everyone.get(host)
        parts.append(f"{host} ({noun} {rank_list(members)})" if whole_host else f"{noun} {rank_list(members)} ({host})")
    return ", ".join(parts)


def hosts_summary(
    hosts: Mapping[int, str] | None, *, max_chars: int = HOSTS_LINE_CHARS, ranks_word: str = "ranks"
) -> str:
    """One short line on where the ranks ran; "" when on one host (or none known).

    ``"4 ranks on 2 hosts: node1 (ranks 0–1), node2 (ranks 2–3)"`` while that fits ``max_chars``;
    else counted, ``"1024 ranks on 128 hosts, 8 per host"`` (``"4–8 per host"`` when they differ).
    ``ranks_word`` replaces the first "ranks" (a live view says "ranks seen").
    """
    if host_count(hosts) < 2:
        return ""
    assert hosts is not None
    groups = _ranks_by_host(hosts, hosts)
    head = f"{len(hosts)} {ranks_word} on {len(groups)} hosts"
    named = ", ".join(
        f"{host} ({'rank' if len(members) == 1 else 'ranks'} {rank_list(members)})" for host, members in groups.items()
    )
    if len(head) + 2 + len(named) <= max_chars:
        return f"{head}: {named}"
    sizes = sorted(len(members) for members in groups.values())
    per_host = str(sizes[0]) if sizes[0] == sizes[-1] else f"{sizes[0]}–{sizes[-1]}"
    return f"{head}, {per_host} per host"


def names_starting(names: pd.Series, prefix: str) -> np.ndarray:
    """A boolean mask of the names that start with ``prefix``: each distinct name tested once (a categorical's
    categories, an object column's unique values), not each of millions of rows."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        chosen = np.asarray([str(c).startswith(prefix) for c in names.cat.categories] + [False])
        return chosen[names.cat.codes.to_numpy()]
    codes, uniques = pd.factorize(names, use_na_sentinel=True)
    chosen = np.asarray([isinstance(u, str) and u.startswith(prefix) for u in uniques] + [False], dtype=bool)
    return chosen[codes]


def empty_events() -> pd.DataFrame:
    """An events frame with the right columns and dtypes and no rows."""
    return EVENT_SCHEMA.empty_table().to_pandas()


def empty_memory() -> pd.DataFrame:
    """A memory frame with the right columns and dtypes and no rows."""
    return MEMORY_SCHEMA.empty_table().to_pandas()


def empty_counters() -> pd.DataFrame:
    """A counters frame with the right columns and dtypes and no rows."""
    return COUNTER_SCHEMA.empty_table().to_pandas()


def natural_order(text: str) -> tuple:
    """A sort key that puts ``node2`` before ``node10`` (numbers in names compared as numbers)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def ascending_runs(keys: np.ndarray) -> np.ndarray | None:
    """Where each run of equal ``keys`` starts, when the keys ascend (rows rank by rank, as the store returns them);
    None when they do not (or there are none): per-key reductions then go by segment instead of a group-by."""
    if len(keys) == 0 or not (keys[1:] >= keys[:-1]).all():
        return None
    return np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))


def run_medians(values: np.ndarray, starts: np.ndarray) -> list[float]:
    """The median of each run of ``values`` that begins at ``starts`` (``ascending_runs``)."""
    bounds = np.append(starts, len(values))
    return [float(np.median(values[a:b])) for a, b in itertools.pairwise(bounds)]


def writable_text(text: str) -> str:
    """``text`` as it can be stored (UTF-8): a lone surrogate (a trace's ``"\\udcff"`` escape) written as its
    escape, so one odd name does not stop a file's import."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def labelled_codes(codes: np.ndarray, labels: Sequence[object]) -> pd.Categorical:
    """Codes into labels that may repeat (two metadata ids of one name), as a categorical of the distinct labels:
    millions of rows of a few names with no string per row."""
    labels = [writable_text(label) if isinstance(label, str) else label for label in labels]
    label_codes, distinct = pd.factorize(pd.Index(labels, dtype=object))
    return pd.Categorical.from_codes(label_codes[np.asarray(codes, np.int64)].astype(np.int32), categories=distinct)


def events_frame(rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """Build a schema-conformant events frame, filling optional columns with their defaults.

    Required: rank, phase, start_ns, end_ns. Defaults: run_id "", host "", name = phase,
    detail "", step/epoch/bytes -1. Handy for tests and importers.
    """
    frame = pd.DataFrame(rows).copy()
    for column in ("rank", "phase", "start_ns", "end_ns"):
        if column not in frame:
            raise ValueError(f"events need a {column!r} column")
    defaults = {"run_id": "", "host": "", "detail": "", "step": -1, "epoch": -1, "bytes": -1}
    for column, value in defaults.items():
        frame[column] = frame[column].fillna(value) if column in frame else value
    frame["name"] = frame["name"].fillna(frame["phase"]) if "name" in frame else frame["phase"]
    table = pa.Table.from_pandas(frame[list(EVENT_COLUMNS)], schema=EVENT_SCHEMA, preserve_index=False)
    return table.to_pandas()


# --------------------------------------------------------------------------------------------
# Seconds in words: the one formatter the analysis's sentences and the text output share
# --------------------------------------------------------------------------------------------

#: What a missing number reads as.
MISSING = "–"


def format_seconds(seconds: float | None, *, signed: bool = False) -> str:
    """``0.00123`` -> ``1.23 ms``, ``95.2`` -> ``95.2 s``, ``4000`` -> ``66.7 min``; NaN -> ``–``."""
    if not is_finite_number(seconds):
        return MISSING
    value = float(seconds)  # type: ignore[arg-type]
    if value == 0:
        return "0 s"
    magnitude = abs(value)
    if magnitude < 1e-3:
        unit, scale = "µs", 1e-6
    elif magnitude < 1:
        unit, scale = "ms", 1e-3
    elif magnitude < 600:
        unit, scale = "s", 1.0
    elif magnitude < 36_000:
        unit, scale = "min", 60.0
    else:
        unit, scale = "h", 3600.0
    return f"{significant_figures(value / scale, signed)} {unit}"


def significant_figures(value: float, signed: bool = False) -> str:
    """Three significant figures without exponent: 0.0123, 1.23, 12.3, 123, 1234."""
    value = float(f"{value:.3g}")  # round first: 9.996 is 10.0, not 10.00
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return text.replace("-", "−")


def is_finite_number(value: object) -> bool:
    try:
        return value is not None and math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
