"""The reproducibility manifest of a site's report: config hash, seeds, versions, commit, sizes."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from panoramia_fl.audit.result import PanoramiaResult
from panoramia_fl.contracts.run_log import PlatformInfo

from ..schemas.schema import ReproManifest
from .run_config import ReportConfig

PACKAGES: dict[str, str] = {
    "torch": "torch",
    "flwr": "flwr",
    "opacus": "opacus",
    "numpy": "numpy",
    "sklearn": "scikit-learn",
}
"""Shown name -> distribution name of the packages whose versions decide the numbers."""

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The checkout holding this package (``<root>/reporting/assembly/manifest.py``)."""


def build_manifest(
    config: ReportConfig,
    result: PanoramiaResult | None,
    platform_info: PlatformInfo | None = None,
) -> ReproManifest:
    """The manifest of one site's audit: the config file hashed byte for byte, its seeds,
    ``result``'s repeat seeds and data sizes (None for a failed audit), and the machine
    that trained the run (``platform_info``, from its ``platform.json``)."""
    path = config.file if config.file is not None and config.file.exists() else None
    commit, dirty = git_state()
    return ReproManifest(
        config_file=None if path is None else path.name,
        config_sha256=None if path is None else hashlib.sha256(path.read_bytes()).hexdigest(),
        run_seed=config.seed,
        audit_seed=config.audit_seed,
        repeat_seeds=[] if result is None else [int(r.seed) for r in result.repeats],
        packages=package_versions(),
        python=platform.python_version(),
        git_commit=commit,
        git_dirty=dirty,
        data_sizes={} if result is None else {str(k): int(v) for k, v in result.sizes.items()},
        platform=platform_info,
    )


def package_versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (None for one that is not installed)."""
    versions: dict[str, str | None] = {}
    for shown, dist in PACKAGES.items():
        try:
            versions[shown] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[shown] = None
    return versions


def _git(*args: str, root: Path) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(root: Path = _PROJECT_ROOT) -> tuple[str | None, bool | None]:
    """``git rev-parse HEAD`` of the project's checkout and whether tracked files differ
    from it; None for what cannot be told (no git, no checkout).

    An installed copy may sit inside some other repository (a venv in a checkout): only a
    repository whose top level is ``root`` itself counts.
    """
    out = _git("rev-parse", "--show-toplevel", "HEAD", root=root)
    lines = [] if out is None or out.returncode else out.stdout.split()
    if len(lines) != 2 or Path(lines[0]).resolve() != root.resolve():
        return None, None
    diff = _git("diff", "--quiet", "HEAD", "--", root=root)
    return lines[1], None if diff is None else {0: False, 1: True}.get(diff.returncode)
