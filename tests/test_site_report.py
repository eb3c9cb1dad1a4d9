"""Each site's own report, the exposed-records scorer and the report pages' polish."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import (
    by_round_lines,
    load_run_of,
    make_result,
    ok_audit,
    run_files,
    site_pages,
    site_report_of,
    write_report_of,
    write_run,
)

from panoramia_fl.audit.inversion.inversion_result import InversionResult
from panoramia_fl.audit.result import AuditFlags, Interval, PanoramiaResult
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.contracts.run_files import exposed_records_name
from panoramia_fl.reporting import SCHEMA_VERSION, SweepPoint, build_sweep_report
from panoramia_fl.reporting.assembly.aggregate import build_report
from panoramia_fl.reporting.assembly.manifest import PACKAGES
from panoramia_fl.reporting.layout.between_runs import over_runs, pooled
from panoramia_fl.reporting.layout.blocks import to_html
from panoramia_fl.reporting.layout.columns import md_table
from panoramia_fl.reporting.layout.site_columns import UPDATE_COLUMNS
from panoramia_fl.reporting.numbers.flag_prose import FLAG_PROSE
from panoramia_fl.reporting.numbers.formatting import fmt, fmt_est, fmt_two_sided
from panoramia_fl.reporting.numbers.metrics import EPS_TILDE_TWO_SIDED
from panoramia_fl.reporting.pages import plots
from panoramia_fl.reporting.pages.html_page import SORT_SCRIPT
from panoramia_fl.reporting.privacy.privacy_ledger import update_violations
from panoramia_fl.reporting.schemas.replicate_schema import (
    ReplicateReport,
    ReplicateRun,
    ReplicateSite,
)
from panoramia_fl.reporting.schemas.schema import SiteReport
from panoramia_fl.reporting.site.site_page import update_blocks
from panoramia_fl.reporting.site.standing import BANDS, rank_band
from panoramia_fl.reporting.sweeps import sweep_plots
from panoramia_fl.reporting.sweeps.sweep_report import render_sweep_html
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.config_file import report_config

FAILED_ERROR = "ValueError: too few records for the splits at site 4"
# Distinctive indices and scores of a site-local exposed-records file.
EXPOSED_INDICES = [987_651, 987_652, 987_653]
EXPOSED_SCORES = [7.123456789, 6.987654321, 6.5551234]


def _failed(site_id: int) -> dict[str, Any]:
    return {
        "site_id": site_id,
        "status": "failed",
        "error": FAILED_ERROR,
        "n_members": 600,
        "n_holdout": 100,
        "dp_epsilon": None,
        "elapsed_s": 3.0,
        "result": None,
    }


def _results() -> dict[int, Any]:
    """Four ok sites with distinct, distinctive two-sided values (0.7718 + 0.31373 i)."""
    return {
        i: make_result(
            [1.0, 1.25],
            [1.25 + 0.31373 * i, 1.5 + 0.31373 * i],
            rm_rn=[0.5, 0.75],
            o1=[0.25, 0.5],
            o1_fdp=[(0.5, 0.125), (0.75, 0.25)],
            nonmember_gain=0.2718,
        )
        for i in range(4)
    }


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six sites: 0-3 ok, 4 failed, 5 missing; site 0 keeps an exposed-records file."""
    results = _results()
    run = write_run(
        tmp_path_factory.mktemp("sites") / "run",
        n_sites=6,
        dp=8.0,
        audits={**{i: ok_audit(i, r, dp=8.0) for i, r in results.items()}, 4: _failed(4)},
    )
    state = run_files(run).site_state
    state.mkdir()
    (state / exposed_records_name(0)).write_text(
        json.dumps({"indices": EXPOSED_INDICES, "scores": EXPOSED_SCORES})
    )
    write_report_of(run)
    return run


def _page_json(run: Path, site_id: int) -> dict[str, Any]:
    return json.loads(site_pages(run, site_id).json_path.read_text())


def _embedded(page: str) -> Any:
    match = re.search(
        r'<script type="application/json" id="report-data">\n(.*?)\n</script>', page, re.S
    )
    assert match
    return json.loads(match.group(1))


def test_aggregator_writes_one_report_per_audited_site(consortium: Path) -> None:
    written = sorted(p.name for p in (consortium / "site-reports").iterdir())
    assert written == [f"site-{i}.{ext}" for i in range(5) for ext in ("html", "json")]
    report = json.loads((consortium / "report.json").read_text())
    by_id = {s["site_id"]: s for s in report["sites"]}
    for site_id in range(4):
        data = _page_json(consortium, site_id)
        assert data["schema_version"] == SCHEMA_VERSION
        assert data["source"] == "consortium"
        # The page's numbers are the consortium report's, copied.
        assert data["site"] == by_id[site_id]
        page = site_pages(consortium, site_id).html_path.read_text()
        assert _embedded(page) == data
        assert page.count('class="meaning"') == 1
        site = build_report(load_run_of(consortium)).sites[site_id]
        assert site.panoramia is not None
        assert fmt_two_sided(site) in page and fmt_est(site.panoramia.one_sided.eps_tilde) in page
        assert len(data["threat_model"]) == 3
        reading = data["reading"]
        assert reading["verdict"] == "evidence"
        assert fmt(EPS_TILDE_TWO_SIDED.value(site)) in reading["headline"]
        assert reading["measured"] and reading["meaning"] and reading["not_shown"]
        assert "not proof of privacy" in " ".join(reading["not_shown"])
    failed = _page_json(consortium, 4)
    assert failed["reading"]["verdict"] == "no result"
    assert FAILED_ERROR in failed["reading"]["headline"]
    assert failed["standing"]["available"] is False


def _numbers(text: str) -> list[tuple[float, int]]:
    """Every decimal number in ``text``, with its number of decimals."""
    return [(float(m), len(m.split(".")[1])) for m in re.findall(r"\d+\.\d+", text)]


def _eps_tildes(site: Any) -> list[float]:
    """A site's eps_tilde values as its page would show them: two-sided and one-sided."""
    assert site.panoramia is not None
    return [
        v for v in (EPS_TILDE_TWO_SIDED.value(site), site.panoramia.one_sided.eps_tilde.mean) if v
    ]


def test_standing_ranks_without_other_sites_numbers_or_ids(consortium: Path) -> None:
    values = {
        s.site_id: v
        for s in build_report(load_run_of(consortium)).sites
        if (v := EPS_TILDE_TWO_SIDED.value(s)) is not None
    }
    assert sorted(values) == [0, 1, 2, 3] and len(set(values.values())) == 4
    ranked = sorted(values.values(), reverse=True)
    for site_id, own in values.items():
        data = _page_json(consortium, site_id)
        st = data["standing"]
        assert st["available"] is True and st["n_ranked"] == 4
        assert st["rank"] == ranked.index(own) + 1
        assert st["band"] == rank_band(st["rank"], 4)
        page = site_pages(consortium, site_id).html_path.read_text()
        assert st["band"] in page
        ids = {int(i) for i in re.findall(r"\bsite[ _-]?(\d+)", page)}
        assert ids == {site_id}, ids
        assert FAILED_ERROR not in page
    assert [rank_band(r, 4) for r in (1, 2, 3, 4)] == [BANDS[0], BANDS[1], BANDS[1], BANDS[2]]
    assert [rank_band(r, 2) for r in (1, 2)] == [BANDS[0], BANDS[2]]
    assert rank_band(1, 1) == "the only ranked site"


def _standing_lines(run: Path, site_id: int) -> tuple[dict[str, Any], str]:
    page = site_pages(run, site_id).html_path.read_text()
    section = page[page.index("Where your site stands") :]
    return _page_json(run, site_id)["standing"], section[: section.index("</ul>")]


def test_tied_sites_share_a_rank_and_band_that_tell_nothing_of_the_others(tmp_path: Path) -> None:
    """A site ranks after every site that measured at least as much: three sites at 0 are
    each last (the lowest third), as a site at 0 is whatever the others read, so none learns
    that the others read exactly 0; two tied at the top share the lower rank and its band."""
    zero = make_result([2.0, 2.0], [1.0, 1.0], nonmember_gain=-5.0)
    run = write_run(tmp_path / "zeros", n_sites=3, audits={i: ok_audit(i, zero) for i in range(3)})
    write_report_of(run)
    for site_id in range(3):
        standing, text = _standing_lines(run, site_id)
        assert (standing["rank"], standing["band"]) == (3, BANDS[2])
        assert "Your site ranks 3 of 3 by two-sided eps_tilde" in text
        assert "2 other sites measured at least as much as yours." in text
        assert "highest" not in text
    high = make_result([1.0, 1.25], [1.5, 1.75], nonmember_gain=0.0)
    audits = {0: ok_audit(0, high), 1: ok_audit(1, high), 2: ok_audit(2, zero)}
    run = write_run(tmp_path / "tie", n_sites=3, audits=audits)
    write_report_of(run)
    ranks = {i: _standing_lines(run, i)[0] for i in range(3)}
    assert [(r["rank"], r["band"]) for r in ranks.values()] == [
        (2, BANDS[1]),
        (2, BANDS[1]),
        (3, BANDS[2]),
    ]


@pytest.mark.parametrize("n_sites", [2, 3, 4])
def test_site_pages_show_no_other_sites_eps_tilde(tmp_path: Path, n_sites: int) -> None:
    """Every number on a site's page (HTML and JSON) against every other site's eps_tilde:
    with 3 sites a consortium median or maximum would be another site's own value."""
    results = _results()
    run = write_run(
        tmp_path / "run",
        n_sites=n_sites,
        audits={i: ok_audit(i, results[i]) for i in range(n_sites)},
    )
    write_report_of(run)
    sites = build_report(load_run_of(run)).sites
    for site_id in range(n_sites):
        page = site_pages(run, site_id).html_path.read_text()
        shown = _numbers(page) + _numbers(json.dumps(_page_json(run, site_id)))
        assert fmt_two_sided(sites[site_id]) in page
        for other in sites:
            if other.site_id == site_id:
                continue
            for value in _eps_tildes(other):
                leaked = [x for x, d in shown if d >= 3 and abs(x - value) < 0.5 * 10**-d]
                assert not leaked, (site_id, other.site_id, value, leaked)


def test_site_rebuilds_its_report_from_its_audit_file_alone(
    consortium: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / "alone"
    (alone / "audits").mkdir(parents=True)
    shutil.copy(consortium / "audits" / "site-2.json", alone / "audits")
    assert cli_main(["report", str(alone), "--site", "2"]) == 0
    assert capsys.readouterr().out.strip().endswith("site-reports/site-2.html")
    assert sorted(p.name for p in (alone / "site-reports").iterdir()) == [
        "site-2.html",
        "site-2.json",
    ]
    data = _page_json(alone, 2)
    full = _page_json(consortium, 2)
    assert data["source"] == "site"
    # The same numbers from the file alone; delta and the accountant's name are the config's,
    # which is not there yet, and what the site sent each round is the training log's.
    alone_privacy = {"dp_delta": None, "record_accountant": "Opacus", "outside_guarantee": []}
    assert data["site"] == full["site"] | {"privacy": full["site"]["privacy"] | alone_privacy}
    assert data["reading"] == full["reading"]
    assert data["standing"]["available"] is False and data["standing"]["rank"] is None
    assert "unavailable" in data["standing"]["note"].lower()
    assert data["manifest"]["config_file"] is None and data["manifest"]["config_sha256"] is None
    page = site_pages(alone, 2).html_path.read_text()
    assert fmt_two_sided(build_report(load_run_of(consortium)).sites[2]) in page
    assert "Unavailable" in page
    # The best one-run lower bound (O(1)'s f-DP mean here) is named on the site's own page.
    assert data["site"]["checks"]["best_eps_lb"] == pytest.approx(0.625)
    assert data["site"]["checks"]["best_eps_lb_method"].startswith("O(1): f-DP, Gaussian")
    assert "best lower bound" in page and "0.625 (O(1): f-DP, Gaussian" in page

    # With config.yaml beside it, the manifest hashes it byte for byte.
    shutil.copy(consortium / "config.yaml", alone / "config.yaml")
    site_report_of(alone, 2)
    manifest = _page_json(alone, 2)["manifest"]
    assert manifest["config_file"] == "config.yaml"
    digest = hashlib.sha256((consortium / "config.yaml").read_bytes()).hexdigest()
    assert manifest["config_sha256"] == digest == full["manifest"]["config_sha256"]
    assert manifest["run_seed"] == 0
    alone_site = _page_json(alone, 2)["site"]
    assert alone_site == full["site"] | {
        "privacy": full["site"]["privacy"] | {"outside_guarantee": []}
    }


def test_missing_site_file_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "audits").mkdir()
    assert cli_main(["report", str(tmp_path), "--site", "7"]) == 2
    assert "site-7.json" in capsys.readouterr().err


def test_manifest_records_seeds_versions_and_sizes(consortium: Path) -> None:
    manifest = _page_json(consortium, 1)["manifest"]
    result = _results()[1]
    assert manifest["repeat_seeds"] == [r.seed for r in result.repeats] == [0, 1]
    assert (
        set(manifest["packages"])
        == set(PACKAGES)
        == {
            "torch",
            "flwr",
            "opacus",
            "numpy",
            "sklearn",
        }
    )
    assert manifest["packages"]["numpy"] == np.__version__
    assert manifest["data_sizes"] == result.sizes
    # The tests run from a checkout: the manifest names its commit and whether it is edited.
    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    edited = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=repo).returncode == 1
    if (repo / ".git").exists():
        assert manifest["git_commit"] == head.stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{40}", manifest["git_commit"])
        assert manifest["git_dirty"] is edited
    else:
        assert manifest["git_commit"] is None and manifest["git_dirty"] is None


def test_exposed_records_are_linked_never_copied(consortium: Path) -> None:
    link = f"../site_state/{exposed_records_name(0)}"
    data = _page_json(consortium, 0)
    assert data["exposed_records_link"] == link
    page = site_pages(consortium, 0).html_path.read_text()
    assert f'href="{link}"' in page and "stays at your site" in page
    assert (consortium / "site-reports" / link).resolve().exists()
    for other in (1, 2):
        assert _page_json(consortium, other)["exposed_records_link"] is None
        assert exposed_records_name(0) not in (site_pages(consortium, other).html_path.read_text())
    pages = [site_pages(consortium, i) for i in range(5)]
    files = [p.html_path for p in pages] + [p.json_path for p in pages]
    files += [consortium / f"report.{ext}" for ext in ("json", "csv", "md", "html")]
    for path in files:
        text = path.read_text()
        for value in (*EXPOSED_INDICES, *EXPOSED_SCORES):
            assert str(value) not in text, path.name
    for path in (consortium / f"report.{ext}" for ext in ("json", "csv", "md", "html")):
        text = path.read_text()
        assert "exposed_records" not in text and "exposed-records" not in text, path.name


def test_verdicts_in_plain_language(tmp_path: Path) -> None:
    audits = {
        # Two-sided interval above 0: evidence.
        0: ok_audit(0, make_result([1.0, 1.25], [1.5, 1.75], nonmember_gain=0.0)),
        # Reads 0 on every side: none.
        1: ok_audit(1, make_result([2.0, 2.0], [1.0, 1.0], nonmember_gain=-5.0)),
        # Mean above 0, interval reaching below 0: inconclusive.
        2: ok_audit(2, make_result([1.0, 1.0], [0.5, 1.5], nonmember_gain=-5.0))
        | {"by_round": json_safe(by_round_lines([1, 2, 4]))},
    }
    run = write_run(tmp_path / "v", n_sites=3, audits=audits)
    write_report_of(run)
    verdicts = {i: _page_json(run, i)["reading"]["verdict"] for i in range(3)}
    # What the reading covers: the final model, plus the earlier rounds a site audited.
    coverage = {i: _page_json(run, i)["reading"]["not_shown"][-1] for i in (0, 2)}
    assert "final shared model" in coverage[0] and "not earlier rounds" in coverage[0]
    assert "after rounds 1, 2 and the final one" in coverage[2]
    assert "not earlier rounds" not in coverage[2]
    assert verdicts == {0: "evidence", 1: "none", 2: "inconclusive"}
    assert "member' guesses" in _page_json(run, 0)["reading"]["headline"]
    none = _page_json(run, 1)["reading"]["headline"]
    assert "no evidence" in none and "not proof" in none


def test_a_flagged_headline_is_never_shown_as_a_finding(tmp_path: Path) -> None:
    """A headline above 0 whose flags say it does not measure leakage (generated non-members
    reading above real ones, RM;RN lower): the site page's top box and the consortium's
    headline table say what the flags mean for that number; no "leakage measured" badge."""
    flags = AuditFlags(saturated=False, c_lb_not_tight=True, above_real_nonmembers=True)
    result = make_result(
        [1.0, 1.25],
        [1.5, 1.75],
        nonmember_gain=0.0,
        rm_rn=[0.0, 0.0],
        side_flags={"member": flags, "nonmember": flags},
    )
    run = write_run(tmp_path / "f", n_sites=1, audits={0: ok_audit(0, result)})
    write_report_of(run)
    reading = _page_json(run, 0)["reading"]
    assert reading["verdict"] == "flagged"
    page = site_pages(run, 0).html_path.read_text()
    top = page[page.index('<div class="headline">') :]
    top = top[: top.index("</p></div>")]
    assert "leakage measured" not in top and "found evidence" not in top
    assert "flagged: not a measurement of leakage" in top
    assert "is not evidence that the shared model gives away your records" in top
    assert "it is not a measurement of leakage: the generated non-members read above real" in top
    assert "it may overstate the leakage" in top
    assert "The cross-checks with your real held-out records read RM;RN 0.250." in top
    table = (run / "report.md").read_text().split("## Headline")[1].split("\n\n")[1]
    (row,) = [line for line in table.splitlines() if line.startswith("| 0 ")]
    assert "flagged (c_lb not tight, above real non-members): it may overstate" in row
    assert "it is not a measurement of leakage" in row
    html = (run / "report.html").read_text()
    headline = html[html.index('id="headline"') :]
    assert 'class="flag-note">flagged (c_lb not tight' in headline[: headline.index("</table>")]


def _two_runs() -> ReplicateReport:
    """A replicate set of two runs with one site (the plot's inputs only)."""
    numbers = {m.key: over_runs([0.5, 0.75], m.bounds) for m in pooled()}
    runs = [ReplicateRun(s, f"seed-{s}", "complete", [], None) for s in (0, 1)]
    return ReplicateReport(SCHEMA_VERSION, None, 0, runs, [ReplicateSite(0, numbers)])


def _with_inversion(point: Any) -> Any:
    """The point with an inversion audit at every site (the plot's inputs only)."""
    entry = from_dict(
        InversionResult,
        {
            **dict.fromkeys(("round", "n_records", "n_dummies", "n_scored", "iterations"), 1),
            **dict.fromkeys(("quality_mean", "quality_median", "quality_max"), 0.5),
            **dict.fromkeys(("baseline_quality_mean", "baseline_quality_max"), 0.4),
            **dict.fromkeys(("share_rebuilt", "baseline_share_rebuilt", "match_loss"), 0.0),
            **dict.fromkeys(("psnr_mean", "baseline_psnr_mean", "seconds"), 10.0),
            "attack": "fedavg",
            "modality": "image",
            "measure": "ssim",
            "threshold": 0.6,
        },
    )
    sites = [_with_results(s, inversion=[entry]) if s.audit else s for s in point.sites]
    return dataclasses.replace(point, sites=sites)


def _with_updates(site: SiteReport, rm_rn: float = 0.5) -> SiteReport:
    """``site`` with global lines of rounds 1 and 2 and its updates of them at eps 1 and 2,
    the round-2 update's RM;RN at ``rm_rn``."""
    lines = by_round_lines([1, 2])
    iv = Interval(mean=rm_rn, std=0.0, low=rm_rn, high=rm_rn, n=5)
    updates = [
        dataclasses.replace(lines[0], rm_rn_eps_lb=iv, dp_epsilon=1.0),
        dataclasses.replace(lines[1], rm_rn_eps_lb=iv, dp_epsilon=2.0),
    ]
    return _with_results(site, by_round=lines, updates=updates)


def _with_results(site: SiteReport, **kinds: Any) -> SiteReport:
    """``site`` with its audit's results of these kinds replaced."""
    assert site.audit is not None
    results = dataclasses.replace(site.audit.results, **kinds)
    return dataclasses.replace(site, audit=dataclasses.replace(site.audit, results=results))


def test_a_site_page_shows_its_updates_beside_the_global_model_and_checks_them(
    consortium: Path,
) -> None:
    """The table pairs each update with its round's global model and epsilon; an RM;RN of a
    round above the epsilon after it is a violation of that round's guarantee (0.5 after
    round 1 is not, 1.5 after round 1 would be; the round-2 epsilon is 2)."""
    site = _with_updates(build_report(load_run_of(consortium)).sites[0])
    rows = site.update_rows()
    assert [(r.round, r.global_model and r.global_model.round) for r in rows] == [(1, 1), (2, 2)]
    table = md_table(UPDATE_COLUMNS, rows)
    assert table[2].startswith("| 1 |") and table[2].rstrip(" |").endswith("1.000")
    assert update_violations(site) == []
    # O(1) of the global model's round-2 line is 0.4 (by_round_lines): below 2.
    (flagged,) = update_violations(_with_updates(site, rm_rn=1.5))
    assert (flagged.bound, flagged.value, flagged.dp_epsilon) == ("round_1_update", 1.5, 1.0)
    assert "RM;RN two-sided of the round-1 update = 1.500" in flagged.message
    html = "".join(to_html(update_blocks(site)))
    assert 'id="updates-' in html and "Leakage of your own updates" in html
    assert update_blocks(_with_results(site, updates=[])) == []


def test_every_plot_has_axis_labels(
    consortium: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[tuple[str, Any]] = []
    for module in (plots, sweep_plots):
        monkeypatch.setattr(module, "_svg", lambda panels, **_: figures.append(panels) or "svg")
    report = build_report(load_run_of(consortium))
    results = {i: make_result([1.0, 1.25], [1.5, 1.75], rm_rn=[0.5, 0.75]) for i in range(4)}
    sweep = build_sweep_report(
        tmp_path,
        [SweepPoint("eps=8", {"dp.target_epsilon": 8}, run_files(consortium))],
        report_config,
    )
    calls = {
        "site_eps_plot": lambda: plots.site_eps_plot(report.sites),
        "roc_plot": lambda: plots.roc_plot(0, results[0].roc, 2),
        "precision_recall_plot": lambda: plots.precision_recall_plot(report.sites),
        "bound_recall_plot": lambda: plots.bound_recall_plot(report.sites),
        "training_plot": lambda: plots.training_plot(report.rounds),
        "by_round_plot": lambda: plots.by_round_plot(by_round_lines([1, 2])),
        "updates_plot": lambda: plots.updates_plot(_with_updates(report.sites[0]).update_rows()),
        "sweep_eps_plot": lambda: sweep_plots.sweep_eps_plot(sweep.points),
        "sweep_accuracy_plot": lambda: sweep_plots.sweep_accuracy_plot(sweep.points),
        "sweep_site_accuracy_plot": lambda: sweep_plots.sweep_site_accuracy_plot(sweep.points),
        "sweep_site_bounds_plot": lambda: sweep_plots.sweep_site_bounds_plot(sweep.points),
        "sweep_replicates_plot": lambda: sweep_plots.sweep_replicates_plot(
            [dataclasses.replace(p, replicates=_two_runs()) for p in sweep.points]
        ),
        "sweep_site_inversion_plot": lambda: sweep_plots.sweep_site_inversion_plot(
            [_with_inversion(p) for p in sweep.points]
        ),
    }
    public = {
        n
        for module in (plots, sweep_plots)
        for n in dir(module)
        if n.endswith("_plot") and not n.startswith("_")
    }
    assert public == set(calls)
    # Values carry their unit; x axes are categorical (site), counts (round) or labelled.
    unit = re.compile(r"\((nats|fraction|cross-entropy)|fraction of")
    for name, call in calls.items():
        figures.clear()
        assert call() == "svg", name
        (panels,) = figures
        assert panels, name
        for ax in panels:
            assert ax.xlabel, (name, ax.title)
            assert unit.search(ax.ylabel), (name, ax.ylabel)


def test_sweep_tables_are_sortable_inline(consortium: Path, tmp_path: Path) -> None:
    sweep = build_sweep_report(
        tmp_path, [SweepPoint("eps=8", {}, run_files(consortium))], report_config
    )
    page = render_sweep_html(sweep)
    assert page.count('<table class="sortable">') == 3  # points, sites, what each party can measure
    assert SORT_SCRIPT in page and page.count("<script>") == 1
    assert "<script src" not in page and "http" not in SORT_SCRIPT


def test_the_reading_says_what_the_baseline_knew_of_real_records(tmp_path: Path) -> None:
    """A trained generator's audit whose helper saw no public records says so in plain words
    (and one that saw none at all says that); a headline above real non-members is said
    once, with the side's flags."""
    result = make_result([1.0, 1.25], [1.5, 1.75], nonmember_gain=0.5, generator_kind="mst")
    two = result.two_sided
    assert two is not None
    above = AuditFlags(saturated=False, c_lb_not_tight=False, above_real_nonmembers=True)
    flagged = dataclasses.replace(result, two_sided=dataclasses.replace(two, flags=above))

    def sized(r: PanoramiaResult, public: int, own: int) -> PanoramiaResult:
        return dataclasses.replace(
            r, sizes=r.sizes | {"helper_real_public": public, "helper_real_site": own}
        )

    audits = {
        0: ok_audit(0, sized(flagged, 0, 123)),
        1: ok_audit(1, sized(result, 0, 0)),
        2: ok_audit(2, sized(result, 400, 123)),
    }
    run = write_run(tmp_path / "r", n_sites=3, audits=audits)
    write_report_of(run)
    meaning = {i: " ".join(_page_json(run, i)["reading"]["meaning"]) for i in range(3)}
    assert "only from 123 of your own records" in meaning[0]
    assert meaning[0].count(FLAG_PROSE["above_real_nonmembers"].plain) == 1
    assert "never saw a real record" in meaning[1]
    assert "only from 123" not in meaning[2] and "never saw a real record" not in meaning[2]
