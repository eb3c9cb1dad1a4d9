"""Self-contained HTML pages: inline CSS, plots as inline SVG, no external resources.

Every string that comes from the inputs goes through :func:`esc` (error texts, labels,
config values). The report's JSON is embedded as an inert ``application/json`` block so the
page carries the exact numbers next to the rounded display.
"""

from __future__ import annotations

import html
import json
from importlib.resources import files
from typing import Any

from ..schemas.schema import FLAGS

_ASSETS = files(__package__)
CSS = (_ASSETS / "page.css").read_text(encoding="utf-8").strip()
"""The pages' style sheet (``page.css``), inlined in each page."""
SORT_SCRIPT = (_ASSETS / "sort_table.js").read_text(encoding="utf-8").strip()
"""Click a header of a ``table.sortable`` to sort its rows by that column (numbers as
numbers), again to reverse. Inline: the pages load nothing from outside."""


def esc(value: Any) -> str:
    """HTML-escaped text of any value (quotes included, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def page(
    title: str, body: list[str], *, data: Any, script: str | None = None, style: str = ""
) -> str:
    """A complete HTML document with the given body parts and embedded JSON data.

    ``script`` (trusted, never built from the inputs) runs inline at the end of the body;
    ``style`` (trusted) follows the style sheet (a printed page's).
    """
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{esc(title)}</title>",
            f"<style>\n{CSS}\n{style}</style>",
            "</head>",
            "<body>",
            *body,
            '<script type="application/json" id="report-data">',
            json_for_script(data),
            "</script>",
            *([f"<script>\n{script}\n</script>"] if script else []),
            "</body>",
            "</html>",
            "",
        ]
    )


def json_for_script(data: Any) -> str:
    """JSON that cannot close its <script> block: <, > and & become \\u escapes."""
    text = json.dumps(data, indent=1, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def badge(label: str, kind: str) -> str:
    """A small coloured label next to a number."""
    return f'<span class="badge {esc(kind)}">{esc(label)}</span>'


_FLAG_BADGE_KIND = {flag.label: flag.badge for flag in FLAGS.values()}


def flag_badges(labels: list[str], prefix: str = "") -> str:
    """A badge per flag label (:func:`~.formatting.flag_labels`), coloured by the flag's kind."""
    return "".join(badge(prefix + label, _FLAG_BADGE_KIND[label]) for label in labels)


def td(text: str, *, title: Any = None, raw: bool = False, cls: str | None = None) -> str:
    """A table cell; ``title`` carries the unrounded value as a tooltip."""
    attrs = ""
    if cls:
        attrs += f' class="{esc(cls)}"'
    if title is not None:
        attrs += f' title="{esc(repr(title) if isinstance(title, float) else title)}"'
    return f"<td{attrs}>{text if raw else esc(text)}</td>"
