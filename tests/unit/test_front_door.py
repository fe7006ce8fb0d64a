"""The front door (issue 32): notebooks import only what ``workbench`` exports, ``import workbench`` stays light,
and the package's modules import each other without a circle."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import workbench

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PACKAGE = ROOT / "workbench"


def _code_cells(notebook: Path) -> list[tuple[int, ast.Module]]:
    """Every code cell parsed, IPython's ``%magic`` and ``!shell`` lines left out."""
    cells = []
    for index, cell in enumerate(json.loads(notebook.read_text())["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        kept = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        cells.append((index, ast.parse(kept, filename=f"{notebook.name}[{index}]")))
    return cells


def _imports_past_the_front_door(tree: ast.Module) -> list[str]:
    """Imports of workbench other than ``import workbench`` or ``from workbench import <exported name>``."""
    wrong = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wrong += [f"import {a.name}" for a in node.names if a.name.startswith("workbench.")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "workbench":
            names = [a.name for a in node.names]
            if node.module != "workbench" or node.level:
                wrong.append(f"from {node.module} import {', '.join(names)}")
            else:
                wrong += [f"from workbench import {n} (not exported)" for n in names if n not in workbench.__all__]
    return wrong


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 7


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_notebook_imports_only_what_workbench_exports(notebook):
    wrong = [
        f"cell {index}: {line}" for index, tree in _code_cells(notebook) for line in _imports_past_the_front_door(tree)
    ]
    assert not wrong, f"{notebook.name} goes past `from workbench import ...`:\n" + "\n".join(wrong)


def test_the_check_catches_module_imports():
    tree = ast.parse("from workbench.store import RunTail\nimport workbench.report\nfrom workbench import _LAZY")
    assert len(_imports_past_the_front_door(tree)) == 3


def test_every_exported_name_is_public_and_listed():
    assert all(not name.startswith("_") or name == "__version__" for name in workbench.__all__)
    assert len(set(workbench.__all__)) == len(workbench.__all__)
    assert set(workbench.__all__) <= set(dir(workbench))


def test_import_workbench_stays_light():
    """Nothing heavy until a name is touched: a script that only needs the CLI's parser starts fast."""
    code = "import sys, workbench; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for heavy in ("tensorflow", "plotly", "pandas", "ipyparallel"):
        assert f"'{heavy}'" not in loaded


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Modules imported anywhere in the file (inside functions too), except under ``if TYPE_CHECKING:``."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
            found.extend(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """workbench's modules -> the workbench modules each imports (lazy imports in functions count too)."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in _runtime_imports(ast.parse(path.read_text())) if m in files and m != name}
        for name, path in files.items()
    }


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                connect(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            connect(module)
    return cycles


def test_the_cycle_check_finds_a_circle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_in_workbench():
    assert import_cycles(import_graph()) == []


def _recorded_run(root: Path) -> Path:
    """A finished 2-rank run: three steps each, then rank 0 evaluates while rank 1 waits."""
    import pandas as pd

    from workbench.events import events_frame
    from workbench.store import StreamWriter, create_run, update_run_meta

    second = 1_000_000_000
    rows = [
        {
            "rank": r,
            "phase": "compute",
            "name": "train_step",
            "start_ns": 2 * i * second,
            "end_ns": (2 * i + 2) * second,
        }
        for r in (0, 1)
        for i in range(3)
    ]
    rows += [
        {"rank": 0, "phase": "evaluation", "name": "evaluate", "start_ns": 6 * second, "end_ns": 10 * second},
        {
            "rank": 1,
            "phase": "communication",
            "name": "NEGOTIATE_ALLREDUCE",
            "start_ns": 6 * second,
            "end_ns": 10 * second,
        },
    ]
    path = create_run(root, "front-door", ranks=2, config={"cluster": {"ranks": 2, "threads": 1, "cores": 4}})
    events = events_frame(pd.DataFrame(rows).assign(run_id=path.name))
    for rank, part in events.groupby("rank"):
        StreamWriter(path, "events", int(rank)).write(part.to_dict(orient="list"))
    update_run_meta(path, status="finished")
    return path


def test_run_forwards_to_analysis_and_report(tmp_path, capsys):
    """``Run.analyse/summary/report`` give exactly what ``workbench analyse --html`` computes, prints and writes."""
    from pandas.testing import assert_frame_equal

    from workbench.cli import main

    path = _recorded_run(tmp_path)
    run = workbench.Run.load(path)
    result = run.analyse()
    expected = workbench.analyse_run(run.events, run.memory, run.meta)
    assert_frame_equal(result.findings, expected.findings)
    assert main(["analyse", str(path), "--html", str(tmp_path / "cli.html")]) == 0
    printed = capsys.readouterr().out
    assert run.summary(result) in printed
    report = run.report(tmp_path / "report.html", result)
    assert report.stat().st_size > 10_000


class _Pending:
    """Stands in for ipyparallel's AsyncResult: finished, with every rank's return value."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def ready(self) -> bool:
        return True

    def successful(self) -> bool:
        return True

    def wait(self) -> None:
        pass

    def get(self) -> list[float]:
        return self.values


def test_a_profiled_call_closes_its_run(tmp_path, capsys):
    import asyncio

    path = _recorded_run(tmp_path)
    call = workbench.ProfiledCall(path, _Pending([0.5, 0.5]))
    run = asyncio.run(call.finish(poll_s=0.01))
    assert isinstance(run, workbench.Run) and not call.failed and call.outcome() == [0.5, 0.5]
    assert run.meta["status"] == "finished"
    assert "Horovod timeline" in capsys.readouterr().out
    assert isinstance(call.finish_sync(), workbench.Run)
