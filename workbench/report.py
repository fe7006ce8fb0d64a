"""One self-contained HTML report: metadata, figures, text and tables in a single file that opens offline.

Reports get mailed, attached to issues and opened on machines without network access, so plotly.js
is embedded once per file, whatever the number of figures: its cartesian bundle when that draws
every figure (bar, scatter, heatmap...), else the full library. It is stored gzip-compressed
(base64) and unpacked by the browser's ``DecompressionStream``, which keeps a report small enough
to mail and quick to open (about 0.7 MB of library instead of 4.8 MB). Figures are JSON blocks drawn by one
loader script, so no figure waits on or repeats the library.

Tables go through ``readable``: fractions as percentages, 2–3 significant figures, no exponent,
text left-aligned and never truncated; wide tables scroll inside their section instead of widening
the page, and ``Details`` holds the columns a reader opens only on demand.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler
from plotly.basedatatypes import BaseFigure

from workbench.formatting import MISSING, format_number, format_percent


@dataclass(frozen=True)
class Details:
    """A table shown folded (``<details>``): the columns a reader opens only when the headline is not enough."""

    frame: pd.DataFrame
    label: str = "all columns"


Content = BaseFigure | str | pd.DataFrame | Details

#: A report's timeline is a still overview (zoom and the dashboard show the detail): few bars keep it light.
REPORT_MAX_SPANS = 1_500
REPORT_WIDTH_PX = 1_200

#: Column names whose values are fractions of 1, shown as percentages.
PERCENT_COLUMNS = re.compile(r"(fraction|share|efficiency|load_balance|utilisation|utilization|_pct$)")
#: Columns of free text (findings, advice): left-aligned, wrapped, never truncated.
WIDE_TEXT_COLUMNS = ("text", "finding", "findings", "advice", "detail", "details", "message", "why")

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { border-bottom: 2px solid #0072B2; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.table-scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: .9em; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; white-space: nowrap;
         font-variant-numeric: tabular-nums; vertical-align: top; }
th { background: #f4f4f4; white-space: normal; }  /* long names break after "_" (<wbr>), not mid-word */
td.text, th.text { text-align: left; }
td.wide { white-space: normal; min-width: 24em; max-width: 60em; }
table.metadata th { text-align: left; }
table.metadata td { text-align: left; white-space: normal; }
details summary { cursor: pointer; color: #0072B2; margin: .5em 0; }
code { background: #f4f4f4; padding: 0 .2em; border-radius: 3px; }
.section { margin-bottom: 2em; }
.figure { width: 100%; min-height: 200px; }
table.figure-table caption { text-align: left; font-weight: bold; margin-bottom: .3em; }
"""

#: Unpacks the compressed plotly.js, then draws each figure from its JSON block when it nears the screen:
#: the first screen is drawn at once, the rest as the reader scrolls (a report opens in the time of what it shows).
_LOADER = """
(async () => {
  const packed = document.getElementById("plotlyjs-gz").textContent.trim();
  let gzipped;
  try {  // the browser's own base64 decoder, off the main thread's JavaScript
    gzipped = (await fetch("data:application/gzip;base64," + packed)).body;
  } catch (error) {
    gzipped = new Blob([Uint8Array.from(atob(packed), (c) => c.charCodeAt(0))]).stream();
  }
  const source = await new Response(gzipped.pipeThrough(new DecompressionStream("gzip"))).text();
  // as a script of its own (compiled like any page script), not through eval
  const url = URL.createObjectURL(new Blob([source], {type: "text/javascript"}));
  await new Promise((loaded, failed) => {
    const tag = Object.assign(document.createElement("script"), {src: url, onload: loaded, onerror: failed});
    document.head.appendChild(tag);
  });
  URL.revokeObjectURL(url);
  const draw = (block) => {
    if (block.dataset.drawn) return;
    block.dataset.drawn = "1";
    const figure = JSON.parse(block.textContent);
    const target = document.getElementById(block.dataset.target);
    Plotly.newPlot(target, figure.data, figure.layout, {responsive: true, displaylogo: false});
  };
  const blocks = [...document.querySelectorAll("script.figure-data")];
  const byTarget = new Map(blocks.map((block) => [block.dataset.target, block]));
  if (!("IntersectionObserver" in window)) return blocks.forEach(draw);
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      observer.unobserve(entry.target);
      draw(byTarget.get(entry.target.id));
    }
  }, {rootMargin: "600px 0px"});
  for (const block of blocks) observer.observe(document.getElementById(block.dataset.target));
  window.addEventListener("beforeprint", () => blocks.forEach(draw));
})().catch((error) => {
  for (const div of document.querySelectorAll("div.figure")) {
    div.textContent = "This browser could not unpack plotly.js (" + error + "): open the report in a current "
      + "Chromium, Firefox or Safari.";
  }
});
"""


def text_to_html(text: str) -> str:
    """Markdown-ish text to HTML: blank-line paragraphs, ``- `` lists, `code`, **bold**; all escaped."""
    blocks = re.split(r"\n\s*\n", text.strip())
    out = []
    for block in blocks:
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        if all(line.startswith(("- ", "* ")) for line in lines):
            items = "".join(f"<li>{_inline(line[2:])}</li>" for line in lines)
            out.append(f"<ul>{items}</ul>")
        elif lines[0].startswith("#"):
            level = min(len(lines[0]) - len(lines[0].lstrip("#")) + 2, 6)
            out.append(f"<h{level}>{_inline(lines[0].lstrip('#').strip())}</h{level}>")
            if lines[1:]:
                out.append(f"<p>{_inline(' '.join(lines[1:]))}</p>")
        else:
            out.append(f"<p>{_inline(' '.join(lines))}</p>")
    return "\n".join(out)


def _inline(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


# -- tables ----------------------------------------------------------------------------------------
def _is_percent(column: str, values: pd.Series) -> bool:
    if not PERCENT_COLUMNS.search(str(column)) or not pd.api.types.is_numeric_dtype(values):
        return False
    finite = pd.to_numeric(values, errors="coerce").dropna()
    return bool(len(finite) == 0 or finite.abs().max() <= 1.5)  # an efficiency may pass 1 a little


def _is_text(values: pd.Series) -> bool:
    return not pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def _heading(name: Any) -> str:
    """A column name that may break after its underscores: long snake_case names set a table's width."""
    return html.escape(str(name)).replace("_", "_<wbr>")


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def readable(frame: pd.DataFrame, *, percent: Iterable[str] = (), hide_index: bool = True) -> Styler:
    """``frame`` laid out for reading (notebooks and reports): fractions as %, 3 significant figures.

    Fraction columns (``fraction_*``, ``*efficiency``, ``load_balance``, ``*share`` and those named
    in ``percent``) show as percentages; other numbers with 2–3 significant figures and never in
    scientific notation; text columns left-aligned, and free-text columns (findings) wrapped in
    full instead of cut at pandas' column width. The data are not changed, only their display.
    """
    frame = frame.reset_index(drop=True) if hide_index else frame
    styler = frame.style
    forced = set(percent)
    formats: dict[Any, Any] = {}
    text_columns, wide_columns = [], []
    for column in frame.columns:
        values = frame[column]
        if column in forced or _is_percent(column, values):
            formats[column] = format_percent
        elif _is_text(values):
            formats[column] = _cell
            text_columns.append(column)
            if str(column).lower() in WIDE_TEXT_COLUMNS:
                wide_columns.append(column)
        else:
            formats[column] = _cell
    styler = styler.format(formats, na_rep=MISSING, escape="html").format_index(_heading, axis=1)
    if text_columns:
        styler = styler.set_properties(subset=text_columns, **{"text-align": "left"})
        styler = styler.set_table_styles(
            [
                {"selector": f"th.col_heading.col{list(frame.columns).index(c)}", "props": "text-align: left;"}
                for c in text_columns
            ],
            overwrite=False,
        )
    if wide_columns:
        styler = styler.set_properties(
            subset=wide_columns, **{"white-space": "normal", "min-width": "24em", "max-width": "60em"}
        )
    if hide_index:
        styler = styler.hide(axis="index")
    return styler


def _table_html(frame: pd.DataFrame) -> str:
    return f'<div class="table-scroll">{readable(frame).to_html()}</div>'


# -- metadata --------------------------------------------------------------------------------------
def run_metadata(run_paths: Iterable[str | Path], **known: Any) -> dict[str, str]:
    """What a report is about, from the runs' ``run.json``: case, preset, date, host, cores, versions, ranks.

    ``known`` (case, preset, ...) comes first and wins; values that differ across runs are listed.
    """
    from workbench.store import NotARunError, read_run_meta

    metas = []
    for path in run_paths:
        try:
            metas.append(read_run_meta(path))
        except (NotARunError, OSError, ValueError):
            continue

    def values(get: Any) -> str:
        seen: list[str] = []
        for meta in metas:
            try:
                value = get(meta)
            except (KeyError, TypeError, AttributeError):
                continue
            if value not in (None, "") and str(value) not in seen:
                seen.append(str(value))
        return ", ".join(seen)

    created = [m.get("created") for m in metas if isinstance(m.get("created"), (int, float))]
    dates = ""
    if created:
        first, last = (time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) for t in (min(created), max(created)))
        dates = first if first == last else f"{first} – {last}"
    versions = {}
    for label, key in (
        ("TensorFlow", "tensorflow-cpu"),
        ("TensorFlow ", "tensorflow"),
        ("Horovod", "horovod"),
        ("mpi4py", "mpi4py"),
        ("Python", "python"),
    ):
        found = values(lambda m, k=key: m["versions"][k])
        if found:
            versions[label.strip()] = found
    mpi = values(lambda m: m["config"]["cluster"]["mpi"])
    meta = {
        **{k: str(v) for k, v in known.items() if v not in (None, "")},
        "runs": str(len(metas)),
        "date": dates,
        "host": values(lambda m: m["host"]),
        "cores": values(lambda m: m["cores"]),
        "ranks": values(lambda m: m["ranks"]),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "MPI": f"{mpi} (via mpi4py {versions['mpi4py']})" if mpi and "mpi4py" in versions else mpi,
    }
    return {k: v for k, v in meta.items() if v}


def _metadata_html(metadata: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in metadata.items()
    )
    return f'<table class="metadata">{rows}</table>'


# -- figures ---------------------------------------------------------------------------------------
#: plotly.js's cartesian bundle (bar, box, contour, heatmap, histogram*, image, pie, scatter, violin...),
#: a third of the full library; used when every figure of a report needs only these trace types.
CARTESIAN_BUNDLE = Path(__file__).parent / "assets" / "plotly-cartesian-4.1.1.min.js.gz"
CARTESIAN_VERSION = "4.1.1"
CARTESIAN_TRACES = frozenset(
    {"bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour", "image", "pie"}
    | {"scatter", "scatterternary", "violin"}
)


def plotlyjs_bundle(trace_types: Iterable[str]) -> str:
    """ "cartesian" when the small bundle draws every trace type (and matches plotly.py's plotly.js), else "full"."""
    from plotly.offline import get_plotlyjs_version

    small = CARTESIAN_BUNDLE.is_file() and get_plotlyjs_version() == CARTESIAN_VERSION
    return "cartesian" if small and set(trace_types) <= CARTESIAN_TRACES else "full"


@functools.lru_cache(maxsize=2)
def _packed_plotlyjs(bundle: str) -> str:
    """The bundle gzip-compressed and base64-encoded, for the loader to unpack in the browser."""
    if bundle == "cartesian":
        return base64.b64encode(CARTESIAN_BUNDLE.read_bytes()).decode("ascii")
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def _figure_html(figure: BaseFigure, div_id: str) -> str:
    data = figure.to_json().replace("</", "<\\/")  # a "</script>" in a label must not end the block
    height = int(figure.layout.height or 450)  # plotly's default: the page keeps its place while figures draw
    return (
        f'<div class="figure" id="{div_id}" style="height: {height}px"></div>\n'
        f'<script type="application/json" class="figure-data" data-target="{div_id}">{data}</script>'
    )


def _table_trace_html(trace: Any, title: str | None) -> str:
    """A plotly table as an HTML table, fills and alignment kept: it needs no plotly.js (nor its full bundle)."""
    columns = [list(column) for column in (trace.cells.values or [])]
    header = list(trace.header.values or [])
    fills, aligns = trace.cells.fill.color, trace.cells.align

    def per_column(value: Any, column: int) -> Any:
        if isinstance(value, list | tuple):
            return value[column] if column < len(value) else (value[-1] if value else None)
        return value

    def per_cell(value: Any, column: int, row: int) -> Any:
        value = per_column(value, column)
        return per_column(value, row) if isinstance(value, list | tuple) else value

    def style(column: int, row: int) -> str:
        fill, align = per_cell(fills, column, row), per_column(aligns, column) or "center"
        return f' style="text-align: {align}' + (f"; background: {fill}" if fill else "") + '"'

    caption = f"<caption>{html.escape(title)}</caption>" if title else ""
    head = "".join(f"<th>{html.escape(str(value))}</th>" for value in header)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td{style(c, r)}>{html.escape(str(columns[c][r]))}</td>" if r < len(columns[c]) else "<td></td>"
            for c in range(len(columns))
        )
        + "</tr>"
        for r in range(max((len(column) for column in columns), default=0))
    )
    return f'<div class="table-scroll"><table class="figure-table">{caption}<tr>{head}</tr>{rows}</table></div>'


def write_report(
    path: str | Path,
    *,
    title: str,
    sections: Sequence[tuple[str, Content]],
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``sections`` (heading, figure | text | DataFrame | Details) as one HTML file; return its path.

    ``metadata`` (see ``run_metadata``) heads the report. plotly.js is in the file once, and only
    when there is a figure.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = []
    trace_types: set[str] = set()
    figures = 0
    if metadata:
        body.append(f'<section class="section" id="metadata">{_metadata_html(metadata)}</section>')
    for index, (heading, content) in enumerate(sections):
        parts = [f'<section class="section" id="section-{index}"><h2>{html.escape(heading)}</h2>']
        if isinstance(content, BaseFigure) and content.data and all(t.type == "table" for t in content.data):
            parts.extend(_table_trace_html(trace, content.layout.title.text) for trace in content.data)
        elif isinstance(content, BaseFigure):
            parts.append(_figure_html(content, f"figure-{index}"))
            figures += 1
            trace_types |= {trace.type for trace in content.data}
        elif isinstance(content, Details):
            parts.append(
                f"<details><summary>{html.escape(content.label)}</summary>{_table_html(content.frame)}</details>"
            )
        elif isinstance(content, pd.DataFrame):
            parts.append(_table_html(content))
        elif isinstance(content, str):
            parts.append(text_to_html(content))
        else:
            raise TypeError(f"section {heading!r}: cannot render {type(content).__name__}")
        parts.append("</section>")
        body.append("\n".join(parts))
    scripts = ""
    if figures:
        packed = _packed_plotlyjs(plotlyjs_bundle(trace_types))
        scripts = f'<script type="text/plain" id="plotlyjs-gz">{packed}</script>\n<script>{_LOADER}</script>\n'
    document = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "\n" + scripts + "</body>\n</html>\n"
    )
    path.write_text(document, encoding="utf-8")
    return path
