"""One result shape: report fields are declared once (reporting/schema.py) and every output,
view and table derives from the declaration."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_report import make_result, ok_audit, write_run

from reporting.columns import (
    LEDGER_COLUMNS,
    SITE_COLUMNS,
    SWEEP_SITE_COLUMNS,
    html_headers,
    labelled_columns,
    md_headers,
)
from reporting.formatting import MEANING_POINTS, flag_labels
from reporting.html_page import _FLAG_BADGE_KIND
from reporting.plain_language import _FLAG_SENTENCES
from reporting.privacy_ledger import released_model_epsilon
from reporting.schema import (
    SCORERS,
    SIDES,
    TPR_FPR_KEYS,
    ConsortiumSummary,
    FlagsReport,
    LedgerRow,
    SiteReport,
    SweepSiteRow,
    field_spec,
    flag_specs,
    flagged_lists,
    project,
    spec,
)
from reporting.writers import CSV_COLUMNS, LEDGER_CSV_COLUMNS, csv_columns, csv_row

ROOT = Path(__file__).resolve().parents[1]


def _interval(name: str) -> tuple[str, ...]:
    return (name, *(f"{name}_{k}" for k in ("low", "high", "std", "n")))


_FLAGS_V3 = ("saturated", "c_lb_not_tight", "rm_rn_capped", "reasons")
_SIDE_V3 = ("c_lb", "c_eps_lb", "eps_tilde", "ceiling", "headroom", "rm_rn_eps_lb", "rm_rn_ceiling")
CSV_COLUMNS_V3: tuple[str, ...] = (
    *("site_id", "status", "error", "n_members", "n_holdout", "modality", "generator_kind"),
    *("beta", "n_repeats"),
    *_interval("c_lb"),
    *_interval("c_eps_lb"),
    *_interval("eps_tilde"),
    *_interval("eps_tilde_two_sided"),
    *("two_sided_side", "ceiling", "headroom", *_FLAGS_V3),
    *_interval("rm_rn_eps_lb"),
    *_interval("rm_rn_eps_lb_two_sided"),
    *_interval("o1_eps_lb"),
    "two_sided_beta",
    *(f"two_sided_{side}_{name}" for side in SIDES for name in (*_SIDE_V3, *_FLAGS_V3)),
    *("target_loss_members", "target_loss_nonmembers", "dp_epsilon", "dp_epsilon_source"),
    *(f"{scorer}_auc" for scorer in SCORERS),
    *(f"{scorer}_tpr_at_fpr_{key}" for scorer in SCORERS for key in TPR_FPR_KEYS),
    *("elapsed_s", "dp_epsilon_record", "dp_epsilon_client", "dp_epsilon_client_record"),
    *("dp_delta", "canaries", "canary_eps_lb", "canary_eps_interval_low"),
    *("canary_eps_interval_high", "bound_violations", "eps_tilde_above_accountant"),
    "eps_tilde_above_accountant_reason",
)
"""report.csv's header at report schema version 3, when it was kept by hand."""


def _in_order(columns: tuple[str, ...], old: tuple[str, ...]) -> bool:
    """Every old column is still there, in the old order (new ones may sit anywhere)."""
    return [c for c in columns if c in set(old)] == list(old)


def test_csv_columns_keep_the_hand_kept_header() -> None:
    assert _in_order(CSV_COLUMNS, CSV_COLUMNS_V3)
    assert len(set(CSV_COLUMNS)) == len(CSV_COLUMNS)
    ledger = [f.name for f in dataclasses.fields(LedgerRow) if f.name != "canary_eps_interval"]
    # The canary interval sits where older ledger.csv files had it; newer fields follow it.
    cut = ledger.index("eps_tilde_above_accountant") + 1
    ledger[cut:cut] = ["canary_eps_interval_low", "canary_eps_interval_high"]
    assert tuple(ledger) == LEDGER_CSV_COLUMNS
    assert LEDGER_CSV_COLUMNS[-4:] == (
        "best_eps_lb",
        "best_eps_lb_method",
        "client_eps_estimate",
        "client_eps_lb",
    )


def test_every_field_marked_for_csv_is_in_the_header() -> None:
    for cls, header in ((SiteReport, CSV_COLUMNS), (LedgerRow, LEDGER_CSV_COLUMNS)):
        for f in dataclasses.fields(cls):
            s = field_spec(f)
            if s is None or s.csv is None:
                continue
            if s.csv == "nested":
                prefix = f"{f.name}_" if s.csv_prefix is None else s.csv_prefix
                assert any(c.startswith(prefix) for c in header), f.name
            elif s.csv == "keys":
                prefix = f"{f.name}_" if s.csv_prefix is None else s.csv_prefix
                assert {prefix + k for k in s.csv_keys} <= set(header), f.name
            elif s.csv == "pair":
                assert {f"{f.name}_low", f"{f.name}_high"} <= set(header), f.name
            else:
                assert f.name in header, f.name


def test_a_new_field_in_the_declaration_reaches_csv_and_tables() -> None:
    """A field added to SiteReport with a spec: its CSV columns come last, its column shows."""
    extended = dataclasses.make_dataclass(
        "Extended",
        [("foo_score", float | None, spec(None, label="foo score", digits=2))],
        bases=(SiteReport,),
        frozen=True,
    )
    assert csv_columns(extended) == (*CSV_COLUMNS, "foo_score")
    site = extended(site_id=7, status="ok", error=None, n_members=1, n_holdout=1, foo_score=0.25)
    assert csv_row(site)["foo_score"] == 0.25
    (col,) = labelled_columns(extended)
    assert col.header == "foo score" and col.md is not None and col.md(site) == "0.25"
    assert col.html is not None and col.html(site) == '<td title="0.25">0.25</td>'


def test_flags_are_declared_once() -> None:
    names = [name for name, _ in flag_specs()]
    assert names == ["saturated", "c_lb_not_tight", "rm_rn_capped"]
    for name, flag in flag_specs():
        assert name in CSV_COLUMNS
        assert all(f"two_sided_{side}_{name}" in CSV_COLUMNS for side in SIDES)
        assert flag.meaning in MEANING_POINTS
        assert _FLAG_BADGE_KIND[flag.label] == flag.badge
        assert _FLAG_SENTENCES[name] == flag.plain
    raised = FlagsReport(**{name: True for name in names})
    assert flag_labels(raised) == [flag.label for _, flag in flag_specs()]
    summary = {f.name for f in dataclasses.fields(ConsortiumSummary)}
    for list_name, flag_name, _ in flagged_lists():
        assert flag_name in names and list_name in summary


def test_views_are_projections_of_the_site_report() -> None:
    site = SiteReport(
        site_id=3,
        status="ok",
        error=None,
        n_members=10,
        n_holdout=5,
        eps_tilde=0.5,
        dp_epsilon=4.0,
        quality={"target_accuracy_nonmembers": 0.75, "target_loss_members": 0.125},
    )
    # theoretical_eps is the sweep's own: the released model's epsilon.
    row = project(
        SweepSiteRow, site, global_accuracy=0.9, theoretical_eps=released_model_epsilon(site)
    )
    assert (row.site_id, row.eps_tilde, row.theoretical_eps) == (3, 0.5, 4.0)
    assert (row.accuracy_holdout, row.global_accuracy) == (0.75, 0.9)
    with pytest.raises(TypeError, match="no field"):
        project(SweepSiteRow, site, not_a_field=1)
    # LedgerRow: a field not named after a SiteReport field must be passed (own).
    with pytest.raises(AttributeError):
        project(LedgerRow, site)


def test_every_table_column_has_a_header() -> None:
    for columns in (SITE_COLUMNS, LEDGER_COLUMNS, SWEEP_SITE_COLUMNS):
        assert all(md_headers(columns)) and all(html_headers(columns))
    assert md_headers(SITE_COLUMNS)[-2:] == ["flags", "status"]
    assert html_headers(SITE_COLUMNS)[:2] == ["site", "status"]


_PATCHES: dict[str, list[tuple[str, str]]] = {
    "audit/result.py": [
        (
            "    rm_rn_capped: bool = False\n",
            "    rm_rn_capped: bool = False\n    foo_flag: bool = False\n",
        )
    ],
    "reporting/schema.py": [
        # A flag of FlagsReport, a field of SiteReport and the same in the ledger's view.
        (
            "\n\n@dataclass(frozen=True)\nclass RepeatReport:",
            '    foo_flag: bool = flag("foo flag", badge="not-tight",'
            ' meaning="foo_flag: FOO MEANING", plain="FOO PLAIN")'
            "\n\n\n@dataclass(frozen=True)\nclass RepeatReport:",
        ),
        (
            '    best_eps_lb_method: str | None = spec(None)\n    """Which audit and method gave '
            '``best_eps_lb``."""\n',
            '    best_eps_lb_method: str | None = spec(None)\n    """Which audit and method gave '
            '``best_eps_lb``."""\n'
            '    foo_score: float | None = spec(None, label="foo score")\n',
        ),
        (
            "    best_eps_lb_method: str | None = spec()\n",
            "    best_eps_lb_method: str | None = spec()\n"
            '    foo_score: float | None = spec(label="foo score")\n',
        ),
    ],
    "reporting/aggregate.py": [
        (
            '        "repeats": _repeats(result),\n',
            '        "repeats": _repeats(result),\n        "foo_score": 0.4321,\n',
        ),
    ],
}


def test_adding_a_field_and_a_flag_touches_three_files(tmp_path: Path) -> None:
    """Patch a copy of the sources as a developer would (audit/result.py, reporting/schema.py,
    reporting/aggregate.py) and report a run with it: the new flag and field reach
    report.json, report.csv, report.md, report.html and ledger.csv."""
    src = tmp_path / "src"
    for package in ("audit", "reporting"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    for path, patches in _PATCHES.items():
        text = (src / path).read_text()
        for old, new in patches:
            assert text.count(old) == 1, f"{path}: the patch's anchor moved: {old!r}"
            text = text.replace(old, new)
        (src / path).write_text(text)
    audit = ok_audit(0, make_result([1.0, 1.5], [2.0, 2.5], rm_rn=[1.25, 1.5]), dp=8.0)
    audit["result"]["flags"]["foo_flag"] = True
    run = write_run(tmp_path / "run", n_sites=1, dp=8.0, audits={0: audit})
    script = (
        "import sys, reporting; "
        f"assert reporting.__file__.startswith({str(src)!r}), reporting.__file__; "
        "reporting.write_report(sys.argv[1])"
    )
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(run)], cwd=tmp_path, env=env, capture_output=True
    )
    assert proc.returncode == 0, proc.stderr.decode()

    site = json.loads((run / "report.json").read_text())["sites"][0]
    assert site["foo_score"] == 0.4321 and site["flags"]["foo_flag"] is True
    assert list(site)[-1] == "foo_score"
    with (run / "report.csv").open() as fh:
        header, row = list(csv.reader(fh))
    assert header[-1] == "foo_score" and row[-1] == "0.4321"
    assert header[header.index("rm_rn_capped") + 2] == "foo_flag"
    assert row[header.index("foo_flag")] == "true"
    assert "two_sided_member_foo_flag" in header
    with (run / "ledger.csv").open() as fh:
        ledger = next(csv.DictReader(fh))
    assert ledger["foo_score"] == "0.4321"
    md = (run / "report.md").read_text()
    assert "| foo score | flags | status |" in md and "| 0.432 |" in md
    assert "**foo flag**" in md and "FOO MEANING" in md
    page = (run / "report.html").read_text()
    assert "<th>foo score</th>" in page and 'badge not-tight">foo flag<' in page
