"""The release gate and the evidence pack on a small saved run (hand-built audit results of
three sites, no training): ``panoramia-fl gate`` with the strict and lenient example
policies, a failing rule, bad policies, JUnit XML read back as a JUnit parser reads it;
``panoramia-fl report --pdf`` printed by headless Chromium, its text extracted with
``pdftotext`` and its first page rendered with ``pdftoppm`` (poppler-utils)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml
from builders import (
    failed_audit,
    inversion_entry,
    load_run_of,
    make_result,
    ok_audit,
    set_config,
    site_pages,
    white_box_audit,
    with_quality,
    write_run,
)
from PIL import Image

from panoramia_fl.audit.conformance.checks import CHECKS, ConformanceCheck, ConformanceResult
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.reporting import build_report
from panoramia_fl.reporting.numbers.formatting import fmt_est, fmt_two_sided
from panoramia_fl.reporting.numbers.meanings import NOTES, Note
from panoramia_fl.reporting.numbers.metrics import EPS_TILDE_TWO_SIDED, O1, RM_RN_TWO_SIDED
from panoramia_fl.simulations.cli import main

REPO = Path(__file__).resolve().parents[1]
STRICT = REPO / "configs" / "policies" / "strict.yaml"
LENIENT = REPO / "configs" / "policies" / "lenient.yaml"
BROKEN_CHECK = "noise_level"


def _conformance(failed: str | None) -> ConformanceResult:
    """A site's checks of its DP-SGD steps, all passed but ``failed``."""
    checks = tuple(
        ConformanceCheck(name, name != failed, 1.0, None, None, f"{name} as assumed")
        for name in CHECKS
    )
    return ConformanceResult(
        steps=100, rounds=2, coordinates=256, records=600, beta=0.05, checks=checks
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Record-level DP at eps 8: site 0 leaks (two-sided eps_tilde near 1.9) with its DP-SGD
    conforming and an inversion audit that rebuilt nothing; site 1 reads low and one of its
    conformance checks failed; site 2's audit failed."""
    white_box = white_box_audit()
    leaky = with_quality(make_result([1.0, 1.3], [2.1, 2.5], rm_rn=[1.6, 1.9], o1=[0.6, 0.7]))
    low = make_result([0.5, 0.61], [0.83, 0.91], rm_rn=[0.2, 0.3], o1=[0.11, 0.17])
    audits = {
        0: ok_audit(0, leaky, dp=8.0)
        | {
            "gradient_canaries": json_safe(
                dataclasses.replace(white_box, conformance=_conformance(None))
            ),
            "inversion": [json_safe(inversion_entry(1, quality=0.41, baseline=0.2))],
        },
        1: ok_audit(1, low, dp=8.0)
        | {
            "gradient_canaries": json_safe(
                dataclasses.replace(white_box, conformance=_conformance(BROKEN_CHECK))
            )
        },
        2: failed_audit(2),
    }
    path = write_run(tmp_path_factory.mktemp("release") / "run", n_sites=3, dp=8.0, audits=audits)
    set_config(path, level="record", enabled=True)
    return path


def _gate(run: Path, policy: Path, capsys: pytest.CaptureFixture[str], *extra: str):
    code = main(["gate", str(run), "--policy", str(policy), *extra])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def _line(lines: list[str], where: str, rule: str) -> str:
    (found,) = [x for x in lines if f" {where}: {rule}" in x]
    return found


def test_strict_policy_fails_with_one_line_per_site_and_rule(run, capsys):
    code, lines, _ = _gate(run, STRICT, capsys)
    assert code == 1
    policy = yaml.safe_load(STRICT.read_text())
    site_rules = [r for r in policy["rules"] if r.get("scope", "site") == "site"]
    required = sum(bool(v) or v == 0 for v in policy["requirements"].values())
    assert len(lines) == 3 * (len(site_rules) + required) + 1 + 1  # + consortium, + verdict
    site0 = build_report(load_run_of(run)).sites[0]
    high = EPS_TILDE_TWO_SIDED.get(site0).high
    assert _line(lines, "site 0", "eps_tilde two-sided (upper 95% CI end) <= 0.5").startswith(
        "FAIL"
    ) and f"{high:.3f}" in _line(lines, "site 0", "eps_tilde two-sided")
    assert _line(lines, "site 0", "every DP-SGD conformance check passes").startswith("PASS")
    broken = _line(lines, "site 1", "every DP-SGD conformance check passes")
    assert broken.startswith("FAIL") and BROKEN_CHECK.replace("_", " ") in broken
    rebuilt = _line(lines, "site 0", "nothing rebuilt above a share of 0")
    assert rebuilt.startswith("PASS") and "0.000 (share rebuilt by gradient inversion)" in rebuilt
    assert _line(lines, "site 1", "nothing rebuilt").startswith("NOT MEASURED")
    assert _line(lines, "site 1", "nothing rebuilt").endswith("(counts as a failure)")
    assert all(x.startswith("NOT MEASURED") for x in lines if " site 2: " in x)
    assert lines[-1].startswith("gate: FAIL (policy strict")
    verdict = json.loads((run / "gate.json").read_text())
    assert verdict["passed"] is False and len(verdict["lines"]) == len(lines) - 1


def test_lenient_policy_passes_and_junit_parses(run, capsys, tmp_path):
    junit = tmp_path / "ci" / "gate.xml"
    code, lines, _ = _gate(run, LENIENT, capsys, "--junit", str(junit))
    assert code == 0 and lines[-1].startswith("gate: PASS (policy lenient")
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    # The attributes the JUnit schema requires of a test suite and of a test case.
    assert {"name", "tests", "failures", "errors"} <= set(suite.attrib)
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == len(lines) - 1
    assert all({"name", "classname"} <= set(c.attrib) for c in cases)
    assert int(suite.get("failures")) == 0 == len(suite.findall("testcase/failure"))
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert len(skipped) == int(suite.get("skipped")) == sum("NOT MEASURED" in x for x in lines)
    assert {c.get("classname") for c in skipped} >= {"site 2"}


def test_strict_junit_has_a_failure_per_failing_line(run, capsys, tmp_path):
    junit = tmp_path / "strict.xml"
    _, lines, _ = _gate(run, STRICT, capsys, "--junit", str(junit))
    suite = ET.parse(junit).getroot().find("testsuite")
    failures = suite.findall("testcase/failure")
    assert (
        len(failures)
        == int(suite.get("failures"))
        == sum(x.startswith("FAIL ") or x.endswith("(counts as a failure)") for x in lines)
    )
    assert {f.get("type") for f in failures} == {"fail", "not measured"}


def _policy(tmp_path: Path, body: dict) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", **body}))
    return path


@pytest.mark.parametrize("read", ["high", "low", "value"])
def test_one_rule_passes_then_fails_at_its_reading(run, capsys, tmp_path, read):
    """A threshold just above the reading passes, just below it fails (exit 1); the reading
    is the interval's end or its mean, and a consortium rule reads the worst site."""
    site = build_report(load_run_of(run)).sites[0]
    interval = RM_RN_TWO_SIDED.get(site)
    value = {"high": interval.high, "low": interval.low, "value": interval.mean}[read]
    for at_most, code in ((value + 1e-6, 0), (value - 1e-6, 1)):
        rule = {"metric": "rm_rn_eps_lb_two_sided", "read": read, "at_most": at_most}
        policy = _policy(
            tmp_path,
            {"rules": [rule | {"sites": [0]}, rule | {"scope": "consortium", "sites": [0, 1]}]},
        )
        got, lines, _ = _gate(run, policy, capsys)
        assert got == code
        assert _line(lines, "consortium", "worst site's").split(": ")[-1] == f"{value:.3f} (site 0)"


def test_a_rule_on_a_site_the_run_lacks_is_not_measured(run, capsys, tmp_path):
    policy = _policy(tmp_path, {"rules": [{"metric": "o1_eps_lb", "at_most": 9, "sites": [0, 7]}]})
    code, lines, _ = _gate(run, policy, capsys)
    assert code == 1 and "not in this run" in _line(lines, "site 7", "O(1)")
    allowed = _policy(
        tmp_path,
        {
            "not_measured": "allow",
            "rules": [{"metric": "o1_eps_lb", "at_most": 9, "sites": [0, 7]}],
        },
    )
    assert _gate(run, allowed, capsys)[0] == 0


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (
            {"requirements": {"no_flaged_headline": True}},
            "requirements.no_flaged_headline: unknown key",
        ),
        (
            {"rules": [{"metric": "eps_tild", "at_most": 1}]},
            "rules.0.metric: unknown metric 'eps_tild'",
        ),
        ({"rules": [{"metric": "o1_eps_lb", "read": "upper", "at_most": 1}]}, "rules.0.read"),
        ({"rules": [{"metric": "o1_eps_lb"}]}, "rules.0: a rule needs at_most, at_least or both"),
        ({"requirements": {"max_rebuilt_share": 2}}, "requirements.max_rebuilt_share"),
        ({"thresholds": []}, "thresholds: unknown key"),
    ],
)
def test_a_bad_policy_exits_2_naming_the_key(run, capsys, tmp_path, body, key):
    out = tmp_path / "out"
    code, lines, err = _gate(run, _policy(tmp_path, body), capsys, "--json", str(out / "g.json"))
    assert code == 2 and lines == []
    assert err.startswith("panoramia-fl: error: ") and key in err and str(tmp_path) in err
    assert not out.exists()


def test_a_sweep_is_gated_point_by_point(run, capsys, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    points = [
        {"label": "eps=8", "overrides": {}, "run_dir": str(run)},
        {"label": "eps=2", "overrides": {}, "run_dir": str(tmp_path / "never-ran")},
    ]
    (sweep / "sweep.json").write_text(json.dumps({"points": points}))
    code, lines, _ = _gate(sweep, LENIENT, capsys)
    assert code == 0  # the lenient policy allows what was not measured ...
    assert any(x.startswith("PASS") and " point eps=8, site 0: " in x for x in lines)
    unread = _line(lines, "point eps=2", "its run")
    assert unread.startswith("NOT MEASURED") and "never-ran" in unread
    assert not unread.endswith("(counts as a failure)")
    code, lines, _ = _gate(sweep, STRICT, capsys)  # ... the strict one does not
    assert code == 1 and _line(lines, "point eps=2", "its run").endswith("(counts as a failure)")


def test_a_policy_named_in_the_config_shows_its_verdict(run, tmp_path):
    """report.policy: report.html shows the verdict, a site's page its own lines alone."""
    copy = shutil.copytree(run, tmp_path / "run")
    config = yaml.safe_load((copy / "config.yaml").read_text())
    (copy / "config.yaml").write_text(yaml.safe_dump(config | {"report": {"policy": str(STRICT)}}))
    assert main(["report", str(copy)]) == 0
    report = json.loads((copy / "report.json").read_text())
    assert report["gate"]["policy"] == "strict" and report["gate"]["passed"] is False
    assert 'id="gate"' in (copy / "report.html").read_text()
    page = json.loads(site_pages(copy, 1).json_path.read_text())
    assert {line["where"] for line in page["gate"]["lines"]} == {"site 1"}


def test_report_policy_is_read_when_the_config_loads(tmp_path, monkeypatch):
    """A bad policy stops the config naming report.policy; a good one is kept absolute in
    the run's config.yaml and read back for its report from another folder."""
    from panoramia_fl.simulations.config_file import dump_config, report_config_of
    from panoramia_fl.simulations.experiment_config import ConfigError, load_config

    bad = _policy(tmp_path, {"rules": [{"metric": "nope", "at_most": 1}]})
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"report": {"policy": str(bad)}}))
    with pytest.raises(ConfigError, match=r"report\.policy: .*rules\.0\.metric: unknown metric"):
        load_config(config)
    monkeypatch.chdir(REPO)
    config.write_text(yaml.safe_dump({"report": {"policy": "configs/policies/strict.yaml"}}))
    written = dump_config(load_config(config))
    monkeypatch.chdir(tmp_path)
    policy = report_config_of(yaml.safe_load(written)).policy
    assert policy is not None and policy.name == "strict"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: `make browser` installs poppler-utils")
    return found


def _text(pdf: Path) -> str:
    """The PDF's text, words joined by single spaces; ``-`` dropped (pdftotext joins a word
    broken at a line's end hyphen)."""
    out = subprocess.run(
        [_tool("pdftotext"), str(pdf), "-"], capture_output=True, text=True, check=True
    )
    return _flat(out.stdout)


def _flat(text: str) -> str:
    return re.sub(r"\s+", "", text).replace("-", "")


SECTIONS = (
    "Verdict against the release policy",
    "Attacks tried",
    "Design choices",
    "Residual risk and its limits",
    "Reproducibility",
)


@pytest.fixture(scope="module")
def packs(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run with report.policy naming the strict policy, reported with --pdf."""
    copy = shutil.copytree(run, tmp_path_factory.mktemp("packs") / "run")
    config = yaml.safe_load((copy / "config.yaml").read_text())
    (copy / "config.yaml").write_text(yaml.safe_dump(config | {"report": {"policy": str(STRICT)}}))
    assert main(["report", str(copy), "--pdf"]) == 0
    return copy


def _in_order(text: str, parts: tuple[str, ...]) -> bool:
    at = [text.find(_flat(p)) for p in parts]
    return all(i >= 0 for i in at) and at == sorted(at)


@pytest.mark.slow  # headless Chromium prints the packs
def test_site_pack_holds_every_section_and_only_its_own_numbers(packs):
    text = _text(packs / "site-reports" / "site-0.pdf")
    assert _in_order(text, SECTIONS)
    sites = build_report(load_run_of(packs)).sites
    own, other = sites[0], sites[1]
    for number in (
        fmt_two_sided(own),
        fmt_est(O1.get(own)),
        fmt_est(RM_RN_TWO_SIDED.get(own)),
        "8.00",
    ):
        assert _flat(number) in text, number
    assert _flat("the highest third") in text  # its standing band
    for number in (
        fmt_two_sided(other),
        fmt_est(O1.get(other)),
        fmt_est(RM_RN_TWO_SIDED.get(other)),
    ):
        assert _flat(number) not in text, number
    assert "site1" not in text and "site2" not in text
    assert _flat(NOTES[Note.THREAT_WHO]) in text and _flat(NOTES[Note.NOT_PROOF]) in text


@pytest.mark.slow  # headless Chromium prints the packs
def test_consortium_pack_holds_every_section_and_site(packs):
    text = _text(packs / "evidence.pdf")
    assert _in_order(text, SECTIONS)
    for site in build_report(load_run_of(packs)).sites[:2]:
        assert _flat(fmt_two_sided(site)) in text
    assert _flat("The release policy 'strict'") in text and _flat("does not pass") in text


@pytest.mark.slow  # headless Chromium prints the packs
def test_pack_first_page_is_a4_and_drawn(packs, tmp_path):
    info = subprocess.run(
        [_tool("pdfinfo"), str(packs / "site-reports" / "site-0.pdf")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "(A4)" in info
    subprocess.run(
        [
            _tool("pdftoppm"),
            "-r",
            "40",
            "-png",
            "-f",
            "1",
            "-l",
            "1",
            "-singlefile",
            str(packs / "evidence.pdf"),
            str(tmp_path / "first"),
        ],
        check=True,
    )
    image = np.asarray(Image.open(tmp_path / "first.png").convert("L"))
    height, width = image.shape
    assert abs(height / width - 297 / 210) < 0.02
    assert 0.02 < (image < 250).mean() < 0.5  # text and tables, neither blank nor black


def test_pdf_without_chromium_names_what_to_install(run, capsys, monkeypatch, tmp_path):
    copy = shutil.copytree(run, tmp_path / "run")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["report", str(copy), "--pdf"]) == 2
    err = capsys.readouterr().err
    assert "Chromium" in err and "apt-get install chromium" in err
    assert not (copy / "report.html").exists()  # nothing started before the check
