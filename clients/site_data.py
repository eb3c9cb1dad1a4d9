"""A site's own records, as stored at the site (one ``.npz`` file per site).

In simulation the harness writes these files when it partitions the dataset; under the
Deployment Engine each hospital points its SuperNode at its own file (``data-path``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from audit.components import Records

_PARTS = ("train", "holdout", "test", "public")
_AXES = ("x", "y", "groups")


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
        arrays: dict[str, np.ndarray] = {"site_id": np.asarray(self.site_id)}
        for part in _PARTS:
            for axis in _AXES:
                value = getattr(self, f"{part}_{axis}")
                if value is not None:
                    arrays[f"{part}_{axis}"] = value
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> SiteData:
        if not path.exists():
            raise FileNotFoundError(f"site data file not found: {path}")
        with np.load(path, allow_pickle=False) as f:
            kwargs = {key: f[key] for key in f.files if key != "site_id"}
            site_id = int(f["site_id"])
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
