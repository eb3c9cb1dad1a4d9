"""What the report needs of a run's config, typed (:class:`ReportConfig`).

Whoever asks for a report (the CLI, the runner, a sweep, a deployment) hands it in; the
config's owner (``simulations.config_file.report_config``) reads ``config.yaml`` into it. The
report itself reads no config key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from panoramia_fl.contracts.run_files import RunLayout

from ..gate.gate_policy import GatePolicy
from ..privacy.privacy_ledger import PrivacySettings


@dataclass(frozen=True)
class ReportConfig:
    """The run's config as the report uses it."""

    privacy: PrivacySettings
    """DP level, accountant, delta and canaries: the ledger's guarantees."""
    name: str | None = None
    seed: int | None = None
    """``seed``: the run's seed (the manifest)."""
    audit_seed: int | None = None
    """``audit.settings.seed`` (the manifest)."""
    audited: bool = True
    """``audit.enabled``: the run audits its sites, so a site without an audit file is lost."""
    file: Path | None = None
    """``config.yaml`` itself, hashed byte for byte by each site's manifest; None: none."""
    record: dict[str, Any] = field(default_factory=dict)
    """The config as ``config.yaml`` holds it: report.json's ``run``, copied, never read."""
    policy: GatePolicy | None = None
    """``report.policy``, read: the release policy whose verdict the report shows."""


ConfigReader = Callable[[RunLayout], ReportConfig]
"""Reads a run directory's config for its report (sweeps and replicate sets, whose runs
each have their own)."""
