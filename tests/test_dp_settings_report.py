"""The DP settings side by side: the sweep file, and what the reports say each party holds
and can measure (central client-level DP against distributed DP with secure aggregation)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml
from builders import (
    client_dp_accounting,
    inversion_entry,
    make_result,
    ok_audit,
    run_files,
    set_config,
    white_box_audit,
    write_report_of,
    write_run,
)

from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.audit.result import Interval
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.reporting import SweepPoint, write_sweep_report
from panoramia_fl.reporting.layout.columns import SiteRow
from panoramia_fl.reporting.privacy.update_membership import NOT_RUN, SUM_ONLY, SUM_ONLY_SHORT
from panoramia_fl.reporting.sweeps.observers import NOT_SEEN, OBSERVER_COLUMNS, SERVER_VIEWS
from panoramia_fl.reporting.sweeps.sweep_report import build_sweep_report
from panoramia_fl.simulations.config_file import report_config
from panoramia_fl.simulations.sweep import expand, load_sweep

REPO = Path(__file__).resolve().parents[1]


def test_the_settings_sweep_compares_four_settings_at_one_epsilon_for_2_and_8_sites():
    points = expand(load_sweep(REPO / "configs" / "dp_settings_sweep.yaml"))
    settings = {(c.partition.num_sites, c.dp.level, c.fl.secure_aggregation) for _, _, c in points}
    assert settings == {
        (n, level, "ideal" if level == "distributed" else "none")
        for n in (2, 8)
        for level in ("none", "record", "client", "distributed")
    }
    targets = {c.dp.target_epsilon or c.dp.client.target_epsilon for _, _, c in points}
    assert targets == {None, 8}
    assert all(c.audit.inversion is not None for _, _, c in points)
    # 2 or 8 sites hold the same records: the comparison is of who holds them
    held = {c.partition.num_sites * c.partition.records_per_site for _, _, c in points}
    assert len(held) == 1


def _run(
    tmp_path: Path, name: str, *, level: str, secure: str, ledger: dict[str, Any] | None
) -> Path:
    result = make_result([1.0, 1.0], [1.1, 1.2], o1=[0.2, 0.3])
    audits = {
        s: ok_audit(s, result) | {"inversion": [json_safe(inversion_entry(1, q, 0.30))]}
        for s, q in ((0, 0.91), (1, 0.35))
    }
    run = write_run(tmp_path / name, n_sites=2, audits=audits)
    set_config(run, level=level)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["fl"] = {"secure_aggregation": secure}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    if ledger is not None:
        run_files(run).client_dp_accounting.write_text(json.dumps(ledger))
    return run


def _ledger(mechanism: str, secure: str, server: float | None) -> dict[str, Any]:
    ledger = client_dp_accounting({0: (8.0, 18.8), 1: (8.0, 18.8)})
    ledger |= {"schema_version": 2, "mechanism": mechanism, "secure_aggregation": secure}
    for site in ledger["sites"].values():
        site |= {
            "epsilon_server": server,
            "epsilon_record_server": None if server is None else 18.8,
        }
    return ledger


def test_the_sweep_says_what_the_server_holds_and_what_each_party_measured(tmp_path):
    central = _run(
        tmp_path, "central", level="client", secure="none", ledger=_ledger("central", "none", None)
    )
    ideal = _run(
        tmp_path,
        "distributed",
        level="distributed",
        secure="ideal",
        ledger=_ledger("distributed", "ideal", 8.0),
    )
    points = [
        SweepPoint("central", {}, run_files(central)),
        SweepPoint("distributed", {}, run_files(ideal)),
    ]
    files = write_sweep_report(tmp_path / "sweep", points, report_config)
    md = files.md_path.read_text()
    assert "## What each party can measure" in md
    rows = {
        line.split("|")[1].strip(): line
        for line in md.splitlines()
        if line.startswith("| central |") or line.startswith("| distributed |")
    }
    assert SERVER_VIEWS["client"] in rows["central"]
    assert SERVER_VIEWS["ideal"] in rows["distributed"]
    # The update membership audit: off centrally; with only the sum, nothing to audit.
    assert f"| {NOT_RUN} | not run | not run |" in rows["central"]
    assert f"| {SUM_ONLY} | {SUM_ONLY_SHORT} | {SUM_ONLY_SHORT} |" in rows["distributed"]
    # Against the server: nothing centrally, the site-level guarantee's record level with
    # the sum only; the inversion audit read the round's sum there.
    observers = [line for line in md.splitlines() if SERVER_VIEWS["client"] in line]
    assert "| none |" in observers[0]
    ideal_rows = [line for line in md.splitlines() if SERVER_VIEWS["ideal"] in line]
    assert len(ideal_rows) == 2 and all("| 18.800 |" in line for line in ideal_rows)
    assert "SSIM 0.91 (baseline 0.30); 100% &gt;= 0.60 (on the round's sum)" in ideal_rows[0]
    html = files.html_path.read_text()
    assert 'aria-label="what each party can measure, per sweep point"' in html
    sweep = json.loads(files.json_path.read_text())
    assert [p["secure_aggregation"] for p in sweep["points"]] == ["none", "ideal"]
    assert sweep["points"][1]["client_dp"]["mechanism"] == "distributed"
    # The run's own ledger: the guarantee against the server, by site.
    write_report_of(ideal)
    with open(ideal / "ledger.csv") as fh:
        ledger = list(csv.DictReader(fh))
    assert {r["secure_aggregation"] for r in ledger} == {"ideal"}
    assert {r["client_epsilon_server"] for r in ledger} == {"8.0"}
    assert (
        "DP level of the run: distributed; secure aggregation: ideal"
        in (ideal / "report.md").read_text()
    )
    page = (ideal / "site-reports" / "site-0.html").read_text()
    assert "Can the server rebuild your records from the round&#x27;s sum?" in page
    assert "holds only each round&#x27;s sum" in page  # the threat model says so too


def test_a_white_box_server_reading_under_secure_aggregation_is_not_measured(tmp_path):
    """Record-level DP with secure aggregation: the site's gradient canaries read its own
    DP-SGD (the mechanism level) but not the server level, which would read the site's own
    update; the table says so instead of showing a number."""
    canaries = white_box_audit()
    run = _run(tmp_path, "r", level="record", secure="ideal", ledger=None)
    audit_file = run / "audits" / "site-0.json"
    audit = json.loads(audit_file.read_text()) | {"gradient_canaries": json_safe(canaries)}
    audit_file.write_text(json.dumps(audit))
    report = build_sweep_report(tmp_path, [SweepPoint("r", {}, run_files(run))], report_config)
    point = report.points[0]
    cells = [
        {c.header: c.md(SiteRow(site, point.global_accuracy, point)) for c in OBSERVER_COLUMNS}
        for site in point.sites
    ]
    white_box = [next(v for k, v in row.items() if "white-box" in k) for row in cells]
    assert white_box == [NOT_SEEN, "off (record-level DP only)"]


def _line(round_: int, low: float, high: float, *, bound: float = 0.1, dp: float | None = None):
    """A round's audit in brief: two-sided eps_tilde over [low, high], RM;RN and O(1) at
    ``bound``, the DP-SGD epsilon after the round (updates under record-level DP)."""
    iv = Interval(mean=(low + high) / 2, std=0.1, low=low, high=high, n=5)
    lb = Interval(mean=bound, std=0.05, low=bound - 0.1, high=bound + 0.1, n=5)
    return RoundLeakage(round_, iv, "member", lb, 0.55, 0.02, 0.0, rm_rn_eps_lb=lb, dp_epsilon=dp)


def _with_rounds(run: Path, site: int, **lines: list[RoundLeakage]) -> None:
    path = run / "audits" / f"site-{site}.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | json_safe(lines)))


def test_the_sweep_says_whether_the_server_learns_more_from_an_update_than_a_model_user(
    tmp_path,
):
    """Per site the update whose two-sided eps_tilde is largest over the audited rounds, its
    round's global model beside it and the rounds whose update lies above it; its lower
    bounds against the DP-SGD epsilon after its round (a violation named); where the update
    audit or the inversion audit did not run at a site, said so."""
    central = _run(tmp_path, "central", level="client", secure="none", ledger=None)
    models = [_line(1, 0.0, 0.0), _line(3, 0.0, 0.3)]
    _with_rounds(central, 0, updates=[_line(1, 0.5, 1.1), _line(3, 0.0, 0.4)], by_round=models)
    _with_rounds(central, 1, updates=[_line(1, 0.0, 0.2), _line(3, 0.0, 0.1)], by_round=models)
    local = _run(tmp_path, "local", level="record", secure="none", ledger=None)
    _with_rounds(local, 0, updates=[_line(3, 0.0, 0.2, bound=0.5, dp=0.25)], by_round=models)
    inversion = local / "audits" / "site-1.json"
    inversion.write_text(json.dumps(json.loads(inversion.read_text()) | {"inversion": []}))
    points = [SweepPoint(n, {}, run_files(r)) for n, r in (("central", central), ("local", local))]
    report = build_sweep_report(tmp_path, points, report_config)
    cells = {
        (p.label, s.site_id): {
            c.header: c.md(SiteRow(s, p.global_accuracy, p)) for c in OBSERVER_COLUMNS if c.md
        }
        for p in report.points
        for s in p.sites
    }

    def cell(point: str, site: int, header_part: str) -> str:
        row = cells[point, site]
        return row[next(h for h in row if header_part in h)]

    update, versus, bounds = "the site's update", "model users, same round", "that update"
    assert cell("central", 0, update) == "0.800 [0.500, 1.100] (round 1; audited 1, 3)"
    assert cell("central", 0, versus) == (
        "0.000 [0.000, 0.000]; update above it in round 1 (intervals apart)"
    )
    assert cell("central", 0, bounds) == (
        "0.100 [0.000, 0.200] / 0.100 [0.000, 0.200] (no guarantee against the server)"
    )
    # Site 1's largest update is round 1's (a tie goes to the first), within its model's.
    assert cell("central", 1, update) == "0.100 [0.000, 0.200] (round 1; audited 1, 3)"
    assert cell("central", 1, versus).endswith("; update not above it in any audited round")
    assert cell("local", 0, bounds) == (
        "0.500 [0.400, 0.600] / 0.500 [0.400, 0.600] (DP-SGD eps 0.25 after the round); "
        "VIOLATION: RM;RN two-sided of the round-3 update, O(1) of the round-3 update above "
        "the DP-SGD eps"
    )
    assert cell("local", 1, update) == "not audited at this site"
    assert cell("local", 1, "inversion") == "not run at this site (audit.inversion.sites: 0)"
    md = write_sweep_report(tmp_path / "sweep", points, report_config).md_path.read_text()
    assert "not run at this site (audit.inversion.sites: 0)" in md
