"""The ``workbench`` command's entry point: packages that do not import together are one line, not a traceback.

The command line imports numpy, pandas and pyarrow before it parses anything, so an environment where they do
not fit (pyarrow 22+ beside NumPy 1, a numpy upgraded under TensorFlow) would fail inside an import. This
module imports nothing of the stack itself and turns that failure into the line that says what to install.
"""

from __future__ import annotations

import sys

#: Import failures whose cause and fix are known: a piece of the message -> what to do.
KNOWN_FIXES = {
    "pyarrow requires NumPy 2": "NumPy 1 stays here (TensorFlow <= 2.17 needs it): pip install 'pyarrow<22', "
    "or install the workbench with its numpy1 extra (docs/install.md)",
    "compiled using NumPy 1.x cannot be run in": "a package built for NumPy 1 meets NumPy 2: reinstall the NumPy "
    "your TensorFlow needs (pip install 'numpy<2') and keep it with a constraints file (docs/install.md)",
}


def import_failure_line(error: BaseException) -> str:
    """The one line for a stack that does not import: what failed, and the fix where it is known."""
    text = " ".join(str(error).split()) or type(error).__name__
    fix = next((fix for piece, fix in KNOWN_FIXES.items() if piece in text), None)
    fix = fix or "the packages installed here do not work together: see `pip check` and docs/install.md"
    return f"workbench: cannot start: {type(error).__name__}: {text[:300]}: {fix}"


def main() -> int:
    try:
        from workbench.cli import main as command_line
    except ImportError as error:
        print(import_failure_line(error), file=sys.stderr)
        return 2
    return command_line()


if __name__ == "__main__":
    sys.exit(main())
