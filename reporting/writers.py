"""report.json, report.csv and ledger.csv writers."""

from __future__ import annotations

import csv
import dataclasses
import json
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .schema import (
    BoundViolation,
    IntervalReport,
    LedgerRow,
    RunReport,
    SiteReport,
    field_spec,
    to_jsonable,
)


def csv_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` with CSV columns, in column order: field order, each field with
    a ``csv_after`` moved right after the field it names (in field order)."""
    spread = [f for f in dataclasses.fields(cls) if (s := field_spec(f)) and s.csv is not None]
    for f in list(spread):
        after = field_spec(f).csv_after  # type: ignore[union-attr]
        if after is not None:
            spread.remove(f)
            anchor = next((i for i, g in enumerate(spread) if g.name == after), None)
            if anchor is None:
                raise TypeError(f"{cls.__name__}.{f.name}: csv_after {after!r} has no columns")
            spread.insert(anchor + 1, f)
    return spread


def csv_columns(cls: type) -> tuple[str, ...]:
    """The CSV columns of a dataclass, from its fields' :class:`~.schema.FieldSpec`."""
    return tuple(_cells(cls, None))


def csv_row(obj: Any) -> dict[str, Any]:
    """One CSV row of a dataclass instance: column -> value (as :func:`csv_cell` takes it)."""
    return _cells(type(obj), obj)


def _cells(cls: type, obj: Any, prefix: str = "") -> dict[str, Any]:
    """Column -> value of ``obj`` (all None when ``obj`` is None: the columns alone)."""
    hints = typing.get_type_hints(cls)
    cells: dict[str, Any] = {}
    for f in csv_fields(cls):
        s = field_spec(f)
        assert s is not None
        name = prefix + f.name
        value = None if obj is None else getattr(obj, f.name)
        if s.csv == "value":
            cells[name] = value
        elif s.csv == "interval":
            cells[name] = value
            interval = None if obj is None else getattr(obj, f"{f.name}_interval")
            cells.update(_cells(IntervalReport, interval, f"{name}_"))
        elif s.csv == "nested":
            inner = f"{f.name}_" if s.csv_prefix is None else s.csv_prefix
            cells.update(_cells(_dataclass_of(hints[f.name]), value, prefix + inner))
        elif s.csv == "keys":
            inner = f"{f.name}_" if s.csv_prefix is None else s.csv_prefix
            cells.update({f"{prefix}{inner}{k}": (value or {}).get(k) for k in s.csv_keys})
        elif s.csv == "pair":
            low, high = value if value and len(value) == 2 else (None, None)
            cells.update({f"{name}_low": low, f"{name}_high": high})
        elif s.csv == "join":
            cells[name] = None if value is None else "; ".join(_text(v) for v in value)
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: unknown csv kind {s.csv!r}")
    return cells


def _dataclass_of(hint: Any) -> type:
    """The dataclass of a field typed ``X`` or ``X | None``."""
    for arg in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(arg) and isinstance(arg, type):
            return arg
    raise TypeError(f"a nested CSV field must hold a dataclass, not {hint!r}")


def _text(value: Any) -> str:
    return value.message if isinstance(value, BoundViolation) else str(value)


CSV_COLUMNS: tuple[str, ...] = csv_columns(SiteReport)
"""report.csv's columns: :class:`~.schema.SiteReport`'s fields as their specs spread them.
The privacy ledger's fields come last, so older readers that index columns by position
still read the earlier ones; a new field's columns come last too."""

LEDGER_CSV_COLUMNS: tuple[str, ...] = csv_columns(LedgerRow)
"""ledger.csv's columns: :class:`~.schema.LedgerRow`'s fields, the canary interval spread
last."""


def report_to_json_text(report: RunReport) -> str:
    """Deterministic JSON text of the report (sorted by construction, not by key)."""
    return json.dumps(to_jsonable(report), indent=2, allow_nan=False) + "\n"


def write_json(report: RunReport, path: Path) -> Path:
    """Write ``report.json``."""
    path.write_text(report_to_json_text(report))
    return path


def write_ledger_csv(report: RunReport, path: Path) -> Path:
    """Write ``ledger.csv``: the privacy ledger, one row per site."""
    return _write_rows(path, LEDGER_CSV_COLUMNS, [csv_row(r) for r in report.ledger])


def _write_rows(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([csv_cell(row[c]) for c in columns])
    return path


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A text cell starting with one of these is a formula to a spreadsheet (CSV injection)."""


def csv_cell(value: Any) -> str:
    """CSV text of a value: repr for floats so the number reads back exactly as in the JSON.

    Text (a site's error message, a label) that a spreadsheet would run as a formula gets a
    leading ``'``; numbers are written as they are (a negative number is not text).
    """
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


def write_csv(report: RunReport, path: Path) -> Path:
    """Write ``report.csv``: one row per site, columns :data:`CSV_COLUMNS`."""
    return _write_rows(path, CSV_COLUMNS, [csv_row(site) for site in report.sites])
