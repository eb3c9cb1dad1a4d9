"""Self-contained HTML pages: inline CSS, plots as base64 PNG, no external resources.

Every string that comes from the inputs goes through :func:`esc` (error texts, labels,
config values). The report's JSON is embedded as an inert ``application/json`` block so the
page carries the exact numbers next to the rounded display.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .text import MEANING_POINTS

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
.wide { overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.55em; text-align: right; }
th { background: #f0f0f0; }
td.text { text-align: left; }
tr.saturated td { background: #fff4d6; }
tr.not-tight td { background: #ffe3e3; }
tr.failed td, tr.missing td, tr.incomplete td { background: #eeeeee; color: #555; }
.badge { display: inline-block; padding: 0 0.4em; border-radius: 0.3em; font-size: 0.8em;
         margin-left: 0.3em; }
.badge.saturated { background: #f5b700; color: #000; }
.badge.not-tight { background: #d63c3c; color: #fff; }
.badge.failed, .badge.missing, .badge.incomplete { background: #777; color: #fff; }
.meaning { border-left: 4px solid #d63c3c; background: #fafafa; padding: 0.5em 1em; }
.error { font-family: monospace; white-space: pre-wrap; }
figure { margin: 1em 0; }
figcaption { font-size: 0.85em; color: #444; }
img { max-width: 100%; }
""".strip()


def esc(value: Any) -> str:
    """HTML-escaped text of any value (quotes included, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def page(title: str, body: list[str], *, data: Any) -> str:
    """A complete HTML document with the given body parts and embedded JSON data."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{esc(title)}</title>",
            f"<style>\n{CSS}\n</style>",
            "</head>",
            "<body>",
            *body,
            '<script type="application/json" id="report-data">',
            json_for_script(data),
            "</script>",
            "</body>",
            "</html>",
            "",
        ]
    )


def json_for_script(data: Any) -> str:
    """JSON that cannot close its <script> block: <, > and & become \\u escapes."""
    text = json.dumps(data, indent=1, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def meaning_block() -> str:
    """The plain statement of what eps_tilde means and does not mean."""
    items = "".join(f"<li>{esc(p)}</li>" for p in MEANING_POINTS)
    return (
        '<div class="meaning"><strong>What eps_tilde means and does not mean</strong>'
        f"<ul>{items}</ul></div>"
    )


def figure(png_base64: str | None, caption: str, *, alt: str) -> str:
    """An embedded PNG with its caption, or a note when there was nothing to plot."""
    if png_base64 is None:
        return f"<p><em>{esc(alt)}: no data to plot.</em></p>"
    return (
        f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{png_base64}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def badge(label: str, kind: str) -> str:
    """A small coloured label next to a number."""
    return f'<span class="badge {esc(kind)}">{esc(label)}</span>'


def td(text: str, *, title: Any = None, raw: bool = False, cls: str | None = None) -> str:
    """A table cell; ``title`` carries the unrounded value as a tooltip."""
    attrs = ""
    if cls:
        attrs += f' class="{esc(cls)}"'
    if title is not None:
        attrs += f' title="{esc(repr(title) if isinstance(title, float) else title)}"'
    return f"<td{attrs}>{text if raw else esc(text)}</td>"


def th_row(headers: list[str] | tuple[str, ...]) -> str:
    """A header row."""
    return "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"
