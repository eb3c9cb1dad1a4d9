"""A site's own records, as stored at the site (one ``.npz`` file per site).

In simulation the harness writes these files when it partitions the dataset; under the
Deployment Engine each hospital points its SuperNode at its own file (``data-path``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

_PARTS = ("train", "holdout", "test", "public")


@dataclass(frozen=True)
class SiteData:
    """Members (``train``), real non-members (``holdout``), ``test``, and optionally the
    public records of the same kind a site may use as a reference pool."""

    site_id: int
    train_x: np.ndarray
    train_y: np.ndarray | None
    holdout_x: np.ndarray
    holdout_y: np.ndarray | None
    test_x: np.ndarray
    test_y: np.ndarray | None
    public_x: np.ndarray | None = None
    public_y: np.ndarray | None = None

    def save(self, path: Path) -> None:
        arrays: dict[str, np.ndarray] = {"site_id": np.asarray(self.site_id)}
        for part in _PARTS:
            x, y = getattr(self, f"{part}_x"), getattr(self, f"{part}_y")
            if x is not None:
                arrays[f"{part}_x"] = x
            if y is not None:
                arrays[f"{part}_y"] = y
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
            for axis in ("x", "y"):
                kwargs.setdefault(f"{part}_{axis}", None)
        if kwargs["train_x"] is None:
            raise ValueError(f"{path}: no train_x array (a site's members)")
        if kwargs["holdout_x"] is None:
            kwargs["holdout_x"] = kwargs["train_x"][:0]
        if kwargs["test_x"] is None:
            kwargs["test_x"] = kwargs["train_x"][:0]
        return cls(site_id=site_id, **kwargs)
