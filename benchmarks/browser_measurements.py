"""Run the JupyterLab browser test and print what it measured (JSON) for the README's dashboard table.

The test (``tests/browser``) drives a live dashboard in headless Chromium and writes
``artifacts/browser/measurements.json``: event on a rank -> its span on screen, the dashboard cell's
first figure, and a redraw of 8 x 10 000 spans in the browser.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = ROOT / "artifacts" / "browser" / "measurements.json"


def main() -> int:
    MEASUREMENTS.unlink(missing_ok=True)
    test = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/browser"]
    done = subprocess.run(test, cwd=ROOT, stdout=sys.stderr, check=False)
    if done.returncode != 0 or not MEASUREMENTS.exists():
        print(f"the browser test failed (exit {done.returncode}): nothing measured", file=sys.stderr)
        return 1
    print(MEASUREMENTS.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
