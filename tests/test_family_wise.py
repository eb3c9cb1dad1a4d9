"""A failed statistical conformance check read across the consortium: the run's banner counts
every statistical check its sites ran, the chance an honest consortium flags one, and whether
each flag survives Holm's correction at beta; exact checks and the site's own page keep the
site-level wording (hand-built audit results, no training)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from builders import (
    make_result,
    ok_audit,
    run_files,
    set_config,
    site_pages,
    white_box_audit,
    write_report_of,
    write_run,
)
from statsmodels.stats.multitest import multipletests

from panoramia_fl.audit.canaries.gradient_canaries import GradientCanaryResult
from panoramia_fl.audit.conformance.checks import (
    CHECKS,
    STATISTICAL_CHECKS,
    ConformanceCheck,
    ConformanceResult,
    check_level,
)
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.reporting import SweepPoint, write_sweep_report
from panoramia_fl.reporting.layout.banners import CHANCE_FLAGS_HEADLINE, VIOLATION_HEADLINE
from panoramia_fl.reporting.numbers.meanings import NOTES, Note
from panoramia_fl.reporting.privacy.family_wise import family_wise
from panoramia_fl.simulations.config_file import report_config

BETA = 0.05
LEVEL = check_level(BETA)
SITES = 8
CHECKS_RUN = SITES * len(STATISTICAL_CHECKS)
DO_NOT_TRUST = "Do not trust the guarantee"


@pytest.fixture(scope="module")
def canaries() -> GradientCanaryResult:
    return white_box_audit()


def _conformance(site: int, flag: float | None, exact_failed: str | None) -> ConformanceResult:
    """A site's checks: its statistical ones at p-values spread over (0.1, 0.9) (the first
    at ``flag`` when given), its exact ones passed (but ``exact_failed``)."""
    spread = np.linspace(0.1, 0.9, len(STATISTICAL_CHECKS)) + 0.01 * site
    statistical = [
        ConformanceCheck(name, p >= LEVEL, 1.0, float(p), LEVEL, f"{name} measured at {p:.3g}")
        for name, p in zip(STATISTICAL_CHECKS, spread, strict=True)
    ]
    if flag is not None:
        statistical[0] = dataclasses.replace(
            statistical[0], passed=flag >= LEVEL, p_value=flag, message="half the noise"
        )
    exact = [
        ConformanceCheck(name, name != exact_failed, None, None, None, f"{name} as assumed")
        for name in CHECKS
        if name not in STATISTICAL_CHECKS
    ]
    return ConformanceResult(
        steps=100, rounds=2, coordinates=256, records=600, beta=BETA, checks=(*statistical, *exact)
    )


def _run(
    tmp_path: Path,
    canaries: GradientCanaryResult,
    *,
    flag: float | None = None,
    exact_failed: str | None = None,
) -> Path:
    """A record-level DP run of :data:`SITES` sites with conformance checks; site 2 holds the
    flag (a failed statistical check at p = ``flag``) and the failed exact check."""
    result = make_result([1.0, 1.0], [1.1, 1.2], o1=[0.2, 0.3])
    audits = {}
    for s in range(SITES):
        mine = s == 2
        conformance = _conformance(s, flag if mine else None, exact_failed if mine else None)
        white_box = dataclasses.replace(canaries, conformance=conformance)
        audits[s] = ok_audit(s, result, dp=8.0) | {"gradient_canaries": json_safe(white_box)}
    run = write_run(tmp_path / "run", n_sites=SITES, audits=audits)
    set_config(run, level="record", enabled=True)
    return run


def _report(run: Path) -> tuple[list[str], str, list[str]]:
    """The report's banner lines, its headline and its warnings: written once."""
    report = write_report_of(run)
    assert report.md_path is not None
    md = report.md_path.read_text().splitlines()
    banner = [line[4:] for line in md if line.startswith("> - ")]
    return banner, next(line for line in md if line.startswith("> **")), report.warnings


def _site_page(run: Path) -> str:
    return site_pages(run, 2).html_path.read_text()


def test_holm_and_the_chance_of_a_flag_match_their_definitions():
    """Holm's rejections as statsmodels computes them; the chance as 1 - prod(1 - level)."""
    p = np.random.default_rng(1).uniform(size=50) ** 3
    levels = np.full(50, 0.001)
    reading = family_wise(p, levels, beta=0.05)
    assert list(reading.survives) == list(multipletests(p, alpha=0.05, method="holm")[0])
    assert any(reading.survives) and not all(reading.survives)
    assert reading.checks == 50
    assert reading.chance == pytest.approx(1 - 0.999**50)


def test_one_flag_at_its_own_level_among_many_checks_is_read_as_chance(tmp_path, canaries):
    run = _run(tmp_path, canaries, flag=0.99 * LEVEL)
    banner, headline, warnings = _report(run)
    chance = 1 - (1 - LEVEL) ** CHECKS_RUN
    head = NOTES[Note.FAMILY_WISE].format(
        scope="run", checks=CHECKS_RUN, sites=SITES, chance=chance, beta=BETA
    )
    assert head in banner
    assert f"{CHECKS_RUN} statistical conformance checks ran on {SITES} DP-SGD sites" in head
    flag = next(line for line in banner if line.startswith("site 2, noise level (p = "))
    assert "does not survive: consistent with chance across 72 checks" in flag
    assert banner[0].startswith("site 2: its DP-SGD does not do what its accountant assumes")
    assert banner[-1] == NOTES[Note.ONLY_CHANCE]
    # the consortium's headline says chance, not a violation
    assert headline == f"> **{CHANCE_FLAGS_HEADLINE}**"
    assert warnings[-1].startswith(f"{CHANCE_FLAGS_HEADLINE}: No flag")
    # the site's own page reads the flag at the site's level, as before
    page = _site_page(run)
    assert DO_NOT_TRUST in page and "family-wise" not in page


def test_a_flag_far_below_beta_over_the_checks_survives(tmp_path, canaries):
    run = _run(tmp_path, canaries, flag=BETA / CHECKS_RUN / 100)
    banner, headline, warnings = _report(run)
    flag = next(line for line in banner if line.startswith("site 2, noise level (p = "))
    assert flag.endswith("survives: treat as a DP bug.")
    assert banner[-1].startswith(DO_NOT_TRUST)
    assert headline == f"> **{VIOLATION_HEADLINE}**"
    assert not any(CHANCE_FLAGS_HEADLINE in w for w in warnings)


def test_a_failed_exact_check_keeps_its_wording(tmp_path, canaries):
    """An exact check alone: the banner as before. Beside a flag read as chance, the exact
    check still says not to trust the guarantee."""
    banner, _, _ = _report(_run(tmp_path / "exact", canaries, exact_failed="clipping"))
    assert len(banner) == 2 and "clipping as assumed" in banner[0]
    assert banner[1].startswith(DO_NOT_TRUST)
    both, headline, _ = _report(
        _run(tmp_path / "both", canaries, flag=0.99 * LEVEL, exact_failed="clipping")
    )
    assert any("does not survive" in line for line in both)
    assert both[-1].startswith(DO_NOT_TRUST)
    assert headline == f"> **{VIOLATION_HEADLINE}**"


def test_a_sweep_banner_names_the_point_on_every_line(tmp_path, canaries):
    """A sweep's banner opens with the violation under its point's and site's name, as its
    family-wise lines name them."""
    run = _run(tmp_path, canaries, flag=BETA / CHECKS_RUN / 100)
    sweep = write_sweep_report(
        tmp_path / "sweep", [SweepPoint("eps8", {}, run_files(run))], report_config
    )
    md = sweep.md_path.read_text().splitlines()
    banner = [line[4:] for line in md if line.startswith("> - ")]
    assert banner[0].startswith("point eps8, site 2: its DP-SGD does not do what its accountant")
    assert any(line.startswith("point eps8, site 2, noise level (p = ") for line in banner)
