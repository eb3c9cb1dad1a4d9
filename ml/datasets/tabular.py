"""Tabular datasets: the RAND Health Insurance Experiment (embedded) and user CSV/Parquet.

Encoding (what every tabular record looks like): ``x`` is float32 ``(n, d)``; each numeric
column is standardised with the mean and standard deviation of the site pool (missing values
imputed with the pool median first); each categorical column becomes ``k`` adjacent one-hot
columns, one per level seen in the pool (missing values are their own level ``"<missing>"``;
levels seen only in the public part encode as all zeros). ``y`` is int64 class indices.

``Dataset.info["schema"]`` describes the encoding (JSON): ``columns`` lists the source
attributes in encoded order with ``name``, ``kind`` (``"numeric"``/``"categorical"``),
``start``, ``width`` and ``mean``/``std`` or ``levels``; ``target`` and ``classes`` name the
label. Pass it to the task (``build_task("tabular", ..., schema=info["schema"])``; a run
does so through ``DatasetMeta.schema``) so the audit's generator knows which columns form
one attribute; without it the generator infers the same structure from the data
(:mod:`contracts.tabular_schema`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from panoramia_fl.ml.datasets import DATASETS, DataError, Dataset, LoaderOptions

MISSING_LEVEL = "<missing>"


@dataclass(frozen=True)
class EncodedTable:
    x: np.ndarray
    schema: dict[str, Any]


def encode_frame(
    frame: pd.DataFrame,
    *,
    numeric: list[str],
    categorical: list[str],
    fit_rows: np.ndarray,
    source: str,
) -> EncodedTable:
    """Encode ``frame`` (see the module docstring); statistics come from ``fit_rows`` only.

    Columns are encoded in ``frame`` order. ``source`` names the file in errors.
    """
    blocks: list[np.ndarray] = []
    columns: list[dict[str, Any]] = []
    start = 0
    for name in frame.columns:
        if name in categorical:
            block, column = _one_hot(frame[name], fit_rows=fit_rows, start=start)
        elif name in numeric:
            block, column = _standardised(
                frame[name], fit_rows=fit_rows, start=start, source=source
            )
        else:
            continue
        columns.append(column)
        blocks.append(block)
        start += block.shape[1]
    if not blocks:
        raise DataError(f"{source}: no feature columns left to encode")
    return EncodedTable(
        np.hstack(blocks).astype(np.float32),
        {"version": 1, "columns": columns, "encoded_width": start},
    )


def _one_hot(
    series: pd.Series, *, fit_rows: np.ndarray, start: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """A categorical column's one-hot block and its schema entry."""
    values = series.astype("string").fillna(MISSING_LEVEL).to_numpy(dtype=object)
    fit_values = values[fit_rows]
    levels = sorted({str(v) for v in fit_values})
    index = {level: i for i, level in enumerate(levels)}
    block = np.zeros((len(series), len(levels)), dtype=np.float32)
    rows = [(r, index[str(v)]) for r, v in enumerate(values) if str(v) in index]
    if rows:
        r, c = np.array(rows).T
        block[r, c] = 1.0
    return block, {
        "name": str(series.name),
        "kind": "categorical",
        "start": start,
        "width": len(levels),
        "levels": levels,
    }


def _standardised(
    series: pd.Series, *, fit_rows: np.ndarray, start: int, source: str
) -> tuple[np.ndarray, dict[str, Any]]:
    """A numeric column imputed and standardised, and its schema entry."""
    name = series.name
    col = pd.to_numeric(series, errors="coerce").astype(np.float64)
    infinite = np.flatnonzero(np.isinf(col.to_numpy()))
    if len(infinite):
        # One inf makes the column's mean and std inf, every value NaN after scaling.
        where = ", ".join(str(int(r)) for r in infinite[:3])
        raise DataError(
            f"{source}: column {name!r} has {len(infinite)} infinite value(s) (0-based "
            f"data rows {where}); replace or drop them"
        )
    fit_col = col.iloc[fit_rows]
    if fit_col.notna().sum() == 0:
        raise DataError(f"{source}: column {name!r} has no values in the site pool")
    median = float(fit_col.median())
    col = col.fillna(median)
    fit_col = fit_col.fillna(median)
    mean, std = float(fit_col.mean()), float(fit_col.std(ddof=0))
    std = std if std > 0 else 1.0
    block = ((col.to_numpy() - mean) / std).astype(np.float32)[:, None]
    return block, {
        "name": str(name),
        "kind": "numeric",
        "start": start,
        "width": 1,
        "mean": mean,
        "std": std,
        "median": median,
        "min": float(fit_col.min()),
        "max": float(fit_col.max()),
    }


def _public_split(units: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of rows in the public part: a fixed ``fraction`` of whole units."""
    if fraction <= 0:
        return np.zeros(len(units), dtype=bool)
    unique = np.unique(units)
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(unique)[: int(round(fraction * len(unique)))]
    return np.isin(units, chosen)


def _labels(values: pd.Series, source: str, column: str) -> tuple[np.ndarray, list[str]]:
    if values.isna().any():
        raise DataError(
            f"{source}: target column {column!r} has {int(values.isna().sum())} missing values"
        )
    classes = sorted(values.unique().tolist(), key=lambda v: (str(type(v)), v))
    if len(classes) < 2:
        raise DataError(f"{source}: target column {column!r} has a single value")
    if len(classes) > 100:
        raise DataError(
            f"{source}: target column {column!r} has {len(classes)} distinct "
            "values; a classification target is expected"
        )
    index = {c: i for i, c in enumerate(classes)}
    return values.map(index).to_numpy(dtype=np.int64), [str(c) for c in classes]


def build_dataset(
    name: str,
    frame: pd.DataFrame,
    *,
    y: np.ndarray,
    classes: list[str],
    target: str,
    numeric: list[str],
    categorical: list[str],
    units: np.ndarray,
    sites: np.ndarray | None,
    public_fraction: float,
    seed: int,
    source: str,
    extra_info: dict[str, Any],
) -> Dataset:
    """Split off the public part by unit, encode, attach the schema."""
    public = _public_split(units, public_fraction, seed)
    pool_rows = np.flatnonzero(~public)
    table = encode_frame(
        frame, numeric=numeric, categorical=categorical, fit_rows=pool_rows, source=source
    )
    schema = table.schema | {"target": target, "classes": classes}
    x_pool = table.x[~public]
    return Dataset(
        name=name,
        modality="tabular",
        x=x_pool,
        y=y[~public],
        num_classes=len(classes),
        input_shape=(int(table.x.shape[1]),),
        public_x=table.x[public] if public.any() else None,
        public_y=y[public] if public.any() else None,
        sites=None if sites is None else np.asarray(sites)[~public],
        groups=np.asarray(units)[~public],
        public_groups=np.asarray(units)[public] if public.any() else None,
        info={"source": source, "schema": schema, **extra_info},
    )


# -- RAND Health Insurance Experiment ------------------------------------------------------

RANDHIE_NUMERIC = [
    "coins",
    "idp",
    "mdeoff",
    "pioff",
    "year",
    "tookphys",
    "black",
    "income",
    "num",
    "educdec",
    "xage",
    "female",
    "mhi",
    "disea",
    "physlm",
    "xghindx",
]
"""Plan terms, demographics and baseline health. Left out: ``child``/``fchild`` (functions of
``xage`` and ``female``), ``time`` (eligible part of the year, 1 for 99.8% of rows), the log
transforms (``lfam``, ``lpi``, ``logc``, ``fmde``, ``linc``, ``lnum``), ``ghindx`` (``xghindx``
is its imputed version) and every utilisation or spending column (the targets' sources)."""
RANDHIE_CATEGORICAL = ["plan", "health"]
"""``health``: self-rated health (excellent, good, fair, poor) from the three dummies."""
RANDHIE_TARGETS = {
    "high_spending": "medical spending (meddol) above the table's median",
    "any_admission": "at least one hospital admission in the year (totadm > 0)",
    "any_spending": "any medical spending in the year (binexp = 1)",
}


def randhie_path() -> Path:
    import statsmodels.datasets.randhie as pkg

    return Path(pkg.__file__).parent / "src" / "randhie.csv"


class RandHIEOptions(LoaderOptions):
    target: Literal["high_spending", "any_admission", "any_spending"] = Field(
        "high_spending", description="binary label (see RANDHIE_TARGETS)"
    )
    unit: Literal["person", "person_year"] = Field(
        "person",
        description="person: one year per person drawn with a fixed seed (5,912 rows); "
        "person_year: all 20,190 rows (a person appears up to 5 times)",
    )
    public_fraction: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="persons kept out of every site (central evaluation, reference pools)",
    )
    max_rows: int | None = Field(None, ge=10, description="use the first N rows")


@DATASETS.register("randhie", options=RandHIEOptions)
def randhie(root: Path | None, options: RandHIEOptions) -> Dataset:
    """RAND HIE (statsmodels' copy of the table, public domain): 20,190 person-years.

    Features (``RANDHIE_NUMERIC`` + one-hot ``plan`` and ``health``): 16 numeric columns and
    two categoricals, 38 encoded columns. ``sites``: the experiment's six cities (``site``);
    ``groups``: the person (``zper``), so a person's years stay in one site and one split.
    ``unit="person"`` (default) keeps one year per person, so records are independent units.
    With ``unit="person_year"`` a site's members hold several years of the same people: the
    audit's own splits (D_in^tr / D_in^te) then share people, the baseline and the MIA learn
    to recognise them, and RM;RN (real non-members are other people) stops being an eps
    lower bound: measured on site 1 with an MLP after 10 epochs, RM;RN 0.97 while O(1) 0.09.
    """
    path = (root / "randhie.csv") if root is not None else randhie_path()
    frame = _read_table(path, sep=",")
    needed = (
        *RANDHIE_NUMERIC,
        "plan",
        "hlthg",
        "hlthf",
        "hlthp",
        "site",
        "zper",
        "meddol",
        "totadm",
        "binexp",
    )
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: missing columns {missing} (is this the RAND HIE table?)")
    if options.unit == "person":
        order = np.random.default_rng(2024).permutation(len(frame))
        _, first = np.unique(frame["zper"].to_numpy()[order], return_index=True)
        frame = frame.iloc[np.sort(order[first])].reset_index(drop=True)
    if options.max_rows is not None:
        frame = frame.iloc[: options.max_rows].reset_index(drop=True)
    y, target_info = _randhie_target(frame, options.target)
    return build_dataset(
        "randhie",
        _randhie_features(frame),
        y=y,
        classes=["0", "1"],
        target=options.target,
        numeric=RANDHIE_NUMERIC,
        categorical=RANDHIE_CATEGORICAL,
        units=frame["zper"].to_numpy(),
        sites=frame["site"].to_numpy(np.int64),
        public_fraction=options.public_fraction,
        seed=12345,
        source=str(path),
        extra_info={
            "target_meaning": RANDHIE_TARGETS[options.target],
            "unit": options.unit,
            "license": "public domain (statsmodels.datasets.randhie)",
            **target_info,
        },
    )


def _randhie_target(frame: pd.DataFrame, target: str) -> tuple[np.ndarray, dict[str, float]]:
    """The binary label ``target`` names, and what the dataset's info records of it."""
    if target == "high_spending":
        threshold = float(frame["meddol"].median())
        return (frame["meddol"] > threshold).to_numpy(np.int64), {"meddol_threshold": threshold}
    if target == "any_admission":
        return (frame["totadm"] > 0).to_numpy(np.int64), {}
    return (frame["binexp"] > 0).to_numpy(np.int64), {}


def _randhie_features(frame: pd.DataFrame) -> pd.DataFrame:
    """``plan``, self-rated ``health`` (one column from the table's three dummies) and the
    numeric columns."""
    dummies = frame[["hlthg", "hlthf", "hlthp"]].to_numpy()
    health = np.array(["excellent", "good", "fair", "poor"])[
        (dummies * np.array([1, 2, 3])).sum(axis=1).astype(np.int64)
    ]
    features = frame[["plan"]].assign(health=health)[["plan", "health"]]
    return pd.concat([features, frame[RANDHIE_NUMERIC]], axis=1)


# -- user CSV / Parquet ---------------------------------------------------------------------


class CsvOptions(LoaderOptions):
    path: str = Field(..., description="CSV or Parquet file; relative paths are under data.root")
    target: str = Field(..., description="label column")
    categorical: list[str] = Field(default_factory=list, description="columns one-hot encoded")
    drop: list[str] = Field(default_factory=list, description="columns ignored")
    site_column: str | None = Field(None, description="natural site of each row")
    group_column: str | None = Field(None, description="rows of one unit stay together")
    public_fraction: float = Field(0.2, ge=0, lt=1)
    sep: str = ","
    seed: int = Field(12345, description="seed of the public split")


def _read_table(path: Path, *, sep: str) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"missing data file: {path}")
    try:
        if path.suffix.lower() in {".parquet", ".pq"}:
            try:
                return pd.read_parquet(path)
            except ImportError as err:
                raise DataError(
                    f"{path}: reading Parquet needs pyarrow (`pip install pyarrow`): {err}"
                ) from None
        return pd.read_csv(path, sep=sep)
    except (
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        ValueError,
        OSError,
    ) as err:
        if isinstance(err, DataError):
            raise
        raise DataError(f"corrupt data file {path}: {err}") from None


def _csv_features(frame: pd.DataFrame, options: CsvOptions, path: Path) -> list[str]:
    """The feature columns, once every column the options name is found in ``frame``."""
    named: dict[str, Sequence[str | None]] = {
        "target": [options.target],
        "categorical": options.categorical,
        "drop": options.drop,
        "site_column": [options.site_column],
        "group_column": [options.group_column],
    }
    for key, cols in named.items():
        for col in cols:
            if col is not None and col not in frame.columns:
                raise DataError(
                    f"{path}: column {col!r} (data.options.{key}) not found; "
                    f"columns: {list(frame.columns)}"
                )
    special = {options.target, options.site_column, options.group_column, *options.drop}
    features = [c for c in frame.columns if c not in special]
    if not features:
        raise DataError(f"{path}: no feature columns besides the target/site/group/drop ones")
    return features


def _check_numeric(frame: pd.DataFrame, numeric: list[str], path: Path) -> None:
    """Refuse a numeric column with a value that does not parse as a number."""
    for col in numeric:
        values = frame[col]
        if pd.api.types.is_bool_dtype(values):
            continue
        if not pd.api.types.is_numeric_dtype(values):
            bad = values[pd.to_numeric(values, errors="coerce").isna() & values.notna()]
            if len(bad):
                raise DataError(
                    f"{path}: column {col!r} is not numeric (e.g. {bad.iloc[0]!r}); "
                    "list it in data.options.categorical or data.options.drop"
                )


@DATASETS.register("csv", options=CsvOptions)
def csv_table(root: Path | None, options: CsvOptions) -> Dataset:
    """A user table: every column not dropped, not the target and not a site/group column
    is a feature; it must be numeric unless listed in ``categorical``."""
    path = Path(options.path)
    if not path.is_absolute() and root is not None:
        path = root / path
    frame = _read_table(path, sep=options.sep)
    features = _csv_features(frame, options, path)
    numeric = [c for c in features if c not in options.categorical]
    _check_numeric(frame, numeric, path)
    y, classes = _labels(frame[options.target], str(path), options.target)
    units = (
        frame[options.group_column].to_numpy() if options.group_column else np.arange(len(frame))
    )
    sites = None
    if options.site_column:
        if frame[options.site_column].isna().any():
            raise DataError(f"{path}: site column {options.site_column!r} has missing values")
        _, sites = np.unique(frame[options.site_column].astype(str).to_numpy(), return_inverse=True)
    return build_dataset(
        path.stem,
        frame[features],
        y=y,
        classes=classes,
        target=options.target,
        numeric=numeric,
        categorical=list(options.categorical),
        units=units,
        sites=sites,
        public_fraction=options.public_fraction,
        seed=options.seed,
        source=str(path),
        extra_info={},
    )
