"""Running a notebook for a test: in JupyterLab in Chromium (or papermill), outputs gathered, the saved copy checked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat

if TYPE_CHECKING:
    from jupyterlab_browser import LabNotebooks

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def check_saved(name: str, *parameter_lines: str) -> None:
    """The committed notebook has no outputs and one ``parameters`` cell holding ``parameter_lines``."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1
    for line in parameter_lines:
        assert line in tagged[0].source, (line, tagged[0].source)


def execute(
    name: str, tmp_path: Path, parameters: dict[str, Any], *, timeout_s: int = 600, lab: LabNotebooks | None = None
) -> list[Any]:
    """Execute ``notebooks/<name>`` with ``parameters``; fail on any error output; return every output.

    With ``lab`` (Chromium is installed: see ``conftest.py``) the notebook runs in JupyterLab
    in the browser, as a user runs it, and the page is checked too; without, papermill runs it.
    """
    if lab is not None:
        folder = re.sub(r"[^A-Za-z0-9_.-]+", "-", tmp_path.name)
        saved = lab.run(NOTEBOOKS / name, folder, parameters, timeout_s=timeout_s * 2)
        notebook = nbformat.reads(json.dumps(saved), as_version=4)  # joins JupyterLab's multi-line lists
    else:
        import papermill

        executed = tmp_path / f"executed-{name}"
        papermill.execute_notebook(
            str(NOTEBOOKS / name),
            str(executed),
            parameters=parameters,
            cwd=str(NOTEBOOKS.parent),
            kernel_name="python3",
            execution_timeout=timeout_s,
            progress_bar=False,
        )
        notebook = nbformat.read(executed, as_version=4)
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    errors = [output for output in outputs if output.output_type == "error"]
    assert not errors, "\n".join(f"{e.get('ename')}: {e.get('evalue')}" for e in errors)
    return outputs


def stream_text(outputs: list[Any]) -> str:
    """What the cells printed."""
    return "\n".join(output.get("text", "") for output in outputs if output.output_type == "stream")


def all_text(outputs: list[Any]) -> str:
    """What the cells printed and the plain text of what they displayed."""
    parts = []
    for output in outputs:
        parts.append("".join(output.get("text", "")))
        parts.append("".join(output.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)
