"""The share of a site's records an attack rebuilt, scored where the records are: at the
site. Only the summary (:class:`RebuiltShare`) leaves it.

* **Tabular**: a record counts as rebuilt when *every* field comes back: each one-hot field
  at the same level (the largest column of its block; a block with none above one half is
  no level), each numeric field within ``tolerance`` of the column's range (the schema's
  ``min``..``max`` on the source scale, else the site's own records' range).
* **Images**: SSIM (:mod:`audit.inversion.scores`) of each record with its rebuilt image, a
  record rebuilt at SSIM 0.9 and, more loosely, 0.6.

Each rebuilt record is matched to one original at most (a one-to-one assignment maximising
the total score, :func:`scipy.optimize.linear_sum_assignment`). A share reads against a
**baseline**: the same rebuild from an update the model computed on public records (no
private signal), scored against the same site records; that is what chance gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy
import torch

from panoramia_fl.audit.adversary.passthrough import PassThrough
from panoramia_fl.audit.inversion.scores import image_scores
from panoramia_fl.contracts.tabular_schema import Attribute, resolve_attributes

__all__ = ["IMAGE_THRESHOLDS", "TOLERANCE", "RebuiltShare", "rebuilt_share"]

TOLERANCE = 0.01
"""A numeric field is rebuilt within this share of its column's range."""
IMAGE_THRESHOLDS = (0.9, 0.6)
"""SSIM at which an image counts as rebuilt (strict, loose)."""


@dataclass(frozen=True)
class RebuiltShare:
    """How much of a site's records an attack rebuilt: summary numbers only."""

    measure: Literal["fields", "ssim"]
    n_records: int
    """The site's records the update came from (those scored)."""
    n_rebuilt: int
    """Rows the attack returned."""
    share: float
    """Records rebuilt: every field (tabular) or SSIM >= 0.9 (images)."""
    share_loose: float
    """Tabular: records with every one-hot field exact (numeric fields free); images:
    SSIM >= 0.6."""
    quality_mean: float
    """Mean over records of their match's share of fields (tabular) or SSIM (images);
    0 for a record left unmatched."""
    tolerance: float | None = None
    """Tabular: a numeric field's tolerance, as a share of its range."""
    reference: str | None = None
    """Images: ``original`` (the record as the site holds it) or ``passthrough`` (the
    record as the architecture lets it through: :meth:`PassThrough.comes_back`)."""


def _levels(block: torch.Tensor) -> torch.Tensor:
    """Each row's one-hot level; -1 where no column is above one half."""
    best, level = block.max(dim=1)
    return torch.where(best > 0.5, level, torch.full_like(level, -1))


def _spans(
    attributes: list[Attribute], schema: dict[str, Any] | None, records: torch.Tensor
) -> dict[int, float]:
    """Each numeric attribute's range in encoded units (the schema's min..max / std)."""
    columns = {c["start"]: c for c in (schema or {}).get("columns", [])}
    spans: dict[int, float] = {}
    for attr in attributes:
        if attr.kind != "numeric":
            continue
        col = columns.get(attr.start, {})
        if {"min", "max", "std"} <= col.keys() and col["std"] > 0:
            spans[attr.start] = float(col["max"] - col["min"]) / float(col["std"])
        else:
            values = records[:, attr.start]
            spans[attr.start] = float(values.max() - values.min())
        spans[attr.start] = max(spans[attr.start], 1e-12)
    return spans


def _field_hits(
    records: torch.Tensor,
    rebuilt: torch.Tensor,
    schema: dict[str, Any] | None,
    tolerance: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_records, n_rebuilt, fields) hits, and which fields are one-hot."""
    attributes = resolve_attributes(records.numpy(), schema)
    spans = _spans(attributes, schema, records)
    hits, onehot = [], []
    for attr in attributes:
        cols = attr.columns
        if attr.kind == "onehot":
            hits.append(_levels(records[:, cols])[:, None] == _levels(rebuilt[:, cols])[None, :])
        else:
            gap = (records[:, None, attr.start] - rebuilt[None, :, attr.start]).abs()
            hits.append(gap <= tolerance * spans[attr.start])
        onehot.append(attr.kind == "onehot")
    return torch.stack(hits, dim=2), torch.tensor(onehot)


def _matched(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(record rows, rebuilt columns) of the one-to-one assignment of highest total score."""
    return scipy.optimize.linear_sum_assignment(-score)


def _tabular(
    rebuilt: torch.Tensor, records: torch.Tensor, schema: dict[str, Any] | None, tolerance: float
) -> RebuiltShare:
    hits, onehot = _field_hits(records, rebuilt, schema, tolerance)
    share = hits.float().mean(dim=2).numpy()
    # Among equally good matches, prefer the one with every field: the strict count.
    rows, cols = _matched(share + hits.all(dim=2).float().numpy())
    whole = hits.all(dim=2).numpy()[rows, cols]
    levels = hits[:, :, onehot].all(dim=2).numpy()[rows, cols]
    n = len(records)
    return RebuiltShare(
        measure="fields",
        n_records=n,
        n_rebuilt=len(rebuilt),
        share=float(whole.sum()) / n,
        share_loose=float(levels.sum()) / n,
        quality_mean=float(share[rows, cols].sum()) / n,
        tolerance=tolerance,
    )


def _images(
    rebuilt: torch.Tensor, records: torch.Tensor, reference: str, passthrough: PassThrough | None
) -> RebuiltShare:
    if reference == "passthrough":
        if passthrough is None:
            raise ValueError("reference='passthrough' needs the crafted model's passthrough")
        records = passthrough.comes_back(records)
    # image_scores assigns one-to-one when it has at least as many candidates as records:
    # score from the smaller side.
    if len(rebuilt) >= len(records):
        quality = image_scores(records, rebuilt).quality
    else:
        quality = image_scores(rebuilt, records).quality
    n = len(records)
    strict, loose = IMAGE_THRESHOLDS
    return RebuiltShare(
        measure="ssim",
        n_records=n,
        n_rebuilt=len(rebuilt),
        share=float((quality >= strict).sum()) / n,
        share_loose=float((quality >= loose).sum()) / n,
        quality_mean=float(quality.sum()) / n,
        reference=reference,
    )


def rebuilt_share(
    rebuilt: torch.Tensor,
    records: torch.Tensor,
    *,
    schema: dict[str, Any] | None = None,
    tolerance: float = TOLERANCE,
    reference: Literal["original", "passthrough"] = "original",
    passthrough: PassThrough | None = None,
) -> RebuiltShare:
    """The share of ``records`` (the site's, in the model's input space) that ``rebuilt``
    gives back.

    Flat records ``(n, d)`` are tabular (``schema``: the dataset's encoding, which says
    which columns are one-hot and each numeric column's range; without it the structure is
    read off the records, :mod:`contracts.tabular_schema`); ``(n, C, H, W)`` are images in
    [-1, 1], compared with the original (``reference="original"``) or with what the
    architecture lets through (``"passthrough"``: ``passthrough`` is the crafted model's).
    """
    records = torch.as_tensor(records).float().cpu()
    rebuilt = torch.as_tensor(rebuilt).float().cpu()
    if len(records) == 0:
        raise ValueError("rebuilt_share: no records to score against")
    empty = RebuiltShare(
        measure="fields" if records.dim() == 2 else "ssim",
        n_records=len(records),
        n_rebuilt=0,
        share=0.0,
        share_loose=0.0,
        quality_mean=0.0,
        tolerance=tolerance if records.dim() == 2 else None,
        reference=None if records.dim() == 2 else reference,
    )
    if len(rebuilt) == 0:
        return empty
    rebuilt = torch.nan_to_num(rebuilt, nan=0.0, posinf=0.0, neginf=0.0)
    if records.dim() == 2:
        return _tabular(rebuilt, records, schema, tolerance)
    return _images(rebuilt, records, reference, passthrough)
