"""Small charts as inline SVG markup: a plot fills panels (:class:`Axes`) in data units, and
:func:`render_figure` draws them.

Matplotlib spent 0.13-0.35 s of CPU on each report figure, and a 16-site report has about 68
figures; these strings are built in milliseconds, stay sharp when zoomed and go in the page as
they are. Same inputs, same markup.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Loc = Literal["upper left", "upper right", "lower right", "outside right"]
"""Where a legend goes: inside the plot area, or to its right (never over the data)."""
Marker = Literal["o", "s", "D", "^", "*"]

MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 68, 12, 24, 48
TITLE_LINE = 17
"""Pixels per line of a figure title."""
TICK_FONT, LABEL_FONT, TITLE_FONT = 11, 12, 13
_CHAR_WIDTH = 0.58
"""Mean glyph width over font size of a sans-serif face: sizes legend boxes without fonts."""


@dataclass(frozen=True)
class Style:
    color: str
    width: float = 1.5
    dash: str | None = None
    """SVG stroke-dasharray, e.g. "2 3" (dotted) or "6 3" (dashed); None: solid."""
    opacity: float = 1.0
    marker: Marker | None = None
    filled: bool = True


@dataclass(frozen=True)
class LegendEntry:
    label: str
    style: Style
    kind: Literal["line", "marker", "patch"] = "line"
    fill: str | None = None
    """The patch's fill colour (``style.color`` is its edge)."""


@dataclass(frozen=True)
class Line:
    xs: np.ndarray
    ys: np.ndarray
    style: Style


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    style: Style
    low: float | None = None
    high: float | None = None
    """The error bar's ends (None: no bar)."""


@dataclass(frozen=True)
class Bar:
    x: float
    height: float
    width: float
    fill: str
    edge: str


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    text: str
    color: str
    size: int = 9
    dy: float = 0.0
    """Offset in pixels, upwards, from the data point."""
    dx: float = 0.0
    vertical: bool = False


@dataclass
class Axes:
    """One panel, in data units."""

    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    xlog: bool = False
    ylog: bool = False
    xlim: tuple[float, float] | None = None
    ylim: tuple[float, float] | None = None
    xticks: list[tuple[float, str]] | None = None
    """Fixed ticks and their labels (None: chosen from the limits)."""
    lines: list[Line] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    hlines: list[tuple[float, Style]] = field(default_factory=list)
    vlines: list[tuple[float, Style]] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)
    legend_loc: Loc | None = None
    """Where the legend goes (None: no legend drawn)."""

    def plot(self, xs: Sequence[float], ys: Sequence[float], style: Style, label: str = "") -> None:
        """A line through the points; NaN breaks it (a gap)."""
        self.lines.append(Line(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), style))
        if label:
            self.legend.append(LegendEntry(label, style, "line"))

    def point(
        self,
        x: float,
        y: float,
        style: Style,
        *,
        low: float | None = None,
        high: float | None = None,
    ) -> None:
        """A marker, with an error bar from ``low`` to ``high`` when both are given."""
        self.points.append(Point(float(x), float(y), style, low, high))

    def data_x(self) -> np.ndarray:
        xs = [p.x for p in self.points] + [b.x for b in self.bars] + [t.x for t in self.texts]
        # Fixed ticks are in view (as matplotlib's set_xticks widens the limits to them).
        xs += [x for x, _ in self.vlines] + [x for x, _ in self.xticks or []]
        return np.concatenate([*(line.xs for line in self.lines), np.array(xs)])

    def data_y(self) -> np.ndarray:
        ys = [v for p in self.points for v in (p.y, p.low, p.high) if v is not None]
        ys += [b.height for b in self.bars] + [t.y for t in self.texts]
        ys += [y for y, _ in self.hlines] + [0.0] * bool(self.bars)
        return np.concatenate([*(line.ys for line in self.lines), np.array(ys)])


def limits(values: np.ndarray, log: bool, margin: float = 0.05) -> tuple[float, float]:
    """The data's range with a margin on each side (in log space on a log axis)."""
    v = values[np.isfinite(values)]
    if log:
        v = np.log10(v[v > 0])
    lo, hi = (float(v.min()), float(v.max())) if v.size else (-1.0, 0.0) if log else (0.0, 1.0)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    lo, hi = lo - margin * (hi - lo), hi + margin * (hi - lo)
    return (10**lo, 10**hi) if log else (lo, hi)


def linear_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round-numbered ticks (steps of 1, 2, 2.5 or 5 times a power of ten) within the limits."""
    raw = (hi - lo) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step - 1e-9)
    ticks = [(first + i) * step for i in range(int((hi - lo) / step) + 2)]
    # Snap float noise (0.30000000000000004, -1e-17) to the round value it stands for.
    return [round(t, 12) + 0.0 for t in ticks if lo - 1e-9 * step <= t <= hi + 1e-9 * step]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten within the limits; 1-2-5 multiples where that gives fewer than three."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for multiples in ((1.0,), (1.0, 2.0, 5.0), tuple(range(1, 10))):
        ticks = [
            m * 10.0**k
            for k in range(first, last + 1)
            for m in multiples
            if lo * (1 - 1e-9) <= m * 10.0**k <= hi * (1 + 1e-9)
        ]
        if len(ticks) >= 3:
            break
    return ticks


class _Scale:
    """Data to pixels along one axis, linear or log; ``flip`` for y (pixels grow down)."""

    def __init__(self, lim: tuple[float, float], log: bool, size: float, flip: bool) -> None:
        self.log, self.size, self.flip = log, size, flip
        self.lo, self.hi = (math.log10(lim[0]), math.log10(lim[1])) if log else lim

    def __call__(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)
        frac = (v - self.lo) / (self.hi - self.lo)
        return (1.0 - frac if self.flip else frac) * self.size

    def one(self, value: float) -> float:
        return float(self(np.array([value]))[0])


def _attrs(style: Style, *, fill: str = "none") -> str:
    out = f'stroke="{style.color}" stroke-width="{style.width:g}" fill="{fill}"'
    if style.dash:
        out += f' stroke-dasharray="{style.dash}"'
    return out + (f' stroke-opacity="{style.opacity:g}"' if style.opacity < 1 else "")


def _line(x1: float, y1: float, x2: float, y2: float, paint: str) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {paint}/>'


def _polylines(px: np.ndarray, py: np.ndarray, style: Style) -> list[str]:
    """Polylines through the finite pixel points, on a half-pixel grid: a point repeating the
    last one there, or inside a straight vertical or horizontal run, is dropped, so thousands
    of curve points cost what the pixels show (under a 1.5-pixel stroke, nothing visible)."""
    ok = np.isfinite(px) & np.isfinite(py)
    x, y = np.round(px * 2) / 2, np.round(py * 2) / 2
    out = []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], ok.astype(np.int8), [0]))))
    for start, stop in zip(edges[::2], edges[1::2]):  # runs of finite points
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


def _star(r: float) -> list[tuple[float, float]]:
    radius = [r * 1.4 if k % 2 == 0 else r * 0.6 for k in range(10)]
    return [
        (s * math.sin(k * math.pi / 5), -s * math.cos(k * math.pi / 5))
        for k, s in enumerate(radius)
    ]


def marker(x: float, y: float, style: Style, size: float = 4.5) -> str:
    """One marker centred on pixel (x, y)."""
    r, fill = size, style.color if style.filled else "white"
    paint = f'fill="{fill}" stroke="{style.color}" stroke-width="1"'
    if style.marker == "s":
        return (
            f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:g}" height="{2 * r:g}" {paint}/>'
        )
    shapes = {
        "D": [(0, -r * 1.2), (r, 0), (0, r * 1.2), (-r, 0)],
        "^": [(0, -r * 1.2), (r * 1.1, r * 0.8), (-r * 1.1, r * 0.8)],
    }
    if style.marker in ("D", "^", "*"):
        pts = shapes[style.marker] if style.marker in shapes else _star(r)
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
        f'fill="{color}"{weight}{turn}>{html.escape(text, quote=True)}</text>'
    )


def _legend_width(entries: Sequence[LegendEntry]) -> float:
    return 34 + _CHAR_WIDTH * TICK_FONT * max(len(e.label) for e in entries)


def _legend(entries: list[LegendEntry], loc: Loc, width: float, height: float) -> list[str]:
    """The legend box for a plot area ``width`` by ``height`` pixels."""
    row = TICK_FONT + 5
    box_w, box_h = _legend_width(entries), row * len(entries) + 6
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
    """An entry's key (line, marker or patch) at ``x0`` and its label after it."""
    out = []
    if entry.kind == "patch":
        out.append(
            f'<rect x="{x0:.1f}" y="{cy - 5:.1f}" width="20" height="10" '
            f'fill="{entry.fill}" stroke="{entry.style.color}"/>'
        )
    else:
        if entry.kind == "line":
            out.append(_line(x0, cy, x0 + 20, cy, _attrs(entry.style)))
        if entry.style.marker:
            out.append(marker(x0 + 10, cy, entry.style, size=3.5))
    out.append(_text(x0 + 26, cy + TICK_FONT * 0.35, entry.label, size=TICK_FONT, anchor="start"))
    return out


def _fitting(text: str, room: float) -> int:
    """The axis-label font size at which ``text`` fits in ``room`` pixels (8 at least)."""
    return max(8, min(LABEL_FONT, int(room / (_CHAR_WIDTH * max(1, len(text))))))


def _ticks(lim: tuple[float, float], log: bool) -> list[tuple[float, str]]:
    return [(t, f"{t:.4g}") for t in (log_ticks if log else linear_ticks)(*lim)]


@dataclass(frozen=True)
class _Frame:
    """A panel's plot area in pixels and its two scales."""

    pw: float
    ph: float
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    sx: _Scale
    sy: _Scale


def _frame(ax: Axes, width: float, height: float) -> _Frame:
    """The plot area left inside the panel's margins (and beside a legend outside it)."""
    pw = width - MARGIN_LEFT - MARGIN_RIGHT
    if ax.legend and ax.legend_loc == "outside right":
        pw -= _legend_width(ax.legend) + 12
    ph = height - MARGIN_TOP - MARGIN_BOTTOM
    xlim = ax.xlim or limits(ax.data_x(), ax.xlog)
    ylim = ax.ylim or limits(ax.data_y(), ax.ylog)
    sx, sy = _Scale(xlim, ax.xlog, pw, flip=False), _Scale(ylim, ax.ylog, ph, flip=True)
    return _Frame(pw, ph, xlim, ylim, sx, sy)


def _grid(ax: Axes, f: _Frame) -> list[str]:
    """Grid lines, tick marks and tick labels of both axes."""
    out = []
    for value, label in ax.xticks or _ticks(f.xlim, ax.xlog):
        px = f.sx.one(value)
        if -0.5 <= px <= f.pw + 0.5:
            out.append(_line(px, 0, px, f.ph, 'stroke="#eee"'))
            out.append(_line(px, f.ph, px, f.ph + 4, 'stroke="#444"'))
            out.append(_text(px, f.ph + 6 + TICK_FONT, label, size=TICK_FONT))
    for value, label in _ticks(f.ylim, ax.ylog):
        py = f.sy.one(value)
        out.append(_line(0, py, f.pw, py, 'stroke="#eee"'))
        out.append(_line(-4, py, 0, py, 'stroke="#444"'))
        out.append(_text(-6, py + TICK_FONT * 0.35, label, size=TICK_FONT, anchor="end"))
    return out


def _data(ax: Axes, f: _Frame) -> list[str]:
    """Bars, reference lines, lines and points, clipped to the plot area."""
    sx, sy = f.sx, f.sy
    # A nested <svg> clips to its own viewport (no ids, which would have to be unique over a
    # page of many figures).
    out = [f'<svg width="{f.pw:.1f}" height="{f.ph:.1f}" overflow="hidden">']
    for bar in ax.bars:
        xa, xb = sx.one(bar.x - bar.width / 2), sx.one(bar.x + bar.width / 2)
        ya, yb = sy.one(bar.height), sy.one(0.0)
        out.append(
            f'<rect x="{xa:.1f}" y="{min(ya, yb):.1f}" width="{xb - xa:.1f}" '
            f'height="{abs(yb - ya):.1f}" fill="{bar.fill}" stroke="{bar.edge}"/>'
        )
    out += [_line(0, sy.one(y), f.pw, sy.one(y), _attrs(style)) for y, style in ax.hlines]
    out += [_line(sx.one(x), 0, sx.one(x), f.ph, _attrs(style)) for x, style in ax.vlines]
    for line in ax.lines:
        lx, ly = sx(line.xs), sy(line.ys)
        out.extend(_polylines(lx, ly, line.style))
        if line.style.marker:
            ok = np.isfinite(lx) & np.isfinite(ly)
            out.extend(marker(a, b, line.style, size=3) for a, b in zip(lx[ok], ly[ok]))
    for p in ax.points:
        out.extend(_point(p, f))
    out.append("</svg>")
    return out


def _point(p: Point, f: _Frame) -> list[str]:
    """A point's marker and its error bar with caps (when it has one)."""
    out = []
    px, py = f.sx.one(p.x), f.sy.one(p.y)
    if p.low is not None and p.high is not None:
        ya, yb = f.sy.one(p.low), f.sy.one(p.high)
        ink = f'stroke="{p.style.color}" stroke-width="1.2"'
        out.append(_line(px, ya, px, yb, ink))
        out.extend(_line(px - 3, yc, px + 3, yc, ink) for yc in (ya, yb))
    if math.isfinite(px) and math.isfinite(py):
        out.append(marker(px, py, p.style))
    return out


def _annotations(ax: Axes, f: _Frame) -> list[str]:
    """The panel's free texts, each at its data point plus its offset."""
    out = []
    for t in ax.texts:
        px, py = f.sx.one(t.x) + t.dx, f.sy.one(t.y) - t.dy
        if t.vertical:
            out.append(
                _text(
                    px + 3, py - 4, t.text, size=t.size, anchor="start", color=t.color, rotate=True
                )
            )
        else:
            anchor = "start" if t.dx else "middle"
            out.append(_text(px, py, t.text, size=t.size, anchor=anchor, color=t.color))
    return out


def _titles(ax: Axes, f: _Frame) -> list[str]:
    """The panel's title and axis labels, each label at a size that fits its side."""
    out = []
    if ax.title:
        out.append(_text(f.pw / 2, -8, ax.title, size=TITLE_FONT - 1))
    if ax.xlabel:
        size = _fitting(ax.xlabel, f.pw + MARGIN_LEFT - 20)
        out.append(_text(f.pw / 2, f.ph + MARGIN_BOTTOM - 8, ax.xlabel, size=size))
    if ax.ylabel:
        size = _fitting(ax.ylabel, f.ph + MARGIN_BOTTOM)
        out.append(_text(-MARGIN_LEFT + 12, f.ph / 2, ax.ylabel, size=size, rotate=True))
    return out


def render_axes(ax: Axes, left: float, top: float, width: float, height: float) -> list[str]:
    """The panel ``ax`` in the box (``left``, ``top``, ``width``, ``height``) in pixels."""
    f = _frame(ax, width, height)
    out = [
        f'<g transform="translate({left + MARGIN_LEFT:.1f},{top + MARGIN_TOP:.1f})">',
        f'<rect width="{f.pw:.1f}" height="{f.ph:.1f}" fill="white" stroke="none"/>',
        *_grid(ax, f),
        *_data(ax, f),
        # Text after the clip: a label beside a point at the edge stays whole.
        *_annotations(ax, f),
    ]
    if ax.legend and ax.legend_loc:
        out.extend(_legend(ax.legend, ax.legend_loc, f.pw, f.ph))
    out.append(f'<rect width="{f.pw:.1f}" height="{f.ph:.1f}" fill="none" stroke="#444"/>')
    out.extend(_titles(ax, f))
    out.append("</g>")
    return out


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
    ``legend`` shared by every panel (flowed in rows, over no data), as one ``<svg>`` element
    sized in pixels (the page's CSS lets it shrink to the column)."""
    rows = math.ceil(len(panels) / cols)
    width = panel_width * cols
    chars = max(20, int(width / (_CHAR_WIDTH * TITLE_FONT)))
    title_lines = textwrap.wrap(title, chars) if title else []
    head = TITLE_LINE * len(title_lines) + (6 if title_lines else 0)
    keys: list[str] = []
    flowed: list[list[tuple[LegendEntry, float]]] = []
    used = width
    for entry in legend:
        span = _legend_width([entry]) + 10
        if used + span > width - 8:
            flowed.append([])
            used = 0.0
        flowed[-1].append((entry, span))
        used += span
    for line in flowed:
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
