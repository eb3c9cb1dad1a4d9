"""The per-site privacy ledger on hand-built run directories: record- and client-level
accountant epsilons, canaries, the ordering check and the canary banner."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from builders import (
    LEDGER_ACCOUNTANT,
    QUALITY,
    canary_block,
    client_dp_accounting,
    flat,
    make_result,
    ok_audit,
    run_files,
    set_config,
    site_pages,
    with_quality,
    write_report_of,
    write_run,
)

from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.run_files import CLIENT_DP_FILE, NOISE_NOTES
from panoramia_fl.contracts.run_log import ClientDPFile, ClientDPSite, RoundRecord, SiteRound
from panoramia_fl.reporting import (
    SCHEMA_VERSION,
    SweepPoint,
    build_report,
    load_run,
    write_sweep_report,
)
from panoramia_fl.reporting.assembly.inputs import SiteAuditRead
from panoramia_fl.reporting.numbers.formatting import fmt_outside
from panoramia_fl.reporting.numbers.meanings import NOTES, Note
from panoramia_fl.reporting.numbers.report_parts import lower_bounds, site_metrics
from panoramia_fl.reporting.privacy.privacy_ledger import released_model_epsilon, site_privacy
from panoramia_fl.reporting.run.run_report import render_markdown
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.config_file import privacy_settings, report_config
from panoramia_fl.simulations.experiment_config import DPConfig

CANARY_BANNER = "trained with 200 canaries per site: this model is not the plain model"


def _add_client_metrics(run: Path, eps: dict[int, float]) -> None:
    """metrics.jsonl rounds gain dp_epsilon_client (cumulative) beside dp_epsilon."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    out = []
    for i, line in enumerate(lines, start=1):
        rec = json.loads(line)
        for sid, site in rec["sites"].items():
            site["dp_epsilon_client"] = eps[int(sid)] * i / len(lines)
        out.append(json.dumps(rec))
    (run / "metrics.jsonl").write_text("\n".join(out) + "\n")


@pytest.fixture(scope="module")
def ledger_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Record- and client-level DP ("both"), 200 canaries per site, three sites.

    Site 0: record eps 4 is the smaller guarantee; every bound below it.
    Site 1: client level implies 3.0 per record, below its record eps 50; eps_tilde reads
    above 3.0 (a flag), every lower bound below it.
    Site 2: record eps 1.0; its canary audit reads 3.0 (a violation).
    Best one-run lower bounds: site 0 the canary's f-DP 2.4, site 1 O(1)'s f-DP 1.5, site 2
    the canary's Steinke 3.0 (its audit file predates f-DP).
    """
    results = {
        0: make_result(
            [1.0, 1.25],
            [1.5, 1.75],
            rm_rn=[0.5, 0.75],
            o1=[0.25, 0.5],
            o1_fdp=[(0.5, 0.1), (0.75, 0.2)],
        ),
        1: make_result(
            [0.5, 0.5],
            [4.0, 4.25],
            rm_rn=[1.0, 1.25],
            o1=[0.5, 0.75],
            o1_fdp=[(1.25, 0.3), (1.75, 0.5)],
        ),
        2: make_result([1.0, 1.0], [1.25, 1.25], o1=[0.125, 0.25], nonmember_gain=0.0),
    }
    record_eps = {0: 4.0, 1: 50.0, 2: 1.0}
    canaries = {
        0: canary_block(1.9, 4.2, fdp=(2.4, 0.6)),
        1: canary_block(1.0, 2.5, fdp=(0.9, 0.25)),
        2: canary_block(3.0, 5.0),
    }
    run = write_run(
        tmp_path_factory.mktemp("ledger") / "run",
        n_sites=3,
        dp=4.0,
        audits={
            sid: ok_audit(sid, with_quality(r), dp=record_eps[sid]) | {"canary": canaries[sid]}
            for sid, r in results.items()
        },
    )
    set_config(
        run,
        level="both",
        enabled=True,
        target_epsilon=4.0,
        client={"noise_multiplier": 1.0, "clipping": "fixed", "clipping_norm": 1.0},
        canaries=200,
    )
    _add_client_metrics(run, {0: 31.2, 1: 30.0, 2: 29.0})
    (run / CLIENT_DP_FILE).write_text(
        json.dumps(client_dp_accounting({0: (31.2, 118.0), 1: (1.5, 3.0), 2: (29.0, 110.0)}))
    )
    write_report_of(run)
    return run


def _report(run: Path) -> dict[str, Any]:
    return json.loads((run / "report.json").read_text())


def _sites(run: Path) -> dict[int, dict[str, Any]]:
    return {s["site_id"]: flat(s) for s in _report(run)["sites"]}


def _violation_message(run: Path) -> str:
    (violation,) = [v for s in _sites(run).values() for v in s["bound_violations"]]
    return violation["message"]


def test_ledger_rows_and_values(ledger_run: Path) -> None:
    report = _report(ledger_run)
    assert report["schema_version"] == SCHEMA_VERSION
    assert report["dp_level"] == "both" and report["canaries"] == 200
    assert report["client_dp"]["accountant"] == LEDGER_ACCOUNTANT
    assert report["client_dp"]["sites"]["1"]["epsilon_record"] == 3.0
    sites = _sites(ledger_run)
    assert sorted(sites) == [0, 1, 2]

    s0, row0 = sites[0], report["sites"][0]["privacy"]
    assert s0["dp_epsilon_client"] == 31.2 and s0["dp_epsilon_client_record"] == 118.0
    assert s0["dp_epsilon"] == 4.0 and s0["dp_epsilon_source"] == "audit"
    assert s0["dp_delta"] == 1e-5
    assert s0["canaries"] == 200 and s0["canary_eps_lb"] == 1.9
    assert s0["canary_eps_interval"] == [1.9, 4.2]
    assert s0["canary"]["correct"] == 58 and s0["canary"]["kind"] == "noise_image"
    assert s0["bound_violations"] == [] and s0["eps_tilde_above_accountant"] is False

    assert row0["record_accountant"] == "Opacus RDP"
    assert row0["client_accountant"] == LEDGER_ACCOUNTANT
    assert row0["client_sampling"] == "no-amplification"
    assert row0["client_neighboring_relation"] == "add-or-remove-one site"
    assert row0["client_delta"] == 1e-5 and row0["client_rounds"] == 3
    assert report["sites"][0]["audit"]["quality"] == QUALITY

    # Site 1: against the server only its own DP-SGD counts, even where client-level DP
    # implies a smaller epsilon for readers of the global model (which the bounds check).
    assert sites[1]["dp_epsilon"] == 50.0 and sites[1]["dp_epsilon_source"] == "audit"
    assert sites[1]["dp_epsilon_client_record"] == 3.0
    assert sites[1]["eps_tilde_above_accountant"] is True  # against the released model's 3.0
    # The ledger's column says whom each epsilon holds against.
    assert "against the server (record level; distributed" in (ledger_run / "report.md").read_text()
    assert report["noise"] == NOISE_NOTES["seeded"]  # no noise.json: a simulation

    # The markdown and html show the ledger table with the accountants.
    md = (ledger_run / "report.md").read_text()
    page = (ledger_run / "report.html").read_text()
    for text in (md, page):
        assert "Privacy ledger" in text
        assert "4.000 (Opacus RDP; delta 1e-05)" in text
        assert f"31.200 ({LEDGER_ACCOUNTANT}; no-amplification; add-or-remove-one site" in text
        assert "1.900 [1.900, 4.200] (200 canaries)" in text
        assert "0.800 / 0.810" in text  # accuracy global / site holdout
        assert "0.125 / 0.562" in text  # f loss members / holdout
    assert page.index('id="ledger"') > page.index("<h2>Per-site audit</h2>")
    # The headline's record-level guarantee is the one that applies: site 1's is the one
    # client-level DP implies, not its DP-SGD's 50.
    headline = md[: md.index("Privacy ledger")]
    assert "| 3.00 (implied by client-level DP) |" in headline and "| 50.00 " not in headline


def test_best_lower_bound_is_the_largest_one_run_bound_and_names_it(ledger_run: Path) -> None:
    sites = _sites(ledger_run)
    assert sites[0]["canary_eps_lb_fdp"] == 2.4 and sites[0]["canary_fdp_mu"] == 0.6
    assert sites[0]["o1_eps_lb_fdp"] == pytest.approx(0.625) and sites[0]["fdp_delta"] == 1e-5
    want = {
        0: (2.4, "canary audit: f-DP, Gaussian (Mahloujifar et al. 2025), delta = 1e-05"),
        1: (1.5, "O(1): f-DP, Gaussian (Mahloujifar et al. 2025), delta = 1e-05"),
        2: (3.0, "canary audit: Steinke et al. (2023), delta = 0"),
    }
    for sid, (value, method) in want.items():
        assert sites[sid]["best_eps_lb"] == pytest.approx(value), sid
        assert sites[sid]["best_eps_lb_method"] == method, sid
    assert sites[2]["canary_eps_lb_fdp"] is None  # an older canary block reads as absent
    md = (ledger_run / "report.md").read_text()
    page = (ledger_run / "report.html").read_text()
    for text in (md, page):
        assert "best lower bound (method)" in text
        assert "2.400 (canary audit: f-DP, Gaussian (Mahloujifar et al. 2025)" in text
        assert "2.400 (GDP mu 0.600, delta 1e-05)" in text  # the canary's f-DP column
    site0 = site_pages(ledger_run, 0).html_path.read_text()
    assert "best lower bound" in site0 and "2.400 (canary audit: f-DP" in site0
    assert "O(1), f-DP" in site0 and "0.625 [" in site0


def test_an_fdp_bound_above_the_guarantee_is_a_violation(tmp_path: Path) -> None:
    """The f-DP readings join the ordering check: O(1)'s f-DP mean 1.5 is above DP eps 1.2
    while its Steinke value (0.5) is not."""
    result = make_result(
        [1.0, 1.0], [1.0, 1.0], rm_rn=[0.25, 0.25], o1=[0.5, 0.5], o1_fdp=[(1.5, 0.4)] * 2
    )
    run = write_run(tmp_path / "r", n_sites=1, dp=1.2, audits={0: ok_audit(0, result, dp=1.2)})
    write_report_of(run)
    site = _sites(run)[0]
    (violation,) = [v for v in site["bound_violations"] if v["bound"].startswith("o1")]
    assert violation["bound"] == "o1_eps_lb_fdp" and violation["level"] == 0.05
    assert "O(1) f-DP eps lower bound = 1.500" in violation["message"]
    assert site["best_eps_lb"] == 1.5


def test_csv_and_ledger_csv_carry_the_ledger(ledger_run: Path) -> None:
    sites = _sites(ledger_run)
    with (ledger_run / "report.csv").open(newline="") as fh:
        rows = {int(r["site_id"]): r for r in csv.DictReader(fh)}
    for sid, site in sites.items():
        row = rows[sid]
        for col, name in (
            ("privacy_dp_epsilon", "dp_epsilon"),
            ("privacy_client_epsilon", "dp_epsilon_client"),
            ("privacy_client_epsilon_record", "dp_epsilon_client_record"),
            ("privacy_dp_delta", "dp_delta"),
            ("privacy_canary_eps_lb", "canary_eps_lb"),
        ):
            assert float(row[col]) == site[name], (sid, col)
        assert int(row["privacy_canaries"]) == 200
        assert row["privacy_canary_eps_interval"] == "; ".join(
            map(repr, site["canary_eps_interval"])
        )
    assert "canary audit eps lower bound = 3.000" in rows[2]["checks_bound_violations"]
    assert rows[0]["checks_bound_violations"] == ""
    assert rows[1]["checks_eps_tilde_above_accountant"].startswith(NOTES[Note.EPS_TILDE_ABOVE])

    with (ledger_run / "ledger.csv").open(newline="") as fh:
        ledger = list(csv.DictReader(fh))
    assert [int(r["site_id"]) for r in ledger] == [0, 1, 2]
    assert ledger[0]["client_accountant"] == LEDGER_ACCOUNTANT
    assert ledger[0]["dp_level"] == "both" and ledger[0]["record_accountant"] == "Opacus RDP"
    assert float(ledger[1]["dp_epsilon"]) == 50.0  # record-level alone
    assert float(ledger[0]["global_accuracy"]) == pytest.approx(0.8)
    assert ledger[0]["canary_eps_interval"] == "1.9; 4.2"
    assert ledger[2]["checks_bound_violations"].startswith("site 2: canary audit")
    # The training log's lines predate ``sent``: the count and the loss each site sent.
    assert ledger[0]["outside_guarantee"] == "num-examples; train-loss"
    outside = "num-examples, train-loss (declared size: its own member count)"
    assert outside in (ledger_run / "report.md").read_text()
    assert outside in site_pages(ledger_run, 0).html_path.read_text()


def _audit(site_id: int, record: float | None) -> SiteAuditRead:
    return SiteAuditRead(
        site_id=site_id,
        status="ok",
        n_members=10,
        n_holdout=5,
        dp_epsilon=record,
        elapsed_s=1.0,
        results=SiteResults(),
    )


@pytest.mark.parametrize(
    ("record", "client_record", "want", "source", "released"),
    [
        (2.0, None, 2.0, "audit", 2.0),
        (None, 5.0, None, None, 5.0),
        (2.0, 5.0, 2.0, "audit", 2.0),
        (7.0, 5.0, 7.0, "audit", 5.0),
        (None, None, None, None, None),
    ],
)
def test_dp_epsilon_against_the_server_is_the_record_level_one_alone(
    record: float | None,
    client_record: float | None,
    want: float | None,
    source: str | None,
    released: float | None,
) -> None:
    """The server sees each site's update before client-level noise: only the site's own
    DP-SGD protects its records against it. The smaller of the two holds only against
    readers of the released model (what the measured bounds are checked against)."""
    ledger = ClientDPFile(
        schema_version=1,
        accountant=LEDGER_ACCOUNTANT,
        noise_multiplier=1.0,
        clipping="fixed",
        clipping_side="server",
        clipping_norm=1.0,
        delta=2e-5,
        population_size=1,
        sites_per_round=1,
        sampling="no-amplification",
        neighboring_relation="add-or-remove-one site",
        rounds_done=2,
        sites={"0": ClientDPSite(rounds=[1, 2], epsilon=9.0, epsilon_record=client_record)},
    )
    settings = privacy_settings({"dp": {"level": "both", "delta": 1e-5}})
    got = site_privacy(0, _audit(0, record), [], settings, ledger)
    assert got.dp_epsilon == want == record and got.dp_epsilon_source == source
    assert got.client_epsilon_record == client_record
    assert got.client_epsilon == 9.0
    assert released_model_epsilon(got) == released
    assert got.dp_delta == 1e-5  # the record-level guarantee's delta


def test_record_and_client_epsilons_from_metrics_when_files_lack_them() -> None:
    rounds = [
        RoundRecord(
            round=r,
            global_loss=None,
            global_accuracy=None,
            elapsed_s=None,
            sites={
                "0": SiteRound(
                    train_loss=1.0, dp_epsilon=0.5 * r, num_examples=10, dp_epsilon_client=2.0 * r
                )
            },
        )
        for r in (1, 2)
    ]
    settings = privacy_settings({"dp": {"level": "both", "delta": 1e-5}})
    got = site_privacy(0, _audit(0, None), rounds, settings, None)
    assert got.dp_epsilon == 1.0 and got.dp_epsilon_source == "metrics"
    assert got.client_epsilon == 4.0 and got.client_epsilon_record is None


def test_a_lower_bound_above_the_guarantee_is_a_violation(
    ledger_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _report(ledger_run)
    sites = _sites(ledger_run)
    (violation,) = sites[2]["bound_violations"]
    assert violation["bound"] == "canary_eps_lb"
    assert violation["value"] == 3.0 and violation["dp_epsilon"] == 1.0
    assert violation["level"] == 0.05 and "1 in 20" in violation["message"]
    assert sites[0]["bound_violations"] == [] and sites[1]["bound_violations"] == []
    assert report["consortium"]["bound_violation_sites"] == [2]

    # Loud at the top of report.md / report.html and of the site's own page.
    md = (ledger_run / "report.md").read_text()
    assert md.index("BOUND VIOLATION") < md.index("## What eps_tilde means")
    assert violation["message"] in md
    page = (ledger_run / "report.html").read_text()
    assert page.index('<div class="violation" role="alert">') < page.index("What eps_tilde means")
    assert "BOUND VIOLATION" in page and 'tr class="violation"' in page
    site2 = site_pages(ledger_run, 2).html_path.read_text()
    assert site2.index('class="violation"') < site2.index("<h2>What was measured</h2>")
    reading = json.loads(site_pages(ledger_run, 2).json_path.read_text())["reading"]
    assert "signals a bug" in " ".join(reading["meaning"])
    site0 = site_pages(ledger_run, 0).html_path.read_text()
    assert "BOUND VIOLATION" not in site0 and 'class="violation"' not in site0

    # ... and a line on stderr from the report command.
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.yaml", "partition.json", "metrics.jsonl", CLIENT_DP_FILE):
        (copy / name).write_text((ledger_run / name).read_text())
    (copy / "audits").mkdir()
    for path in (ledger_run / "audits").iterdir():
        (copy / "audits" / path.name).write_text(path.read_text())
    assert cli_main(["report", str(copy)]) == 0
    err = capsys.readouterr().err
    assert err.count("BOUND VIOLATION") == 1 and "site 2: canary audit" in err
    assert cli_main(["report", str(copy), "--site", "2"]) == 0
    assert "BOUND VIOLATION" in capsys.readouterr().err
    assert cli_main(["report", str(copy), "--site", "0"]) == 0
    assert "BOUND VIOLATION" not in capsys.readouterr().err
    # The writer returns them: `panoramia-fl run` prints what its runner hands up.
    (warning,) = write_report_of(copy).warnings
    assert warning == f"BOUND VIOLATION: {violation['message']}"


def test_rm_rn_on_either_side_is_checked(tmp_path: Path, capsys: Any) -> None:
    # RM;RN one-sided 1.0 and member side 1.0 are below 1.1; the non-member side (and so
    # the two-sided value) reads 1.25, above.
    result = make_result([1.0, 1.0], [1.0, 1.0], rm_rn=[1.0, 1.0], nonmember_gain=0.0)
    run = write_run(tmp_path / "r", n_sites=1, dp=1.1, audits={0: ok_audit(0, result, dp=1.1)})
    files = write_report_of(run)
    site = _sites(run)[0]
    assert {v["bound"] for v in site["bound_violations"]} == {
        "rm_rn_eps_lb_two_sided",
        "rm_rn_eps_lb_nonmember",
    }
    assert len(files.warnings) == 2 and all("BOUND VIOLATION" in w for w in files.warnings)

    # Without DP nothing is checked, whatever the bounds read.
    plain = write_run(tmp_path / "p", n_sites=1, audits={0: ok_audit(0, result)})
    assert write_report_of(plain).warnings == []
    assert _sites(plain)[0]["bound_violations"] == []
    assert "BOUND VIOLATION" not in (plain / "report.md").read_text()
    assert 'class="violation"' not in (plain / "report.html").read_text()


def test_every_bound_of_the_registry_is_checked_once() -> None:
    """A metric with a guarantee (every kind's included) is in the ordering check's list,
    once, with its level."""
    checked = [m for m in site_metrics() if m.checked is not None]
    bounds = lower_bounds()
    assert sorted(m.key for m in bounds) == sorted(m.key for m in checked)
    assert len(set(m.key for m in bounds)) == len(bounds)
    assert all(m.level is not None for m in bounds)
    assert {"mechanism_eps_lb_fdp", "attribute_eps_lb"} <= {m.key for m in bounds}


def test_eps_tilde_above_the_guarantee_is_a_flag_not_a_violation(ledger_run: Path) -> None:
    report = _report(ledger_run)
    site = _sites(ledger_run)[1]
    # Checked against the released model's epsilon: client-level DP's 3.0 per record.
    assert site["eps_tilde"] > site["dp_epsilon_client_record"] == 3.0
    assert site["bound_violations"] == []
    assert site["eps_tilde_above_accountant"] is True
    reason = site["eps_tilde_above_accountant_reason"]
    assert reason.startswith(NOTES[Note.EPS_TILDE_ABOVE]) and "> DP eps 3.000" in reason
    assert report["consortium"]["eps_tilde_above_accountant_sites"] == [1]
    assert _sites(ledger_run)[0]["eps_tilde_above_accountant"] is False
    md = (ledger_run / "report.md").read_text()
    assert f"site 1: {NOTES[Note.EPS_TILDE_ABOVE]}" in md
    assert "eps_tilde is a measurement, not a bound" in (
        site_pages(ledger_run, 1).html_path.read_text()
    )
    reading = json.loads(site_pages(ledger_run, 1).json_path.read_text())["reading"]
    meaning = " ".join(reading["meaning"])
    assert "measurement, not a bound" in meaning and "signals a bug" not in meaning


def test_canary_banner_iff_canaries(ledger_run: Path, tmp_path: Path) -> None:
    pages = [ledger_run / f"report.{ext}" for ext in ("md", "html")]
    pages += [site_pages(ledger_run, i).html_path for i in range(3)]
    for path in pages:
        assert CANARY_BANNER in path.read_text(), path.name

    # An old run directory: no canaries, no client_dp.json, dp.enabled only.
    result = make_result([1.0, 1.25], [1.5, 1.75], rm_rn=[0.5, 0.75], o1=[0.25, 0.5])
    old = write_run(tmp_path / "old", n_sites=1, dp=8.0, audits={0: ok_audit(0, result, dp=8.0)})
    files = write_report_of(old)
    report = _report(old)
    assert report["canaries"] is None and report["dp_level"] == "record"
    assert report["client_dp"] is None
    site = flat(report["sites"][0])
    assert site["dp_epsilon"] == 8.0
    assert site["dp_epsilon_client"] is None and site["dp_epsilon_client_record"] is None
    assert site["canaries"] is None and site["canary_eps_lb"] is None and site["canary"] is None
    assert report["sites"][0]["privacy"]["client_accountant"] is None
    assert report["sites"][0]["privacy"]["record_accountant"] == "Opacus RDP"
    for path in (files.md_path, files.html_path, site_pages(old, 0).html_path):
        text = path.read_text()
        assert "canaries per site" not in text and "BOUND VIOLATION" not in text, path

    sweep = write_sweep_report(
        tmp_path / "sweep",
        [
            SweepPoint("canaries", {}, run_files(ledger_run)),
            SweepPoint("plain", {}, run_files(old)),
        ],
        report_config,
    )
    text = sweep.html_path.read_text()
    assert text.count(CANARY_BANNER) == 1 and "canaries: This run was trained" in text
    # The ledger run's violation is loud on the sweep page too.
    assert text.index('<div class="violation" role="alert">') < text.index("<h2>Points</h2>")
    assert sweep.warnings == ["BOUND VIOLATION: point canaries: " + _violation_message(ledger_run)]
    assert sweep.md_path is not None and CANARY_BANNER in sweep.md_path.read_text()
    plain_sweep = write_sweep_report(
        tmp_path / "sweep2", [SweepPoint("plain", {}, run_files(old))], report_config
    )
    assert "canaries per site" not in plain_sweep.html_path.read_text()


@pytest.mark.parametrize(
    ("dp", "want"),
    [
        ({"enabled": True}, "record"),
        ({"enabled": False}, "none"),
        ({"level": "client", "enabled": False}, "client"),
        ({"level": "both", "enabled": True}, "both"),
        ({"enabled": True, "target_epsilon": float("inf")}, "none"),
        (None, "none"),
    ],
)
def test_dp_level_of_old_and_new_configs(dp: Any, want: str) -> None:
    """The report resolves a config's level by the config loader's rule (one rule, in
    contracts.dp_level)."""
    assert privacy_settings({"dp": dp}).dp_level == want
    assert privacy_settings({}).dp_level is None
    if isinstance(dp, dict):
        record = {"target_epsilon": 1.0} if dp.get("enabled") else {}
        client = {"client": {"noise_multiplier": 1.0}} if want in ("client", "both") else {}
        assert DPConfig(**(record | dp | client)).level == want


def test_a_bad_dp_level_names_the_config_key() -> None:
    with pytest.raises(RunFileError, match=r"dp\.level must be one of"):
        privacy_settings({"dp": {"level": "records"}})


def test_client_level_only_counts_as_private_in_a_sweep(tmp_path: Path) -> None:
    result = make_result([1.0, 1.25], [1.5, 1.75])
    run = write_run(tmp_path / "client", n_sites=1, audits={0: ok_audit(0, result)})
    # Client-level DP on, but no accountant number anywhere (no client_dp.json yet).
    set_config(run, level="client", enabled=False)
    sweep = write_sweep_report(
        tmp_path / "sweep", [SweepPoint("client", {}, run_files(run))], report_config
    )
    point = json.loads(sweep.json_path.read_text())["points"][0]
    assert point["private"] is True and point["dp_level"] == "client"
    assert point["theoretical_eps"] is None
    assert "unknown (DP on)" in sweep.html_path.read_text()


def test_the_headline_names_the_record_guarantee_client_level_dp_implies(tmp_path: Path) -> None:
    """Client-level DP alone: the headline's record-level guarantee is the one it implies,
    said as such, never "off" while the ledger holds it."""
    result = make_result([1.0, 1.25], [1.5, 1.75])
    run = write_run(tmp_path / "client", n_sites=1, audits={0: ok_audit(0, result)})
    set_config(run, level="client", enabled=False, client={"noise_multiplier": 1.0})
    (run / CLIENT_DP_FILE).write_text(json.dumps(client_dp_accounting({0: (9.4, 18.84)})))
    layout = run_files(run)
    md = render_markdown(build_report(load_run(layout, report_config(layout))))
    headline = md[: md.index("Privacy ledger")]
    assert "| 18.84 (implied by client-level DP) |" in headline and "| off |" not in headline


def _sent_rounds(*sites: SiteRound) -> list[RoundRecord]:
    return [RoundRecord(round=r, sites={"0": s}) for r, s in enumerate(sites, start=1)]


@pytest.mark.parametrize(
    ("dp", "rounds", "outside", "text"),
    [
        # Record level, each site's own count declared: what derives from it is not covered.
        (
            {"level": "record"},
            _sent_rounds(SiteRound(dp_epsilon=1.0, sent=["arrays", "dp-epsilon", "site-id"])),
            ["dp-epsilon"],
            "dp-epsilon (declared size: its own member count)",
        ),
        # A public declared size: everything covered.
        (
            {"level": "record", "declared_size": 1000},
            _sent_rounds(SiteRound(dp_epsilon=1.0, sent=["arrays", "dp-epsilon", "site-id"])),
            [],
            "nothing (declared size 1000, public)",
        ),
        # An older run's lines (no ``sent``): the count and the loss it sent are named.
        (
            {"level": "record", "declared_size": 1000},
            _sent_rounds(SiteRound(train_loss=0.5, dp_epsilon=1.0, num_examples=10)),
            ["num-examples", "train-loss"],
            "num-examples, train-loss (declared size 1000, public)",
        ),
        # A key nobody knows the coverage of is not counted as covered.
        (
            {"level": "record", "declared_size": 1000},
            _sent_rounds(SiteRound(sent=["arrays", "site-accuracy"])),
            ["site-accuracy"],
            "site-accuracy (declared size 1000, public)",
        ),
        (
            {"level": "none"},
            _sent_rounds(SiteRound(train_loss=0.5)),
            [],
            "off (no DP)",
        ),
        # Client-level DP, central or distributed: the reply carries no loss and no count.
        (
            {"level": "distributed"},
            _sent_rounds(SiteRound(sent=["arrays", "site-id", "unit-weight"])),
            [],
            "nothing (client-level DP)",
        ),
        # A client-level run from before: its loss and count are named.
        (
            {"level": "client"},
            _sent_rounds(SiteRound(train_loss=0.5, num_examples=10)),
            ["num-examples", "train-loss"],
            "num-examples, train-loss (client-level DP)",
        ),
    ],
)
def test_the_ledger_names_what_left_outside_the_guarantee(
    dp: dict[str, Any], rounds: list[RoundRecord], outside: list[str], text: str
) -> None:
    settings = privacy_settings({"dp": dp})
    got = site_privacy(0, _audit(0, None), rounds, settings, None)
    assert got.outside_guarantee == outside
    assert fmt_outside(got) == text
