"""report.json and report.csv writers."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from .schema import IntervalReport, RunReport, SiteReport, to_jsonable

_INTERVAL_FIELDS = ("low", "high", "std", "n")

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
    "c_lb",
    *(f"c_lb_{k}" for k in _INTERVAL_FIELDS),
    "c_eps_lb",
    *(f"c_eps_lb_{k}" for k in _INTERVAL_FIELDS),
    "eps_tilde",
    *(f"eps_tilde_{k}" for k in _INTERVAL_FIELDS),
    "ceiling",
    "headroom",
    "saturated",
    "c_lb_not_tight",
    "rm_rn_capped",
    "reasons",
    "rm_rn_eps_lb",
    *(f"rm_rn_eps_lb_{k}" for k in _INTERVAL_FIELDS),
    "o1_eps_lb",
    *(f"o1_eps_lb_{k}" for k in _INTERVAL_FIELDS),
    "target_loss_members",
    "target_loss_nonmembers",
    "dp_epsilon",
    "dp_epsilon_source",
    "baseline_auc",
    "mia_auc",
    "elapsed_s",
)


def report_to_json_text(report: RunReport) -> str:
    """Deterministic JSON text of the report (sorted by construction, not by key)."""
    return json.dumps(to_jsonable(report), indent=2, allow_nan=False) + "\n"


def write_json(report: RunReport, path: Path) -> Path:
    """Write ``report.json``."""
    path.write_text(report_to_json_text(report))
    return path


def flatten_site(site: SiteReport) -> dict[str, Any]:
    """One CSV row: the site's scalars with intervals and flags spread into columns."""
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
        "ceiling": site.ceiling,
        "headroom": site.headroom,
        "saturated": None if site.flags is None else site.flags.saturated,
        "c_lb_not_tight": None if site.flags is None else site.flags.c_lb_not_tight,
        "rm_rn_capped": None if site.flags is None else site.flags.rm_rn_capped,
        "reasons": None if site.flags is None else "; ".join(site.flags.reasons),
        "dp_epsilon": site.dp_epsilon,
        "dp_epsilon_source": site.dp_epsilon_source,
        "baseline_auc": site.baseline_auc,
        "mia_auc": site.mia_auc,
        "elapsed_s": site.elapsed_s,
        "target_loss_members": site.quality.get("target_loss_members"),
        "target_loss_nonmembers": site.quality.get("target_loss_nonmembers"),
    }
    for name in ("c_lb", "c_eps_lb", "eps_tilde", "rm_rn_eps_lb", "o1_eps_lb"):
        row[name] = getattr(site, name)
        iv: IntervalReport | None = getattr(site, f"{name}_interval")
        for key in _INTERVAL_FIELDS:
            row[f"{name}_{key}"] = None if iv is None else getattr(iv, key)
    return {col: row[col] for col in CSV_COLUMNS}


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
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for site in report.sites:
            row = flatten_site(site)
            writer.writerow([csv_cell(row[c]) for c in CSV_COLUMNS])
    return path
