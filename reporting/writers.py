"""report.json, report.csv and ledger.csv writers."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .schema import (
    SCORERS,
    SIDES,
    TPR_FPR_KEYS,
    BoundViolation,
    FlagsReport,
    IntervalReport,
    LedgerRow,
    RunReport,
    SiteReport,
    to_jsonable,
)

_INTERVAL_FIELDS = ("low", "high", "std", "n")
_FLAG_FIELDS = ("saturated", "c_lb_not_tight", "rm_rn_capped", "reasons")
_SIDE_FIELDS = (
    "c_lb",
    "c_eps_lb",
    "eps_tilde",
    "ceiling",
    "headroom",
    "rm_rn_eps_lb",
    "rm_rn_ceiling",
)
"""Scalars of :class:`~.schema.SideReport` given a ``two_sided_<side>_`` column each."""


def _with_interval(name: str) -> tuple[str, ...]:
    """A value's column and its interval's (``<name>_low`` ...)."""
    return (name, *(f"{name}_{k}" for k in _INTERVAL_FIELDS))


CSV_COLUMNS: tuple[str, ...] = (
    "site_id",
    "status",
    "error",
    "n_members",
    "n_holdout",
    "modality",
    "generator_kind",
    "beta",
    "n_repeats",
    *_with_interval("c_lb"),
    *_with_interval("c_eps_lb"),
    *_with_interval("eps_tilde"),
    *_with_interval("eps_tilde_two_sided"),
    "two_sided_side",
    "ceiling",
    "headroom",
    *_FLAG_FIELDS,
    *_with_interval("rm_rn_eps_lb"),
    *_with_interval("rm_rn_eps_lb_two_sided"),
    *_with_interval("o1_eps_lb"),
    "two_sided_beta",
    *(f"two_sided_{side}_{name}" for side in SIDES for name in (*_SIDE_FIELDS, *_FLAG_FIELDS)),
    "target_loss_members",
    "target_loss_nonmembers",
    "dp_epsilon",
    "dp_epsilon_source",
    *(f"{scorer}_auc" for scorer in SCORERS),
    *(f"{scorer}_tpr_at_fpr_{key}" for scorer in SCORERS for key in TPR_FPR_KEYS),
    "elapsed_s",
    "dp_epsilon_record",
    "dp_epsilon_client",
    "dp_epsilon_client_record",
    "dp_delta",
    "canaries",
    "canary_eps_lb",
    "canary_eps_interval_low",
    "canary_eps_interval_high",
    "bound_violations",
    "eps_tilde_above_accountant",
    "eps_tilde_above_accountant_reason",
)
"""report.csv's columns; the privacy ledger's fields come last, so older readers that index
columns by position still read the earlier ones."""

LEDGER_CSV_COLUMNS: tuple[str, ...] = (
    *(f.name for f in dataclasses.fields(LedgerRow) if f.name != "canary_eps_interval"),
    "canary_eps_interval_low",
    "canary_eps_interval_high",
)
"""ledger.csv's columns: :class:`~.schema.LedgerRow`'s fields, the canary interval spread."""


def report_to_json_text(report: RunReport) -> str:
    """Deterministic JSON text of the report (sorted by construction, not by key)."""
    return json.dumps(to_jsonable(report), indent=2, allow_nan=False) + "\n"


def write_json(report: RunReport, path: Path) -> Path:
    """Write ``report.json``."""
    path.write_text(report_to_json_text(report))
    return path


def _flag_cells(flags: FlagsReport | None, prefix: str = "") -> dict[str, Any]:
    if flags is None:
        return {f"{prefix}{name}": None for name in _FLAG_FIELDS}
    cells: dict[str, Any] = {f"{prefix}{name}": getattr(flags, name) for name in _FLAG_FIELDS}
    cells[f"{prefix}reasons"] = "; ".join(flags.reasons)
    return cells


def _interval_cells(name: str, value: float | None, iv: IntervalReport | None) -> dict[str, Any]:
    cells: dict[str, Any] = {name: value}
    cells.update({f"{name}_{k}": None if iv is None else getattr(iv, k) for k in _INTERVAL_FIELDS})
    return cells


def _side_cells(site: SiteReport, side: str) -> dict[str, Any]:
    prefix = f"two_sided_{side}_"
    block = None if site.two_sided is None else getattr(site.two_sided, side)
    cells = {f"{prefix}{name}": getattr(block, name, None) for name in _SIDE_FIELDS}
    cells.update(_flag_cells(None if block is None else block.flags, prefix))
    return cells


def flatten_site(site: SiteReport) -> dict[str, Any]:
    """One CSV row: the site's scalars with intervals, flags and sides spread into columns."""
    row: dict[str, Any] = {
        "site_id": site.site_id,
        "status": site.status,
        "error": site.error,
        "n_members": site.n_members,
        "n_holdout": site.n_holdout,
        "modality": site.modality,
        "generator_kind": site.generator_kind,
        "beta": site.beta,
        "n_repeats": site.n_repeats,
        "two_sided_side": site.two_sided_side,
        "ceiling": site.ceiling,
        "headroom": site.headroom,
        "two_sided_beta": None if site.two_sided is None else site.two_sided.beta,
        "dp_epsilon": site.dp_epsilon,
        "dp_epsilon_source": site.dp_epsilon_source,
        "elapsed_s": site.elapsed_s,
        **{
            name: getattr(site, name)
            for name in (
                "dp_epsilon_record",
                "dp_epsilon_client",
                "dp_epsilon_client_record",
                "dp_delta",
                "canaries",
                "canary_eps_lb",
                "eps_tilde_above_accountant",
                "eps_tilde_above_accountant_reason",
            )
        },
        **_canary_interval_cells(site.canary_eps_interval),
        "bound_violations": violations_text(site.bound_violations),
        "target_loss_members": site.quality.get("target_loss_members"),
        "target_loss_nonmembers": site.quality.get("target_loss_nonmembers"),
        **_flag_cells(site.flags),
    }
    for name in (
        "c_lb",
        "c_eps_lb",
        "eps_tilde",
        "eps_tilde_two_sided",
        "rm_rn_eps_lb",
        "rm_rn_eps_lb_two_sided",
        "o1_eps_lb",
    ):
        row.update(_interval_cells(name, getattr(site, name), getattr(site, f"{name}_interval")))
    for side in SIDES:
        row.update(_side_cells(site, side))
    for scorer in SCORERS:
        row[f"{scorer}_auc"] = getattr(site, f"{scorer}_auc")
        tpr = getattr(site, f"{scorer}_tpr_at_fpr") or {}
        row.update({f"{scorer}_tpr_at_fpr_{key}": tpr.get(key) for key in TPR_FPR_KEYS})
    # A KeyError here means CSV_COLUMNS and this row disagree: fail loudly, not silently.
    return {col: row[col] for col in CSV_COLUMNS}


def violations_text(violations: list[BoundViolation]) -> str:
    """The violations of a site in one CSV cell (empty without any)."""
    return "; ".join(v.message for v in violations)


def _canary_interval_cells(interval: list[float | None] | None) -> dict[str, Any]:
    low, high = interval if interval and len(interval) == 2 else (None, None)
    return {"canary_eps_interval_low": low, "canary_eps_interval_high": high}


def flatten_ledger_row(row: LedgerRow) -> dict[str, Any]:
    """One ledger.csv row: the ledger's fields, the canary interval and violations spread."""
    cells: dict[str, Any] = {
        name: getattr(row, name) for name in LEDGER_CSV_COLUMNS if hasattr(row, name)
    }
    cells["bound_violations"] = violations_text(row.bound_violations)
    cells.update(_canary_interval_cells(row.canary_eps_interval))
    return {col: cells[col] for col in LEDGER_CSV_COLUMNS}


def write_ledger_csv(report: RunReport, path: Path) -> Path:
    """Write ``ledger.csv``: the privacy ledger, one row per site."""
    return _write_rows(path, LEDGER_CSV_COLUMNS, [flatten_ledger_row(r) for r in report.ledger])


def _write_rows(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([csv_cell(row[c]) for c in columns])
    return path


def csv_cell(value: Any) -> str:
    """CSV text of a value: repr for floats so the number reads back exactly as in the JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_csv(report: RunReport, path: Path) -> Path:
    """Write ``report.csv``: one row per site, columns :data:`CSV_COLUMNS`."""
    return _write_rows(path, CSV_COLUMNS, [flatten_site(site) for site in report.sites])
