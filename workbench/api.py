"""The front door's verbs: a recorded run that analyses and reports itself, and one call that profiles a function.

Like HolisticTraceAnalysis' ``TraceAnalysis``, everything here forwards in one line to the layer
that does the work (``store`` loads, ``analysis`` computes, ``report`` writes, ``profile`` records),
so a notebook needs one import and the layers keep their boundaries: nothing below imports this.
``Run`` holds the loaded frames (what ``Run.load`` read, once) and recomputes each analysis when asked:
results are not cached, so a method never answers from frames that were since replaced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench import store

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from workbench.analysis import RunAnalysis
    from workbench.cluster import Cluster
    from workbench.widgets import Dashboard

#: ``step_throughput``'s columns, for a run it cannot measure (the function raises there: no steps, too few).
THROUGHPUT_COLUMNS: tuple[str, ...] = (
    "run_id", "ranks", "warmup_steps", "measured_steps", "seconds", "steps_per_s", "throughput", "unit"
)  # fmt: skip
#: ``memory_skew``'s columns, for a run without memory samples (the function raises there).
SKEW_COLUMNS: tuple[str, ...] = ("run_id", "rank", "peak_mb", "peak_over_mean", "skew")
#: ``network_episodes``' keys, as the columns of ``Run.network_episodes``.
EPISODE_COLUMNS: tuple[str, ...] = ("kind", "host", "began_ns", "ended_ns", "text", "seconds_lost", "ranks")


def _empty(columns: Sequence[str], note: str = "") -> pd.DataFrame:
    """A table with ``columns`` and no rows; ``note`` (why it is empty) in its ``attrs``."""
    import pandas as pd

    table = pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    if note:
        table.attrs["note"] = note
    return table


class Run(store.RunData):
    """A recorded run (``workbench.store.RunData``) that can analyse itself and write its HTML report.

    Each analysis of ``workbench.analysis`` a notebook calls on one run is a method here, given the run's own
    frames (events, memory, counters, devices, ranks, hosts), so ``run.phase_breakdown()`` replaces
    ``analysis.phase_breakdown(run.events, ranks=...)``. A method returns what its function returns; where the
    run lacks the data (no memory samples, no GPU activity, no step spans) it returns an empty table, never raises.
    ``analyse()`` is all of it at once, as ``workbench analyse`` computes it.
    """

    # ---- the whole analysis, its report and its text ------------------------------------------------
    def analyse(self) -> RunAnalysis:
        """What ``workbench analyse`` computes: POP metrics, breakdown, findings, steps, memory."""
        from workbench.analysis import analyse_run

        return analyse_run(
            self.events, self.memory, self.meta, rank_meta=self.rank_meta, counters=self.counters, devices=self.devices
        )

    def report(self, path: str | Path, result: RunAnalysis | None = None) -> Path:
        """The analysis as one self-contained HTML file (what ``workbench analyse --html`` writes)."""
        from workbench.commands.analyse import write_analysis_report

        return write_analysis_report(path, result if result is not None else self.analyse(), self)

    def summary(self, result: RunAnalysis | None = None) -> str:
        """The analysis as text, as ``workbench analyse`` prints it."""
        from workbench.text import format_analysis

        return format_analysis(result if result is not None else self.analyse())

    # ---- what the methods read ------------------------------------------------------------------------
    @property
    def measured_events(self) -> pd.DataFrame:
        """The events the methods analyse: spans that end before they start left out (``analyse()`` leaves them
        out too, with a finding saying how many), since the functions refuse them."""
        from workbench.analysis.run_analysis import forward_spans

        return forward_spans(self.events)

    @property
    def hosts(self) -> dict[int, str]:
        """``{rank: host}`` from the events, else the memory samples, else the ranks' files (unknown ranks left out)."""
        from workbench.analysis import run_hosts

        return run_hosts(self.events, self.memory, self.rank_meta)

    # ---- where the time went --------------------------------------------------------------------------
    def phase_breakdown(
        self, by: Sequence[str] = ("rank",), *, window: tuple[int, int] | None = None, waits: bool = False
    ) -> pd.DataFrame:
        """Where each rank's time went: ``[*by, phase, seconds, fraction]`` (idle included; silent ranks idle).

        ``window=(start_ns, end_ns)``: only that stretch. ``waits``: each rank's wait for the last one in a step
        counted as ``communication_wait``, as ``workbench analyse`` and ``workbench compare`` count it.
        """
        from workbench.analysis import phase_breakdown

        return phase_breakdown(_events_of(self, waits), by, window=window, ranks=self.ranks)

    def pop_metrics(
        self, *, input_is_useful: bool = True, useful_phases: Sequence[str] | None = None, waits: bool = False
    ) -> pd.DataFrame:
        """How efficient the run was (POP): one row, ``runtime_s``, useful time, ``load_balance``,
        ``communication_efficiency``, ``parallel_efficiency`` (``POP_COLUMNS``; NaN with a ``note`` without events).

        ``waits``: as ``phase_breakdown``.
        """
        from workbench.analysis import pop_metrics

        return pop_metrics(
            _events_of(self, waits), input_is_useful=input_is_useful, useful_phases=useful_phases, ranks=self.ranks
        )

    def findings(self, *, min_fraction: float = 0.02, efficiency_target: float = 0.8) -> pd.DataFrame:
        """What costs the run time, read from its phases: ``order, kind, text, seconds_lost, fraction_of_wall,
        ranks``, largest loss first. ``analyse().findings`` adds stragglers, memory, GPUs, input and the rest."""
        from workbench.analysis import findings

        return findings(
            self.measured_events,
            ranks=self.ranks,
            min_fraction=min_fraction,
            efficiency_target=efficiency_target,
            hosts=self.hosts,
        )

    def rank_activity(self, *, bin_s: float = 0.5, slowest: int = 16) -> pd.DataFrame:
        """Which ranks the others wait for: per rank ``host, known_s, waiting_s, work_s, work_share, slowest``
        (the ``slowest`` ranks are those that wait least), from the rank x time grid of ``bin_s`` bins."""
        from workbench.analysis.activity import rank_activity, rank_time_grid

        grid = rank_time_grid(self.measured_events, bin_s=bin_s)
        return rank_activity(grid, slowest=slowest, hosts=self.hosts)

    def compare(self, other: store.RunData, *, waits: bool = False) -> pd.DataFrame:
        """Where ``other`` (run B) spent its time differently from this run (A): per rank and phase, then per phase
        and the wall time, ``scope, rank, phase, seconds_a, seconds_b, delta_s, ratio, present``.

        ``waits=True``: waits for the last rank counted as ``workbench compare`` counts them.
        """
        from workbench.analysis import compare_runs

        return compare_runs(_events_of(self, waits), _events_of(other, waits), ranks_a=self.ranks, ranks_b=other.ranks)

    # ---- steps and stragglers -------------------------------------------------------------------------
    def steps_per_rank(self, *, step_name: str = "train_step") -> pd.DataFrame:
        """How fast each rank stepped: ``rank, steps, seconds, steps_per_s, mean_step_s, median_step_s``."""
        from workbench.analysis import steps_per_rank

        return steps_per_rank(self.measured_events, ranks=self.ranks, step_name=step_name)

    def step_throughput(
        self,
        *,
        warmup_steps: int = 10,
        measured_steps: int = 100,
        samples_per_step: float | None = None,
        step_name: str = "train_step",
    ) -> pd.DataFrame:
        """Steps (and samples) per second after a warm-up: ``run_id, ranks, warmup_steps, measured_steps, seconds,
        steps_per_s, throughput, unit`` (+ ``samples_per_s``). Empty, ``attrs["note"]`` saying why, when the run
        has no step spans or no more than ``warmup_steps`` of them."""
        from workbench.analysis import step_throughput

        try:
            return step_throughput(
                self.measured_events,
                warmup_steps=warmup_steps,
                measured_steps=measured_steps,
                samples_per_step=samples_per_step,
                step_name=step_name,
            )
        except ValueError as error:
            if warmup_steps < 0 or measured_steps < 1 or (samples_per_step is not None and samples_per_step <= 0):
                raise  # the arguments, not the run
            return _empty(THROUGHPUT_COLUMNS, note=str(error))

    def step_waits(self, *, step_name: str = "train_step") -> pd.DataFrame:
        """Per rank and step, how long it waited for the last rank and on what evidence: ``rank, step, start_ns,
        end_ns, duration_s, wait_s, compute_s, late_rank, evidence, wait_end_ns``."""
        from workbench.analysis import step_waits

        return step_waits(self.measured_events, step_name=step_name)

    def stragglers(self, *, min_fraction: float = 0.02, step_name: str = "train_step") -> pd.DataFrame:
        """The ranks that arrive last in most steps and what they cost the others, as findings (kind ``straggler``,
        ``FINDING_COLUMNS``); empty when none (or no steps)."""
        from workbench.analysis import combine_findings, pop_metrics, straggler_rows

        waits = self.step_waits(step_name=step_name)
        pop = pop_metrics(self.measured_events, ranks=self.ranks)
        wall_s = float(pop["runtime_s"].iloc[0]) if len(pop) else float("nan")
        if not len(waits) or not wall_s > 0:
            return combine_findings()
        rows = straggler_rows(waits, wall_s, min_fraction=min_fraction, hosts=self.hosts)
        return combine_findings(_frame(rows))

    def allreduce_lateness(self, *, step_name: str = "train_step") -> pd.DataFrame:
        """Per step and rank, when it submitted its last tensor to the allreduce and how late that was (Horovod's
        timeline): ``step, rank, tensors, arrival_ns, lateness_s, last``."""
        from workbench.analysis import allreduce_lateness

        return allreduce_lateness(self.measured_events, step_name=step_name)

    def lateness_summary(self, *, step_name: str = "train_step") -> pd.DataFrame:
        """Per rank, how often it came last to the allreduce: ``rank, host, steps, last_in_steps, last_share,
        median_lateness_s, max_lateness_s``."""
        from workbench.analysis import lateness_summary

        return lateness_summary(self.allreduce_lateness(step_name=step_name), self.hosts)

    def communication_overlap(self) -> pd.DataFrame:
        """How much of the collectives in flight overlapped each rank's own work: ``rank, in_flight_s, overlapped_s,
        overlapped_share``."""
        from workbench.analysis import communication_overlap

        return communication_overlap(self.measured_events)

    def collective_split(self, *, warmup_steps: int = 1) -> pd.DataFrame:
        """Per step of ranks meeting in a blocking collective: ``epoch, step, ranks, between_s, slowest_s, wait_s,
        collective_s`` (work between collectives, the wait for the slowest, the collective itself)."""
        from workbench.analysis import collective_intervals, collective_split

        return collective_split(collective_intervals(self.measured_events, warmup_steps=warmup_steps))

    def collective_summary(self, *, warmup_steps: int = 1) -> dict[str, float] | None:
        """A step in ``collective_split``'s parts (means over steps) and how the ranks' times between collectives
        correlate: ``{between_s, wait_s, collective_s, correlation}``; None without collectives."""
        from workbench.analysis import collective_intervals, collective_summary

        return collective_summary(collective_intervals(self.measured_events, warmup_steps=warmup_steps))

    # ---- input ----------------------------------------------------------------------------------------
    def input_share(self, *, input_names: tuple[str, ...] | None = ("dequeue", "next_batch")) -> pd.DataFrame:
        """How much of each rank's step time waited for input: ``rank, step_s, input_s, input_share, level``."""
        from workbench.analysis import input_share

        return input_share(self.measured_events, input_names=input_names)

    def step_times(self, *, warmup_steps: int = 1) -> pd.DataFrame:
        """Per rank, its steps after warm-up and their mean and median duration: ``rank, steps, mean_ms, median_ms``."""
        from workbench.analysis import step_times

        return step_times(self.measured_events, warmup_steps=warmup_steps)

    def queue_exhaustion(self, *, name: str = "queue_depth_at_dequeue") -> pd.DataFrame:
        """How often each rank found its input queue empty and when it first ran dry: ``rank, dequeues,
        empty_fraction, ran_dry_after_s, empty_fraction_after`` (empty without queue counters)."""
        from workbench.analysis import queue_exhaustion

        return queue_exhaustion(self.counters, name=name)

    def input_findings(self) -> pd.DataFrame:
        """Findings for an input-bound run: ``kind, ranks, seconds_lost, fraction_of_wall, text``."""
        from workbench.analysis import input_findings

        return input_findings(self.measured_events, self.counters, hosts=self.hosts)

    # ---- memory ---------------------------------------------------------------------------------------
    def memory_summary(self) -> pd.DataFrame:
        """Per rank, resident memory at the first and last sample and its peak: ``rank, samples, first_mb, last_mb,
        peak_mb, gpu_peak_mb`` (empty without samples)."""
        from workbench.analysis import memory_summary

        return memory_summary(self.memory)

    def memory_growth(
        self,
        *,
        x: str = "iteration",
        by: Sequence[str] = ("rank", "label"),
        warmup: int = 0,
        memory: str = "rss_bytes",
        leak_threshold_mb: float = 0.01,
        min_samples: int = 10,
    ) -> pd.DataFrame:
        """Whether memory grows (a leak) per rank and call site: ``[*by, n, slope_mb_per_x, ci_low, ci_high,
        peak_mb, start_mb, end_mb, x_unit, verdict]``; empty without samples of ``memory`` (at call sites when
        ``x="iteration"``; ``x="time_ns"``: per second, all samples)."""
        from workbench.analysis import memory_growth
        from workbench.analysis.memory import GROWTH_COLUMNS

        samples = self.memory
        known = samples[memory] >= 0 if memory in samples else None
        if known is not None and x == "iteration" and "iteration" in samples:
            known &= samples["iteration"] >= 0
        if known is not None and not known.any():
            where = "call-site samples (iteration >= 0)" if x == "iteration" else "samples"
            return _empty([*([by] if isinstance(by, str) else by), *GROWTH_COLUMNS], note=f"no {where} of {memory}")
        return memory_growth(
            samples,
            x=x,
            by=by,
            warmup=warmup,
            memory=memory,
            leak_threshold_mb=leak_threshold_mb,
            min_samples=min_samples,
        )

    def memory_skew(self, *, memory: str = "rss_bytes") -> pd.DataFrame:
        """How unevenly the ranks peak: ``run_id, rank, peak_mb, peak_over_mean, skew`` (max peak / mean peak);
        empty without samples of ``memory``."""
        from workbench.analysis import memory_skew

        if memory in self.memory and not (self.memory[memory] > 0).any():
            return _empty(SKEW_COLUMNS, note=f"no samples of {memory}")
        return memory_skew(self.memory, memory=memory)

    # ---- what the ranks ran -----------------------------------------------------------------------------
    def keras_calls(self) -> pd.DataFrame:
        """Per rank, Keras method and model: ``calls, seconds, model_s, own_s, ms_per_call, model_ms_per_call``
        (``own_s``: Keras's work outside the model)."""
        from workbench.analysis import keras_call_table

        return keras_call_table(self.measured_events)

    def cpu_wait(self) -> pd.DataFrame:
        """Per rank, how long its threads waited for a core (``cpu_wait_table``: ``rank, seconds, cpu_cores,
        waiting_cores, wait_share, throttled_share, quota_cores, cpus_allowed``)."""
        from workbench.analysis import cpu_wait_table

        return cpu_wait_table(self.counters, self.rank_meta if len(self.rank_meta) else None)

    def network_episodes(self) -> pd.DataFrame:
        """Links that dropped or slowed during the run (the ranks' network counters), in the order they began:
        ``kind, host, began_ns, ended_ns, text, seconds_lost, ranks``."""
        from workbench.analysis.network import network_episodes, reduce_network

        part = reduce_network(self.counters, self.rank_meta if len(self.rank_meta) else None, self.measured_events)
        episodes = network_episodes([part])
        return _frame(episodes, EPISODE_COLUMNS)

    # ---- GPUs (imported profiles) -------------------------------------------------------------------------
    def device_step_table(self, *, window_ns: tuple[int, int] | None = None) -> pd.DataFrame:
        """Per GPU and step, seconds busy, idle, computing, communicating, copying: ``rank, host, device, step,
        wall_s, busy_s, idle_s, compute_s, communication_s, copy_s, overlapped_s, exposed_communication_s``."""
        from workbench.analysis import device_step_table

        return device_step_table(self.devices, window_ns=window_ns)

    def device_summary(self) -> pd.DataFrame:
        """Per GPU over its steps (``analyse().devices``): ``device_step_table``'s sums, ``steps``, ``busy_share``
        and ``communication_hidden_share``."""
        from workbench.analysis import device_summary

        return device_summary(self.device_step_table())

    def gpu_time(self) -> pd.DataFrame:
        """Per GPU, HTA's temporal breakdown and overlap (each rank's last profiler step left out, as HTA does):
        ``rank, host, device, kernel_time_s, idle_s, compute_s, non_compute_s, *_share, communication_s,
        overlapped_s, overlap_share``."""
        from workbench.analysis.devices import gpu_time_table

        return gpu_time_table(self.devices)

    def idle_by_cause(self, *, kernel_gap_ns: int = 30_000) -> pd.DataFrame:
        """Why each GPU stream sat idle (host too slow to launch, waiting for the host, between kernels): ``rank,
        host, device, stream, cause, idle_s, idle_share``."""
        from workbench.analysis import idle_by_cause

        return idle_by_cause(self.devices, kernel_gap_ns=kernel_gap_ns)

    def launch_summary(self) -> pd.DataFrame:
        """Per rank, its kernel launches: ``rank, launches, cpu_mean_us, gpu_mean_us, launch_delay_mean_us,
        launch_delay_median_us, short_kernels, runtime_outliers, launch_delay_outliers``."""
        from workbench.analysis import kernel_launches, launch_summary

        return launch_summary(kernel_launches(self.devices))

    def kernel_type_breakdown(self) -> pd.DataFrame:
        """Per rank, its GPU time in compute, communication and memory kernels, alone and overlapping: ``rank,
        kernel_type, seconds, share``."""
        from workbench.analysis.kernels import kernel_type_breakdown

        return kernel_type_breakdown(self.devices)

    def top_kernels(self, *, count: int = 10) -> pd.DataFrame:
        """Per rank, the ``count`` kernels that took the most GPU time: ``rank, kind, name, count, total_s, mean_us,
        min_us, max_us, share``."""
        from workbench.analysis.kernels import top_kernels

        return top_kernels(self.devices, count=count)


def _events_of(run: store.RunData, waits: bool) -> pd.DataFrame:
    """A run's measured events, with each rank's wait for the last one as ``communication_wait`` when ``waits``
    (``analysis.with_step_waits``: what ``workbench analyse`` and ``workbench compare`` break down)."""
    from workbench.analysis.run_analysis import forward_spans, with_step_waits

    if not waits:
        return forward_spans(run.events)

    return with_step_waits(run.events, run.ranks)


def _frame(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows (dicts) as a table; ``columns`` kept (and present) even when there are none."""
    import pandas as pd

    if columns is None:
        return pd.DataFrame(rows)
    return pd.DataFrame(rows, columns=list(columns)) if rows else _empty(columns)


@dataclass
class ProfiledCall:
    """A function running recorded on every rank: its run directory, its live dashboard, its outcome."""

    run_path: Path
    pending: Any  # ipyparallel's AsyncResult of ``profiled_call`` on every engine
    dashboard: Dashboard | None = None

    @property
    def failed(self) -> bool:
        """True once finished when at least one rank raised."""
        return self.pending.ready() and not self.pending.successful()

    def outcome(self) -> Any:
        """What the function returned on every rank, or the error when a rank raised."""
        return self.pending.exception() if self.failed else self.pending.get()

    async def finish(self, poll_s: float = 0.5) -> Run:
        """Wait without blocking the kernel (the dashboard keeps refreshing), then close the run and load it."""
        while not self.pending.ready():
            await asyncio.sleep(poll_s)
        return self._close()

    def finish_sync(self) -> Run:
        """``finish`` outside an event loop: block until every rank returned."""
        self.pending.wait()
        return self._close()

    def _close(self) -> Run:
        from workbench.profile import finish_run

        if self.dashboard is not None:
            self.dashboard.update()
            self.dashboard.stop()
        for line in finish_run(self.run_path, failed=self.failed):
            print(line)
        return Run.load(self.run_path)


def profile_function(
    cluster: Cluster,
    function: Callable[..., Any],
    *args: Any,
    out: str | Path | None = None,
    name: str = "notebook-train",
    dashboard: bool = True,
    refresh_s: float = 1.0,
    **kwargs: Any,
) -> ProfiledCall:
    """Run ``function(*args, **kwargs)`` on every rank of ``cluster``, recorded as ``workbench profile`` records.

    Start the cluster with ``env=PROFILE_ENVIRONMENT`` (Horovod's timeline). The call returns at
    once, with the live dashboard started (``.dashboard``); ``await call.finish()`` (or
    ``finish_sync()``) imports Horovod's timeline, marks the run ended and returns the ``Run``.
    """
    from workbench.profile import profiled_call

    run_path = store.create_run(out, name, ranks=cluster.n, config={"cluster": cluster.config.as_dict()})
    pending = cluster.view.apply_async(profiled_call, str(run_path), function, *args, **kwargs)
    live = None
    if dashboard:
        from workbench.widgets import Dashboard

        live = Dashboard(store.RunTail(run_path), refresh_s=refresh_s, on_stacks=cluster.stacks).start()
    return ProfiledCall(run_path, pending, live)
