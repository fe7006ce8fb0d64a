"""Markdown for the docs' measured tables: a table from rows, numbers as the docs write them, a source line.

The tables in README.md and docs/*.md are rendered from saved results (``benchmarks/render_readme.py``), some
of them by the cases' docs (``docsbench.cases``: ``CaseDocs.tables``); both write their numbers with these helpers, so a
figure reads the same wherever it appears. ``SavedResults`` reads the saved results by name; a ``Measurement``
says how one is measured again (``docsbench.registry.measurements`` lists them all, the cases' included).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from workbench.formatting import format_amount as number

__all__ = [
    "REPETITIONS",
    "Measurement",
    "ReadmeClause",
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
    "varied",
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
        return _renamed_keys(json.loads(path.read_text()))


#: Keys of a case's summary saved before the published studies were called so (they were "seeds"; 2026-11-29).
_RENAMED_KEYS = {
    "seed_speedup_eval_fix": "published_speedup_eval_fix",
    "seed_speedup_in_memory": "published_speedup_in_memory",
    "seed_pop": "published_pop",
    "seed_efficiency": "published_efficiency",
    "seed": "published_study",
}


def _renamed_keys(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved case result read with today's keys (its numbers as saved)."""
    result = saved.get("result")
    if isinstance(result, dict) and "case" in result:
        saved["result"] = {_RENAMED_KEYS.get(key, key): value for key, value in result.items()}
    return saved


class ReadmeClause(NamedTuple):
    """A case's part of one of the README's headline lines: the line's title, the clause, the saved results read."""

    line: str
    text: str
    sources: tuple[str, ...]


#: The repetitions of a sweep the projection's node rows take the median of.
REPETITIONS = ("1", "2", "3")


@dataclass(frozen=True)
class Measurement:
    """How one saved result behind the docs is measured: ``command``, run from the repository root with the
    project's environment first on PATH, prints one JSON object that is saved as ``NAME.json`` beside the command.

    A ``sweep`` saves nothing: its runs (its ``--out`` folder) are what a later measurement reads, and every
    sweep of one name runs when that name is asked for, a ``round`` (repetition) of every case before the next.
    ``stage`` orders the whole: 0 reads nothing measured here, 1 runs a case, 2 reads what stages 0 and 1 left.
    A ``kept`` result is not measured again (the text says why: a state of the code that is gone).
    """

    name: str
    command: str
    about: str = ""
    stage: int = 0
    sweep: bool = False
    round: int = 0
    root: bool = False
    kept: str = ""

    def same_command(self, saved_command: str) -> bool:
        """Whether a saved result came from this command: the same words, wherever its runs were written
        (``--out``), a comment after ``#`` left out."""
        return _measured_words(self.command) == _measured_words(saved_command.split("  # ")[0])


def _measured_words(command: str) -> list[str]:
    words = shlex.split(command)
    if "--out" in words:
        at = words.index("--out")
        del words[at : at + 2]
    return words


def varied(template: Measurement, **choices: Sequence[str]) -> tuple[Measurement, ...]:
    """``template`` once per combination of ``choices`` (``{name}`` in its name and command filled in), the first
    choice outermost; a ``repetition`` choice also sets each one's ``round``."""
    keys = list(choices)
    rounds = list(choices.get("repetition", [""]))
    out = []
    for values in itertools.product(*(choices[k] for k in keys)):
        filled = dict(zip(keys, values))
        out.append(
            replace(
                template,
                name=template.name.format(**filled),
                command=template.command.format(**filled),
                round=rounds.index(filled["repetition"]) if "repetition" in filled else template.round,
            )
        )
    return tuple(out)


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
