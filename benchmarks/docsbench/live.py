"""The live dashboard following a large synthetic job (``workbench bench live``): refresh time and event → widget.

A synthetic job (``LiveSyntheticJob``, run in processes of their own as real ranks are) writes to a run in
the store as a job's recorders do: every ``flush_s`` each rank appends, as one part file of its own,
the spans of the steps it finished since its last flush. Steps are synchronous, as in data-parallel
training: every rank reads its batch and computes (``step_s`` give or take 10 %; the last rank 10 %
slower, the ranks of ``slow_host`` ``slow_factor`` slower), then waits in the allreduce until the
slowest rank is ready, and the transfer takes the step's last 15 %. Every ``marker_every_s`` one rank,
in turn, checkpoints for ``marker_s``, 1 ms longer each time, so that the newest is its rank's longest
span (which the decimation keeps as a bar of its own): a span whose end is known. The dashboard
follows the run through ``RunTail`` exactly as in a notebook, refreshed every ``refresh_s``; each
refresh's poll and redraw are timed, and a marker's latency is the time from its end until a refresh
has drawn it. What the browser then takes to paint is measured by ``tests/browser`` (the same job and
dashboard).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from workbench.events import CHECKPOINT, COMMUNICATION, COMPUTE, INPUT, NS_PER_S
from workbench.store import MERGE_FANOUT, RunTail, StreamWriter, create_run

#: Where the feed process is told to stop: a file it checks between flushes.
STOP_FILE = "feed.stop"
#: The spans of one step, in order: (phase, name, share of the step). The communication span lasts from
#: the rank's readiness to the step's end: its share is the transfer's when the rank is the slowest.
STEP_SPANS: tuple[tuple[str, str, float], ...] = (
    (INPUT, "next_batch", 0.05),
    (COMPUTE, "train_step", 0.80),
    (COMMUNICATION, "allreduce", 0.15),
)


class LiveSyntheticJob:
    """``ranks`` recorders' output at a real job's rate; this process writes ``writes`` of them (default all).

    ``ranks_per_host``: ranks on host ``node<rank // ranks_per_host>`` (default all on ``node0``).
    Every process of a job given the same ``seed`` simulates the same steps, so a job can be written by
    several processes, each for its own ranks (``start_feed(..., processes=2)``).
    """

    def __init__(
        self,
        run_path: str | Path,
        *,
        ranks: int = 64,
        step_s: float = 0.1,
        marker_every_s: float = 1.0,
        marker_s: float = 1.0,
        flush_s: float = 0.5,
        seed: int = 0,
        merge_fanout: int = MERGE_FANOUT,
        ranks_per_host: int | None = None,
        slow_host: int | None = None,
        slow_factor: float = 1.25,
        writes: range | None = None,
        started_ns: int | None = None,
    ) -> None:
        self.run_path = Path(run_path)
        self.ranks = ranks
        self.step_ns = int(step_s * NS_PER_S)
        self.marker_every_ns = int(marker_every_s * NS_PER_S)
        self.marker_ns = int(marker_s * NS_PER_S)
        self.flush_ns = int(flush_s * NS_PER_S)
        # steps and markers draw from their own generators, and a step's draw is kept until it is written,
        # so every process of a job simulates the same job whenever it flushes
        self.step_rng = np.random.default_rng(seed)
        self.marker_rng = np.random.default_rng(seed + 1)
        self._work: np.ndarray | None = None
        self.hosts = [f"node{rank // ranks_per_host}" if ranks_per_host else "node0" for rank in range(ranks)]
        self.factor = np.ones(ranks)
        self.factor[-1] = 1.1
        if slow_host is not None and ranks_per_host:
            self.factor[slow_host * ranks_per_host : (slow_host + 1) * ranks_per_host] = slow_factor
        self.writes = writes if writes is not None else range(ranks)
        self.writers = {
            rank: StreamWriter(self.run_path, "events", rank, merge_fanout=merge_fanout) for rank in self.writes
        }
        started = time.time_ns() if started_ns is None else started_ns
        self.clock = np.full(ranks, started, dtype=np.int64)  # when each rank is free for its next step
        self.step = 0
        self.next_marker = started + self.marker_every_ns
        self.markers = 0
        self.spans = 0

    def flush(self, now_ns: int | None = None) -> int:
        """Every rank this process writes stores what it finished by ``now_ns`` as one part file; returns the spans."""
        now = time.time_ns() if now_ns is None else now_ns
        rows: dict[int, dict[str, list[Any]]] = {
            rank: {c: [] for c in ("phase", "name", "step", "start_ns", "end_ns")} for rank in self.writes
        }
        while now >= self.next_marker:  # a rank checkpointed (in the background), ending in the last flush_s
            rank = self.markers % self.ranks
            self.markers += 1
            end = self.next_marker - int(self.marker_rng.uniform(0.0, self.flush_ns))
            self.next_marker += self.marker_every_ns
            # each marker 1 ms longer than the one before: its rank's longest span, which stays a bar
            # of its own however dense the timeline (a 1 s span is narrower than a bucket after ~60 s)
            length = self.marker_ns + self.markers * 1_000_000
            if rank in rows:
                self._add(rows[rank], CHECKPOINT, "save", -1, end - length, end)
        (_, _, input_share), (_, _, compute_share), (_, _, transfer_share) = STEP_SPANS
        while True:
            if self._work is None:
                self._work = (self.step_ns * self.factor * self.step_rng.uniform(0.9, 1.1, self.ranks)).astype(np.int64)
            work = self._work
            input_end = self.clock + (work * input_share).astype(np.int64)
            ready = input_end + (work * compute_share).astype(np.int64)
            step_end = int(ready.max()) + int(self.step_ns * transfer_share)
            if step_end > now:
                break
            for rank, spans in rows.items():
                self._add(spans, INPUT, STEP_SPANS[0][1], self.step, int(self.clock[rank]), int(input_end[rank]))
                self._add(spans, COMPUTE, STEP_SPANS[1][1], self.step, int(input_end[rank]), int(ready[rank]))
                self._add(spans, COMMUNICATION, STEP_SPANS[2][1], self.step, int(ready[rank]), step_end)
            self.clock[:] = step_end
            self.step += 1
            self._work = None
        written = 0
        for rank, spans in rows.items():
            n = len(spans["phase"])
            if n:
                spans.update(
                    run_id=[self.run_path.name] * n,
                    rank=[rank] * n,
                    host=[self.hosts[rank]] * n,
                    detail=[""] * n,
                    epoch=[0] * n,
                    bytes=[-1] * n,
                )
                self.writers[rank].write(spans)
                written += n
        self.spans += written
        return written

    @staticmethod
    def _add(rows: dict[str, list[Any]], phase: str, name: str, step: int, start: int, end: int) -> None:
        rows["phase"].append(phase)
        rows["name"].append(name)
        rows["step"].append(step)
        rows["start_ns"].append(start)
        rows["end_ns"].append(end)

    def run(self, seconds: float) -> None:
        """Flush every ``flush_s`` for ``seconds`` or until the stop file appears."""
        deadline = time.monotonic() + seconds
        stop = self.run_path / STOP_FILE
        flush_s = self.flush_ns / NS_PER_S
        while time.monotonic() < deadline and not stop.exists():
            time.sleep(max(0.0, flush_s - (time.monotonic() % flush_s)))
            self.flush()


def start_feed(
    run_path: str | Path, *, ranks: int, seconds: float, step_s: float = 0.1, processes: int = 1, **job: Any
) -> subprocess.Popen:
    """The synthetic job in processes of its own, as ranks are (``stop_feed`` ends it early).

    ``processes`` > 1 splits the ranks' writing between that many processes, which simulate the same
    job (same seed and start); the one returned waits for the others. ``job``: more ``LiveSyntheticJob``
    settings (``ranks_per_host``, ``slow_host``, ``flush_s``, ...).
    """
    settings = {"ranks": ranks, "step_s": step_s, "started_ns": time.time_ns(), **job}
    code = (
        "import json, sys; from docsbench.live import feed_main;"
        "feed_main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]))"
    )
    args = [sys.executable, "-c", code, str(run_path), str(seconds), str(max(1, processes)), json.dumps(settings)]
    return subprocess.Popen(args)


def feed_main(run_path: str, seconds: float, processes: int, settings: dict[str, Any]) -> None:
    """A feed process: with ``processes`` > 1 it starts the others, each writing every ``processes``-th rank."""
    ranks = int(settings["ranks"])
    others = []
    for index in range(1, processes):
        code = (
            "import json, sys; from docsbench.live import LiveSyntheticJob;"
            "s = json.loads(sys.argv[2]); s['writes'] = range(int(sys.argv[3]), s['ranks'], int(sys.argv[4]));"
            "LiveSyntheticJob(sys.argv[1], **s).run(float(sys.argv[5]))"
        )
        others.append(
            subprocess.Popen(
                [sys.executable, "-c", code, run_path, json.dumps(settings), str(index), str(processes), str(seconds)]
            )
        )
    try:
        LiveSyntheticJob(run_path, **settings, writes=range(0, ranks, processes)).run(seconds)
    finally:
        for other in others:
            other.wait()


def stop_feed(run_path: str | Path, feed: subprocess.Popen, timeout_s: float = 10.0) -> None:
    (Path(run_path) / STOP_FILE).touch()
    try:
        feed.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        feed.kill()
        feed.wait()


def drawn_checkpoints(dashboard: Any) -> list[tuple[int, float, float]]:
    """(rank, start, end) in seconds since the dashboard's t0 of every checkpoint-coloured bar drawn."""
    for trace in dashboard.timeline.data:
        if trace.name == CHECKPOINT and trace.x is not None and len(trace.x):
            return [(int(r), float(b), float(b) + float(x)) for r, b, x in zip(trace.y, trace.base, trace.x)]
    return []


def marker_latencies(markers: list[tuple[int, int]], refreshes: list[tuple[int, int, list]]) -> list[float]:
    """Seconds from each marker's end to the first refresh that drew it.

    ``markers``: (rank, end_ns). ``refreshes``: (wall ns when the refresh ended, its t0 ns, its
    checkpoint bars). A marker counts as drawn when a checkpoint-coloured bar of its rank covers its
    end: its own bar, or a bucket it dominates once the run is long enough to be binned.
    """
    latencies = []
    for rank, end_ns in markers:
        for wall_ns, t0_ns, bars in refreshes:
            end_s = (end_ns - t0_ns) / NS_PER_S
            if any(r == rank and lo - 1e-6 <= end_s <= hi + 1e-6 for r, lo, hi in bars):
                latencies.append((wall_ns - end_ns) / NS_PER_S)
                break
    return latencies


def run(
    ranks: int = 64,
    seconds: float = 30.0,
    *,
    step_s: float = 0.1,
    refresh_s: float = 0.5,
    flush_s: float = 0.5,
    processes: int = 1,
    ranks_per_host: int | None = None,
    slow_host: int | None = None,
) -> dict[str, Any]:
    """Follow a ``ranks``-rank synthetic job for ``seconds`` with the dashboard; its refresh times and latency.

    Past ``TIMELINE_MAX_RANKS`` ranks the dashboard draws the rank × time heatmap of all ranks and the
    timeline of the slowest: ``slowest_drawn`` says whether the slow host's ranks are the ones drawn.
    """
    from workbench.widgets.dashboard import Dashboard

    with tempfile.TemporaryDirectory(prefix="workbench-live-") as scratch:
        run_path = create_run(scratch, "live", ranks=ranks)
        feed = start_feed(
            run_path,
            ranks=ranks,
            seconds=seconds + 5,
            step_s=step_s,
            processes=processes,
            flush_s=flush_s,
            ranks_per_host=ranks_per_host,
            slow_host=slow_host,
        )
        dashboard = Dashboard(RunTail(run_path), refresh_s=refresh_s)
        timings: list[dict[str, float]] = []
        drawn: list[tuple[int, int, list]] = []
        try:
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                tick = time.monotonic()
                dashboard.update()
                drawn.append((time.time_ns(), dashboard._t0_ns or 0, drawn_checkpoints(dashboard)))
                timings.append(dashboard.timings[-1])
                time.sleep(max(0.0, refresh_s - (time.monotonic() - tick)))
        finally:
            stop_feed(run_path, feed)
        events = dashboard.events
        if events is None:
            raise RuntimeError("the synthetic job wrote nothing the dashboard could read")
        checkpoints = events[events["phase"] == CHECKPOINT]
        markers = [(int(r), int(e)) for r, e in zip(checkpoints["rank"], checkpoints["end_ns"])]
        latencies = marker_latencies(markers, drawn)
        busy = [t for t in timings if t["new_events"] > 0]
        total = [t["poll_s"] + t["redraw_s"] for t in busy]
        slow = (
            set(range(slow_host * ranks_per_host, (slow_host + 1) * ranks_per_host))
            if slow_host is not None and ranks_per_host
            else set()
        )
        return {
            "ranks": ranks,
            "seconds": seconds,
            "step_s": step_s,
            "flush_s": flush_s,
            "feed_processes": processes,
            "ranks_per_host": ranks_per_host,
            "slow_host": slow_host,
            "heatmap": dashboard._heatmap is not None,
            "timeline_ranks": dashboard._visible_ranks(),
            "slow_host_ranks_on_timeline": len(slow & set(dashboard._visible_ranks())) if slow else None,
            "spans_at_end": len(events),
            "spans_per_s": round(len(events) / seconds, 1),
            "drawn_at_end": int(dashboard._drawn_spans),
            "refreshes": len(busy),
            "refresh_median_s": round(statistics.median(total), 4),
            "refresh_p95_s": round(float(np.percentile(total, 95)), 4),
            "refresh_max_s": round(max(total), 4),
            "poll_median_s": round(statistics.median(t["poll_s"] for t in busy), 4),
            "redraw_median_s": round(statistics.median(t["redraw_s"] for t in busy), 4),
            "last_refresh_s": round(total[-1], 4),
            "markers": len(markers),
            "markers_drawn": len(latencies),
            "marker_latency_median_s": round(statistics.median(latencies), 3) if latencies else None,
            "marker_latency_max_s": round(max(latencies), 3) if latencies else None,
            **_longest_spans_drawn(dashboard, events),
            "dashboard_error": dashboard.error,
        }


def _longest_spans_drawn(dashboard: Any, events: Any) -> dict[str, Any]:
    """Whether every rank on the timeline has its longest span (any of them, on a tie) as a bar of its own."""
    events = events[events["rank"].isin(dashboard._visible_ranks())]
    duration = events["end_ns"] - events["start_ns"]
    longest = events[duration == duration.groupby(events["rank"]).transform("max")]
    t0 = dashboard._t0_ns or 0
    bars: dict[int, list[tuple[float, float]]] = {}
    for trace in dashboard.timeline.data:
        if trace.x is None:
            continue
        for rank, base, width in zip(trace.y, trace.base, trace.x):
            bars.setdefault(int(rank), []).append((float(base), float(base) + float(width)))
    found: set[int] = set()
    for row in longest.itertuples():
        start_s, end_s = (row.start_ns - t0) / NS_PER_S, (row.end_ns - t0) / NS_PER_S
        drawn = np.asarray(bars.get(int(row.rank), [(np.nan, np.nan)]))
        if (np.abs(drawn[:, 0] - start_s) + np.abs(drawn[:, 1] - end_s) < 1e-6).any():
            found.add(int(row.rank))
    missing = sorted(set(int(r) for r in longest["rank"]) - found)
    return {"ranks_with_longest_span_drawn": len(found), "ranks_missing_longest_span": missing}


def format_result(result: dict[str, Any]) -> str:
    """One paragraph a reader compares by eye."""
    return (
        f"{result['ranks']} ranks, {result['spans_at_end']} spans after {result['seconds']:.0f} s"
        f" ({result['spans_per_s']:.0f} spans/s), {result['drawn_at_end']} bars drawn:"
        f" refresh (poll + redraw) median {result['refresh_median_s']} s, p95 {result['refresh_p95_s']} s,"
        f" max {result['refresh_max_s']} s; marker → drawn median {result['marker_latency_median_s']} s,"
        f" max {result['marker_latency_max_s']} s ({result['markers_drawn']} of {result['markers']} markers);"
        " every timeline rank's longest span drawn:"
        f" {not result['ranks_missing_longest_span']}"
        + (
            f"; heatmap of all ranks, timeline of {len(result['timeline_ranks'])}"
            + (
                f" ({result['slow_host_ranks_on_timeline']} of them on the slow host)"
                if result["slow_host_ranks_on_timeline"] is not None
                else ""
            )
            if result["heatmap"]
            else ""
        )
    )


def command(args: argparse.Namespace) -> int:
    """``workbench bench live``: 1 when the dashboard failed while following the job."""
    from workbench.bench import print_result

    result = run(
        ranks=args.ranks,
        seconds=args.seconds,
        step_s=args.step_s,
        refresh_s=args.refresh_s,
        flush_s=args.flush_s,
        processes=args.feed_processes,
        ranks_per_host=args.ranks_per_host,
        slow_host=args.slow_host,
    )
    print_result(result, args, format_result)
    return 0 if not result["dashboard_error"] else 1


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 64), indent=1))
