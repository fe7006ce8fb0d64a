"""The live dashboard in a real browser: JupyterLab + headless Chromium run a 2-rank job notebook.

The test starts JupyterLab on a free loopback port with an empty token, opens
``dashboard_job.ipynb`` in headless Chromium (Debian's ``/usr/bin/chromium`` driven by playwright),
runs it with the menu *Run > Run All Cells* and then reads what the browser drew:

* the live timeline shows bars of both ranks (``g.trace.bars path`` in the DOM, y tick labels);
* screenshots are kept at ``artifacts/browser/dashboard.png`` (and ``dashboard-80k.png``);
* no Traceback anywhere in the outputs, the dashboard's own error line is empty, the cluster stops.
* **first figure**: the dashboard's first plotly figure is on screen within ``FIRST_FIGURE_S`` of
  its cell's start: plotly's widget bundle is sent once per kernel (``workbench.widgets.figure``),
  not once per figure.

It also measures, in that browser (written to ``artifacts/browser/measurements.json``):

* **event → screen**: once the dashboard is on screen the test writes ``markers.go``, and the ranks
  take turns to record a ``checkpoint`` span ("marker") every second. Latency of marker k = the
  first time (browser ``Date.now()``, polled every 10 ms) the live timeline's DOM holds k
  checkpoint-coloured bars, minus the marker span's ``end_ns`` as recorded by the rank (same host,
  same wall clock). It covers the recorder's flush interval (0.5 s), the dashboard's refresh
  (0.5 s), the widget message and plotly's redraw.
* **redraw of 8 x 10 000 spans**: a second dashboard gets 80 000 spans in one ``update()``; time
  from just before that call in the kernel to plotly's ``plotly_afterplot`` with bars in the DOM
  (first) and to the last afterplot of that burst (settled, nothing more for 1.5 s).
* **64 ranks live**: a third dashboard follows a synthetic 64-rank job (``docsbench.live``, 10 s
  at a real job's rate); every checkpoint marker must reach the screen, latency as above, and all 64
  rows are drawn (screenshot ``dashboard-64.png``).
* **1 024 ranks live**: a fourth follows a synthetic 1 024-rank job on 128 hosts of 8 (20 s, 0.5 s
  steps, each rank flushing every 2 s as recorders do at that size, node37's ranks 25 % slower). The
  browser must show the rank × time heatmap with all 1 024 rows, node37 framed as the slowest host and
  its 8 ranks among the 16 on the timeline (screenshot ``dashboard-1024.png``). Refresh → screen: from
  the start of each refresh that brought events (kernel wall clock) to the heatmap's next
  ``plotly_afterplot`` in the browser (same host, same clock): poll + redraw + message + paint.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyterlab_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    VIEWPORT,
    chromium_available,
    free_port,
    keep_failure,
    lab_is_up,
    run_all,
    save_and_read,
    saved_outputs_text,
    start_lab,
    stop_processes,
    tree,
    wait_for,
    written_json,
)

pytestmark = pytest.mark.browser

#: Seconds from a marker span's end on its rank to its bar on screen: ~0.5-1 s is usual (flush 0.5 s +
#: refresh 0.5 s); a dashboard that stopped being live draws the early markers only at the end, 7+ s late.
LIVE_CEILING_MS = 5_000
#: Refresh start → heatmap on screen at 1 024 ranks: the goal (1 s) is measured and reported, not held here;
#: this bound says that every refresh reached the screen while two writer processes, the kernel, JupyterLab and
#: Chromium share 2 cores.
LIVE1024_CEILING_MS = 10_000
#: Seconds from the dashboard cell's start to its first figure on screen (issue 19 asks for <= 3 s).
FIRST_FIGURE_S = 3.0
HERE = Path(__file__).resolve().parent
NOTEBOOK = HERE / "dashboard_job.ipynb"
#: Cells of dashboard_job.ipynb (0 is the markdown title).
LIVE_CELL, WAIT_CELL, BIG_CELL, LIVE64_CELL, LIVE64_WAIT_CELL, LIVE1024_CELL, LAST_CELL = 2, 3, 4, 5, 6, 7, 9
N_MARKERS = 8  # as in the notebook

# Counts the live timeline's bars every 10 ms; remembers when the first bar appeared (firstBars) and
# when the k-th bar of the watched colour first appeared (first[k-1]), in ms since the epoch.
JS_WATCH = r"""([cell, fill]) => {
  const wb = window.__wb = {first: [], firstBars: null, cellStart: null, figure: null, timer: 0};
  wb.timer = setInterval(() => {
    const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell];
    const now0 = Date.now();
    // the cell starts when the one before it has finished (Run All marks every queued cell [*] at once)
    const before = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell - 1];
    const prompt = before && before.querySelector('.jp-InputPrompt');
    if (wb.cellStart === null && prompt && /\[\d+\]/.test(prompt.textContent)) wb.cellStart = now0;
    if (wb.figure === null && c && c.querySelector('.js-plotly-plot .main-svg')) wb.figure = now0;
    const plot = c && c.querySelector('.js-plotly-plot');
    if (!plot) return;
    let n = 0, all = 0;
    for (const p of plot.querySelectorAll('g.trace.bars path')) {
      const d = p.getAttribute('d');
      if (!d || d === 'M0,0Z') continue;
      all++;
      if (p.style.fill === fill) n++;
    }
    const now = Date.now();
    if (all && wb.firstBars === null) wb.firstBars = now;
    while (wb.first.length < n) wb.first.push(now);
  }, 10);
}"""

# What the first plot of a cell shows: bars per fill colour, y tick labels, the status line.
JS_PLOT_STATE = """(cell) => {
  const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell];
  const plot = c && c.querySelector('.js-plotly-plot');
  if (!plot) return null;
  const fills = {};
  for (const p of plot.querySelectorAll('g.trace.bars path')) {
    const d = p.getAttribute('d');
    if (d && d !== 'M0,0Z') fills[p.style.fill] = (fills[p.style.fill] || 0) + 1;
  }
  const status = c.querySelector('.widget-html-content');
  return {
    bars: Object.values(fills).reduce((a, b) => a + b, 0),
    fills,
    yticks: [...plot.querySelectorAll('.ytick text')].map((t) => t.textContent),
    status: status ? status.textContent : '',
  };
}"""

# Records every plotly_afterplot of a cell's first plot with the number of bars drawn then.
JS_HOOK_AFTERPLOT = """(cell) => {
  const plot = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell].querySelector('.js-plotly-plot');
  window.__afterplots = [];
  plot.on('plotly_afterplot', () => window.__afterplots.push(
    {t: Date.now(), bars: plot.querySelectorAll('g.trace.bars path').length}));
  return true;
}"""

# Hooks plotly_afterplot of every plot that appears in a cell (heatmap and timeline), with their times.
JS_WATCH_PLOTS = r"""(cell) => {
  const wb = window.__wb1024 = {plots: 0, afterplots: [], timer: 0};
  wb.timer = setInterval(() => {
    const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell];
    const plots = c ? [...c.querySelectorAll('.js-plotly-plot')] : [];
    plots.forEach((plot) => {
      if (plot.__wbHooked || !plot.on) return;
      plot.__wbHooked = true;
      wb.plots++;
      plot.on('plotly_afterplot', () => wb.afterplots.push(
        {t: Date.now(), heatmap: !!(plot.data && plot.data[0] && plot.data[0].type === 'heatmap')}));
    });
  }, 20);
}"""

# The 1 024-rank cell's plots: the heatmap's rows and trace types, the timeline's y tick labels.
JS_HEATMAP_STATE = """(cell) => {
  const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell];
  const plots = c ? [...c.querySelectorAll('.js-plotly-plot')] : [];
  const heat = plots.find((p) => p.data && p.data.length && p.data[0].type === 'heatmap');
  const timeline = plots.find((p) => p !== heat);
  return {
    plots: plots.length,
    heatmap_rows: heat ? new Set(heat.data[0].y).size : 0,
    heatmap_drawn: heat ? heat.querySelectorAll('.hm image, image').length : 0,
    frame: heat ? [...heat.querySelectorAll('.annotation-text')].map((t) => t.textContent) : [],
    timeline_ticks: timeline ? [...timeline.querySelectorAll('.ytick text')].map((t) => t.textContent) : [],
  };
}"""

# The text of a cell's outputs (not its source).
JS_OUTPUT_TEXT = """(cell) => {
  const area = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell].querySelector('.jp-OutputArea');
  return area ? area.innerText : '';
}"""


def rgb(colour: str) -> str:
    """``#009E73`` -> ``rgb(0, 158, 115)``, as the browser reports a bar's fill."""
    value = colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(value[i : i + 2], 16) for i in (0, 2, 4)))


def marker_latencies_ms(run_dir: Path, first_seen_ms: list[int]) -> tuple[list[float], float]:
    """Browser time the k-th checkpoint bar appeared minus the k-th marker span's end on its rank.

    Also returns the end of the run's first span (ms since the epoch).
    """
    from workbench.store import RunData

    events = RunData.load(run_dir).events
    ends = sorted(int(v) for v in events.loc[events["phase"] == "checkpoint", "end_ns"])
    assert len(ends) == N_MARKERS, f"the ranks recorded {len(ends)} markers, expected {N_MARKERS}"
    latencies = [seen - end / 1e6 for seen, end in zip(first_seen_ms, ends, strict=True)]
    return latencies, int(events["end_ns"].min()) / 1e6


def test_dashboard_in_jupyterlab(tmp_path: Path) -> None:
    """Run the job notebook in headless Chromium; check the drawn timeline; measure latency and redraw."""
    if not chromium_available():
        pytest.skip("chromium is missing: install Debian's chromium (make browser) to run the browser test")
    from playwright.sync_api import sync_playwright

    from workbench.events import PHASE_COLOURS

    began = time.monotonic()
    ours_before = {process.pid for process in psutil.Process().children(recursive=True)}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    port = free_port()
    log = tmp_path / "jupyter.log"
    lab = start_lab(root, port, log)
    measurements: dict[str, Any] = {}
    try:
        wait_for("JupyterLab to answer", lambda: lab.poll() is not None or lab_is_up(port), 90, 0.3)
        assert lab.poll() is None, f"JupyterLab exited: {log.read_text()[-3000:]}"
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"),
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_ARGS,
                viewport=VIEWPORT,
            )
            try:
                page = context.pages[0] if context.pages else context.new_page()
                loaded = time.monotonic()
                page.goto(f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK.name}")
                page.wait_for_selector(".jp-Notebook .jp-Cell >> nth=5", timeout=90_000)
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
                page.evaluate(JS_WATCH, [LIVE_CELL, rgb(PHASE_COLOURS["checkpoint"])])
                run_all(page)
                run_all_at = time.monotonic()

                def live() -> dict[str, Any] | None:
                    return page.evaluate(JS_PLOT_STATE, LIVE_CELL)

                def both_ranks() -> dict[str, Any] | None:
                    state = live()
                    return state if state and state["bars"] and {"0", "1"} <= set(state["yticks"]) else None

                wait_for("bars of both ranks in the live timeline", both_ranks, 150, 0.25)
                first_bars = time.monotonic()
                (root / "markers.go").touch()  # the dashboard is on screen: the ranks start the markers
                wait_for(
                    f"{N_MARKERS} checkpoint markers on screen",
                    lambda: len(page.evaluate("window.__wb.first")) >= N_MARKERS,
                    90,
                    0.25,
                )
                wait_for(
                    "the job to end",
                    lambda: "job done" in page.evaluate(JS_OUTPUT_TEXT, WAIT_CELL),
                    60,
                    0.25,
                )
                watched = page.evaluate("clearInterval(window.__wb.timer), window.__wb")
                state = live()
                page.keyboard.press("Control+b")  # hide the file browser: a wider dashboard
                page.locator(".jp-Notebook .jp-Cell").nth(LIVE_CELL).locator(".jp-OutputArea").evaluate(
                    "(area) => area.scrollIntoView({block: 'start'})"
                )
                time.sleep(1.0)  # plotly re-lays out to the wider panel
                page.screenshot(path=str(ARTIFACTS / "dashboard.png"))

                assert {"0", "1"} <= set(state["yticks"]), state
                fills = state["fills"]
                for phase in ("compute", "evaluation", "checkpoint"):
                    assert fills.get(rgb(PHASE_COLOURS[phase]), 0) > 0, f"no {phase} bars drawn: {state}"
                assert fills[rgb(PHASE_COLOURS["checkpoint"])] == N_MARKERS, state
                assert "2 ranks seen (0–1)" in state["status"], state["status"]
                assert "failed" not in state["status"], state["status"]
                (run_dir,) = (root / "runs").iterdir()
                latencies, first_end_ms = marker_latencies_ms(run_dir, watched["first"])
                assert all(0 < latency < LIVE_CEILING_MS for latency in latencies), latencies
                assert None not in (watched["cellStart"], watched["figure"]), watched
                first_figure_s = (watched["figure"] - watched["cellStart"]) / 1e3
                assert first_figure_s <= FIRST_FIGURE_S, f"first figure {first_figure_s:.1f} s after its cell started"

                # redraw of 8 x 10 000 spans: hook afterplot on the second dashboard, then say go
                wait_for(
                    "the 80 000-span dashboard's empty plot",
                    lambda: page.evaluate(JS_PLOT_STATE, BIG_CELL) is not None,
                    60,
                    0.2,
                )
                page.evaluate(JS_HOOK_AFTERPLOT, BIG_CELL)
                (root / "redraw.go").touch()
                redraw_file = root / "redraw.json"
                redraw = wait_for("redraw.json from the kernel", lambda: written_json(redraw_file), 60, 0.05)
                started_ms = redraw["started_ns"] / 1e6

                def settled() -> list[dict[str, float]] | None:
                    plots = [p for p in page.evaluate("window.__afterplots") if p["t"] >= started_ms]
                    with_bars = [p for p in plots if p["bars"] > 0]
                    if with_bars and time.time() * 1e3 - plots[-1]["t"] > 1500:
                        return plots
                    return None

                plots = wait_for("plotly to redraw 80 000 spans", settled, 90, 0.1)
                big_state = page.evaluate(JS_PLOT_STATE, BIG_CELL)
                page.locator(".jp-Notebook .jp-Cell").nth(BIG_CELL).locator(".jp-OutputArea").evaluate(
                    "(area) => area.scrollIntoView({block: 'start'})"
                )
                page.screenshot(path=str(ARTIFACTS / "dashboard-80k.png"))
                assert big_state["bars"] > 0 and {str(r) for r in range(8)} <= set(big_state["yticks"]), big_state

                # 64 ranks: a synthetic job at a real job's rate, followed live; its markers are checkpoints
                page.evaluate(JS_WATCH, [LIVE64_CELL, rgb(PHASE_COLOURS["checkpoint"])])
                (root / "live64.go").touch()
                live64_file = root / "live64.json"
                live64 = wait_for("the 64-rank job to end (live64.json)", lambda: written_json(live64_file), 120, 0.2)
                watched64 = page.evaluate("clearInterval(window.__wb.timer), window.__wb")
                ends64 = live64["marker_ends_ns"]
                assert live64["error"] == "" and len(ends64) >= 5, live64
                assert len(watched64["first"]) >= len(ends64), (watched64["first"], ends64)  # each one drawn
                latencies64 = [seen - end / 1e6 for seen, end in zip(watched64["first"], ends64)]
                assert all(0 < latency < LIVE_CEILING_MS for latency in latencies64), latencies64
                state64 = page.evaluate(JS_PLOT_STATE, LIVE64_CELL)
                assert {str(r) for r in range(64)} <= set(state64["yticks"]), state64["yticks"]
                page.locator(".jp-Notebook .jp-Cell").nth(LIVE64_CELL).locator(".jp-OutputArea").evaluate(
                    "(area) => area.scrollIntoView({block: 'start'})"
                )
                page.screenshot(path=str(ARTIFACTS / "dashboard-64.png"))

                # 1 024 ranks on 128 hosts: the heatmap of all, the timeline of the slowest
                page.evaluate(JS_WATCH_PLOTS, LIVE1024_CELL)
                (root / "live1024.go").touch()
                live1024_file = root / "live1024.json"
                live1024 = wait_for(
                    "the 1024-rank job to end (live1024.json)", lambda: written_json(live1024_file), 180, 0.2
                )
                watched1024 = page.evaluate("clearInterval(window.__wb1024.timer), window.__wb1024")
                assert live1024["error"] == "" and live1024["heatmap_rows"] == 1024, live1024
                slow_host = set(range(37 * 8, 38 * 8))
                assert slow_host <= set(live1024["timeline_ranks"]), live1024["timeline_ranks"]
                assert live1024["marked_host"] == "slowest host node37", live1024["marked_host"]
                state1024 = page.evaluate(JS_HEATMAP_STATE, LIVE1024_CELL)
                assert state1024["heatmap_rows"] == 1024 and state1024["heatmap_drawn"] >= 1, state1024
                assert "slowest host node37" in state1024["frame"], state1024
                assert any("37" in tick for tick in state1024["timeline_ticks"]), state1024
                heatmap_paints = [p["t"] for p in watched1024["afterplots"] if p["heatmap"]]
                refresh_to_screen = [
                    next(t for t in heatmap_paints if t >= r["started_ns"] / 1e6) - r["started_ns"] / 1e6
                    for r in live1024["refreshes"]
                    if any(t >= r["started_ns"] / 1e6 for t in heatmap_paints)
                ]
                assert refresh_to_screen and all(0 < v < LIVE1024_CEILING_MS for v in refresh_to_screen), (
                    refresh_to_screen
                )
                page.locator(".jp-Notebook .jp-Cell").nth(LIVE1024_CELL).locator(".jp-OutputArea").evaluate(
                    "(area) => area.scrollIntoView({block: 'start'})"
                )
                page.screenshot(path=str(ARTIFACTS / "dashboard-1024.png"))
                kernel1024 = [r["poll_s"] + r["redraw_s"] for r in live1024["refreshes"]]

                wait_for(
                    "the last cell (cluster stopped)",
                    lambda: "the end: cluster stopped" in page.evaluate(JS_OUTPUT_TEXT, LAST_CELL),
                    90,
                    0.25,
                )
                assert "dashboard error: ''" in page.evaluate(JS_OUTPUT_TEXT, LAST_CELL)
                shown = page.locator(".jp-Notebook .jp-OutputArea-output").all_inner_texts()
                assert not [text for text in shown if "Traceback" in text], shown

                saved = root / NOTEBOOK.name
                save_and_read(page, saved, lambda nb: "the end: cluster stopped" in json.dumps(nb["cells"]))
                page.close()
                time.sleep(2.0)  # the kernel sees the page go; anything it logs now lands in the server log
                types, text = saved_outputs_text(saved)
                assert "error" not in types and "Traceback" not in text, text[-3000:]
                assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
            except Exception:
                keep_failure(context)
                raise
            finally:
                context.close()

        measurements = {
            "browser": "Debian chromium (headless) via playwright, JupyterLab 4",
            "event_to_screen_ms": {
                "definition": (
                    "first time (browser Date.now(), polled every 10 ms) the live timeline's DOM holds the k-th "
                    "'checkpoint' bar, minus that marker span's end_ns on its rank; markers start once the "
                    "dashboard is on screen; recorder flush 0.5 s, dashboard refresh 0.5 s"
                ),
                "median": round(statistics.median(latencies), 1),
                "min": round(min(latencies), 1),
                "max": round(max(latencies), 1),
                "all": [round(v, 1) for v in latencies],
            },
            "redraw_80k_spans": {
                "definition": (
                    "8 ranks x 10 000 spans in one Dashboard.update(): from just before update() in the kernel "
                    "to plotly_afterplot with bars in the DOM (first) and to the last afterplot (settled)"
                ),
                "spans": redraw["spans"],
                "bars_drawn": int(redraw["drawn_spans"]),
                "kernel_update_s": round(redraw["update_s"], 3),
                "first_afterplot_with_bars_s": round(
                    (next(p["t"] for p in plots if p["bars"] > 0) - started_ms) / 1e3, 3
                ),
                "settled_s": round((plots[-1]["t"] - started_ms) / 1e3, 3),
                "afterplots": len(plots),
            },
            "first_figure": {
                "definition": (
                    "browser Date.now() (polled every 10 ms) when the live cell's dashboard first shows a plotly "
                    "figure, minus when the cell started (the cell before it got its execution count)"
                ),
                "after_cell_start_s": round(first_figure_s, 2),
            },
            "live_64_ranks": {
                "definition": (
                    "a synthetic 64-rank job (docsbench.live) writing to the store at 0.1 s steps for 10 s,"
                    " a dashboard following it: k-th checkpoint bar on screen minus the k-th marker's end_ns"
                ),
                "spans": live64["spans"],
                "markers": len(ends64),
                "event_to_screen_median_ms": round(statistics.median(latencies64), 1),
                "event_to_screen_max_ms": round(max(latencies64), 1),
                "kernel_refresh_median_s": round(live64["refresh_median_s"], 3),
                "kernel_refresh_max_s": round(live64["refresh_max_s"], 3),
            },
            "live_1024_ranks": {
                "definition": (
                    "a synthetic 1024-rank job on 128 hosts (docsbench.live: 0.5 s steps, flush every 2 s,"
                    " 2 writer processes, node37 25 % slower) for 20 s, a dashboard (refresh 1 s) drawing the rank x"
                    " time heatmap and the 16 slowest ranks' timeline: refresh -> screen is from the start of a"
                    " refresh that brought events to the heatmap's next plotly_afterplot in the browser"
                ),
                "events": live1024["events"],
                "refreshes": len(live1024["refreshes"]),
                "kernel_refresh_median_s": round(statistics.median(kernel1024), 3),
                "kernel_refresh_max_s": round(max(kernel1024), 3),
                "refresh_to_screen_median_ms": round(statistics.median(refresh_to_screen), 1),
                "refresh_to_screen_max_ms": round(max(refresh_to_screen), 1),
                "timeline_ranks": live1024["timeline_ranks"],
            },
            "first_event_to_first_bars_s": round((watched["firstBars"] - first_end_ms) / 1e3, 2),
            "run_all_to_first_bars_s": round(first_bars - run_all_at, 1),
            "page_load_to_run_all_s": round(run_all_at - loaded, 1),
            "test_s": round(time.monotonic() - began, 1),
        }
        (ARTIFACTS / "measurements.json").write_text(json.dumps(measurements, indent=2))
        print("\nbrowser measurements:", json.dumps(measurements, indent=2))
    finally:
        stop_processes(tree(lab.pid))
        # anything else this test started (chromium, should playwright not have closed it)
        stop_processes([p for p in psutil.Process().children(recursive=True) if p.pid not in ours_before])
        if log.exists():
            shutil.copy(log, ARTIFACTS / "jupyter.log")
