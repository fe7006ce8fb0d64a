"""Old home of the text formatters, now ``workbench.text``; kept only so that old imports keep working.

``benchmarks/render_readme.py`` and ``workbench/cases/{cpu_tuning,ps_vs_allreduce}.py`` (owned
elsewhere for now) import formatters from here. New code imports
``workbench.text``; the ``analyse`` / ``compare`` commands are ``workbench.commands.analyse`` /
``workbench.commands.compare``.
"""

from __future__ import annotations

from workbench.text import (
    MISSING,
    WIDTH,
    format_amount,
    format_analysis,
    format_comparison,
    format_header,
    format_interval,
    format_megabytes,
    format_number,
    format_percent,
    format_rate,
    format_ratio,
    format_seconds,
    format_share,
    text_table,
)

__all__ = [
    "MISSING",
    "WIDTH",
    "format_amount",
    "format_analysis",
    "format_comparison",
    "format_header",
    "format_interval",
    "format_megabytes",
    "format_number",
    "format_percent",
    "format_rate",
    "format_ratio",
    "format_seconds",
    "format_share",
    "text_table",
]
