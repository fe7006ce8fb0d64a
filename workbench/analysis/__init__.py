"""The pure analysis layer: events and memory samples in, tables out (no plotting).

Every function takes DataFrames shaped like ``workbench.events`` and returns a DataFrame or a
small frozen dataclass; degenerate input either gives a defined result or raises ValueError
saying what is wrong.
"""

from __future__ import annotations

from workbench.analysis.breakdown import (
    effective_phase,
    lane_table,
    phase_breakdown,
    phase_order,
    rank_wall_time,
)
from workbench.analysis.findings import findings, oversubscription_finding, rank_list
from workbench.analysis.memory import memory_growth, memory_skew
from workbench.analysis.pop import pop_metrics, pop_scaling, useful_phase_set
from workbench.analysis.scaling import (
    IoOverhead,
    io_overhead,
    scaling_table,
    step_throughput,
    summarise_repetitions,
)
from workbench.analysis.whatif import WhatIf, estimate_eval_interval, estimate_sharded_evaluation

__all__ = [
    "IoOverhead",
    "WhatIf",
    "effective_phase",
    "estimate_eval_interval",
    "estimate_sharded_evaluation",
    "findings",
    "io_overhead",
    "lane_table",
    "memory_growth",
    "memory_skew",
    "oversubscription_finding",
    "phase_breakdown",
    "phase_order",
    "pop_metrics",
    "pop_scaling",
    "rank_list",
    "rank_wall_time",
    "scaling_table",
    "step_throughput",
    "summarise_repetitions",
    "useful_phase_set",
]
