"""How long the browser takes to draw a 64-rank timeline, by bar budget and style.

Why the live dashboard redraws at most 2 500 bars (``LIVE_MAX_SPANS``): every refresh makes the
browser draw every bar again. This builds the same synthetic 64-rank timeline with 5 000, 2 500 and
1 500 bars (SVG bars) and with 5 000 WebGL segments, and times in headless Chromium a first draw
(``Plotly.newPlot``) and a redraw (``Plotly.react``), each until two animation frames have passed,
``--repeats`` times. Prints JSON: per variant, the bars drawn and the times in ms.

    python benchmarks/timeline_draw.py [--repeats 4]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import plotly

from docsbench.redraw import made_spans
from workbench.figures.timeline import timeline_figure

CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")

VARIANTS: dict[str, dict] = {
    "bars, 5 000": {"max_spans": 5_000},
    "bars, 2 500": {"max_spans": 2_500},
    "bars, 1 500": {"max_spans": 1_500},
    "WebGL, 5 000": {"max_spans": 5_000, "style": "gl"},
}

DRAW = """async (figure) => {
  const frames = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const plot = document.getElementById('plot');
  Plotly.purge(plot);
  let f = JSON.parse(figure);
  const t0 = performance.now();
  await Plotly.newPlot(plot, f.data, f.layout);
  await frames();
  const t1 = performance.now();
  f = JSON.parse(figure);
  await Plotly.react(plot, f.data, f.layout);
  await frames();
  return [t1 - t0, performance.now() - t1];
}"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    if not CHROMIUM.exists():
        print("chromium is missing: install Debian's chromium (make browser)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    events = made_spans(ranks=64, spans_per_rank=450)
    figures = {}
    for label, options in VARIANTS.items():
        figure = timeline_figure(events, height=900, **options)
        figures[label] = (figure.to_json(), int(figure.layout.meta["drawn"]))
    bundle = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()
    results = {}
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        page_file = Path(folder) / "draw.html"
        page_file.write_text(
            "<html><body><div id='plot' style='width:1400px;height:900px'></div>"
            f"<script>{bundle}</script></body></html>"
        )
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(page_file.as_uri())
            for label, (figure, drawn) in figures.items():
                times = [page.evaluate(DRAW, figure) for _ in range(args.repeats)]
                results[label] = {
                    "bars": drawn,
                    "first_draw_ms": [round(first, 1) for first, _ in times],
                    "redraw_ms": [round(again, 1) for _, again in times],
                }
        finally:
            browser.close()
    print(json.dumps({"ranks": 64, "spans": len(events), "variants": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
