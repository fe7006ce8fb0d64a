"""An HTML report opened from disk in headless Chromium: plotly.js unpacks, every figure draws as it is reached."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest
from jupyterlab_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, VIEWPORT, chromium_available, wait_for

from workbench import figures
from workbench.report import write_report

pytestmark = pytest.mark.browser

JS_FIGURES = """() => [...document.querySelectorAll('div.figure')].map((div) => ({
  drawn: !!div.querySelector('.main-svg'), text: div.textContent.slice(0, 200),
  top: div.getBoundingClientRect().top}))"""


def test_report_draws_each_figure_when_it_nears_the_screen(tmp_path: Path) -> None:
    if not chromium_available():
        pytest.skip("chromium is missing: install Debian's chromium (make browser) to run the browser test")
    from playwright.sync_api import sync_playwright

    pop = pd.DataFrame({"ranks": [1, 2], "parallel_efficiency": [0.9, 0.5], "load_balance": [0.95, 0.7]})
    bars = [go.Figure(go.Bar(x=[1, 2, 3], y=[i, 2, 1]), layout={"height": 500}) for i in range(4)]
    sections = [("POP", figures.pop_table_figure(pop))] + [(f"Figure {i}", figure) for i, figure in enumerate(bars)]
    report = write_report(tmp_path / "report.html", title="t", sections=sections)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )  # fmt: skip
        try:
            page = context.new_page()
            page.goto(report.as_uri())
            # the first screen's figure draws by itself; one three screens down waits until it is near
            wait_for("the first figure", lambda: page.evaluate(JS_FIGURES)[0]["drawn"], 30)
            time.sleep(0.5)
            shown = page.evaluate(JS_FIGURES)
            assert shown[-1]["top"] > 2 * VIEWPORT["height"] and not shown[-1]["drawn"], shown
            assert page.locator("table.figure-table td").count() == 6  # the POP table as HTML
            for index in range(len(bars)):
                page.locator("div.figure").nth(index).scroll_into_view_if_needed()
            wait_for("every figure drawn", lambda: all(f["drawn"] for f in page.evaluate(JS_FIGURES)), 30)
            assert not [f for f in page.evaluate(JS_FIGURES) if "could not unpack" in f["text"]]
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"))
        finally:
            context.close()
