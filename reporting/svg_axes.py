"""What a chart shows, in data units: panels (:class:`Axes`) with lines, markers, bars, text
and legends, and the limits and ticks of their axes. :mod:`.svg_chart` draws them.

Only what the report draws is here (matplotlib's vocabulary, much reduced): a plot function
fills an :class:`Axes` the way it filled matplotlib's, and the test of a plot can look at
its panels instead of parsing markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Loc = Literal["upper left", "upper right", "lower right", "outside right"]
"""Where a legend goes: inside the plot area, or to its right (never over the data)."""
Marker = Literal["o", "s", "D", "^", "*"]


@dataclass(frozen=True)
class Style:
    """How a series looks: stroke colour and width, dashes, opacity, marker."""

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
    """The patch's fill colour (``kind="patch"``; ``style.color`` is its edge)."""


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
    """One panel: data in data units, drawn by :func:`render_figure` into its box."""

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
        """A line through the points; NaN breaks it (as a gap, like matplotlib)."""
        line = Line(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), style)
        self.lines.append(line)
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
        parts = [line.xs for line in self.lines]
        parts.append(np.array([p.x for p in self.points] + [b.x for b in self.bars]))
        parts.append(np.array([x for x, _ in self.vlines] + [t.x for t in self.texts]))
        # Fixed ticks are in view (as matplotlib's set_xticks widens the limits to them).
        parts.append(np.array([x for x, _ in self.xticks or []]))
        return np.concatenate(parts)

    def data_y(self) -> np.ndarray:
        parts = [line.ys for line in self.lines]
        ends = [v for p in self.points for v in (p.y, p.low, p.high) if v is not None]
        parts.append(np.array(ends + [b.height for b in self.bars] + [t.y for t in self.texts]))
        parts.append(np.array([y for y, _ in self.hlines] + [0.0] * bool(self.bars)))
        return np.concatenate(parts)


def limits(values: np.ndarray, log: bool, margin: float = 0.05) -> tuple[float, float]:
    """The data's range with a margin on each side (in log space on a log axis)."""
    v = values[np.isfinite(values)]
    if log:
        v = np.log10(v[v > 0])
    if v.size == 0:
        lo, hi = (-1.0, 0.0) if log else (0.0, 1.0)
    else:
        lo, hi = float(v.min()), float(v.max())
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    pad = margin * (hi - lo)
    lo, hi = lo - pad, hi + pad
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


def tick_label(value: float) -> str:
    return f"{value:.4g}"
