"""Collection on the ranks: phase spans, memory samples, clock alignment.

The recorder runs inside training steps, so the hot path is two ``time.time_ns()`` calls and one
``deque.append`` of a tuple. Everything else — building Arrow tables, writing Parquet, sampling
memory — happens in a background thread that wakes every ``flush_interval_s``. A rank that dies
loses at most the rows of the last interval.

Typical use on a rank::

    rec = Recorder.for_rank(run_dir)            # rank and host from MPI / the environment
    rec.align_clocks(comm)                      # optional: offset to rank 0's clock over MPI
    for epoch in range(epochs):
        rec.epoch = epoch
        for batch in rec.wrap_iterator(dataset):     # time waiting for data -> phase "input"
            with rec.phase("compute", "train_step"):
                ...
    rec.close()
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil

from workbench.cpu_probe import CpuWaitProbe, cpus_allowed
from workbench.events import (
    COUNTER_COLUMNS,
    CPU_PERCENT,
    CPU_THROTTLED_PERCENT,
    CPU_WAIT_PERCENT,
    EVENT_COLUMNS,
    MEMORY_COLUMNS,
    check_phase,
)
from workbench.net_probe import LinkProbe, host_addresses
from workbench.store import StreamWriter, read_run_meta, write_rank_meta

F = TypeVar("F", bound=Callable[..., Any])
#: ``time.time_ns`` bound once: the hot path saves a module attribute lookup per call.
_now_ns = time.time_ns
#: Distinct (phase, name, detail) row heads a recorder keeps prepared; the rest are built per span.
_MAX_CACHED_HEADS = 1024
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "HOROVOD_RANK", "SLURM_PROCID")


def detect_rank() -> int:
    """This process's MPI rank from the launcher's environment (0 when not under MPI)."""
    for variable in _RANK_VARIABLES:
        value = os.environ.get(variable)
        if value is not None and value.isdigit():
            return int(value)
    return 0


#: The counter each rank's recorder writes about once a second: its process's CPU % since the last one
#: (beside it: its threads' wait for a core and its cgroup's throttling, ``events.CPU_WAIT_PERCENT``).
HEARTBEAT = CPU_PERCENT
HEARTBEAT_INTERVAL_S = 1.0


class _Span:
    """Context manager for one span; a tiny class because it runs once per training step.

    Measured inside a real training loop (``workbench bench overhead``), every bytecode here costs
    several times what it costs in a tight loop (TensorFlow's step leaves the caches cold), so the
    span keeps one prepared row head and builds one tuple on exit.
    """

    __slots__ = ("_head", "_recorder", "_start", "_tail")

    def __init__(self, recorder: Recorder, head: tuple[str, str, str], step: int, epoch: int, nbytes: int) -> None:
        self._recorder = recorder
        self._head = head
        self._tail = (step, epoch, nbytes)
        self._start = 0

    def __enter__(self) -> _Span:
        self._start = _now_ns()
        return self

    def __exit__(self, *_exc: object) -> None:
        end = _now_ns()
        recorder = self._recorder
        phase, name, detail = self._head
        step, epoch, nbytes = self._tail
        offset = recorder.clock_offset_ns
        recorder._events.append(
            (
                phase,
                name,
                detail,
                recorder.step if step < 0 else step,
                recorder.epoch if epoch < 0 else epoch,
                self._start - offset,
                end - offset,
                nbytes,
            )
        )


#: Part files per second a live view can read, all ranks together: past ``FLUSH_FILES_PER_S / 2`` ranks,
#: each rank flushes less often than every 0.5 s. A dashboard read 1 024 part files in 0.5-0.6 s here
#: (busy 2-core machine): 512 a second keeps its poll near a quarter of a core at 1 024 ranks.
FLUSH_FILES_PER_S = 512
DEFAULT_FLUSH_INTERVAL_S = 0.5
#: Rows a recorder holds while its run folder cannot be written (a full disk, a quota), all streams together:
#: about 100 bytes a row, 100 MB at most. Past it the newest rows are dropped, counted and said.
MAX_HELD_ROWS = 1_000_000
#: memory samples are written at most this often, spans and counters (heartbeats) at the flush interval: a live
#: view's memory lags by a second at most
MEMORY_FLUSH_INTERVAL_S = 1.0


def default_flush_interval(ranks: object) -> float:
    """0.5 s, or longer for a job of more than 256 ranks (``ranks / FLUSH_FILES_PER_S``): 2 s at 1 024."""
    if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks > 0:
        return max(DEFAULT_FLUSH_INTERVAL_S, ranks / FLUSH_FILES_PER_S)
    return DEFAULT_FLUSH_INTERVAL_S


class Recorder:
    """Records one rank's phase spans and memory samples into a run directory.

    ``flush_interval_s`` defaults to ``default_flush_interval`` of the run's rank count: every rank's
    flush is a part file, and a live view reads them all.
    """

    def __init__(
        self,
        run_path: str | Path,
        *,
        rank: int | None = None,
        host: str | None = None,
        flush_interval_s: float | None = None,
        memory_interval_s: float | None = None,
        heartbeat_interval_s: float | None = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self.run_path = Path(run_path)
        meta = read_run_meta(self.run_path)  # one clear error if this is not a run directory
        self.run_id: str = meta["run_id"]
        self.rank = detect_rank() if rank is None else int(rank)
        self.host = host or socket.gethostname()
        self.flush_interval_s = (
            default_flush_interval(meta.get("ranks")) if flush_interval_s is None else flush_interval_s
        )
        self.clock_offset_ns = 0
        self.clock_precision_ns: int | None = None
        #: more facts for the rank's file (``note_facts``: its GPU, its local rank)
        self.facts: dict[str, Any] = {}
        #: Current step and epoch, stamped on spans that do not name their own.
        self.step = -1
        self.epoch = -1
        self._events: collections.deque[tuple] = collections.deque()
        self._memory: collections.deque[tuple] = collections.deque()
        self._counters: collections.deque[tuple] = collections.deque()
        self._event_writer = StreamWriter(self.run_path, "events", self.rank)
        self._memory_writer = StreamWriter(self.run_path, "memory", self.rank)
        self._counter_writer = StreamWriter(self.run_path, "counters", self.rank)
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # prime: the first real reading is then "since now"
        self._gpu = _GpuMemoryProbe()
        self._known_phases: set[str] = set()
        #: (phase, name, detail) -> the row head a span starts with, checked once
        self._heads: dict[tuple[str, str | None, str], tuple[str, str, str]] = {}
        self._memory_interval_s = memory_interval_s
        #: the background thread's tasks each come due an interval after the last (the first: after start)
        started = time.monotonic()
        self._last_memory_sample = self._last_flush = self._last_memory_flush = started
        #: a heartbeat row (``HEARTBEAT``: this process's CPU % since the last one) from the background
        #: thread: a rank waiting in MPI still beats, a frozen process or an unreachable node does not
        self._heartbeat_interval_s = heartbeat_interval_s
        self._heartbeat_process = psutil.Process()
        self._heartbeat_process.cpu_percent(None)
        self._cpu_wait = CpuWaitProbe()
        #: the rank's TCP connections to other hosts and its host's carrier, read with the heartbeat: a link
        #: that drops or slows mid-run (``workbench.net_probe``); peers are named by address (``addresses``)
        self._links = LinkProbe()
        self._addresses = host_addresses()
        self._cpus_allowed = cpus_allowed()
        # the first heartbeat with the first flush: a rank frozen early is still one that was seen beating
        self._last_heartbeat = started - max(0.0, (heartbeat_interval_s or 0.0) - self.flush_interval_s)
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        #: when ``close()`` wrote the last rows (ns): in the rank's file, so a watch knows a rank that records
        #: no more finished recording rather than stalled (it may work on unrecorded, e.g. freeing a model)
        self.recording_ended_ns: int | None = None
        #: the last error of a background flush that was not the run folder refusing a write (a bug: kept to see)
        self.write_error: Exception | None = None
        #: stretches in which the run folder could not be written (a full disk): from, to (ns), the error, rows
        #: held and written late, rows dropped past ``MAX_HELD_ROWS``; in the rank's file once it can be written
        self.write_stalls: list[dict[str, Any]] = []
        self._refused: dict[str, Any] | None = None
        self._write_rank_meta()
        self._thread = threading.Thread(target=self._background, name=f"workbench-recorder-{self.rank}", daemon=True)
        self._thread.start()

    # -- spans -------------------------------------------------------------------------------
    def _checked(self, phase: str) -> str:
        if phase not in self._known_phases:
            self._known_phases.add(check_phase(phase))
        return phase

    def phase(
        self,
        phase: str,
        name: str | None = None,
        *,
        detail: str = "",
        step: int = -1,
        epoch: int = -1,
        nbytes: int = -1,
    ) -> _Span:
        """``with rec.phase("evaluation"): ...`` records the block as one span."""
        head = self._heads.get((phase, name, detail))
        if head is None:
            head = (self._checked(phase), name or phase, detail)
            if len(self._heads) < _MAX_CACHED_HEADS:  # a detail per step (f"batch {i}") must not grow it
                self._heads[(phase, name, detail)] = head
        return _Span(self, head, step, epoch, nbytes)

    def record(
        self,
        phase: str,
        start_ns: int,
        end_ns: int,
        name: str | None = None,
        *,
        detail: str = "",
        step: int = -1,
        epoch: int = -1,
        nbytes: int = -1,
        aligned: bool = False,
    ) -> None:
        """Add a span measured elsewhere (local ``time.time_ns()`` unless ``aligned``)."""
        offset = 0 if aligned else self.clock_offset_ns
        self._events.append(
            (
                self._checked(phase),
                name or phase,
                detail,
                self.step if step < 0 else step,
                self.epoch if epoch < 0 else epoch,
                int(start_ns) - offset,
                int(end_ns) - offset,
                nbytes,
            )
        )

    def timed(self, phase: str, name: str | None = None) -> Callable[[F], F]:
        """Decorator: every call of the function becomes a span of ``phase``."""
        self._checked(phase)

        def decorate(function: F) -> F:
            label = name or function.__name__

            @functools.wraps(function)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.phase(phase, label):
                    return function(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorate

    def wrap_iterator(self, iterable: Iterable[Any], name: str = "next_batch") -> Iterator[Any]:
        """Yield from ``iterable`` recording the wait for each next item as phase ``input``.

        Works for ``tf.data.Dataset`` (its Python iterator) and any other iterable: the time
        spent inside ``next()`` is exactly the time the training loop waited for data.
        """
        iterator = iter(iterable)
        append = self._events.append  # inlined ``record``: this runs once per training step
        while True:
            start = _now_ns()
            try:
                item = next(iterator)
            except StopIteration:
                return
            end = _now_ns()
            offset = self.clock_offset_ns
            append(("input", name, "", self.step, self.epoch, start - offset, end - offset, -1))
            yield item

    def keras_callback(self, *, record_batches: bool = True) -> Any:
        """A Keras callback recording train steps (compute), test batches (evaluation), epochs."""
        from workbench._keras import RecorderCallback

        return RecorderCallback(self, record_batches=record_batches)

    def now_ns(self) -> int:
        """The current time on the aligned clock."""
        return time.time_ns() - self.clock_offset_ns

    def counter(self, name: str, value: float) -> None:
        """Record that ``name`` has ``value`` now (e.g. the input queue's depth): one deque append."""
        self._counters.append((name, time.time_ns() - self.clock_offset_ns, float(value)))

    # -- memory ------------------------------------------------------------------------------
    def sample_memory(self, label: str = "interval", iteration: int = -1) -> int:
        """Take one memory sample now (e.g. after every ``predict`` call); returns RSS in bytes."""
        rss = self._process.memory_info().rss
        self._memory.append(
            (self.now_ns(), rss, self._gpu.bytes_used(), self._process.cpu_percent(None), label, iteration)
        )
        return rss

    def start_memory_sampler(self, interval_s: float = 0.25) -> None:
        """Sample memory every ``interval_s`` in the background thread."""
        self._memory_interval_s = interval_s

    # -- clocks ------------------------------------------------------------------------------
    def align_clocks(self, comm: Any, rounds: int = 16) -> tuple[int, int]:
        """Estimate this rank's clock offset to rank 0 over MPI; see ``align_clocks``."""
        self.clock_offset_ns, self.clock_precision_ns = align_clocks(comm, rounds=rounds)
        self._write_rank_meta()
        return self.clock_offset_ns, self.clock_precision_ns

    def note_facts(self, **facts: Any) -> None:
        """Add facts about this rank (its GPU, its local rank) to the rank's file, now and at every rewrite."""
        self.facts.update(facts)
        self._write_rank_meta()

    # -- persistence -------------------------------------------------------------------------
    def _write_rank_meta(self) -> None:
        write_rank_meta(
            self.run_path,
            self.rank,
            **self.facts,
            host=self.host,
            pid=os.getpid(),
            clock_offset_ns=self.clock_offset_ns,
            clock_precision_ns=self.clock_precision_ns,
            cpus_allowed=self._cpus_allowed,
            cpu_quota_cores=self._cpu_wait.quota_cores,
            addresses=self._addresses,
            **({"write_stalls": self.write_stalls} if self.write_stalls else {}),
            **({"recording_ended_ns": self.recording_ended_ns} if self.recording_ended_ns is not None else {}),
        )

    def flush(self, *, memory: bool = True) -> None:
        """Write buffered rows now (the background thread does this every interval); ``memory=False``: the
        memory samples stay buffered for a later flush."""
        with self._write_lock:
            self._flush_stream(self._events, EVENT_COLUMNS[3:], self._event_writer)
            self._flush_stream(self._counters, COUNTER_COLUMNS[3:], self._counter_writer)
            if memory:
                self._flush_stream(self._memory, MEMORY_COLUMNS[3:], self._memory_writer)

    def _flush_stream(self, buffer: collections.deque, columns: tuple[str, ...], writer: StreamWriter) -> None:
        count = len(buffer)
        if not count:
            return
        rows = [buffer.popleft() for _ in range(count)]
        try:
            writer.write_rows(rows, columns, {"run_id": self.run_id, "rank": self.rank, "host": self.host})
        except Exception:
            buffer.extendleft(reversed(rows))  # kept for the next flush (e.g. the disk was full)
            raise

    def _background(self) -> None:
        while not self._stop.wait(self._until_due()):
            try:
                now = time.monotonic()
                if self._memory_interval_s and now - self._last_memory_sample >= self._memory_interval_s:
                    self._last_memory_sample = now
                    self.sample_memory("interval")
                if self._heartbeat_interval_s and now - self._last_heartbeat >= self._heartbeat_interval_s:
                    self._last_heartbeat = now
                    self.counter(HEARTBEAT, self._heartbeat_process.cpu_percent(None))
                    waiting, throttled = self._cpu_wait.sample()
                    if waiting is not None:
                        self.counter(CPU_WAIT_PERCENT, 100.0 * waiting)
                    if throttled is not None:
                        self.counter(CPU_THROTTLED_PERCENT, 100.0 * throttled)
                    self._sample_links()
                # at the flush interval, not at each sample's, and the memory samples at most every
                # MEMORY_FLUSH_INTERVAL_S: every part file costs the rank CPU (about 1 ms), and on a node with
                # a CPU quota that CPU is taken from its steps (docs/measurements.md); counters are written
                # when they have rows (a heartbeat a second), so a frozen rank is told apart as soon as before
                if now - self._last_flush >= self.flush_interval_s:
                    self._last_flush = now
                    memory = now - self._last_memory_flush >= MEMORY_FLUSH_INTERVAL_S
                    if memory:
                        self._last_memory_flush = now
                    self.flush(memory=memory)
                    if self._refused is not None:
                        self._written_again()
            except OSError as error:  # the run folder refuses writes (disk full): rows held, said once
                self._write_refused(error)
            except Exception as error:
                self.write_error = error
                continue

    def _held(self) -> int:
        return len(self._events) + len(self._counters) + len(self._memory)

    def _write_refused(self, error: OSError) -> None:
        """The first refusal is said (one line on the rank's stderr); rows past ``MAX_HELD_ROWS`` are dropped."""
        now = time.time_ns()
        if self._refused is None:
            said = os.strerror(error.errno) if error.errno else str(error)  # Arrow's own words are long
            self._refused = {"from_ns": now, "error": said, "dropped": 0}
            print(
                f"workbench recorder, rank {self.rank}: cannot write to {self.run_path} ({said}); holding its"
                f" records in memory (up to {MAX_HELD_ROWS:,} rows) and writing them when there is room",
                file=sys.stderr,
                flush=True,
            )
        over = self._held() - MAX_HELD_ROWS
        for buffer in (self._events, self._memory, self._counters):
            while over > 0 and buffer:
                buffer.pop()  # the newest: what is held stays the records up to the refusal, in order
                over -= 1
                self._refused["dropped"] += 1
                self._refused.setdefault("first_dropped_ns", now)
                self._refused["last_dropped_ns"] = now

    def _written_again(self) -> None:
        """The run folder took a write again: the stretch goes into the rank's file, and is said."""
        refused, self._refused = self._refused, None
        assert refused is not None
        refused["to_ns"] = time.time_ns()
        self.write_stalls.append(refused)
        lasted = (refused["to_ns"] - refused["from_ns"]) / 1e9
        dropped = f"; {refused['dropped']:,} rows past the limit were dropped" if refused["dropped"] else ""
        print(
            f"workbench recorder, rank {self.rank}: writing to {self.run_path} again after {lasted:.3g} s{dropped}",
            file=sys.stderr,
            flush=True,
        )
        with contextlib.suppress(OSError):
            self._write_rank_meta()

    def _sample_links(self) -> None:
        """The network counters of this beat; a probe that cannot read (an odd descriptor) skips the beat."""
        try:
            rows = self._links.sample()
        except Exception:  # the heartbeat and the flush go on whatever a socket says
            return
        for name, value in rows:
            self.counter(name, value)

    def _until_due(self) -> float:
        """Seconds until the background thread's next task is due: a memory sample, a heartbeat, a flush."""
        due = [(self._last_flush, self.flush_interval_s)]
        due += [(self._last_memory_sample, self._memory_interval_s), (self._last_heartbeat, self._heartbeat_interval_s)]
        now = time.monotonic()
        return max(0.0, min(last + interval - now for last, interval in due if interval))

    def close(self) -> None:
        """Stop the background thread and write everything still buffered."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.flush()
        except OSError as error:  # still refused at the end: what was written stays, the rest is said, not raised
            held = self._held()
            print(
                f"workbench recorder, rank {self.rank}: its last {held:,} records could not be written to"
                f" {self.run_path} ({error}); the run keeps what was written before",
                file=sys.stderr,
                flush=True,
            )
            return
        if self._refused is not None:
            self._written_again()
        self.recording_ended_ns = time.time_ns()
        self._write_rank_meta()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class _GpuMemoryProbe:
    """GPU memory used by this process through NVML, when an NVIDIA driver is present."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._pid = os.getpid()
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            self._handles = []

    def bytes_used(self) -> int:
        if not self._handles:
            return -1
        total = 0
        for handle in self._handles:
            try:
                for process in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if process.pid == self._pid and process.usedGpuMemory is not None:
                        total += int(process.usedGpuMemory)
            except Exception:
                return -1
        return total


def align_clocks(comm: Any, rounds: int = 16) -> tuple[int, int]:
    """Offset of this rank's clock to rank 0's, and its precision bound, in ns.

    Cristian's method over MPI: rank 0 pings each rank ``rounds`` times; the rank answers with
    its ``time.time_ns()``. With the round trip of least delay, offset = t_rank − (t_send +
    t_recv)/2, and the true offset lies within ± half that round trip — the precision bound we
    store. Aligned time = local time − offset. Rank 0's offset is 0 by definition.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    result = (0, 0)
    for peer in range(1, size):
        if rank == 0:
            best = None
            for _ in range(rounds):
                sent = time.time_ns()
                comm.send(None, dest=peer, tag=7301)
                remote = comm.recv(source=peer, tag=7302)
                received = time.time_ns()
                round_trip = received - sent
                if best is None or round_trip < best[0]:
                    best = (round_trip, remote - (sent + received) // 2)
            assert best is not None
            comm.send((best[1], best[0] // 2 + 1), dest=peer, tag=7303)
        elif rank == peer:
            for _ in range(rounds):
                comm.recv(source=0, tag=7301)
                comm.send(time.time_ns(), dest=0, tag=7302)
            result = comm.recv(source=0, tag=7303)
    comm.Barrier()
    return int(result[0]), int(result[1])
