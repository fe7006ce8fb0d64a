"""Markdown for the docs' measured tables: a table from rows, numbers as the docs write them, a source line.

The tables in README.md and docs/*.md are rendered from saved results (``benchmarks/render_readme.py``), some
of them by the cases themselves (``Case.docs_tables``); both write their numbers with these helpers, so a
figure reads the same wherever it appears. ``SavedResults`` reads the saved results by name.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.formatting import format_amount as number

__all__ = [
    "SavedResults",
    "cell",
    "duration",
    "fixed",
    "number",
    "percent",
    "rate_words",
    "share",
    "signed_share",
    "small",
    "source_line",
    "sources_line",
    "table",
    "times",
]


class SavedResults:
    """The saved results of a folder (``NAME.json``: a command's ``--json`` output, the command and when it ran)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def has(self, name: str) -> bool:
        return (self.directory / f"{name}.json").is_file()

    def load(self, name: str) -> dict[str, Any]:
        path = self.directory / f"{name}.json"
        if not path.is_file():
            raise SystemExit(f"{path} is missing: save the command's --json output there (render_readme.py save)")
        return json.loads(path.read_text())


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}".replace("%", " %")


def table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def cell(value: Any) -> str:
    """One value of a headline record as a table cell: numbers to 3 significant figures, nothing as ``–``."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value).replace("|", "\\|")
    return number(value)


def fixed(value: float | None, digits: int = 3) -> str:
    """A ratio or a duration with a fixed number of decimals (``0.996``); None or NaN -> ``–``."""
    return "–" if value is None or value != value else f"{value:.{digits}f}".replace("-", "−")


def small(value: float) -> str:
    """A signed value with 2 significant figures and no exponent (``+5.7e-05`` -> ``+0.000057``); 0 below 1e-6."""
    if abs(value) < 1e-6:
        return "0"
    digits = max(0, 1 - math.floor(math.log10(abs(value))))
    return f"{value:+.{digits}f}".replace("-", "−")


def times(value: float | None) -> str:
    """A speedup or slowdown: ``2.62×``; None or NaN -> empty (the row has none)."""
    return "" if value is None or value != value else f"{value:.3g}×"


def share(value: float | None) -> str:
    """A fraction as a percentage with 2 significant figures: ``0.374`` -> ``37 %``."""
    if value is None or value != value:
        return "–"
    percent = 100 * value
    return f"{percent:.0f} %" if abs(percent) >= 10 else f"{percent:.2g} %"


def signed_share(value: float | None) -> str:
    """A relative error as a signed percentage: ``+7.1 %``, ``−2.3 %``; None or NaN -> ``–``."""
    return "–" if value is None or value != value else ("+" if value > 0 else "") + share(value).replace("-", "−")


def duration(value: float) -> str:
    """Seconds with 3 significant figures, in ms below 1 s: ``214 ms``, ``3.39 s``."""
    return f"{number(value * 1e3)} ms" if value < 1 else f"{number(value)} s"


def rate_words(rate: str) -> str:
    """A link rate in tc's notation in words: ``1gbit`` -> ``1 Gbit/s``, ``100mbit`` -> ``100 Mbit/s``."""
    match = re.fullmatch(r"([\d.]+)(gbit|mbit|kbit)", rate)
    return f"{match[1]} {match[2][0].upper() if match[2] != 'kbit' else 'k'}bit/s" if match else rate


def source_line(saved: Mapping[str, Any]) -> str:
    where = f"`benchmarks/results/{saved['name']}.json`"
    load = saved.get("load_average")
    busy = (
        f", load average {load[0]:g} / {load[1]:g} / {load[2]:g} as it ended (its own processes included)"
        if load
        else ""
    )
    # a result not (yet) from its command says so: e.g. values measured by hand while the command was written
    note = f" Note: {saved['note']}." if saved.get("note") else ""
    return f"*From `{saved['command']}`, {saved['measured']} on {saved['machine']}{busy} ({where}).{note}*"


def sources_line(*saved: Mapping[str, Any]) -> str:
    """The source line of a table rendered from several saved results (one command each)."""
    return "\n\n".join(source_line(one) for one in saved)
