"""One result shape: a site's numbers are held once (reporting/schemas/schema.py, nested like the
PanoramiaResult) and every output shows them: report.json, report.csv, the tables."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from builders import (
    by_round_lines,
    load_run_of,
    make_result,
    ok_audit,
    with_class_slices,
    write_report_of,
    write_run,
)

from panoramia_fl.audit.result import AuditFlags
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.reporting.layout.columns import (
    HEADLINE_COLUMNS,
    LEDGER_COLUMNS,
    LEDGER_GROUPS,
    SITE_COLUMNS,
    SITE_GROUPS,
    SiteRow,
    md_table,
)
from panoramia_fl.reporting.numbers.flag_prose import FLAG_PROSE
from panoramia_fl.reporting.numbers.formatting import flag_labels
from panoramia_fl.reporting.numbers.meanings import MEANING_POINTS, NOTES, Note
from panoramia_fl.reporting.numbers.report_parts import (
    PART_MODULES,
    REPORT_PARTS,
    ReportPart,
    rebuilt_shares,
    report_parts,
)
from panoramia_fl.reporting.pages.html_page import _FLAG_BADGE_KIND
from panoramia_fl.reporting.schemas.schema import FLAGS, FlaggedSites


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], float]]:
    """Every number in a JSON value, with its path (booleans are flags, not numbers)."""
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(obj, list):
        return [leaf for i, v in enumerate(obj) for leaf in _leaves(v, (*path, i))]
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        return [(path, obj)]
    return []


LISTS = ("repeats", "by_round", "per_class")


def _run(tmp_path: Path) -> Path:
    audits = {
        0: ok_audit(0, make_result([1.0, 1.5], [2.0, 2.5], rm_rn=[1.25, 1.5]), dp=8.0),
        # Audited over rounds, with label slices: lists of records, kept out of the CSV.
        1: ok_audit(1, with_class_slices(make_result([0.5, 0.75], [0.5, 0.75])), dp=8.0)
        | {"by_round": json_safe(by_round_lines([1, 2]))},
    }
    run = write_run(tmp_path / "run", n_sites=2, dp=8.0, audits=audits)
    write_report_of(run)
    return run


def test_every_number_of_a_site_is_in_its_csv_row_under_its_json_path(tmp_path: Path) -> None:
    run = _run(tmp_path)
    sites = json.loads((run / "report.json").read_text())["sites"]
    with (run / "report.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["site_id"]) for r in rows] == [s["site_id"] for s in sites]
    for site, row in zip(sites, rows):
        # Lists of records (repeats, by_round, per_class) stay in report.json.
        numbers = [(p, v) for p, v in _leaves(site) if not set(LISTS) & set(p)]
        assert len(numbers) > 40
        for path, value in numbers:
            column = "_".join(str(p) for p in path)
            # The CSV writes floats with repr: they read back exactly.
            assert float(row[column]) == value, column


def test_a_site_holds_each_estimate_once(tmp_path: Path) -> None:
    """No flat copies beside the nested blocks: eps_tilde lives in its game, the canary
    numbers in the canary block, and the mean is the interval's own."""
    site = json.loads((_run(tmp_path) / "report.json").read_text())["sites"][0]
    assert set(site) == {
        *("site_id", "status", "error", "n_members", "n_holdout", "elapsed_s"),
        *("audit", "privacy", "checks", "by_round", "updates"),
    }
    game = site["audit"]["one_sided"]
    assert set(game["eps_tilde"]) == {"mean", "std", "low", "high", "n"}
    assert not any(k.endswith("_interval") for k in game)
    two = site["audit"]["two_sided"]
    assert two["side"] in ("member", "nonmember")
    assert math.isclose(
        two["eps_tilde"]["mean"],
        max(two["member"]["eps_tilde"]["mean"], two["nonmember"]["eps_tilde"]["mean"]),
        abs_tol=1.0,
    )


def test_flags_are_declared_once() -> None:
    flag_fields = [f.name for f in dataclasses.fields(AuditFlags) if f.type in ("bool", bool)]
    assert list(FLAGS) == flag_fields == [f.name for f in dataclasses.fields(FlaggedSites)]
    assert list(FLAG_PROSE) == list(FLAGS)
    assert set(NOTES) == set(Note)
    assert all(prose.meaning in MEANING_POINTS for prose in FLAG_PROSE.values())
    for flag in FLAGS.values():
        assert _FLAG_BADGE_KIND[flag.label] == flag.badge
    raised = AuditFlags(
        saturated=True, c_lb_not_tight=True, rm_rn_capped=True, above_real_nonmembers=True
    )
    assert flag_labels(raised) == [f.label for f in FLAGS.values()]


def test_tables_have_a_cell_per_header_and_the_headline_is_narrow(tmp_path: Path) -> None:
    run = _run(tmp_path)
    from panoramia_fl.reporting import build_report

    report = build_report(load_run_of(run))
    for columns, rows in (
        (HEADLINE_COLUMNS, report.sites),
        (SITE_COLUMNS, report.sites),
        (LEDGER_COLUMNS, [SiteRow(s, 0.5) for s in report.sites]),
    ):
        header, _, *lines = md_table(columns, rows)
        assert len(lines) == 2
        assert all(line.count(" | ") == header.count(" | ") for line in lines)
    headers = [c.header for c in HEADLINE_COLUMNS]
    assert headers[:2] == ["site", "eps_tilde two-sided [95% CI] (side)"] and len(headers) == 5


@pytest.mark.parametrize(
    ("full", "groups"),
    [(SITE_COLUMNS, SITE_GROUPS), (LEDGER_COLUMNS, LEDGER_GROUPS)],
    ids=["per-site", "ledger"],
)
def test_html_groups_show_every_column_once(full, groups) -> None:
    """report.html splits a wide table into a leading group and folds: together they hold
    every HTML column of the Markdown table, each once but the key column, which leads each
    group."""
    key = full[0]
    shown = [c for g in groups for c in g.columns if c is not key]
    assert all(g.columns[0] is key for g in groups)
    assert len(shown) == len(set(map(id, shown)))
    assert {id(c) for c in shown} == {id(c) for c in full[1:] if c.html is not None}


def test_each_report_part_is_a_kind_of_audit_with_its_section() -> None:
    """Every module of the one list registers its kind's part (the site page shows each
    one's section); a part under a name no field of SiteResults has is refused, as is a
    rebuilt share that is not one of its metrics."""
    parts = report_parts()
    assert set(PART_MODULES) <= {f.name for f in dataclasses.fields(SiteResults)}
    assert len(parts) == len(PART_MODULES) and all(p.site_section for p in parts)
    with pytest.raises(ValueError, match="'no_such_kind' names no kind of audit"):
        REPORT_PARTS.register("no_such_kind")(ReportPart())
    share = rebuilt_shares()[0]
    with pytest.raises(ValueError, match="a rebuilt share must be one of its metrics"):
        REPORT_PARTS.register("by_round")(ReportPart(rebuilt=(share,)))
    assert "no_such_kind" not in REPORT_PARTS.names() and "by_round" not in REPORT_PARTS.names()
