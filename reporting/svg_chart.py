"""Small charts written as inline SVG markup, straight from the numbers.

Matplotlib spent 0.13-0.35 s of CPU on each report figure (its layout engine and the Agg
rasteriser), and a 16-site report has about 68 figures: the report stage grew by a second a
site. These charts are strings built in milliseconds; they stay sharp when zoomed and go in
the page as they are (no base64 image).

Drawing is deterministic: the same inputs give the same markup. What is drawn (panels and
their contents) is :mod:`.svg_axes`.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Sequence

import numpy as np

from .svg_axes import Axes, LegendEntry, Loc, Style, limits, linear_ticks, log_ticks, tick_label

MARGIN_LEFT = 68
MARGIN_RIGHT = 12
MARGIN_TOP = 24
MARGIN_BOTTOM = 48
TITLE_LINE = 17
"""Pixels per line of a figure title."""
TICK_FONT = 11
LABEL_FONT = 12
TITLE_FONT = 13
_CHAR_WIDTH = 0.58
"""Mean glyph width over font size of a sans-serif face: sizes legend boxes without fonts."""


class _Scale:
    """Data to pixels along one axis, linear or log; ``flip`` for y (pixels grow down)."""

    def __init__(self, lo: float, hi: float, log: bool, size: float, flip: bool) -> None:
        self.log = log
        self.lo, self.hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        self.size, self.flip = size, flip

    def __call__(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)
        frac = (v - self.lo) / (self.hi - self.lo)
        return (1.0 - frac if self.flip else frac) * self.size

    def one(self, value: float) -> float:
        return float(self(np.array([value]))[0])


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def _attrs(style: Style, *, fill: str = "none") -> str:
    out = f'stroke="{style.color}" stroke-width="{style.width:g}" fill="{fill}"'
    if style.dash:
        out += f' stroke-dasharray="{style.dash}"'
    if style.opacity < 1:
        out += f' stroke-opacity="{style.opacity:g}"'
    return out


def _polylines(px: np.ndarray, py: np.ndarray, style: Style) -> list[str]:
    """Polylines through the finite pixel points, on a half-pixel grid: a point repeating the
    last one there, or inside a straight vertical or horizontal run, is dropped, so thousands
    of curve points cost what the pixels show (under a 1.5-pixel stroke, nothing visible)."""
    ok = np.isfinite(px) & np.isfinite(py)
    x, y = np.round(px * 2) / 2, np.round(py * 2) / 2
    out = []
    # Runs of finite points, split at each NaN.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], ok.astype(np.int8), [0]))))
    for start, stop in zip(edges[::2], edges[1::2]):
        xs, ys = x[start:stop], y[start:stop]
        keep = np.ones(xs.size, dtype=bool)
        keep[1:] = (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1])
        xs, ys = xs[keep], ys[keep]
        inner = np.ones(xs.size, dtype=bool)
        inner[1:-1] = ~(
            ((xs[1:-1] == xs[:-2]) & (xs[1:-1] == xs[2:]))
            | ((ys[1:-1] == ys[:-2]) & (ys[1:-1] == ys[2:]))
        )
        xs, ys = xs[inner], ys[inner]
        coords = " ".join(f"{a:g},{b:g}" for a, b in zip(xs, ys))
        if xs.size == 1:
            coords += f" {xs[0]:g},{ys[0]:g}"
        out.append(f'<polyline points="{coords}" {_attrs(style)} stroke-linejoin="round"/>')
    return out


def marker(x: float, y: float, style: Style, size: float = 4.5) -> str:
    """One marker centred on pixel (x, y)."""
    fill = style.color if style.filled else "white"
    paint = f'fill="{fill}" stroke="{style.color}" stroke-width="1"'
    r = size
    if style.marker == "s":
        return (
            f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:g}" height="{2 * r:g}" {paint}/>'
        )
    if style.marker in ("D", "^", "*"):
        if style.marker == "D":
            pts = [(0, -r * 1.2), (r, 0), (0, r * 1.2), (-r, 0)]
        elif style.marker == "^":
            pts = [(0, -r * 1.2), (r * 1.1, r * 0.8), (-r * 1.1, r * 0.8)]
        else:  # a five-pointed star
            pts = [
                (
                    (r * 1.4 if k % 2 == 0 else r * 0.6) * math.sin(k * math.pi / 5),
                    -(r * 1.4 if k % 2 == 0 else r * 0.6) * math.cos(k * math.pi / 5),
                )
                for k in range(10)
            ]
        coords = " ".join(f"{x + dx:.1f},{y + dy:.1f}" for dx, dy in pts)
        return f'<polygon points="{coords}" {paint}/>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:g}" {paint}/>'


def _text(
    x: float,
    y: float,
    text: str,
    *,
    size: int,
    anchor: str = "middle",
    color: str = "#222",
    rotate: bool = False,
    bold: bool = False,
) -> str:
    turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    weight = ' font-weight="bold"' if bold else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="{color}"{weight}{turn}>{esc(text)}</text>'
    )


def _legend_width(entries: list[LegendEntry]) -> float:
    return 34 + _CHAR_WIDTH * TICK_FONT * max(len(e.label) for e in entries)


def _legend(entries: list[LegendEntry], loc: Loc, width: float, height: float) -> list[str]:
    """The legend box for a plot area ``width`` by ``height`` pixels."""
    size = TICK_FONT
    row = size + 5
    box_w = _legend_width(entries)
    box_h = row * len(entries) + 6
    left = {"upper left": 8.0, "outside right": width + 12}.get(loc, width - box_w - 8)
    top = height - box_h - 8 if loc == "lower right" else 0.0 if loc == "outside right" else 8.0
    out = [
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{box_w:.1f}" height="{box_h}" '
        'fill="white" fill-opacity="0.85" stroke="#bbb" rx="3"/>'
    ]
    for i, entry in enumerate(entries):
        out.extend(_legend_entry(entry, left + 6, top + 3 + row * (i + 0.5)))
    return out


def _legend_entry(entry: LegendEntry, x0: float, cy: float) -> list[str]:
    """An entry's key (line, marker or patch) at ``x0`` and its label after it, centred on
    ``cy``."""
    out = []
    if entry.kind == "patch":
        out.append(
            f'<rect x="{x0:.1f}" y="{cy - 5:.1f}" width="20" height="10" '
            f'fill="{entry.fill}" stroke="{entry.style.color}"/>'
        )
    else:
        if entry.kind == "line":
            out.append(
                f'<line x1="{x0:.1f}" y1="{cy:.1f}" x2="{x0 + 20:.1f}" y2="{cy:.1f}" '
                f"{_attrs(entry.style)}/>"
            )
        if entry.style.marker:
            out.append(marker(x0 + 10, cy, entry.style, size=3.5))
    out.append(_text(x0 + 26, cy + TICK_FONT * 0.35, entry.label, size=TICK_FONT, anchor="start"))
    return out


def _fitting(text: str, room: float) -> int:
    """The axis-label font size at which ``text`` fits in ``room`` pixels (8 at least)."""
    return max(8, min(LABEL_FONT, int(room / (_CHAR_WIDTH * max(1, len(text))))))


def render_axes(ax: Axes, left: float, top: float, width: float, height: float) -> list[str]:
    """The panel ``ax`` in the box (``left``, ``top``, ``width``, ``height``) in pixels."""
    pw = width - MARGIN_LEFT - MARGIN_RIGHT
    if ax.legend and ax.legend_loc == "outside right":
        pw -= _legend_width(ax.legend) + 12
    ph = height - MARGIN_TOP - MARGIN_BOTTOM
    x0, y0 = left + MARGIN_LEFT, top + MARGIN_TOP
    xlim = ax.xlim or limits(ax.data_x(), ax.xlog)
    ylim = ax.ylim or limits(ax.data_y(), ax.ylog)
    sx = _Scale(*xlim, ax.xlog, pw, flip=False)
    sy = _Scale(*ylim, ax.ylog, ph, flip=True)
    out = [f'<g transform="translate({x0:.1f},{y0:.1f})">']
    out.append(f'<rect width="{pw:.1f}" height="{ph:.1f}" fill="white" stroke="none"/>')
    xticks = ax.xticks or [
        (t, tick_label(t)) for t in (log_ticks if ax.xlog else linear_ticks)(*xlim)
    ]
    yticks = [(t, tick_label(t)) for t in (log_ticks if ax.ylog else linear_ticks)(*ylim)]
    for value, label in xticks:
        px = sx.one(value)
        if not -0.5 <= px <= pw + 0.5:
            continue
        out.append(f'<line x1="{px:.1f}" y1="0" x2="{px:.1f}" y2="{ph:.1f}" stroke="#eee"/>')
        out.append(
            f'<line x1="{px:.1f}" y1="{ph:.1f}" x2="{px:.1f}" y2="{ph + 4:.1f}" stroke="#444"/>'
        )
        out.append(_text(px, ph + 6 + TICK_FONT, label, size=TICK_FONT))
    for value, label in yticks:
        py = sy.one(value)
        out.append(f'<line x1="0" y1="{py:.1f}" x2="{pw:.1f}" y2="{py:.1f}" stroke="#eee"/>')
        out.append(f'<line x1="-4" y1="{py:.1f}" x2="0" y2="{py:.1f}" stroke="#444"/>')
        out.append(_text(-6, py + TICK_FONT * 0.35, label, size=TICK_FONT, anchor="end"))
    # The data, clipped to the plot area: a nested <svg> clips to its own viewport (no ids,
    # which would have to be unique over a page of many figures).
    out.append(f'<svg width="{pw:.1f}" height="{ph:.1f}" overflow="hidden">')
    for bar in ax.bars:
        xa, xb = sx.one(bar.x - bar.width / 2), sx.one(bar.x + bar.width / 2)
        ya, yb = sy.one(bar.height), sy.one(0.0)
        out.append(
            f'<rect x="{xa:.1f}" y="{min(ya, yb):.1f}" width="{xb - xa:.1f}" '
            f'height="{abs(yb - ya):.1f}" fill="{bar.fill}" stroke="{bar.edge}"/>'
        )
    for y, style in ax.hlines:
        py = sy.one(y)
        out.append(f'<line x1="0" y1="{py:.1f}" x2="{pw:.1f}" y2="{py:.1f}" {_attrs(style)}/>')
    for x, style in ax.vlines:
        px = sx.one(x)
        out.append(f'<line x1="{px:.1f}" y1="0" x2="{px:.1f}" y2="{ph:.1f}" {_attrs(style)}/>')
    for line in ax.lines:
        lx, ly = sx(line.xs), sy(line.ys)
        out.extend(_polylines(lx, ly, line.style))
        if line.style.marker:
            ok = np.isfinite(lx) & np.isfinite(ly)
            out.extend(marker(a, b, line.style, size=3) for a, b in zip(lx[ok], ly[ok]))
    for p in ax.points:
        px, py = sx.one(p.x), sy.one(p.y)
        if p.low is not None and p.high is not None:
            ya, yb = sy.one(p.low), sy.one(p.high)
            ink = f'stroke="{p.style.color}" stroke-width="1.2"'
            out.append(f'<line x1="{px:.1f}" y1="{ya:.1f}" x2="{px:.1f}" y2="{yb:.1f}" {ink}/>')
            for yc in (ya, yb):
                out.append(
                    f'<line x1="{px - 3:.1f}" y1="{yc:.1f}" x2="{px + 3:.1f}" y2="{yc:.1f}" {ink}/>'
                )
        if math.isfinite(px) and math.isfinite(py):
            out.append(marker(px, py, p.style))
    out.append("</svg>")
    # Text after the clip: a label beside a point at the edge stays whole.
    for t in ax.texts:
        px, py = sx.one(t.x) + t.dx, sy.one(t.y) - t.dy
        if t.vertical:
            out.append(
                _text(
                    px + 3, py - 4, t.text, size=t.size, anchor="start", color=t.color, rotate=True
                )
            )
        else:
            anchor = "start" if t.dx else "middle"
            out.append(_text(px, py, t.text, size=t.size, anchor=anchor, color=t.color))
    if ax.legend and ax.legend_loc:
        out.extend(_legend(ax.legend, ax.legend_loc, pw, ph))
    out.append(f'<rect width="{pw:.1f}" height="{ph:.1f}" fill="none" stroke="#444"/>')
    if ax.title:
        out.append(_text(pw / 2, -8, ax.title, size=TITLE_FONT - 1))
    if ax.xlabel:
        size = _fitting(ax.xlabel, pw + MARGIN_LEFT - 20)
        out.append(_text(pw / 2, ph + MARGIN_BOTTOM - 8, ax.xlabel, size=size))
    if ax.ylabel:
        size = _fitting(ax.ylabel, ph + MARGIN_BOTTOM)
        out.append(_text(-MARGIN_LEFT + 12, ph / 2, ax.ylabel, size=size, rotate=True))
    out.append("</g>")
    return out


def _legend_rows(
    entries: Sequence[LegendEntry], width: float
) -> list[list[tuple[LegendEntry, float]]]:
    """Entries with their widths, flowed into rows no wider than ``width``."""
    rows: list[list[tuple[LegendEntry, float]]] = []
    used = width
    for entry in entries:
        span = _legend_width([entry]) + 10
        if used + span > width - 8:
            rows.append([])
            used = 0.0
        rows[-1].append((entry, span))
        used += span
    return rows


def render_figure(
    panels: list[Axes],
    *,
    panel_width: float,
    panel_height: float,
    cols: int = 1,
    title: str = "",
    legend: Sequence[LegendEntry] = (),
) -> str:
    """The panels on a grid of ``cols`` columns (row by row) under a wrapped title and a
    ``legend`` shared by every panel (one row, over no data), as one ``<svg>`` element sized
    in pixels (the page's CSS lets it shrink to the column)."""
    rows = math.ceil(len(panels) / cols)
    width = panel_width * cols
    chars = max(20, int(width / (_CHAR_WIDTH * TITLE_FONT)))
    title_lines = textwrap.wrap(title, chars) if title else []
    head = TITLE_LINE * len(title_lines) + (6 if title_lines else 0)
    keys = []
    for line in _legend_rows(legend, width):
        x = max(4.0, (width - sum(span for _, span in line)) / 2)
        for entry, span in line:
            keys.extend(_legend_entry(entry, x, head + TITLE_LINE / 2))
            x += span
        head += TITLE_LINE + 2
    height = head + panel_height * rows
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans, Arial, sans-serif">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
    ]
    for i, title_line in enumerate(title_lines):
        out.append(_text(width / 2, TITLE_LINE * (i + 1), title_line, size=TITLE_FONT, bold=True))
    out.extend(keys)
    for i, ax in enumerate(panels):
        row, col = divmod(i, cols)
        out.extend(
            render_axes(ax, col * panel_width, head + row * panel_height, panel_width, panel_height)
        )
    out.append("</svg>")
    return "\n".join(out)
