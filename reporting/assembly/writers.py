"""report.json, report.csv and ledger.csv writers.

The CSVs flatten the same dataclasses report.json holds: a nested field's columns are its
path joined by ``_`` (``audit_two_sided_member_c_lb_mean``), so a column names where its
value lives in the JSON. Lists of records (``repeats``, ``by_round``,
``per_class``) stay in report.json.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.json_values import dataclass_of, json_safe

from ..numbers.metrics import (
    EPS_TILDE,
    EPS_TILDE_TWO_SIDED,
    O1,
    O1_FDP,
    RM_RN,
    RM_RN_TWO_SIDED,
    Metric,
)
from ..schemas.schema import (
    VIEWS,
    BoundViolation,
    RunReport,
    SitePrivacy,
    SiteReport,
    mean_of,
    report_json,
)


def report_to_json_text(report: Any) -> str:
    """Deterministic JSON text of a report (sorted by construction, not by key)."""
    return json.dumps(report_json(report), indent=2, allow_nan=False, default=str) + "\n"


def flatten(obj: Any, cls: Any, prefix: str = "") -> dict[str, Any]:
    """Column -> value of a dataclass instance of type ``cls`` (None: every column empty)."""
    cells: dict[str, Any] = {}
    for key, inner, value in _members(obj, cls):
        name = prefix + key
        if inner is not None:
            cells.update(flatten(value, inner, name + "_"))
        elif isinstance(value, dict):
            for k, v in value.items():
                sub = dataclass_of(type(v))
                if sub is not None or isinstance(v, dict):
                    cells.update(flatten(v, sub or dict, f"{name}_{k}_"))
                else:
                    cells[f"{name}_{k}"] = v
        elif isinstance(value, list | tuple):
            if (
                not value
                or not dataclasses.is_dataclass(value[0])
                or isinstance(value[0], BoundViolation)
            ):
                cells[name] = "; ".join(_text(v) for v in value)
        else:
            cells[name] = value
    return cells


def _members(obj: Any, cls: Any) -> list[tuple[str, type | None, Any]]:
    """(key, its dataclass or None, value) of each member of ``obj`` (of type ``cls``): a
    dataclass's fields, a viewed type's keys (:data:`~.schema.VIEWS`), a mapping's items."""
    if cls is dict:
        return [(str(k), None, v) for k, v in obj.items()]
    if cls in VIEWS:
        return [(k.name, k.kind, None if obj is None else k.get(obj)) for k in VIEWS[cls]]
    hints = typing.get_type_hints(cls)
    return [
        (f.name, dataclass_of(hints[f.name]), None if obj is None else getattr(obj, f.name))
        for f in dataclasses.fields(cls)
    ]


def _text(value: Any) -> str:
    return value.message if isinstance(value, BoundViolation) else str(value)


def site_rows(sites: list[SiteReport]) -> list[dict[str, Any]]:
    """report.csv's rows: each site flattened."""
    return [flatten(s, SiteReport) for s in sites]


def ledger_csv_rows(report: RunReport) -> list[dict[str, Any]]:
    """ledger.csv's rows: each site's guarantees and checks beside its measurements."""
    rows = []
    for s in report.sites:
        a = s.panoramia
        measured: dict[str, Any] = {}
        if a is not None:
            measured = {
                **_values(s, EPS_TILDE, EPS_TILDE_TWO_SIDED),
                "two_sided_side": None if a.two_sided is None else a.two_sided.side,
                **_values(s, *_LEDGER_BOUNDS),
                "o1_fdp_mu": mean_of(a.o1_fdp_mu),
                **{f"quality_{k}": v for k, v in a.quality.items()},
            }
        rows.append(
            {
                "site_id": s.site_id,
                "status": s.status,
                "dp_level": report.dp_level,
                "secure_aggregation": report.secure_aggregation,
                **flatten(SitePrivacy(s), SitePrivacy),
                **measured,
                "global_accuracy": report.consortium.final_global_accuracy,
                **flatten(s.checks, type(s.checks), "checks_"),
            }
        )
    return rows


_LEDGER_BOUNDS = (RM_RN, RM_RN_TWO_SIDED, O1, O1_FDP)
"""The audit's lower bounds ledger.csv shows beside eps_tilde."""


def _values(site: SiteReport, *metrics: Metric) -> dict[str, float | None]:
    return {m.key: m.value(site) for m in metrics}


def write_rows(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """A CSV of the rows; its columns the union of their keys, in first-seen order."""
    rows = list(rows)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return atomic_write_text(path, text.getvalue())


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A text cell starting with one of these is a formula to a spreadsheet (CSV injection)."""


def csv_cell(value: Any) -> str:
    """CSV text of a value: repr for floats so the number reads back exactly as in the JSON.

    Text (a site's error message, a label) that a spreadsheet would run as a formula gets a
    leading ``'``; numbers are written as they are (a negative number is not text).
    """
    value = json_safe(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text
