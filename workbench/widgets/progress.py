"""Progress for runs and sweeps, drawn by ``tqdm.auto``: a widget bar in a notebook, a text line elsewhere.

The counts (done, total, timing) live in ``ProgressState``, apart from the display, so tests and logs read
the numbers the bar shows without one. tqdm draws them and decides between notebook and terminal, so none
of that is redone here. tqdm comes with the ``notebook`` extra and is imported when a bar is made: the core
install still imports ``workbench.widgets``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from workbench.extras import require_module

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
        """The state as tqdm's meter, the line a terminal bar shows: ``sweep:  40%|████ | 4/10 [00:04<00:06, ...]``."""
        _need_tqdm()
        from tqdm.std import tqdm

        return tqdm.format_meter(self.done, self.total, self.elapsed, prefix=self.desc)


def _need_tqdm() -> None:
    """One line naming the extra when tqdm is missing (the core install does not bring it)."""
    require_module("tqdm", "tqdm", "notebook", for_what="a progress bar")


def in_notebook() -> bool:
    """True where ``tqdm.auto`` draws a widget bar: a Jupyter kernel with ipywidgets (not a terminal or script)."""
    try:
        import tqdm.auto  # noqa: F401  (imports tqdm.autonotebook with its notebook-mode warning silenced)
        from tqdm.autonotebook import tqdm as chosen
        from tqdm.std import tqdm as terminal
    except ImportError:
        return False
    return chosen is not terminal


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _bar_class(widget: bool | None) -> tuple[type, dict[str, Any]]:
    """tqdm's bar class for ``widget`` (None: tqdm.auto decides) and the keywords it needs."""
    if widget is None:
        from tqdm.auto import tqdm

        return tqdm, {}
    if widget:
        from tqdm.notebook import tqdm

        return tqdm, {"display": False}  # the caller shows ``box`` where it wants it
    from tqdm.std import tqdm

    return tqdm, {}


class ProgressBar:
    """A ``ProgressState`` shown by a tqdm bar: a widget in a notebook (``box``), a text line elsewhere.

    ``widget=None`` lets ``tqdm.auto`` pick and show it; ``True`` makes the widget bar without showing it,
    ``False`` the text line on ``stream`` (stderr by default). It is redrawn at most every ``min_interval_s``:
    by default 0.1 s, and 1 s on a stream that is not a terminal, so that a log keeps few lines.
    """

    def __init__(
        self,
        total: int | None = None,
        desc: str = "",
        *,
        widget: bool | None = None,
        stream: IO[str] | None = None,
        min_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        _need_tqdm()
        self.state = ProgressState(total=total, desc=desc, clock=clock)
        self.stream = stream if stream is not None else sys.stderr
        if min_interval_s is None:
            shown_live = widget or (widget is None and in_notebook()) or _isatty(self.stream)
            min_interval_s = 0.1 if shown_live else 1.0
        self.min_interval_s = min_interval_s
        self._closed = False
        bar_class, options = _bar_class(widget)
        #: the tqdm bar that draws the state
        self.tqdm = bar_class(total=total, desc=desc or None, file=self.stream, mininterval=min_interval_s, **options)
        #: the widget (tqdm's container) in a notebook, None for a text line
        self.box = getattr(self.tqdm, "container", None)

    def update(self, n: int = 1) -> None:
        """Count ``n`` items done; tqdm redraws when due."""
        self.state.advance(n)
        self.tqdm.update(n)

    def set_total(self, total: int) -> None:
        """Change the total (a sweep that learns its size late), keeping the count."""
        self.state.total = total
        self.tqdm.total = total
        if self.box is not None:  # tqdm.notebook's reset() would also zero the count
            bar = self.box.children[1]
            bar.max = max(total, 1)
            bar.bar_style = ""
            bar.layout.width = None
        self.tqdm.refresh()

    def close(self) -> None:
        """Show the final state once (tqdm turns a finished widget bar green, an unfinished one red)."""
        if self._closed:
            return
        self._closed = True
        self.state.now = self.state.clock()
        self.tqdm.close()

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
