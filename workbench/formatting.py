"""Numbers and tables as text, for every printed page of the workbench: 2–3 significant figures and a unit.

A reader compares numbers by eye, so each carries 2–3 significant figures and its unit (JSON carries the full
values, for programs); a table wider than the terminal wraps into blocks instead of running past its edge.
Nothing here knows what a run is: the words about runs are ``workbench.text``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from workbench.events import MISSING, is_finite_number, significant_figures

# defined beside the schema (the analysis writes seconds into findings with it); offered here with the other numbers
from workbench.events import format_seconds as format_seconds

#: Width the text output fits in.
WIDTH = 100


def format_megabytes(megabytes: float | None) -> str:
    """``123.4`` -> ``123 MB``, ``2345`` -> ``2.35 GB``; NaN -> ``–``."""
    if not is_finite_number(megabytes):
        return MISSING
    value = float(megabytes)  # type: ignore[arg-type]
    if abs(value) >= 1000:
        return f"{significant_figures(value / 1000)} GB"
    return f"{significant_figures(value)} MB"


def format_rate(per_second: float | None, unit: str = "/s") -> str:
    """``12.345`` -> ``12.3 /s``; NaN -> ``–``."""
    return f"{significant_figures(float(per_second))} {unit}" if is_finite_number(per_second) else MISSING  # type: ignore[arg-type]


def format_ratio(value: float | None) -> str:
    """An efficiency or a ratio with two decimals (``0.73``); NaN -> ``–``, inf -> ``new``."""
    if value is not None and isinstance(value, float) and math.isinf(value):
        return "new"
    return f"{float(value):.2f}" if is_finite_number(value) else MISSING  # type: ignore[arg-type]


def format_number(value: float | None) -> str:
    """Three significant figures, never an exponent (``12345.6`` -> ``12300``); NaN -> ``–``."""
    return significant_figures(float(value)) if is_finite_number(value) else MISSING  # type: ignore[arg-type]


def format_amount(value: float | None) -> str:
    """Three significant figures below 1000, whole units grouped by spaces above (``19.7``, ``246``,
    ``2 461``): images/s and other counts read in prose; NaN or None -> ``–``."""
    if not is_finite_number(value):
        return MISSING
    value = float(value)  # type: ignore[arg-type]
    return f"{value:,.0f}".replace(",", " ") if abs(value) >= 1000 else f"{value:.3g}"


def format_interval(value: float | None, low: float | None, high: float | None, unit: str) -> str:
    """``1 188 images/s [1 084, 1 314]``: a value with its unit and, when both ends are known, its interval."""
    both = is_finite_number(low) and is_finite_number(high)
    interval = f" [{format_amount(low)}, {format_amount(high)}]" if both else ""
    return f"{format_amount(value)} {unit}{interval}"


def format_percent(value: float | None) -> str:
    """A fraction as a percentage with 2–3 significant figures (``0.2537`` -> ``25.4%``); NaN -> ``–``: the one
    percent formatter of everything the package prints."""
    return f"{significant_figures(float(value) * 100)}%" if is_finite_number(value) else MISSING  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Tables and a run's analysis
# --------------------------------------------------------------------------------------------


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, width: int = WIDTH, labels: int = 1
) -> list[str]:
    """Numbers right-aligned, the first ``labels`` columns left-aligned; blocks when wider than ``width``.

    Every block repeats the first column, so a table with many phases or ranks wraps instead of
    running past the terminal's edge.
    """
    columns = list(zip(header, *rows, strict=True)) if rows else [(h,) for h in header]
    widths = [max(len(str(cell)) for cell in column) for column in columns]
    blocks: list[list[int]] = []
    current: list[int] = []
    used = widths[0]
    for index in range(1, len(columns)):
        if current and used + 2 + widths[index] > width:
            blocks.append(current)
            current, used = [], widths[0]
        current.append(index)
        used += 2 + widths[index]
    blocks.append(current)
    lines: list[str] = []
    for number, block in enumerate(blocks):
        if number:
            lines.append("")
        for row in [list(header), *[list(r) for r in rows]]:
            cells = [str(row[0]).ljust(widths[0])]
            cells += [str(row[i]).ljust(widths[i]) if i < labels else str(row[i]).rjust(widths[i]) for i in block]
            lines.append("  ".join(cells).rstrip())
    return lines
