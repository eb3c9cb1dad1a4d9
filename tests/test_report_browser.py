"""The report pages in a real browser: headless Chromium loads report.html, sweep.html and a
site page, with no console error, every plot (inline SVG) laid out and drawn, every image
decoded, the tables as they should be.

Chromium is driven with its command line alone (``--dump-dom``, ``--screenshot``): a copy of
each page gets a checking script as the first thing in its <head>, so it sees every error
of the page's own scripts, and writes what it found into the DOM that ``--dump-dom`` prints.
The product pages themselves are never changed. Without Chromium the test fails: ``make
browser`` installs it (``make test`` does first).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from builders import (
    by_round_lines,
    load_run_of,
    make_result,
    ok_audit,
    run_files,
    site_pages,
    with_class_slices,
    write_report_of,
    write_run,
)

from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.reporting import SweepPoint, build_report, write_sweep_report
from panoramia_fl.reporting.numbers.formatting import fmt_est, fmt_two_sided
from panoramia_fl.simulations.config_file import report_config

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 180
WINDOW = (1400, 3000)
"""The window the pages are read in: a 1,400-pixel-wide laptop screen."""

CHECKER = r"""
<script>
(function () {
  "use strict";
  var problems = [];
  function text(args) {
    return Array.prototype.map.call(args, function (a) { return String(a); }).join(" ");
  }
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) {
      problems.push("resource failed: " + String(t.src || t.href).slice(0, 80));
    } else {
      problems.push("uncaught: " + e.message);
    }
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    problems.push("unhandled rejection: " + String(e.reason));
  });
  console.error = function () { problems.push("console.error: " + text(arguments)); };
  console.assert = function (ok) {
    if (!ok) { problems.push("console.assert: " + text(Array.prototype.slice.call(arguments, 1))); }
  };
  function cells(row) {
    return Array.prototype.map.call(row.cells, function (c) { return c.textContent.trim(); });
  }
  function tables() {
    return Array.prototype.map.call(document.querySelectorAll("table"), function (t) {
      return {id: t.id, sortable: t.classList.contains("sortable"),
              headers: t.rows.length ? cells(t.rows[0]) : [],
              rows: Array.prototype.slice.call(t.rows, 1).map(cells)};
    });
  }
  function column(table, i) {
    return Array.prototype.slice.call(table.rows, 1).map(function (r) {
      return r.cells[i] ? r.cells[i].textContent.trim() : "";
    });
  }
  function sorts() {
    var out = [];
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (t, ti) {
      Array.prototype.forEach.call(t.rows[0].cells, function (th, i) {
        th.click();
        var asc = column(t, i);
        th.click();
        out.push({table: ti, header: th.textContent.trim(), asc: asc, desc: column(t, i),
                  ariaSort: th.getAttribute("aria-sort")});
      });
    });
    return out;
  }
  window.addEventListener("load", function () {
    setTimeout(function () {
      var images = Array.prototype.map.call(document.images, function (img) {
        return {alt: img.alt, complete: img.complete, naturalWidth: img.naturalWidth};
      });
      // A plot is drawn when its <svg> takes room on the page, its shapes have a bounding
      // box, and it has marks and text that the browser laid out (a malformed coordinate
      // list is also a console error, which counts as a problem).
      var plots = Array.prototype.map.call(document.querySelectorAll(".plot"), function (div) {
        var svg = div.querySelector("svg");
        var box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
        var drawn = svg ? svg.getBBox() : {width: 0, height: 0};
        var marks = svg ? svg.querySelectorAll("polyline, polygon, circle, rect, line") : [];
        var texts = svg ? Array.prototype.filter.call(svg.querySelectorAll("text"),
          function (t) { return t.getComputedTextLength() > 0; }) : [];
        return {alt: div.getAttribute("aria-label"), width: box.width, height: box.height,
                drawnWidth: drawn.width, drawnHeight: drawn.height, marks: marks.length,
                texts: texts.length};
      });
      var report = {problems: problems.slice(), images: images, plots: plots,
                    title: document.title,
                    text: document.body.innerText, tables: tables()};
      report.sorts = sorts();
      // Every table as laid out with every fold opened: none may reach past the window.
      Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) {
        d.open = true;
      });
      report.windowWidth = window.innerWidth;
      report.tableBoxes = Array.prototype.map.call(document.querySelectorAll("table"),
        function (t) {
          var box = t.getBoundingClientRect();
          return {headers: t.rows.length ? cells(t.rows[0]).slice(0, 3) : [],
                  width: box.width, right: box.right};
        });
      report.problems = problems;
      var pre = document.createElement("pre");
      pre.id = "__page_check__";
      pre.textContent = JSON.stringify(report);
      document.body.appendChild(pre);
    }, 0);
  });
})();
</script>
"""
"""Records errors from the start of the page; after load, writes images, plots, tables, the text
and (having clicked every header of each sortable table twice) the sorted columns."""

_RESULT = re.compile(r'<pre id="__page_check__">(.*?)</pre>', re.S)


@dataclass(frozen=True)
class PageCheck:
    problems: list[str]
    images: list[dict[str, Any]]
    plots: list[dict[str, Any]]
    title: str
    text: str
    tables: list[dict[str, Any]]
    sorts: list[dict[str, Any]]
    window_width: float
    table_boxes: list[dict[str, Any]]
    """Each table's width and right edge (px) with every fold opened."""

    @property
    def tables_past_the_window(self) -> list[list[str]]:
        """The first headers of the tables reaching past the window's right edge."""
        return [t["headers"] for t in self.table_boxes if t["right"] > self.window_width]

    @property
    def broken_images(self) -> list[str]:
        return [i["alt"] for i in self.images if not (i["complete"] and i["naturalWidth"] > 0)]

    @property
    def broken_plots(self) -> list[str]:
        keys = ("width", "height", "drawnWidth", "drawnHeight", "marks", "texts")
        return [p["alt"] for p in self.plots if not all(p[k] > 0 for k in keys)]

    def table(self, first_header: str, nth: int = 0) -> dict[str, Any]:
        """The ``nth`` table whose first header is ``first_header``."""
        return [t for t in self.tables if t["headers"][:1] == [first_header]][nth]

    def sort(self, header: str, table: int = 0) -> dict[str, Any]:
        """Column ``header`` of the ``table``-th sortable table, sorted up and down."""
        (found,) = [s for s in self.sorts if s["header"] == header and s["table"] == table]
        return found


def chromium() -> str:
    """The Chromium executable; fails (never skips) without one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "Chromium is not installed: the report pages cannot be checked in a browser. "
        "Install it with `make browser` (apt-get install chromium)."
    )


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=10000",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)


def check_page(page: Path, work: Path) -> PageCheck:
    """Load a copy of ``page`` (checker first in <head>) in Chromium; what the checker saw.

    Console messages Chromium itself logs (``CONSOLE`` lines on stderr: the page's console
    calls the checker does not replace, blocked loads) count as problems too.
    """
    source = page.read_text()
    head = re.search(r"<head[^>]*>", source, re.I)
    assert head, f"{page} has no <head>"
    copy = page.with_name(f"{page.stem}.checked{page.suffix}")
    copy.write_text(source[: head.end()] + CHECKER + source[head.end() :])
    try:
        done = _run(
            [f"--window-size={WINDOW[0]},{WINDOW[1]}", "--dump-dom", copy.resolve().as_uri()],
            work / f"profile-{page.stem}",
        )
    finally:
        copy.unlink()
    match = _RESULT.search(done.stdout)
    assert match, (
        f"the checker in {page.name} did not report (exit {done.returncode}): {done.stderr[-2000:]}"
    )
    data = json.loads(html.unescape(match.group(1)))
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return PageCheck(
        problems=data["problems"] + console,
        images=data["images"],
        plots=data["plots"],
        title=data["title"],
        text=data["text"],
        tables=data["tables"],
        sorts=data["sorts"],
        window_width=data["windowWidth"],
        table_boxes=data["tableBoxes"],
    )


def assert_page_ok(check: PageCheck, *, min_plots: int = 1) -> None:
    """No console error or uncaught exception, every plot drawn and every image decoded."""
    assert not check.problems, check.problems
    assert len(check.plots) >= min_plots, check.plots
    assert not check.broken_plots, f"broken plots: {check.broken_plots}"
    assert not check.broken_images, f"broken images: {check.broken_images}"


def screenshot(page: Path, out: Path, work: Path) -> Path:
    """A screenshot of the product page itself (unchanged)."""
    _run(
        [f"--screenshot={out}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.resolve().as_uri()],
        work / f"profile-shot-{page.stem}",
    )
    assert out.exists() and out.stat().st_size > 10_000, f"no screenshot of {page.name}"
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """report.html of a 4-site run (2 ok, 1 failed, 1 missing), a site page, sweep.html."""
    base = tmp_path_factory.mktemp("browser")
    failed = ok_audit(2, make_result([1.0], [1.0])) | {
        "status": "failed",
        "result": None,
        "error": 'OOM in <script>console.error("x")</script>',
    }
    run = write_run(
        base / "run",
        n_sites=4,
        dp=8.0,
        audits={
            0: ok_audit(0, make_result([1.0, 1.25], [1.75, 2.0], rm_rn=[1.0, 1.25]), dp=8.0),
            1: ok_audit(
                1, with_class_slices(make_result([0.5, 0.75], [0.75, 1.5], o1=[0.1, 0.2])), dp=8.0
            )
            | {"by_round": json_safe(by_round_lines([1, 2, 3]))},
            2: failed,
        },
    )
    write_report_of(run)
    eps16 = write_run(
        base / "eps16",
        n_sites=1,
        dp=16.0,
        accuracy=0.9,
        audits={0: ok_audit(0, make_result([1.0, 1.5], [1.5, 2.0]), dp=16.0)},
    )
    nodp = write_run(
        base / "nodp",
        n_sites=1,
        accuracy=0.95,
        audits={0: ok_audit(0, make_result([1.0, 1.5], [2.0, 2.5]))},
    )
    sweep = write_sweep_report(
        base / "sweep",
        [
            SweepPoint("eps=8", {"dp.target_epsilon": 8}, run_files(run)),
            SweepPoint("eps=16", {"dp.target_epsilon": 16}, run_files(eps16)),
            SweepPoint("no DP", {"dp.enabled": False}, run_files(nodp)),
            SweepPoint("eps=2", {"dp.target_epsilon": 2}, run_files(base / "never-ran")),
        ],
        report_config,
    )
    return {
        "run": run,
        "report": run / "report.html",
        "site": site_pages(run, 1).html_path,
        "failed_site": site_pages(run, 2).html_path,
        "sweep": sweep.html_path,
    }


def test_report_html_in_the_browser(pages: dict[str, Path], tmp_path: Path) -> None:
    check = check_page(pages["report"], tmp_path)
    # 4 plots, a log-ROC per ok site and site 1's leakage over rounds.
    assert_page_ok(check, min_plots=7)
    assert "site 1: round 2" in check.text  # the first audited round that leaks
    assert [row[0] for row in check.table("round")["rows"]] == ["1", "2", "3"]
    headline = check.table("site")  # first: the headline table
    assert headline["headers"][1] == "eps_tilde two-sided [95% CI] (side)"
    table = check.table("site", nth=1)
    assert [row[0] for row in table["rows"]] == ["0", "1", "2", "3"]  # one row per site
    assert [row[1] for row in table["rows"]] == ["ok", "ok", "failed", "missing"]
    assert check.text.count("What eps_tilde means and does not mean") == 1
    # Every table, folded ones opened, reads without scrolling sideways.
    assert check.window_width == WINDOW[0]
    assert len(check.table_boxes) >= 8 and check.tables_past_the_window == []
    screenshot(pages["report"], tmp_path / "report.png", tmp_path)


@pytest.mark.parametrize("site_id", [1, 2])
def test_site_page_in_the_browser(pages: dict[str, Path], tmp_path: Path, site_id: int) -> None:
    page = pages["site"] if site_id == 1 else pages["failed_site"]
    check = check_page(page, tmp_path)
    site = build_report(load_run_of(pages["run"])).sites[site_id]
    if site_id == 1:
        assert_page_ok(check, min_plots=5)  # the leakage-over-rounds plot among them
        assert [row[0] for row in check.table("round")["rows"]] == ["1", "2", "3"]
        assert [row[0] for row in check.table("label")["rows"]] == ["0", "1"]
        assert fmt_two_sided(site) in check.text  # the headline: two-sided eps_tilde ...
        assert site.panoramia is not None  # ... beside the paper's one-sided:
        assert fmt_est(site.panoramia.one_sided.eps_tilde) in check.text
        ids = {"bounds", "comparisons", "low-fpr", "manifest", "by-round-1", "per-class"}
        assert ids <= {t["id"] for t in check.tables}
        assert check.tables_past_the_window == []
    else:  # a failed audit: the reason, no plots, no error from the hostile error text
        assert_page_ok(check, min_plots=0)
        assert 'console.error("x")' in check.text and not check.plots
    assert f"site {site_id}" in check.title
    screenshot(page, tmp_path / f"site-{site_id}.png", tmp_path)


def _number(text: str) -> float:
    return float("inf") if text.startswith("inf") else float(text.split()[0])


def test_sweep_html_sorts_by_clicked_header(pages: dict[str, Path], tmp_path: Path) -> None:
    check = check_page(pages["sweep"], tmp_path)
    assert_page_ok(check, min_plots=4)
    assert sum(t["sortable"] for t in check.tables) == 3  # with what each party can measure
    points = check.table("point")
    assert len(points["rows"]) == 4
    # Numeric-aware: 8 < 16 < inf, though "16.00" < "8.00" as text; "-" last both ways.
    eps = check.sort("theoretical eps")
    assert eps["asc"] == ["8.00", "16.00", "inf (no DP)", "-"]
    assert eps["desc"] == ["inf (no DP)", "16.00", "8.00", "-"]
    assert eps["ariaSort"] == "descending"
    accuracy = check.sort("global accuracy")
    numbers = [_number(t) for t in accuracy["asc"] if t != "-"]
    assert numbers == sorted(numbers) and accuracy["asc"][-1] == "-"
    labels = check.sort("point")
    assert labels["asc"] == ["eps=2", "eps=8", "eps=16", "no DP"]
    sites = check.table("point", nth=1)
    assert len(sites["rows"]) == 6  # 4 + 1 + 1 sites of the three runs
    eps_tilde = check.sort("eps_tilde", table=1)
    numbers = [_number(t) for t in eps_tilde["desc"] if t != "-"]
    assert numbers == sorted(numbers, reverse=True) and len(numbers) == 4
    assert eps_tilde["desc"][4:] == ["-", "-"]
    screenshot(pages["sweep"], tmp_path / "sweep.png", tmp_path)


@pytest.mark.parametrize(
    ("name", "inject", "expect"),
    [
        ("broken-image", '<img alt="broken" src="data:image/png;base64,AAAA">', "broken"),
        (
            "empty-plot",
            '<div class="plot" role="img" aria-label="empty">'
            '<svg width="0" height="0"></svg></div>',
            "broken plots",
        ),
        ("inline-error", "<script>notDefinedAnywhere();</script>", "uncaught"),
        ("console-error", '<script>console.error("page failed")</script>', "console.error"),
    ],
)
def test_checker_fails_a_broken_page(
    pages: dict[str, Path], tmp_path: Path, name: str, inject: str, expect: str
) -> None:
    source = pages["site"].read_text()
    broken = tmp_path / f"{name}.html"
    broken.write_text(source.replace("<h1>", inject + "<h1>", 1))
    check = check_page(broken, tmp_path)
    with pytest.raises(AssertionError, match=expect):
        assert_page_ok(check)
