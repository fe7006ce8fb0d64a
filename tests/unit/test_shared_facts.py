"""One definition of each shared fact: units, phase order, the POP threshold, rank lists; no private imports."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import workbench
from workbench import analysis, events, figures
from workbench.figures import pop_table, scaling

PACKAGE = Path(workbench.__file__).parent


def modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(PACKAGE.rglob("*.py"))]


def test_one_definition_of_phase_order_rank_list_and_units():
    assert figures.phase_order is events.phase_order
    assert analysis.phase_order is events.phase_order
    assert figures.PHASE_ORDER is events.PHASE_ORDER
    assert analysis.rank_list is events.rank_list
    assert events.NS_PER_S == 1_000_000_000 and events.BYTES_PER_MB == 1_000_000
    defined = [
        path.relative_to(PACKAGE).as_posix()
        for path, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id in {"NS_PER_S", "BYTES_PER_MB", "PHASE_ORDER", "GOOD_EFFICIENCY"}
    ]
    assert sorted(defined) == ["events.py"] * 4


def test_no_nanosecond_literals_in_analysis_figures_and_widgets():
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path, tree in modules()
        if path.parent.name in {"analysis", "figures", "widgets"}
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and node.value in (1e9, 1e6)
    ]
    assert found == []


def test_pop_good_threshold_is_one_constant():
    assert scaling.GOOD_EFFICIENCY is events.GOOD_EFFICIENCY
    assert pop_table.GOOD_EFFICIENCY is events.GOOD_EFFICIENCY
    assert inspect.signature(analysis.findings).parameters["efficiency_target"].default is events.GOOD_EFFICIENCY
    assert pop_table.pop_colour(events.GOOD_EFFICIENCY) == pop_table.POP_COLOURS["good"]
    assert pop_table.pop_colour(events.FAIR_EFFICIENCY) == pop_table.POP_COLOURS["fair"]


def test_no_private_name_is_imported_across_modules():
    private = [
        f"{path.relative_to(PACKAGE)}: from {node.module} import {alias.name}"
        for path, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert private == []
