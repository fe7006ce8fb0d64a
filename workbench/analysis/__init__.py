"""The pure analysis layer: events and memory samples in, tables out (no plotting).

Every function takes DataFrames shaped like ``workbench.events`` and returns a DataFrame or a
small frozen dataclass. A recorded run never makes it raise: what a run lacks (no events, no
compute spans, one rank, no memory samples) becomes a finding or a NaN with a note. Misuse (a
missing column, two runs where one is expected) raises ValueError saying what is wrong.

Names are imported when first used (PEP 562): ``from workbench.analysis.devices import ...`` loads that
module alone, not every analysis (scipy, the projection) with it.
"""

from __future__ import annotations

import importlib
from typing import Any

# the one name that is also a module's: importing the module sets the package's attribute to it, so the function
# is bound here, after its module (light: pandas only)
from workbench.analysis.findings import findings as findings

#: Each public name and the module that defines it.
_WHERE: dict[str, str] = {
    "allreduce_lateness": "workbench.analysis.straggler",
    "analyse_run": "workbench.analysis.run_analysis",
    "BenchmarkMethod": "workbench.analysis.benchmark_method",
    "call_memory_findings": "workbench.analysis.keras_calls",
    "collective_intervals": "workbench.analysis.straggler",
    "collective_split": "workbench.analysis.straggler",
    "collective_summary": "workbench.analysis.straggler",
    "combine_findings": "workbench.analysis.findings",
    "communication_overlap": "workbench.analysis.straggler",
    "compare_runs": "workbench.analysis.compare",
    "cpu_wait_finding": "workbench.analysis.cpu_wait",
    "cpu_wait_table": "workbench.analysis.cpu_wait",
    "declared_ranks": "workbench.analysis.run_analysis",
    "device_findings": "workbench.analysis.devices",
    "device_phase_spans": "workbench.analysis.devices",
    "device_step_table": "workbench.analysis.devices",
    "device_summary": "workbench.analysis.devices",
    "effective_phase": "workbench.analysis.breakdown",
    "estimate_eval_interval": "workbench.analysis.whatif",
    "estimate_sharded_evaluation": "workbench.analysis.whatif",
    "GOOD_EFFICIENCY": "workbench.events",
    "idle_by_cause": "workbench.analysis.launches",
    "kernel_launches": "workbench.analysis.launches",
    "launch_findings": "workbench.analysis.launches",
    "launch_summary": "workbench.analysis.launches",
    "input_bound_level": "workbench.analysis.input",
    "input_findings": "workbench.analysis.input",
    "input_share": "workbench.analysis.input",
    "io_overhead": "workbench.analysis.scaling",
    "IoOverhead": "workbench.analysis.scaling",
    "json_ready": "workbench.analysis.run_analysis",
    "json_records": "workbench.analysis.run_analysis",
    "keras_call_findings": "workbench.analysis.keras_calls",
    "keras_call_table": "workbench.analysis.keras_calls",
    "lane_table": "workbench.analysis.breakdown",
    "lateness_summary": "workbench.analysis.run_analysis",
    "measured_step_seconds": "workbench.analysis.benchmark_method",
    "memory_growth": "workbench.analysis.memory",
    "memory_skew": "workbench.analysis.memory",
    "memory_summary": "workbench.analysis.memory",
    "missing_data_finding": "workbench.analysis.findings",
    "oversubscription_finding": "workbench.analysis.findings",
    "oversubscription_finding_from_meta": "workbench.analysis.findings",
    "own_time_spans": "workbench.analysis.breakdown",
    "phase_breakdown": "workbench.analysis.breakdown",
    "phase_order": "workbench.events",
    "pop_metrics": "workbench.analysis.pop",
    "pop_scaling": "workbench.analysis.pop",
    "projection": "workbench.analysis.projection",
    "queue_exhaustion": "workbench.analysis.input",
    "rank_list": "workbench.events",
    "rank_wall_time": "workbench.analysis.breakdown",
    "ranks_with_hosts": "workbench.events",
    "run_header": "workbench.analysis.run_analysis",
    "run_hosts": "workbench.analysis.run_analysis",
    "RunAnalysis": "workbench.analysis.run_analysis",
    "scaling_efficiency": "workbench.analysis.benchmark_method",
    "scaling_table": "workbench.analysis.scaling",
    "step_correlation": "workbench.analysis.straggler",
    "step_spans": "workbench.analysis.straggler",
    "step_throughput": "workbench.analysis.scaling",
    "step_times": "workbench.analysis.input",
    "step_waits": "workbench.analysis.straggler",
    "steps_per_rank": "workbench.analysis.scaling",
    "straggler_rows": "workbench.analysis.straggler",
    "summarise_repetitions": "workbench.analysis.scaling",
    "useful_phase_set": "workbench.analysis.pop",
    "wait_spans": "workbench.analysis.straggler",
    "WhatIf": "workbench.analysis.whatif",
    "with_derived_waits": "workbench.analysis.straggler",
    "with_hosts": "workbench.analysis.run_analysis",
    "with_step_waits": "workbench.analysis.run_analysis",
}

__all__ = sorted([*_WHERE, "findings"], key=str.lower)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'workbench.analysis' has no attribute {name!r}")
    module = importlib.import_module(_WHERE[name])
    value = module if _WHERE[name].endswith(f".{name}") else getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
