"""Unit tests of the report writer on hand-built run directories with real PanoramiaResults."""

from __future__ import annotations

import csv
import html
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import (
    ERROR_TEXT,
    SECRET_SCORES,
    failed_audit,
    load_run_of,
    make_result,
    ok_audit,
    power_roc,
    run_files,
    write_report_of,
    write_run,
)

from panoramia_fl.audit.result import (
    EPS_TILDE_MEANING,
    TWO_SIDED_MEANING,
    AuditFlags,
    Interval,
    PanoramiaResult,
)
from panoramia_fl.audit.stats.roc import LOW_FPRS
from panoramia_fl.contracts.json_values import from_dict
from panoramia_fl.reporting import (
    SCHEMA_VERSION,
    ReportFiles,
    SweepPoint,
    build_report,
    write_sweep_report,
)
from panoramia_fl.reporting.assembly.writers import report_to_json_text, site_rows, write_rows
from panoramia_fl.reporting.pages.plots import roc_plot
from panoramia_fl.reporting.run.run_report import render_markdown
from panoramia_fl.reporting.schemas.schema import TPR_FPR_KEYS
from panoramia_fl.simulations.config_file import report_config

MEMBER_NOT_TIGHT = AuditFlags(
    saturated=False, c_lb_not_tight=True, reasons=["eps_tilde above its side's RM;RN"]
)
NM_SATURATED = AuditFlags(
    saturated=True, c_lb_not_tight=False, reasons=["c_lb near its side's ceiling"]
)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ReportFiles]:
    """4 sites: 0 ok with RM;RN/O(1)/scores, 1 ok saturated, 2 failed, 3 missing; reported once.

    Site 0's two-sided member side is not tight; site 1's non-member side is saturated.
    """
    run = write_run(
        tmp_path_factory.mktemp("runs") / "run-a",
        n_sites=4,
        dp=8.0,
        audits={
            0: ok_audit(
                0,
                make_result(
                    [1.0, 1.5],
                    [2.0, 2.5],
                    rm_rn=[1.25, 1.5],
                    o1=[0.5, 0.75],
                    scores=True,
                    capped=True,
                    side_flags={"member": MEMBER_NOT_TIGHT},
                ),
                dp=8.0,
            ),
            1: ok_audit(
                1,
                make_result(
                    [3.25, 3.5], [3.5, 3.75], saturated=True, side_flags={"nonmember": NM_SATURATED}
                ),
                dp=8.0,
            ),
            2: failed_audit(2),
        },
    )
    return run, write_report_of(run)


def _audit_file(run_dir: Path, site_id: int) -> PanoramiaResult:
    data = json.loads((run_dir / "audits" / f"site-{site_id}.json").read_text())
    return from_dict(PanoramiaResult, data["result"])


def _all_keys(obj: Any) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _all_keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _all_keys(v)}
    return set()


def _embedded_json(text: str) -> Any:
    match = re.search(
        r'<script type="application/json" id="report-data">\n(.*?)\n</script>', text, re.S
    )
    assert match, "embedded report data missing"
    return json.loads(match.group(1))


def _assert_self_contained(text: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "<link" not in text.lower()
    assert "<script src" not in text.lower()
    assert len(text.encode()) < 4_000_000


def _iv(iv: Interval | None) -> dict[str, Any] | None:
    return None if iv is None else {k: getattr(iv, k) for k in ("mean", "std", "low", "high", "n")}


def _flags(flags: AuditFlags) -> dict[str, Any]:
    return {
        "saturated": flags.saturated,
        "c_lb_not_tight": flags.c_lb_not_tight,
        "reasons": flags.reasons,
        "rm_rn_capped": flags.rm_rn_capped,
        "above_real_nonmembers": flags.above_real_nonmembers,
    }


def test_report_files_and_numbers_match_audits(written: tuple[Path, ReportFiles]) -> None:
    run_dir, files = written
    for path in (files.json_path, files.csv_path, files.md_path, files.html_path):
        assert path is not None and path.exists() and path.stat().st_size > 0
    report = json.loads(files.json_path.read_text())
    assert report["schema_version"] == SCHEMA_VERSION
    assert report["run"] == yaml.safe_load((run_dir / "config.yaml").read_text())
    assert report["partition"] == json.loads((run_dir / "partition.json").read_text())
    assert [r["round"] for r in report["rounds"]] == [1, 2, 3]
    assert report["rounds"][-1]["sites"]["1"]["dp_epsilon"] == 8.0
    sites = {s["site_id"]: s for s in report["sites"]}
    assert sorted(sites) == [0, 1, 2, 3]

    for sid in (0, 1):
        result, site = _audit_file(run_dir, sid), sites[sid]
        game = site["audit"]["one_sided"]
        assert site["status"] == "ok" and site["error"] is None
        for name in ("c_lb", "c_eps_lb", "eps_tilde"):
            assert game[name] == _iv(getattr(result.one_sided, name))
        assert game["ceiling"] == result.one_sided.ceiling
        assert game["headroom"] == result.one_sided.ceiling - result.one_sided.c_lb.mean
        assert game["flags"] == _flags(result.one_sided.flags)
        assert site["audit"]["generator_kind"] == "cgan"
        assert site["privacy"]["dp_epsilon"] == 8.0
        assert site["privacy"]["dp_epsilon_source"] == "audit"
        assert site["n_members"] == 600 + sid
        # eps_tilde = max(0, c_eps_lb - c_lb) holds in these inputs, so it holds in the report.
        assert result.one_sided.eps_tilde.mean == max(
            0.0, result.one_sided.c_eps_lb.mean - result.one_sided.c_lb.mean
        )
        means = {k: game[k]["mean"] for k in ("c_lb", "c_eps_lb", "eps_tilde")}
        assert means["eps_tilde"] == max(0.0, means["c_eps_lb"] - means["c_lb"])
    audit0, audit1 = sites[0]["audit"], sites[1]["audit"]
    assert (
        audit0["one_sided"]["rm_rn_eps_lb"]["mean"]
        == _audit_file(run_dir, 0).one_sided.rm_rn_eps_lb.mean
    )
    assert audit0["o1_eps_lb"]["high"] == _audit_file(run_dir, 0).o1_eps_lb.high
    assert audit1["one_sided"]["rm_rn_eps_lb"] is None and audit1["o1_eps_lb"] is None
    assert audit1["one_sided"]["flags"]["saturated"] is True

    # The failed site keeps its error and has no audit; the missing one is "missing".
    assert sites[2]["status"] == "failed" and sites[2]["error"] == ERROR_TEXT
    assert sites[2]["audit"] is None
    assert sites[2]["privacy"]["dp_epsilon"] == 8.0
    assert sites[2]["privacy"]["dp_epsilon_source"] == "metrics"
    assert sites[3]["status"] == "missing" and sites[3]["audit"] is None
    assert sites[3]["n_members"] == 603

    c = report["consortium"]
    assert (c["n_ok"], c["n_failed"], c["n_missing"], c["n_sites"]) == (2, 1, 1, 4)
    ok_eps = [s["audit"]["one_sided"]["eps_tilde"]["mean"] for s in (sites[0], sites[1])]
    assert c["max_eps_tilde"] == max(ok_eps)
    assert c["median_eps_tilde"] == pytest.approx(sum(ok_eps) / 2, abs=0)
    assert c["leakiest_site_id"] == 0
    assert c["flagged"]["saturated"] == [1]
    assert c["failed_sites"] == [2] and c["missing_sites"] == [3]
    assert c["flagged"]["rm_rn_capped"] == [0] and audit0["one_sided"]["flags"]["rm_rn_capped"]
    assert report["meaning"] == EPS_TILDE_MEANING
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert c["final_global_accuracy"] == last["global_accuracy"]


def test_csv_rows_match_json(written: tuple[Path, ReportFiles]) -> None:
    _, files = written
    report = json.loads(files.json_path.read_text())
    with files.csv_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["site_id"]) for r in rows] == [s["site_id"] for s in report["sites"]]
    compared = 0
    for row, site in zip(rows, report["sites"]):
        assert row["status"] == site["status"]
        assert row["error"] == (site["error"] or "")
        game = None if site["audit"] is None else site["audit"]["one_sided"]
        for name in ("c_lb", "c_eps_lb", "eps_tilde", "rm_rn_eps_lb"):
            for k in ("mean", "low", "high", "std", "n"):
                col = f"audit_one_sided_{name}_{k}"
                want = None if game is None or game[name] is None else game[name][k]
                if want is None:
                    assert row[col] == "", col
                else:
                    assert float(row[col]) == want, col  # exact: CSV holds repr(float)
                    compared += 1
        if game is not None:
            assert row["audit_one_sided_flags_saturated"] == str(game["flags"]["saturated"]).lower()
        assert float(row["privacy_dp_epsilon"]) == site["privacy"]["dp_epsilon"]
    assert compared > 20


def test_markdown_and_html_show_numbers_flags_and_meaning(
    written: tuple[Path, ReportFiles],
) -> None:
    _, files = written
    report = json.loads(files.json_path.read_text())
    md = files.md_path.read_text()
    page = files.html_path.read_text()
    iv = report["sites"][0]["audit"]["one_sided"]["eps_tilde"]
    assert f"{iv['mean']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}]" in md
    assert EPS_TILDE_MEANING in md
    assert "- sites: 4 (2 ok, 1 failed, 1 missing)" in md
    # The saturated site's flags and the missing site's status sit in their own rows.
    rows = md.splitlines()
    flags = "| one-sided: **saturated**; non-member side: **saturated** | ok |"
    assert any(row.startswith("| 1 |") and row.endswith(flags) for row in rows)
    assert any(row.startswith("| 3 |") and row.endswith("| - | missing |") for row in rows)
    assert "- site 3 (missing): no audit file in audits/" in md
    assert "\\|" in md  # the pipe in the error text is escaped in the table/list
    # HTML: exact numbers embedded, equal to report.json; the meaning sits in the page.
    assert _embedded_json(page) == report
    assert html.escape(EPS_TILDE_MEANING) in page
    assert 'class="saturated"' in page and 'class="failed"' in page
    assert f'title="{iv["mean"]!r}"' in page
    # 4 plots plus one log-ROC per ok site; the explanation block once, folded.
    assert page.count('<div class="plot" role="img"') == 4 + 2
    for sid in (0, 1):
        assert page.count(f'aria-label="log-scale ROC, site {sid}"') == 1
    assert 'aria-label="log-scale ROC, site 2"' not in page
    assert page.count('<details class="meaning">') == 1
    assert page.count("What eps_tilde means and does not mean") == 1
    assert page.count(html.escape(TWO_SIDED_MEANING)) == 1
    # The headline table comes before the explanation and the full tables.
    assert page.index('id="headline"') < page.index('class="meaning"') < page.index("Per-site")
    # Error text is escaped everywhere, never injected.
    assert "<script>alert" not in page
    assert html.escape(ERROR_TEXT.split("\n")[0]) in page
    _assert_self_contained(page)


SIDE_KEYS = {
    "c_lb",
    "c_eps_lb",
    "eps_tilde",
    "ceiling",
    "headroom",
    "flags",
    "rm_rn_eps_lb",
    "rm_rn_ceiling",
}


def test_two_sided_roc_and_levels_in_json(written: tuple[Path, ReportFiles]) -> None:
    run_dir, files = written
    report = json.loads(files.json_path.read_text())
    sites = {s["site_id"]: s for s in report["sites"]}
    for sid in (0, 1):
        result, audit = _audit_file(run_dir, sid), sites[sid]["audit"]
        two = result.two_sided
        assert two is not None
        got_two = audit["two_sided"]
        assert got_two["eps_tilde"] == _iv(two.eps_tilde)
        assert got_two["side"] == two.side == "nonmember"
        # The one-sided value stays beside it, unchanged.
        assert audit["one_sided"]["eps_tilde"]["mean"] == result.one_sided.eps_tilde.mean
        assert result.one_sided.eps_tilde.mean < two.eps_tilde.mean
        assert got_two["beta"] == two.beta == result.beta / 4
        for side in ("member", "nonmember"):
            got, want = got_two[side], getattr(two, side)
            assert set(got) == SIDE_KEYS
            for name in ("c_lb", "c_eps_lb", "eps_tilde", "rm_rn_eps_lb"):
                assert got[name] == _iv(getattr(want, name)), (side, name)
            assert got["ceiling"] == want.ceiling
            assert got["headroom"] == want.ceiling - want.c_lb.mean
            assert got["rm_rn_ceiling"] == want.rm_rn_ceiling
            assert got["flags"] == _flags(want.flags)
        assert got_two["rm_rn_eps_lb"] == _iv(two.rm_rn_eps_lb)
        for scorer in ("baseline", "mia"):
            tpr = result.roc[scorer].tpr_at_fpr
            assert audit["scorers"][scorer]["tpr_at_fpr"] == {
                "0.01": tpr["0.01"],
                "0.001": tpr["0.001"],
            }
        assert audit["levels"] == result.levels
        assert audit["levels"]["two_sided_each"] == result.beta / 4
        for rep, want_rep in zip(audit["repeats"], result.repeats):
            game = want_rep.two_sided
            assert rep["eps_tilde_two_sided"] == game.eps_tilde
            assert rep["member_c_lb"] == game.member.c_lb
            assert rep["member_c_eps_lb"] == game.member.c_eps_lb
            assert rep["nonmember_c_lb"] == game.nonmember.c_lb
            assert rep["nonmember_c_eps_lb"] == game.nonmember.c_eps_lb
            assert rep["c_lb"] == want_rep.one_sided.c_lb  # one-sided per repeat, unchanged
    # RM;RN's ROC exists only where the run had real non-members (site 0).
    roc0 = _audit_file(run_dir, 0).roc["rm_rn"]
    assert sites[0]["audit"]["scorers"]["rm_rn"] == {"auc": roc0.auc, "tpr_at_fpr": roc0.tpr_at_fpr}
    assert "rm_rn" not in sites[1]["audit"]["scorers"]
    assert sites[1]["audit"]["two_sided"]["rm_rn_eps_lb"] is None
    assert "rm_rn" not in sites[1]["audit"]["levels"]

    c = report["consortium"]
    two0 = sites[0]["audit"]["two_sided"]["eps_tilde"]["mean"]
    assert c["max_eps_tilde_two_sided"] == two0
    assert c["leakiest_site_id_two_sided"] == 0
    none = {"saturated": [], "c_lb_not_tight": [], "rm_rn_capped": [], "above_real_nonmembers": []}
    assert c["two_sided_flagged"] == {
        # results written without the headline's own flags (before they existed)
        "headline": none,
        "member": none | {"c_lb_not_tight": [0]},
        "nonmember": none | {"saturated": [1]},
    }
    assert c["flagged"]["saturated"] == [1] and c["flagged"]["c_lb_not_tight"] == []
    assert report["two_sided_meaning"] == TWO_SIDED_MEANING


def test_csv_has_two_sided_and_low_fpr_columns(written: tuple[Path, ReportFiles]) -> None:
    _, files = written
    report = json.loads(files.json_path.read_text())
    with files.csv_path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        header = reader.fieldnames or []
    assert len(set(header)) == len(header)
    audit0, row0 = report["sites"][0]["audit"], rows[0]
    two = audit0["two_sided"]
    assert float(row0["audit_two_sided_eps_tilde_mean"]) == two["eps_tilde"]["mean"]
    assert float(row0["audit_two_sided_eps_tilde_low"]) == two["eps_tilde"]["low"]
    assert row0["audit_two_sided_side"] == "nonmember"
    assert float(row0["audit_two_sided_rm_rn_eps_lb_mean"]) == two["rm_rn_eps_lb"]["mean"]
    for side in ("member", "nonmember"):
        for name in ("c_lb", "c_eps_lb"):
            col = f"audit_two_sided_{side}_{name}_mean"
            assert float(row0[col]) == two[side][name]["mean"]
        assert float(row0[f"audit_two_sided_{side}_ceiling"]) == two[side]["ceiling"]
    assert row0["audit_two_sided_member_flags_c_lb_not_tight"] == "true"
    assert row0["audit_two_sided_nonmember_flags_c_lb_not_tight"] == "false"
    reasons = two["member"]["flags"]["reasons"]
    assert row0["audit_two_sided_member_flags_reasons"] == "; ".join(reasons) != ""
    for scorer in ("baseline", "mia", "rm_rn"):
        got = audit0["scorers"][scorer]
        assert float(row0[f"audit_scorers_{scorer}_auc"]) == got["auc"]
        for key in ("0.01", "0.001"):
            col = f"audit_scorers_{scorer}_tpr_at_fpr_{key}"
            assert float(row0[col]) == got["tpr_at_fpr"][key]
    assert rows[1]["audit_scorers_rm_rn_tpr_at_fpr_0.01"] == ""  # no real non-members at site 1
    assert all(v == "" for k, v in rows[2].items() if k.startswith("audit_"))  # failed site


def test_markdown_shows_two_sided_flags_per_side_and_low_fpr(
    written: tuple[Path, ReportFiles],
) -> None:
    _, files = written
    report = json.loads(files.json_path.read_text())
    md = files.md_path.read_text()
    page = files.html_path.read_text()
    audit0 = report["sites"][0]["audit"]
    iv = audit0["two_sided"]["eps_tilde"]
    two_sided = f"{iv['mean']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}] (non-member)"
    assert two_sided in md and two_sided in page
    one = audit0["one_sided"]["eps_tilde"]
    assert f"{one['mean']:.3f} [{one['low']:.3f}, {one['high']:.3f}]" in md
    assert TWO_SIDED_MEANING in md and md.count("## What eps_tilde means") == 1
    assert "two-sided at beta/4 each" not in md  # the levels line says it in full:
    assert "are at beta/4 each" in md and "O(1) is at beta" in md
    assert "member side: **c_lb not tight**" in md
    assert "non-member side: **saturated**" in md
    assert "site 1 (non-member side): c_lb near its side's ceiling" in md
    assert "two-sided game, non-member side: saturated sites: 1;" in md
    assert "two-sided game, member side: saturated sites: none; c_lb not tight: 0;" in page
    for header in ("AUC b / MIA / RM;RN", "TPR@1% FPR b / MIA / RM;RN", "TPR@0.1% FPR"):
        assert header in md and header in page
    tpr = audit0["scorers"]["mia"]["tpr_at_fpr"]["0.01"]
    base = audit0["scorers"]["baseline"]["tpr_at_fpr"]["0.01"]
    assert f"{base:.3f} / {tpr:.3f} / " in md
    assert "bound levels, site 0: c_lb 0.025" in md
    assert "member: c_lb not tight" in page and "non-member: saturated" in page


def test_tpr_keys_match_the_audit_and_empty_roc_draws_nothing() -> None:
    assert tuple(f"{level:g}" for level in LOW_FPRS) == TPR_FPR_KEYS == ("0.01", "0.001")
    assert roc_plot(0, {}, 1) is None
    assert roc_plot(0, {"mia": power_roc(0.5)}, 1) is not None


def test_per_record_scores_never_leave_audits(written: tuple[Path, ReportFiles]) -> None:
    run_dir, files = written
    raw = (run_dir / "audits" / "site-0.json").read_text()
    assert repr(SECRET_SCORES[0]) in raw  # the input really carries scores
    for path in (files.json_path, files.csv_path, files.md_path, files.html_path):
        text = path.read_text()
        for value in SECRET_SCORES:
            assert repr(value) not in text, path.name
            assert f"{value:.3f}" not in text, path.name
    assert "scores" not in _all_keys(json.loads(files.json_path.read_text()))


def test_report_is_deterministic(written: tuple[Path, ReportFiles], tmp_path: Path) -> None:
    # Same inputs -> same bytes (json, csv, md).
    run_dir, files = written
    inputs = load_run_of(run_dir)
    report = build_report(inputs)
    assert report_to_json_text(report) == files.json_path.read_text()
    assert render_markdown(report, inputs.config.name) == files.md_path.read_text()
    again = write_rows(tmp_path / "again.csv", site_rows(report.sites))
    assert again.read_bytes() == files.csv_path.read_bytes()


def test_sweep_report_two_points_and_an_incomplete_one(tmp_path: Path) -> None:
    dp_run = write_run(
        tmp_path / "runs" / "dp4",
        n_sites=2,
        dp=4.0,
        accuracy=0.7,
        audits={
            i: ok_audit(
                i, make_result([1.0, 1.5], [1.25, 1.75], rm_rn=[0.5, 0.75], o1=[0.25, 0.5]), dp=4.0
            )
            for i in range(2)
        },
    )
    plain_result = make_result([1.0, 1.5], [2.5, 3.0])
    plain_run = write_run(
        tmp_path / "runs" / "nodp",
        n_sites=2,
        accuracy=0.9,
        audits={0: ok_audit(0, plain_result)},  # site 1 missing
    )
    points = [
        SweepPoint("eps=4", {"dp.enabled": True, "dp.epsilon": 4.0}, run_files(dp_run)),
        SweepPoint("no DP", {"dp.enabled": False}, run_files(plain_run)),
        SweepPoint("eps=1", {"dp.epsilon": 1.0}, run_files(tmp_path / "runs" / "never-ran")),
    ]
    files = write_sweep_report(tmp_path / "sweep", points, report_config, write_point_reports=True)
    assert files.json_path.exists() and files.html_path.exists()
    sweep = json.loads(files.json_path.read_text())
    by_label = {p["label"]: p for p in sweep["points"]}
    assert list(by_label) == ["eps=4", "no DP", "eps=1"]

    dp = by_label["eps=4"]
    assert dp["status"] == "complete" and dp["private"] is True
    assert dp["theoretical_eps"] == 4.0
    assert dp["global_accuracy"] == pytest.approx(0.7, abs=1e-12)
    want = _audit_file(dp_run, 1)
    audit = dp["sites"][1]["audit"]
    assert audit["one_sided"]["eps_tilde"] == _iv(want.one_sided.eps_tilde)
    assert audit["one_sided"]["c_lb"] == _iv(want.one_sided.c_lb)
    assert audit["one_sided"]["rm_rn_eps_lb"] == _iv(want.one_sided.rm_rn_eps_lb)
    assert audit["o1_eps_lb"] == _iv(want.o1_eps_lb)
    assert dp["sites"][1]["privacy"]["dp_epsilon"] == 4.0
    assert sweep["schema_version"] == SCHEMA_VERSION
    assert audit["two_sided"]["eps_tilde"] == _iv(want.two_sided.eps_tilde)
    assert audit["two_sided"]["side"] == "nonmember"
    assert audit["two_sided"]["rm_rn_eps_lb"] == _iv(want.two_sided.rm_rn_eps_lb)
    assert dp["max_eps_tilde_two_sided"] == want.two_sided.eps_tilde.mean

    plain = by_label["no DP"]
    assert plain["status"] == "incomplete" and plain["private"] is False
    assert plain["theoretical_eps"] is None
    assert plain["global_accuracy"] == pytest.approx(0.9, abs=1e-12)
    assert [s["status"] for s in plain["sites"]] == ["ok", "missing"]
    assert (
        plain["sites"][0]["audit"]["one_sided"]["eps_tilde"]["mean"]
        == plain_result.one_sided.eps_tilde.mean
    )
    assert any("site 1" in p for p in plain["problems"])
    assert by_label["eps=1"]["status"] == "incomplete" and by_label["eps=1"]["sites"] == []
    assert (dp_run / "report.html").exists() and dp["report_html"].endswith("report.html")

    page = files.html_path.read_text()
    _assert_self_contained(page)
    assert html.escape(EPS_TILDE_MEANING) in page
    assert "inf (no DP)" in page and "never-ran" in page
    iv = audit["two_sided"]["eps_tilde"]
    assert "eps_tilde two-sided [95% CI] (side)" in page
    assert f"{iv['mean']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}] (non-member)" in page
    assert page.count('class="meaning"') == 1
    # Two consortium-wide plots, per site accuracy and bounds against the accountant, and
    # what each party can measure.
    assert page.count('<div class="plot" role="img"') == 5
    assert _embedded_json(page) == sweep
    assert math.isclose(sweep["points"][0]["max_eps_tilde"], 0.25)
