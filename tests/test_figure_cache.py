"""The report stage draws each figure once, over worker processes, and the pages it writes are
those the plot functions give when called directly, byte for byte."""

from __future__ import annotations

from test_report import make_result, ok_audit, write_run

from reporting import load_run, planned_figures, write_report
from reporting.aggregate import build_report
from reporting.figure_cache import FIGURES_PER_WORKER
from reporting.html_report import render_html
from reporting.site_page import render_site_page
from reporting.site_report import site_pages

N_SITES = 4


def test_pages_are_the_same_with_figures_drawn_once_in_workers(tmp_path):
    audits = {
        i: ok_audit(i, make_result([0.5 + 0.1 * i, 0.75], [1.0, 1.25 + 0.1 * i], rm_rn=[0.5, 0.6]))
        for i in range(N_SITES)
    }
    run = write_run(tmp_path / "run", audits=audits, n_sites=N_SITES)
    inputs = load_run(run)
    report = build_report(inputs)
    results = {sid: a.result for sid, a in inputs.audits.items() if a.result is not None}
    pages = site_pages(run, inputs, report)

    plan = planned_figures(report, results, pages)
    # Per site: its ROC (on both pages), eps_tilde, precision-recall and bound-recall; then
    # the consortium's eps_tilde, precision-recall, bound-recall and training figures.
    assert plan.planned == 4 * N_SITES + 4
    assert plan.planned >= 2 * FIGURES_PER_WORKER  # enough to fork workers where CPUs allow

    write_report(run)
    assert (run / "report.html").read_text() == render_html(report, results)
    for page, result in pages:
        path = run / "site-reports" / f"site-{page.site.site_id}.html"
        assert path.read_text() == render_site_page(page, result)
