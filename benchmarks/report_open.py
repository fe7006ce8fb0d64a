"""How long the case studies' HTML reports take to open in headless Chromium; prints JSON for the README.

    python benchmarks/report_open.py [REPORT.html ...] [--repetitions 5]

Without paths it opens every ``artifacts/*-reduced/report.html`` the README's sweeps wrote
(``benchmarks/measure_readme.sh``). For each report, in a fresh page each time (1400 x 1000 px):

* ``open_s``: navigation start to the first screen drawn, i.e. every figure in the first viewport
  has its plotly SVG (a report without one there: the load event);
* ``all_drawn_s``: the same for every figure, scrolling down the page as a reader does;
* ``text_s``: navigation start to the document parsed (DOMContentLoaded): its text and tables are on
  screen, figures follow once plotly.js is unpacked;
* ``mb``: the file's size. Times are the median over ``--repetitions`` opens.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")

# Milliseconds since navigation start when every figure in the viewport is drawn (null while not yet).
JS_FIRST_SCREEN = """() => {
  const height = window.innerHeight;
  const visible = [...document.querySelectorAll('div.figure')].filter((div) => {
    const box = div.getBoundingClientRect();
    return box.top < height && box.bottom > 0;
  });
  if (document.readyState !== 'complete') return null;
  return visible.every((div) => div.querySelector('.main-svg')) ? performance.now() : null;
}"""
JS_ALL_DRAWN = """() => [...document.querySelectorAll('div.figure')].every((div) => div.querySelector('.main-svg'))
  ? performance.now() : null"""


def poll(page, script: str, timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = page.evaluate(script)
        if value is not None:
            return float(value)
        time.sleep(0.005)
    raise TimeoutError(f"the report did not finish drawing within {timeout_s:.0f} s")


def open_once(context, report: Path) -> tuple[float, float, float]:
    page = context.new_page()
    try:
        page.goto(report.resolve().as_uri(), wait_until="commit")
        first = poll(page, JS_FIRST_SCREEN)
        figures = page.locator("div.figure")
        for index in range(figures.count()):
            figures.nth(index).scroll_into_view_if_needed()
            time.sleep(0.05)
        text = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
        return first / 1e3, poll(page, JS_ALL_DRAWN) / 1e3, float(text) / 1e3
    finally:
        page.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path)
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args(argv)
    reports = args.reports or sorted(ROOT.glob("artifacts/*-reduced/report.html"))
    if not reports:
        print("no reports: run benchmarks/measure_readme.sh (the reduced sweeps) or name report files", file=sys.stderr)
        return 1
    if not CHROMIUM.exists():
        print("chromium is missing: install Debian's chromium (make browser)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"],
            viewport={"width": 1400, "height": 1000},
        )
        try:
            open_once(context, reports[0])  # the browser's own start-up is not the report's
            for report in reports:
                times = [open_once(context, report) for _ in range(args.repetitions)]
                rows.append(
                    {
                        "report": str(report.relative_to(ROOT) if report.is_relative_to(ROOT) else report),
                        "mb": round(report.stat().st_size / 1e6, 2),
                        "figures": report.read_text().count('class="figure-data"'),
                        "open_s": round(statistics.median(t[0] for t in times), 3),
                        "open_max_s": round(max(t[0] for t in times), 3),
                        "all_drawn_s": round(statistics.median(t[1] for t in times), 3),
                        "text_s": round(statistics.median(t[2] for t in times), 3),
                    }
                )
        finally:
            context.close()
    print(json.dumps({"browser": "Debian chromium (headless), 1400 x 1000 px", "reports": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
