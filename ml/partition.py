"""Partition a dataset into sites, and each site into train / holdout / test.

``train`` holds the site's members (exactly what it trains on), ``holdout`` real
non-members of the same site distribution (used only by the comparison audits), ``test``
the site's test records. Everything is deterministic from the seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.ml.datasets import Dataset


class PartitionConfig(BaseModel):
    """The ``partition`` section of the experiment config: how records become sites."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: Literal["iid", "dirichlet", "quantity", "natural"] = "dirichlet"
    num_sites: int = Field(5, ge=1)
    alpha: float = Field(0.5, gt=0, description="Dirichlet concentration (label skew)")
    sizes: list[int] | None = Field(None, description="quantity skew: explicit site sizes")
    power: float = Field(1.5, gt=0, description="quantity skew: power-law exponent")
    records_per_site: int | None = Field(
        None, ge=1, description="cap on records per site (train + holdout + test) before splitting"
    )
    holdout_fraction: float = Field(0.2, ge=0, lt=1, description="real non-members per site")
    test_fraction: float = Field(0.1, ge=0, lt=1, description="per-site test split")
    min_train: int = Field(20, ge=1, description="smallest acceptable train split")
    seed: int | None = Field(
        None,
        description="draws the sites' records and their splits (None: the run's seed); "
        "replicate runs keep it while their own seeds vary the training",
    )

    @model_validator(mode="after")
    def _fractions(self) -> PartitionConfig:
        if self.holdout_fraction + self.test_fraction >= 1:
            raise ValueError("holdout_fraction + test_fraction must be < 1")
        if self.sizes is not None and len(self.sizes) != self.num_sites:
            raise ValueError(f"sizes has {len(self.sizes)} entries for {self.num_sites} sites")
        return self

    def seed_for(self, run_seed: int) -> int:
        """The seed that draws the partition: ``seed``, else the run's ``run_seed``."""
        return run_seed if self.seed is None else self.seed


class PartitionError(UserError, ValueError):
    """A site cannot satisfy the requested splits; the message names the site and sizes."""


@dataclass(frozen=True)
class SiteSplit:
    """Indices into the dataset's pool for one site."""

    site_id: int
    train: np.ndarray
    holdout: np.ndarray
    test: np.ndarray


def _units(dataset: Dataset) -> np.ndarray:
    """Unit id per record: records of one unit (e.g. a document) stay together."""
    return dataset.groups if dataset.groups is not None else np.arange(len(dataset))


def _unit_labels(dataset: Dataset, units: np.ndarray, unit_ids: np.ndarray) -> np.ndarray:
    """The label of each of ``unit_ids``: that of its first record."""
    if dataset.y is None:
        return np.zeros(len(unit_ids), dtype=np.int64)
    known, first = np.unique(units, return_index=True)
    return np.asarray(dataset.y)[first[np.searchsorted(known, unit_ids)]]


def assign_units(
    dataset: Dataset, config: PartitionConfig, rng: np.random.Generator
) -> list[np.ndarray]:
    """Unit ids of each site, by the configured scheme."""
    units = _units(dataset)
    unit_ids = np.unique(units)
    k = config.num_sites
    if config.scheme == "natural":
        if dataset.sites is None:
            raise PartitionError(
                f"partition.scheme: natural needs a site column; dataset {dataset.name!r} has none"
            )
        site_of_unit = {u: s for u, s in zip(units, dataset.sites, strict=True)}
        names = np.unique(dataset.sites)
        if len(names) < k:
            raise PartitionError(
                f"partition.num_sites: {k} sites requested but the site "
                f"column has only {len(names)} values"
            )
        names = names[:k]
        return [np.asarray([u for u in unit_ids if site_of_unit[u] == n]) for n in names]
    shuffled = rng.permutation(unit_ids)
    if config.scheme == "iid":
        return [np.sort(part) for part in np.array_split(shuffled, k)]
    if config.scheme == "quantity":
        if config.sizes is not None:
            total = sum(config.sizes)
            if total > len(shuffled):
                raise PartitionError(
                    f"partition.sizes: total {total} exceeds the {len(shuffled)} available records"
                )
            cuts = np.cumsum(config.sizes)[:-1]
            shuffled = shuffled[:total]
        else:
            weights = rng.permutation(np.arange(1, k + 1, dtype=float) ** (-config.power))
            cuts = np.floor(np.cumsum(weights / weights.sum())[:-1] * len(shuffled)).astype(int)
        return [np.sort(part) for part in np.split(shuffled, cuts)]
    # Dirichlet label skew: per class, split its units across sites by Dir(alpha).
    labels = _unit_labels(dataset, units, shuffled)
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for cls in np.unique(labels):
        members = shuffled[labels == cls]
        share = rng.dirichlet(np.full(k, config.alpha))
        cuts = np.floor(np.cumsum(share)[:-1] * len(members)).astype(int)
        for site, chunk in enumerate(np.split(members, cuts)):
            parts[site].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def partition(dataset: Dataset, config: PartitionConfig, *, seed: int) -> list[SiteSplit]:
    """Sites and their train/holdout/test index splits, deterministic from ``seed``."""
    rng = np.random.default_rng(seed)
    units = _units(dataset)
    order = np.argsort(units, kind="stable")
    sorted_units = units[order]
    sites = []
    for site_id, site_units in enumerate(assign_units(dataset, config, rng)):
        site_units = rng.permutation(site_units)
        if config.records_per_site is not None:
            site_units = _cap_units(site_units, sorted_units, order, config.records_per_site)
        n = len(site_units)
        n_hold = int(round(config.holdout_fraction * n))
        n_test = int(round(config.test_fraction * n))
        hold_u, test_u, train_u = np.split(site_units, [n_hold, n_hold + n_test])
        split = SiteSplit(
            site_id=site_id,
            train=_records_of(train_u, sorted_units, order),
            holdout=_records_of(hold_u, sorted_units, order),
            test=_records_of(test_u, sorted_units, order),
        )
        if len(split.train) < config.min_train:
            raise PartitionError(
                f"site {site_id}: train split has {len(split.train)} records (holdout "
                f"{len(split.holdout)}, test {len(split.test)}) but partition.min_train is "
                f"{config.min_train}; use fewer sites, a larger alpha, or smaller fractions"
            )
        sites.append(split)
    return sites


def _records_of(unit_ids: np.ndarray, sorted_units: np.ndarray, order: np.ndarray) -> np.ndarray:
    lo = np.searchsorted(sorted_units, unit_ids, side="left")
    hi = np.searchsorted(sorted_units, unit_ids, side="right")
    if len(unit_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate([order[a:b] for a, b in zip(lo, hi, strict=True)]))


def _cap_units(
    site_units: np.ndarray, sorted_units: np.ndarray, order: np.ndarray, cap: int
) -> np.ndarray:
    sizes = np.searchsorted(sorted_units, site_units, side="right") - np.searchsorted(
        sorted_units, site_units, side="left"
    )
    keep = np.cumsum(sizes) <= cap
    return site_units[keep]


def partition_summary(dataset: Dataset, sites: list[SiteSplit], *, scheme: str, seed: int) -> dict:
    """Sizes and label histograms per site (saved as ``partition.json``)."""

    def hist(idx: np.ndarray) -> list[int]:
        if dataset.y is None:
            return []
        return np.bincount(dataset.y[idx], minlength=dataset.num_classes).tolist()

    return {
        "dataset": dataset.name,
        "scheme": scheme,
        "seed": seed,
        "sites": [
            {
                "site_id": s.site_id,
                "train": int(len(s.train)),
                "holdout": int(len(s.holdout)),
                "test": int(len(s.test)),
                "label_histogram": {"train": hist(s.train), "holdout": hist(s.holdout)},
            }
            for s in sites
        ],
    }
