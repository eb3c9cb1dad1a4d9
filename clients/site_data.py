"""A site's own records, as stored at the site (one ``.npz`` file per site).

In simulation the harness writes these files when it partitions the dataset; under the
Deployment Engine each hospital points its SuperNode at its own file (``data-path``).

Simulations may add canaries (``audit.input_canaries``): records made up by the harness, each
trained on by an independent fair coin (``input_canary_included``) and audited one-run after
training. They are never members: ``records("train")`` and ``train_x`` hold the members
only, while local training uses :attr:`SiteData.training_x` (members plus the included
canaries).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.contracts.errors import MissingFileError
from panoramia_fl.contracts.files import atomic_write

_PARTS = ("train", "holdout", "test", "public")
_AXES = ("x", "y", "groups")
_INPUT_CANARY_ARRAYS = ("input_canary_x", "input_canary_y", "input_canary_included")
_INPUT_CANARY_KIND = "input_canary_kind"
_OLDER_KEYS = {
    key.removeprefix("input_"): key for key in (*_INPUT_CANARY_ARRAYS, _INPUT_CANARY_KIND)
}
"""Input-canary keys of site files written before they said which canaries (``canary_x``)."""


@dataclass(frozen=True)
class SiteData:
    """Members (``train``), real non-members (``holdout``), ``test``, and optionally the
    public records of the same kind a site may use as a reference pool. ``*_groups`` name
    each record's unit (document, person) where the data has one."""

    site_id: int
    train_x: np.ndarray
    train_y: np.ndarray | None
    holdout_x: np.ndarray
    holdout_y: np.ndarray | None
    test_x: np.ndarray
    test_y: np.ndarray | None
    public_x: np.ndarray | None = None
    public_y: np.ndarray | None = None
    train_groups: np.ndarray | None = None
    holdout_groups: np.ndarray | None = None
    test_groups: np.ndarray | None = None
    public_groups: np.ndarray | None = None
    input_canary_x: np.ndarray | None = None
    input_canary_y: np.ndarray | None = None
    input_canary_included: np.ndarray | None = None
    """One coin per canary: true where the canary is in the training data."""
    input_canary_kind: str | None = None
    """How the canaries were made (e.g. ``noise_image``)."""

    def __post_init__(self) -> None:
        if (self.input_canary_x is None) != (self.input_canary_included is None):
            raise ValueError(
                f"site {self.site_id}: input_canary_x and input_canary_included come together "
                "or not at all"
            )
        if self.input_canary_x is not None and self.input_canary_included is not None:
            n = len(self.input_canary_x)
            if len(self.input_canary_included) != n or (
                self.input_canary_y is not None and len(self.input_canary_y) != n
            ):
                raise ValueError(
                    f"site {self.site_id}: {n} canaries but {len(self.input_canary_included)} coins"
                    + (
                        ""
                        if self.input_canary_y is None
                        else f" and {len(self.input_canary_y)} labels"
                    )
                )
            if (self.input_canary_y is None) != (self.train_y is None):
                raise ValueError(f"site {self.site_id}: canaries and members disagree on labels")

    @property
    def has_input_canaries(self) -> bool:
        return self.input_canary_x is not None and len(self.input_canary_x) > 0

    @property
    def training_x(self) -> np.ndarray:
        """What local training uses: the members, then the included canaries."""
        if self.input_canary_x is None or self.input_canary_included is None:
            return self.train_x
        return np.concatenate([self.train_x, self.input_canary_x[self.input_canary_included]])

    @property
    def training_y(self) -> np.ndarray | None:
        """Labels of :attr:`training_x` (``None`` where the task has none)."""
        if (
            self.train_y is None
            or self.input_canary_y is None
            or self.input_canary_included is None
        ):
            return self.train_y
        return np.concatenate([self.train_y, self.input_canary_y[self.input_canary_included]])

    def input_canary_records(self) -> tuple[Records, np.ndarray]:
        """All canaries (included or not) and their coins (true: trained on)."""
        if self.input_canary_x is None or self.input_canary_included is None:
            raise ValueError(f"site {self.site_id}: no canaries")
        return Records(self.input_canary_x, self.input_canary_y), self.input_canary_included

    def with_input_canaries(
        self, x: np.ndarray, y: np.ndarray | None, included: np.ndarray, *, kind: str
    ) -> SiteData:
        """The same site with canaries ``(x, y)`` and their coins ``included``."""
        return replace(
            self,
            input_canary_x=x,
            input_canary_y=y,
            input_canary_included=np.asarray(included, dtype=bool),
            input_canary_kind=str(kind),
        )

    def records(self, part: str) -> Records:
        """One part (``train``, ``holdout``, ``test``, ``public``) as audit records."""
        x = getattr(self, f"{part}_x")
        if x is None:
            raise ValueError(f"site {self.site_id}: no {part} records")
        return Records(x, getattr(self, f"{part}_y"), getattr(self, f"{part}_groups"))

    def with_public(self, public: Records) -> SiteData:
        """The same site with ``public`` as its reference-pool records."""
        return replace(self, public_x=public.x, public_y=public.y, public_groups=public.groups)

    def save(self, path: Path) -> None:
        # Any, not ndarray: mypy would match ndarray values against savez's `allow_pickle: bool`.
        arrays: dict[str, Any] = {"site_id": np.asarray(self.site_id)}
        for part in _PARTS:
            for axis in _AXES:
                value = getattr(self, f"{part}_{axis}")
                if value is not None:
                    arrays[f"{part}_{axis}"] = value
        for key in _INPUT_CANARY_ARRAYS:
            value = getattr(self, key)
            if value is not None:
                arrays[key] = value
        if self.input_canary_kind is not None:
            # A 0-d unicode array: loads without pickle.
            arrays[_INPUT_CANARY_KIND] = np.asarray(self.input_canary_kind, dtype=np.str_)
        # A site's records: owner-only (0600 in a 0700 folder), durable, atomic.
        atomic_write(path, lambda fh: np.savez(fh, **arrays), private=True)

    @classmethod
    def load(cls, path: Path) -> SiteData:
        if not path.exists():
            raise MissingFileError(f"site data file not found: {path}")
        with np.load(path, allow_pickle=False) as f:
            arrays = {_OLDER_KEYS.get(key, key): f[key] for key in f.files}
        site_id = int(arrays.pop("site_id"))
        kind = arrays.pop(_INPUT_CANARY_KIND, None)
        kwargs: dict[str, Any] = {**arrays, _INPUT_CANARY_KIND: None if kind is None else str(kind)}
        if kwargs.get("input_canary_included") is not None:
            kwargs["input_canary_included"] = kwargs["input_canary_included"].astype(bool)
        for part in _PARTS:
            for axis in _AXES:
                kwargs.setdefault(f"{part}_{axis}", None)
        if kwargs["train_x"] is None:
            raise ValueError(f"{path}: no train_x array (a site's members)")
        if kwargs["holdout_x"] is None:
            kwargs["holdout_x"] = kwargs["train_x"][:0]
        if kwargs["test_x"] is None:
            kwargs["test_x"] = kwargs["train_x"][:0]
        return cls(site_id=site_id, **kwargs)
