"""The HTML report is one self-contained file: plotly.js once, every section, no network."""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go

from workbench.report import text_to_html, write_report


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
    assert len(re.findall(r"\* plotly\.js v\d", html)) == 1  # the library's banner: embedded once
    assert html.count("Plotly.newPlot") == 2
    assert not re.search(r"<script[^>]+src=", html)  # nothing fetched from a CDN
    assert "<title>Scaling &lt;study&gt;</title>" in html
    for heading in ("Timeline", "Findings", "Phase seconds", "Memory"):
        assert f"<h2>{heading}</h2>" in html
    assert "<code>allreduce</code>" in html and "<strong>load balance</strong>" in html
    assert "comms &lt;ok&gt;" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<td>1.25</td>" in html


def test_text_paragraphs_are_escaped():
    out = text_to_html("# Summary\nall good\n\n<script>alert(1)</script>")
    assert out.startswith("<h3>Summary</h3>")
    assert "<script>" not in out and "&lt;script&gt;" in out


def test_report_without_figures(tmp_path):
    html = write_report(tmp_path / "r.html", title="t", sections=[("Only text", "hello")]).read_text()
    assert "plotly.js v" not in html and "<p>hello</p>" in html
