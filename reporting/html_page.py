"""Self-contained HTML pages: inline CSS, plots as inline SVG, no external resources.

Every string that comes from the inputs goes through :func:`esc` (error texts, labels,
config values). The report's JSON is embedded as an inert ``application/json`` block so the
page carries the exact numbers next to the rounded display.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .formatting import MEANING_POINTS, UNTRAINED_HEADLINE, VIOLATION_HEADLINE
from .schema import FLAGS

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
.meaning summary { cursor: pointer; }
details.fold { margin: 0.4em 0 1em; }
details.fold summary { cursor: pointer; color: #333; }
.error { font-family: monospace; white-space: pre-wrap; }
figure { margin: 1em 0; }
figcaption { font-size: 0.85em; color: #444; }
img { max-width: 100%; }
.plot svg { max-width: 100%; height: auto; }
.headline { border: 2px solid #555; border-radius: 0.4em; background: #f6f7fb;
            padding: 0.6em 1.2em; margin: 1em 0; }
.headline .numbers { display: flex; gap: 3em; flex-wrap: wrap; margin: 0.5em 0; }
.headline .value { font-size: 1.6em; font-weight: bold; }
.headline .label { font-size: 0.85em; color: #444; }
.verdict { font-weight: bold; padding: 0.1em 0.5em; border-radius: 0.3em; }
.verdict.evidence { background: #d63c3c; color: #fff; }
.verdict.inconclusive { background: #f5b700; color: #000; }
.verdict.none { background: #2e8b57; color: #fff; }
.verdict.no-result { background: #777; color: #fff; }
.site-local { border-left: 4px solid #2e6bd6; background: #f3f7ff; padding: 0.4em 1em; }
div.violation { border: 3px solid #b00020; background: #ffe3e3; color: #600; padding: 0.5em 1em;
             margin: 1em 0; }
div.violation strong { color: #b00020; font-size: 1.1em; }
div.canaries { border: 2px solid #f5b700; background: #fff8e1; padding: 0.5em 1em; margin: 1em 0; }
tr.violation td { background: #ffc9c9; border-top: 2px solid #b00020;
                  border-bottom: 2px solid #b00020; }
.badge.violation { background: #b00020; color: #fff; }
.badge.above { background: #2e6bd6; color: #fff; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " ▲"; }
table.sortable th[aria-sort="descending"]::after { content: " ▼"; }
""".strip()

SORT_SCRIPT = r"""
(function () {
  "use strict";
  // A cell's sort key: its unrounded value (title) or text; a leading number sorts as a
  // number, "inf" above every number, "-" or empty below everything in either direction.
  function key(cell) {
    var text = (cell.getAttribute("title") || cell.textContent || "").trim();
    if (text === "" || text === "-") { return {missing: true}; }
    if (/^\+?inf\b/i.test(text)) { return {num: Infinity}; }
    var m = text.match(/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?/i);
    return m ? {num: parseFloat(m[0])} : {str: text};
  }
  function compare(a, b) {
    if (a.missing || b.missing) { return (a.missing ? 1 : 0) - (b.missing ? 1 : 0); }
    if ("num" in a && "num" in b) { return a.num === b.num ? 0 : (a.num < b.num ? -1 : 1); }
    if ("num" in a) { return -1; }
    if ("num" in b) { return 1; }
    return a.str.localeCompare(b.str, undefined, {numeric: true, sensitivity: "base"});
  }
  function sortBy(table, col, th) {
    var header = table.rows[0];
    var asc = th.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(table.rows, 1).map(function (row, i) {
      return {row: row, i: i, k: row.cells[col] ? key(row.cells[col]) : {missing: true}};
    });
    rows.sort(function (x, y) {
      var c = compare(x.k, y.k);
      if (!asc && !x.k.missing && !y.k.missing) { c = -c; }
      return c || x.i - y.i;
    });
    Array.prototype.forEach.call(header.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = rows.length ? rows[0].row.parentNode : null;
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.title = "click to sort";
      th.addEventListener("click", function () { sortBy(table, col, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, col, th); }
      });
    });
  });
})();
""".strip()
"""Click a header of a ``table.sortable`` to sort its rows by that column (numbers as
numbers), again to reverse. Inline: the pages load nothing from outside."""


def esc(value: Any) -> str:
    """HTML-escaped text of any value (quotes included, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def page(title: str, body: list[str], *, data: Any, script: str | None = None) -> str:
    """A complete HTML document with the given body parts and embedded JSON data.

    ``script`` (trusted, never built from the inputs) runs inline at the end of the body.
    """
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


def meaning_block() -> str:
    """The plain statement of what eps_tilde means and does not mean, folded: the numbers
    come first, the explanation one click away."""
    items = "".join(f"<li>{esc(p)}</li>" for p in MEANING_POINTS)
    return (
        '<details class="meaning"><summary><strong>What eps_tilde means and does not mean'
        f"</strong> (read before drawing conclusions)</summary><ul>{items}</ul></details>"
    )


def html_list(items: list[str], *, ordered: bool = False) -> str:
    """A list of escaped items."""
    tag = "ol" if ordered else "ul"
    return f"<{tag}>" + "".join(f"<li>{esc(i)}</li>" for i in items) + f"</{tag}>"


def figure(svg: str | None, caption: str, *, alt: str) -> str:
    """An inline SVG plot (:mod:`.plots`) with its caption, or a note when there was nothing
    to plot. ``alt`` names the plot to screen readers (``role="img"``)."""
    if svg is None:
        return f"<p><em>{esc(alt)}: no data to plot.</em></p>"
    return (
        f'<figure><div class="plot" role="img" aria-label="{esc(alt)}">{svg}</div>'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


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


def violation_banner(lines: list[str]) -> str:
    """The red banner of bound violations (empty without any)."""
    if not lines:
        return ""
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return (
        f'<div class="violation" role="alert"><strong>{esc(VIOLATION_HEADLINE)}</strong>'
        f"<ul>{items}</ul></div>"
    )


def untrained_block(text: str) -> str:
    """The alert of rounds that aggregated no update."""
    return (
        f'<div class="violation" role="alert"><strong>{esc(UNTRAINED_HEADLINE)}</strong> '
        f"{esc(text)}</div>"
    )


def canary_block(text: str | None) -> str:
    """The banner of a run trained with canaries (empty without)."""
    return f'<div class="canaries"><strong>Canaries.</strong> {esc(text)}</div>' if text else ""
