"""One self-contained HTML report: figures, text and tables in a single file that opens offline.

Reports get mailed, attached to issues and opened on machines without network access, so plotly.js
is embedded (once, however many figures) and nothing is fetched when the file is opened.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from plotly.basedatatypes import BaseFigure

Content = BaseFigure | str | pd.DataFrame

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { border-bottom: 2px solid #0072B2; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table.dataframe { border-collapse: collapse; font-size: .9em; margin: 1em 0; }
table.dataframe th, table.dataframe td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
table.dataframe th { background: #f4f4f4; }
code { background: #f4f4f4; padding: 0 .2em; border-radius: 3px; }
.section { margin-bottom: 2em; }
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


def write_report(path: str | Path, *, title: str, sections: Sequence[tuple[str, Content]]) -> Path:
    """Write ``sections`` (heading, figure | text | DataFrame) as one HTML file; return its path.

    The first figure carries plotly.js inline; later figures reuse it, so the file holds the
    library exactly once.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = []
    plotly_included = False
    for index, (heading, content) in enumerate(sections):
        parts = [f'<section class="section" id="section-{index}"><h2>{html.escape(heading)}</h2>']
        if isinstance(content, BaseFigure):
            parts.append(
                content.to_html(
                    full_html=False,
                    include_plotlyjs=not plotly_included,
                    include_mathjax=False,
                    div_id=f"figure-{index}",
                    config={"responsive": True, "displaylogo": False},
                )
            )
            plotly_included = True
        elif isinstance(content, pd.DataFrame):
            parts.append(content.to_html(border=0, escape=True, na_rep="–", float_format=lambda v: f"{v:.4g}"))
        elif isinstance(content, str):
            parts.append(text_to_html(content))
        else:
            raise TypeError(f"section {heading!r}: cannot render {type(content).__name__}")
        parts.append("</section>")
        body.append("\n".join(parts))
    document = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )
    path.write_text(document, encoding="utf-8")
    return path
