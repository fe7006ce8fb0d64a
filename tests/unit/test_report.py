"""The HTML report is one self-contained file: plotly.js once, every section, no network, readable tables."""

from __future__ import annotations

import base64
import gzip
import re

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs_version

from workbench import figures
from workbench.figures.pop_table import POP_COLOURS
from workbench.report import CARTESIAN_VERSION, Details, readable, run_metadata, text_to_html, write_report

#: The bundle a report of bars and scatters embeds: the shipped cartesian one where it matches plotly.py's
#: plotly.js (plotly 7.1), the whole library otherwise (an older plotly in a user's environment).
SMALL_BUNDLE = (
    r"\* plotly\.js \(cartesian - minified\) v\d"
    if get_plotlyjs_version() == CARTESIAN_VERSION
    else r"\* plotly\.js v\d"
)


def test_report_is_one_self_contained_html_file(tmp_path):
    figures = [go.Figure(go.Bar(x=[1, 2], y=[3, 4])), go.Figure(go.Scatter(x=[1], y=[2]))]
    table = pd.DataFrame({"rank": [0, 1], "compute_s": [1.25, 2.5], "note": ["<b>x</b>", None]})
    path = write_report(
        tmp_path / "sub" / "report.html",
        title="Scaling <study>",
        sections=[
            ("Timeline", figures[0]),
            ("Findings", "Rank 1 waits in `allreduce`.\n\n- **load balance** 0.7\n- comms <ok>"),
            ("Phase seconds", table),
            ("Memory", figures[1]),
        ],
    )
    assert path == tmp_path / "sub" / "report.html"
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]
    html = path.read_text(encoding="utf-8")
    (packed,) = re.findall(r'<script type="text/plain" id="plotlyjs-gz">([^<]+)</script>', html)  # once
    library = gzip.decompress(base64.b64decode(packed)).decode()
    assert re.search(SMALL_BUNDLE, library)  # the small bundle draws bar + scatter
    assert html.count('class="figure-data"') == 2 and html.count("Plotly.newPlot") == 1
    assert not re.search(r"<script[^>]+src=", html)  # nothing fetched from a CDN
    assert "<title>Scaling &lt;study&gt;</title>" in html
    for heading in ("Timeline", "Findings", "Phase seconds", "Memory"):
        assert f"<h2>{heading}</h2>" in html
    assert "<code>allreduce</code>" in html and "<strong>load balance</strong>" in html
    assert "comms &lt;ok&gt;" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and re.search(r"<td[^>]*>1.25</td>", html)


def test_a_trace_outside_the_cartesian_bundle_gets_the_full_library(tmp_path):
    figure = go.Figure(go.Sankey(node={"label": ["a", "b"]}, link={"source": [0], "target": [1], "value": [1]}))
    html = write_report(tmp_path / "r.html", title="t", sections=[("Flow", figure)]).read_text()
    (packed,) = re.findall(r'id="plotlyjs-gz">([^<]+)</script>', html)
    assert re.search(r"\* plotly\.js v\d", gzip.decompress(base64.b64decode(packed)).decode())


def test_a_table_figure_becomes_an_html_table_without_plotly(tmp_path):
    """POP tables are plotly tables in notebooks; in a report they need neither plotly.js nor its full bundle."""
    frame = pd.DataFrame({"ranks": [1, 2], "parallel_efficiency": [0.9, 0.5], "load_balance": [0.95, None]})
    figure = figures.pop_table_figure(frame, title="strong <scaling>")
    html = write_report(tmp_path / "r.html", title="t", sections=[("POP", figure)]).read_text()
    assert "plotlyjs-gz" not in html and "<caption>strong &lt;scaling&gt;</caption>" in html
    assert "<tr><th>ranks</th><th>1</th><th>2</th></tr>" in html
    good, poor, missing = POP_COLOURS["good"], POP_COLOURS["poor"], POP_COLOURS["missing"]
    assert f'background: {good}">0.90</td><td style="text-align: center; background: {poor}">0.50</td>' in html
    assert f'background: {missing}">–</td>' in html and "\u2003\u2003Load balance</td>" in html
    both = write_report(tmp_path / "b.html", title="t", sections=[("POP", figure), ("Bars", go.Figure(go.Bar()))])
    (packed,) = re.findall(r'id="plotlyjs-gz">([^<]+)</script>', both.read_text())
    assert re.search(SMALL_BUNDLE, gzip.decompress(base64.b64decode(packed)).decode()[:300])


def test_text_paragraphs_are_escaped():
    out = text_to_html("# Summary\nall good\n\n<script>alert(1)</script>")
    assert out.startswith("<h3>Summary</h3>")
    assert "<script>" not in out and "&lt;script&gt;" in out


def test_report_without_figures(tmp_path):
    html = write_report(tmp_path / "r.html", title="t", sections=[("Only text", "hello")]).read_text()
    assert "plotlyjs-gz" not in html and "<p>hello</p>" in html


def test_readable_tables_show_percent_three_figures_and_full_text():
    findings = "parallel efficiency is 0.32 (below 0.80): load imbalance costs 12.3 s of 40 s; " * 3
    frame = pd.DataFrame(
        {
            "ranks": [1, 2],
            "fraction_compute": [0.2537, 1.0],
            "parallel_efficiency": [0.321, None],
            "train_samples_per_s": [123456.7, 0.012345],
            "text": [findings, "short"],
        }
    )
    out = readable(frame).to_html()
    for shown in ("25.4%", "100%", "32.1%", "123000", "0.0123", findings.strip()):
        assert shown in out, shown
    assert "e+" not in out and "e-0" not in out
    assert "text-align: left" in out and "white-space: normal" in out
    assert ">parallel_<wbr>efficiency</th>" in out  # long names may break after an underscore: narrower tables


def test_wide_tables_scroll_details_fold_and_metadata_heads_the_report(tmp_path):
    from workbench.store import create_run

    runs = [create_run(tmp_path / "runs", f"r{i}", ranks=i + 1, config={"cluster": {"mpi": "openmpi"}}) for i in (0, 1)]
    metadata = run_metadata(runs, case="eval-frequency", preset="ci")
    assert metadata["case"] == "eval-frequency" and metadata["ranks"] == "1, 2" and metadata["runs"] == "2"
    assert metadata["host"] and metadata["date"] and "Python" in metadata["versions"]
    assert metadata["MPI"].startswith("openmpi")
    wide = pd.DataFrame({f"column_{i}": [float(i)] for i in range(40)})
    sections = [("Runs", wide.iloc[:, :3]), ("More", Details(wide))]
    html = write_report(tmp_path / "r.html", title="t", sections=sections, metadata=metadata).read_text()
    assert html.index('class="metadata"') < html.index("<h2>Runs</h2>")
    assert "<th>preset</th><td>ci</td>" in html
    assert html.count('<div class="table-scroll">') == 2 and "<details><summary>all columns</summary>" in html
