"""The SVG charts: ticks, scales, NaN gaps, thinning, well-formed markup with every label."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from panoramia_fl.charts.svg import (
    MARGIN_LEFT,
    MARGIN_RIGHT,
    Axes,
    LegendEntry,
    Style,
    linear_ticks,
    log_ticks,
    render_figure,
)

SVG = "{http://www.w3.org/2000/svg}"


def test_linear_ticks_are_round_and_inside() -> None:
    assert linear_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert linear_ticks(-0.05, 4.2) == [0.0, 1.0, 2.0, 3.0, 4.0]
    ticks = linear_ticks(0.41, 0.93)
    assert ticks[0] >= 0.41 and ticks[-1] <= 0.93 and len(ticks) >= 4
    assert all(t == round(t, 2) for t in ticks)


def test_log_ticks_are_decades_or_finer_when_few() -> None:
    assert log_ticks(1e-3, 1.05) == [0.001, 0.01, 0.1, 1.0]
    narrow = log_ticks(0.3, 1.05)
    assert len(narrow) >= 3 and all(0.3 <= t <= 1.05 for t in narrow)


def _parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def _polylines(root: ET.Element) -> list[list[tuple[float, float]]]:
    return [
        [(float(x), float(y)) for x, y in (p.split(",") for p in line.get("points", "").split())]
        for line in root.iter(f"{SVG}polyline")
    ]


def test_figure_is_well_formed_with_titles_labels_ticks_and_legend() -> None:
    ax = Axes(title="panel", xlabel="x (fraction)", ylabel="y (nats)", legend_loc="upper left")
    ax.plot([0.0, 1.0], [0.0, 2.0], Style("#d62728"), "the line")
    ax.point(0.5, 1.0, Style("#1f77b4", marker="D"), low=0.5, high=1.5)
    ax.legend.append(LegendEntry("a patch", Style("#999"), "patch", fill="#eee"))
    markup = render_figure([ax, ax], panel_width=300, panel_height=250, cols=2, title="Figure")
    root = _parse(markup)
    assert root.get("width") == "600" and root.get("viewBox") == "0 0 600 273"
    texts = _texts(root)
    for expected in ("Figure", "panel", "x (fraction)", "y (nats)", "the line", "a patch", "0.5"):
        assert expected in texts, expected
    assert len(list(root.iter(f"{SVG}polygon"))) >= 2  # the diamond, once per panel
    # Same inputs, same markup.
    assert markup == render_figure(
        [ax, ax], panel_width=300, panel_height=250, cols=2, title="Figure"
    )


def test_nan_breaks_a_line_and_repeated_pixels_are_dropped() -> None:
    ax = Axes(xlim=(0.0, 10.0), ylim=(0.0, 10.0))
    xs = [0.0, 1.0, 1.0001, 2.0, math.nan, 5.0, 6.0]
    ax.plot(xs, [0.0, 1.0, 1.0001, 2.0, 3.0, 5.0, 6.0], Style("black"))
    (first, second) = _polylines(_parse(render_figure([ax], panel_width=300, panel_height=250)))
    assert len(first) == 3  # 1.0001 falls on 1.0's pixel
    assert len(second) == 2


def test_log_axes_put_the_geometric_mean_in_the_middle() -> None:
    ax = Axes(xlog=True, ylog=True, xlim=(1e-3, 1.0), ylim=(1e-3, 1.0))
    ax.plot([1e-3, math.sqrt(1e-3), 1.0], [1e-3, math.sqrt(1e-3), 1.0], Style("black"))
    # A non-positive value has no place on a log axis: it is a gap, not a crash.
    ax.plot([0.0, 0.1], [0.5, 0.5], Style("red"))
    root = _parse(render_figure([ax], panel_width=300, panel_height=250))
    diagonal, flat = _polylines(root)
    width = 300 - MARGIN_LEFT - MARGIN_RIGHT
    assert diagonal[0][0] == 0.0 and diagonal[2][0] == pytest.approx(width, abs=0.1)
    assert diagonal[1][0] == pytest.approx(width / 2, abs=0.1)
    assert diagonal[1][1] == pytest.approx((diagonal[0][1] + diagonal[2][1]) / 2, abs=0.1)
    assert len(flat) == 2 and flat[0][0] > 0  # only the positive end, doubled into a dot


def test_thousands_of_points_become_what_the_pixels_show() -> None:
    fpr = np.linspace(0.0, 1.0, 20_000)
    ax = Axes(xlim=(0.0, 1.0), ylim=(0.0, 1.0))
    ax.plot(fpr, np.sqrt(fpr), Style("black"))
    (line,) = _polylines(_parse(render_figure([ax], panel_width=300, panel_height=250)))
    assert len(line) < 1_000
    assert line[0] == (0.0, 178.0) and line[-1] == (220.0, 0.0)  # both ends kept
