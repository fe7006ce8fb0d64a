"""Progress for runs and sweeps: a widget bar in a notebook, a text line elsewhere.

The state (done, total, timing) is kept apart from its display, so tests and logs read the same
numbers the bar shows, and a run started from a script or CI prints plain lines instead of widget
placeholders.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, TypeVar

T = TypeVar("T")


@dataclass
class ProgressState:
    """How far a loop is: items done of total, and time since start (``clock`` seconds)."""

    total: int | None = None
    done: int = 0
    desc: str = ""
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)
    now: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()
        self.now = self.started

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more items done and note the time."""
        self.done += n
        self.now = self.clock()

    @property
    def elapsed(self) -> float:
        """Seconds from start to the last update."""
        return max(self.now - self.started, 0.0)

    @property
    def rate(self) -> float | None:
        """Items per second so far (None before the first item)."""
        return self.done / self.elapsed if self.done and self.elapsed > 0 else None

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate so far (None when the total or the rate is unknown)."""
        if self.total is None or self.rate is None:
            return None
        return max(self.total - self.done, 0) / self.rate

    @property
    def fraction(self) -> float | None:
        """Share done, 0..1 (None without a total)."""
        return None if not self.total else min(self.done / self.total, 1.0)

    def line(self) -> str:
        """One tqdm-like line: ``desc  40% 4/10 [00:02<00:03, 1.9 it/s]``."""
        parts = [self.desc] if self.desc else []
        if self.fraction is not None:
            parts.append(f"{self.fraction:4.0%}")
        parts.append(f"{self.done}/{self.total}" if self.total is not None else f"{self.done}")
        timing = _clock_text(self.elapsed)
        if self.eta is not None:
            timing += f"<{_clock_text(self.eta)}"
        if self.rate is not None:
            timing += f", {self.rate:.3g} it/s"
        parts.append(f"[{timing}]")
        return " ".join(parts)


def _clock_text(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def in_notebook() -> bool:
    """True inside a Jupyter kernel that can show widgets (not a terminal IPython or a script)."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class ProgressBar:
    """Progress display over a ``ProgressState``: IntProgress + label, or text lines.

    ``widget=None`` picks the widget in a notebook. Text output rewrites one line on a terminal and
    prints a new line at most every ``min_interval_s`` otherwise (logs stay short).
    """

    def __init__(
        self,
        total: int | None = None,
        desc: str = "",
        *,
        widget: bool | None = None,
        stream: IO[str] | None = None,
        min_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = ProgressState(total=total, desc=desc, clock=clock)
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self._last_shown = float("-inf")
        self._closed = False
        self.box = None
        use_widget = in_notebook() if widget is None else widget
        if use_widget:
            import ipywidgets as w

            self._bar = w.IntProgress(value=0, min=0, max=max(total or 0, 1), description=desc[:20])
            self._label = w.Label(value=self.state.line())
            self.box = w.HBox([self._bar, self._label])
            if widget is None:
                from IPython.display import display

                display(self.box)
        if not use_widget:
            interval = 1.0 if not self._isatty() else min_interval_s
            self.min_interval_s = max(min_interval_s, interval)
        self._show(force=True)

    def _isatty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def update(self, n: int = 1) -> None:
        """Count ``n`` items done and refresh the display when due."""
        self.state.advance(n)
        self._show()

    def set_total(self, total: int) -> None:
        """Change the total (a sweep that learns its size late)."""
        self.state.total = total
        if self.box is not None:
            self._bar.max = max(total, 1)
        self._show(force=True)

    def _show(self, force: bool = False) -> None:
        now = self.state.clock()
        if not force and now - self._last_shown < self.min_interval_s:
            return
        self._last_shown = now
        text = self.state.line()
        if self.box is not None:
            self._bar.value = min(self.state.done, self._bar.max)
            self._label.value = text
        elif self._isatty():
            self.stream.write("\r" + text)
            self.stream.flush()
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Show the final state once (a finished bar turns green)."""
        if self._closed:
            return
        self._closed = True
        self.state.now = self.state.clock()
        if self.box is not None:
            self._bar.bar_style = "success" if self.state.total in (None, self.state.done) else "warning"
        self._show(force=True)
        if self.box is None and self._isatty():
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ProgressBar({self.state.line()})"


def progress(
    iterable: Iterable[T],
    total: int | None = None,
    desc: str = "",
    *,
    widget: bool | None = None,
    stream: IO[str] | None = None,
) -> Iterator[T]:
    """Yield from ``iterable`` while showing progress (``total`` from ``len()`` when possible)."""
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    bar = ProgressBar(total, desc, widget=widget, stream=stream)
    try:
        for item in iterable:
            yield item
            bar.update()
    finally:
        bar.close()
