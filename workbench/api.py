"""The front door's verbs: a recorded run that analyses and reports itself, and one call that profiles a function.

Like HolisticTraceAnalysis' ``TraceAnalysis``, everything here forwards in one line to the layer
that does the work (``store`` loads, ``analysis`` computes, ``report`` writes, ``profile`` records),
so a notebook needs one import and the layers keep their boundaries: nothing below imports this.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench import store

if TYPE_CHECKING:
    from collections.abc import Callable

    from workbench.analysis import RunAnalysis
    from workbench.cluster import Cluster
    from workbench.widgets import Dashboard


class Run(store.RunData):
    """A recorded run (``workbench.store.RunData``) that can analyse itself and write its HTML report."""

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
