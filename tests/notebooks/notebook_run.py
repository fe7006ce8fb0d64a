"""Running a notebook for a test: papermill on the real kernel, outputs gathered, the saved copy checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat

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


def execute(name: str, tmp_path: Path, parameters: dict[str, Any], *, timeout_s: int = 600) -> list[Any]:
    """Execute ``notebooks/<name>`` with ``parameters``; fail on any error output; return every output."""
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
    assert not [output for output in outputs if output.output_type == "error"]
    return outputs


def stream_text(outputs: list[Any]) -> str:
    """What the cells printed."""
    return "\n".join(output.get("text", "") for output in outputs if output.output_type == "stream")
