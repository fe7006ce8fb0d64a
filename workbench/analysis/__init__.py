"""The pure analysis layer: events and memory samples in, tables out (no plotting).

Every function takes DataFrames shaped like ``workbench.events`` and returns a DataFrame or a
small frozen dataclass. A recorded run never makes it raise: what a run lacks (no events, no
compute spans, one rank, no memory samples) becomes a finding or a NaN with a note. Misuse (a
missing column, two runs where one is expected) raises ValueError saying what is wrong.
"""

from __future__ import annotations

from workbench.analysis import projection
from workbench.analysis.breakdown import (
    effective_phase,
    lane_table,
    own_time_spans,
    phase_breakdown,
    rank_wall_time,
)
from workbench.analysis.compare import compare_runs
from workbench.analysis.cpu_wait import cpu_wait_finding, cpu_wait_table
from workbench.analysis.devices import device_findings, device_phase_spans, device_step_table, device_summary
from workbench.analysis.findings import (
    combine_findings,
    findings,
    missing_data_finding,
    oversubscription_finding,
    oversubscription_finding_from_meta,
)
from workbench.analysis.input import input_bound_level, input_findings, input_share, queue_exhaustion, step_times
from workbench.analysis.keras_calls import call_memory_findings, keras_call_findings, keras_call_table
from workbench.analysis.memory import memory_growth, memory_skew, memory_summary
from workbench.analysis.method import BenchmarkMethod, measured_step_seconds, scaling_efficiency
from workbench.analysis.pop import pop_metrics, pop_scaling, useful_phase_set
from workbench.analysis.run_analysis import (
    RunAnalysis,
    analyse_run,
    declared_ranks,
    json_ready,
    json_records,
    lateness_summary,
    run_header,
    run_hosts,
    with_hosts,
    with_step_waits,
)
from workbench.analysis.scaling import (
    IoOverhead,
    io_overhead,
    scaling_table,
    step_throughput,
    steps_per_rank,
    summarise_repetitions,
)
from workbench.analysis.straggler import (
    allreduce_lateness,
    collective_intervals,
    collective_split,
    collective_summary,
    communication_overlap,
    step_correlation,
    step_spans,
    step_waits,
    straggler_rows,
    wait_spans,
    with_derived_waits,
)
from workbench.analysis.whatif import WhatIf, estimate_eval_interval, estimate_sharded_evaluation
from workbench.events import GOOD_EFFICIENCY, phase_order, rank_list, ranks_with_hosts

__all__ = [
    "GOOD_EFFICIENCY",
    "BenchmarkMethod",
    "IoOverhead",
    "RunAnalysis",
    "WhatIf",
    "allreduce_lateness",
    "analyse_run",
    "call_memory_findings",
    "collective_intervals",
    "collective_split",
    "collective_summary",
    "combine_findings",
    "communication_overlap",
    "compare_runs",
    "cpu_wait_finding",
    "cpu_wait_table",
    "declared_ranks",
    "device_findings",
    "device_phase_spans",
    "device_step_table",
    "device_summary",
    "effective_phase",
    "estimate_eval_interval",
    "estimate_sharded_evaluation",
    "findings",
    "input_bound_level",
    "input_findings",
    "input_share",
    "io_overhead",
    "json_ready",
    "json_records",
    "keras_call_findings",
    "keras_call_table",
    "lane_table",
    "lateness_summary",
    "measured_step_seconds",
    "memory_growth",
    "memory_skew",
    "memory_summary",
    "missing_data_finding",
    "oversubscription_finding",
    "oversubscription_finding_from_meta",
    "own_time_spans",
    "phase_breakdown",
    "phase_order",
    "pop_metrics",
    "pop_scaling",
    "projection",
    "queue_exhaustion",
    "rank_list",
    "rank_wall_time",
    "ranks_with_hosts",
    "run_header",
    "run_hosts",
    "scaling_efficiency",
    "scaling_table",
    "step_correlation",
    "step_spans",
    "step_throughput",
    "step_times",
    "step_waits",
    "steps_per_rank",
    "straggler_rows",
    "summarise_repetitions",
    "useful_phase_set",
    "wait_spans",
    "with_derived_waits",
    "with_hosts",
    "with_step_waits",
]
