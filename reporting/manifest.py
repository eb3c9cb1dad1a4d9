"""The reproducibility manifest of a site's report: config hash, seeds, versions, commit, sizes."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from audit.result import AuditResult

from .schema import ReproManifest

PACKAGES: dict[str, str] = {
    "torch": "torch",
    "flwr": "flwr",
    "opacus": "opacus",
    "numpy": "numpy",
    "sklearn": "scikit-learn",
}
"""Shown name -> distribution name of the packages whose versions decide the numbers."""

_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def build_manifest(
    config_path: Path | None, config: dict[str, Any], result: AuditResult | None
) -> ReproManifest:
    """The manifest of one site's audit.

    Parameters
    ----------
    config_path
        The run's ``config.yaml`` (hashed byte for byte), or None when there is none.
    config
        Its parsed content (empty without one): the run and audit seeds.
    result
        The site's audit result (repeat seeds and data sizes); None for a failed audit.
    """
    path = config_path if config_path is not None and config_path.exists() else None
    settings = _section(_section(config, "audit"), "settings")
    return ReproManifest(
        config_file=None if path is None else path.name,
        config_sha256=None if path is None else file_sha256(path),
        run_seed=_int(config.get("seed")),
        audit_seed=_int(settings.get("seed")),
        repeat_seeds=[] if result is None else [int(r.seed) for r in result.repeats],
        packages=package_versions(),
        python=platform.python_version(),
        git_commit=git_commit(),
        git_dirty=git_dirty(),
        data_sizes={} if result is None else {str(k): int(v) for k, v in result.sizes.items()},
    )


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def package_versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (None for one that is not installed)."""
    versions: dict[str, str | None] = {}
    for shown, dist in PACKAGES.items():
        try:
            versions[shown] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[shown] = None
    return versions


def git_commit(root: Path = _PROJECT_ROOT) -> str | None:
    """``git rev-parse HEAD`` of the project's checkout; None without git or a checkout.

    An installed copy may sit inside some other repository (a venv in a checkout): only a
    repository whose top level is ``root`` itself counts.
    """
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if len(lines) != 2 or Path(lines[0]).resolve() != root.resolve():
        return None
    return lines[1]


def git_dirty(root: Path = _PROJECT_ROOT) -> bool | None:
    """Whether tracked files differ from the commit (None when that cannot be told)."""
    if git_commit(root) is None:
        return None
    try:
        code = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--"], cwd=root, capture_output=True, timeout=30
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: False, 1: True}.get(code)


def _section(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
