"""A run's ``config.yaml``: written with the digest of its settings, checked for edits, and
read back for the report (:func:`report_config`), which needs no more than a few keys.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import yaml

from panoramia_fl.audit.result import finite
from panoramia_fl.contracts.dp_level import (
    RECORD_LEVELS,
    DPLevel,
    resolve_dp_level,
)
from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import CONFIG_DIGEST_FILE, RunLayout
from panoramia_fl.reporting.assembly.run_config import ReportConfig
from panoramia_fl.reporting.privacy.privacy_ledger import PrivacySettings, record_accountant_name
from panoramia_fl.simulations.audit_phase_config import audit_value
from panoramia_fl.simulations.experiment_config import ConfigError, ExperimentConfig, load_config
from panoramia_fl.simulations.policy_file import load_policy

DIGEST_LINE = "# panoramia-fl wrote this run's settings; their sha256: "
"""The first line of a run's ``config.yaml``: edited settings no longer match it."""


def _digest(settings: Any) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def dump_config(config: ExperimentConfig) -> str:
    """YAML of the resolved config (paths as strings, inf as .inf), after a comment line
    holding the digest of its settings (:func:`check_config_digest`)."""
    body = yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
    return f"{DIGEST_LINE}{_digest(yaml.safe_load(body))}\n{body}"


def write_run_config(layout: RunLayout, text: str) -> None:
    """A run's ``config.yaml`` (``text``: :func:`dump_config`'s), then its digest again in
    ``config.sha256`` beside it: a YAML tool that drops the first line cannot drop that."""
    if not layout.config.exists() or layout.config.read_text(encoding="utf-8") != text:
        atomic_write_text(layout.config, text)
    digest = text.partition("\n")[0].removeprefix(DIGEST_LINE) + "\n"
    if not layout.config_digest.exists() or layout.config_digest.read_text() != digest:
        atomic_write_text(layout.config_digest, digest)


def check_config_digest(path: Path) -> None:
    """A run's ``config.yaml`` still holds the settings the run wrote into it: a
    :class:`ConfigError` naming it when they were edited since (the model and audits on
    disk were not made with the edited ones). The settings must match the digest on its
    first line or the one in ``config.sha256`` beside it (:func:`write_run_config`), so
    removing the first line does not pass an edit. A file with neither (an older run's, or
    one a user's own Flower app wrote) is taken as it is."""
    first, _, body = path.read_text(encoding="utf-8").partition("\n")
    sidecar = path.parent / CONFIG_DIGEST_FILE
    digests = {first.removeprefix(DIGEST_LINE).strip()} if first.startswith(DIGEST_LINE) else set()
    if sidecar.is_file():
        digests.add(sidecar.read_text(encoding="utf-8").strip())
    if not digests:
        return
    try:
        settings = yaml.safe_load(body if first.startswith("#") else f"{first}\n{body}")
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if _digest(settings) not in digests:
        raise ConfigError(
            f"{path} was edited after the run wrote it (its settings no longer match the "
            f"digest the run kept in {CONFIG_DIGEST_FILE} and on its first line): what is on "
            f"disk was not made with them; put it back, change what may change with --resume "
            f"{path.parent} --set KEY=VALUE, or start another run"
        )


def load_run_config(path: Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """A run's ``config.yaml`` (with ``overrides``, ``key=value``) as the run was made: one
    written before ``audit.seeding`` existed seeds its audits as it always did (``legacy``),
    so a resumed old run audits its remaining sites as it audited the others."""
    config = load_config(path, overrides)
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    audit = raw.get("audit") if isinstance(raw, dict) else None
    written_before = isinstance(audit, dict) and "seeding" not in audit
    if written_before and not any(o.startswith("audit.seeding=") for o in overrides or []):
        seeding = config.audit.model_copy(update={"seeding": "legacy"})
        config = config.model_copy(update={"audit": seeding})
    return config


def report_config(layout: RunLayout, *, optional: bool = False) -> ReportConfig:
    """What the report needs of the run's ``config.yaml`` (:func:`report_config_of`);
    ``optional``: a directory without one reads as an empty config (a site's report from
    its audit file alone). A :class:`RunFileError` names the file when it is missing (and
    not optional) or malformed."""
    path = layout.config
    if not optional and not layout.root.is_dir():
        raise RunFileError(f"run directory {layout.root} does not exist")
    if not path.exists():
        if optional:
            return report_config_of({})
        raise RunFileError(f"{path} is missing (the run's resolved config)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise RunFileError(f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RunFileError(f"{path} must hold a mapping, got {type(data).__name__}")
    return report_config_of(data, file=path)


def report_config_of(raw: dict[str, Any], *, file: Path | None = None) -> ReportConfig:
    """:class:`ReportConfig` of a config read as plain data. Lenient: an older run's
    config, or the one a user's own Flower app writes (``deployment.site_audits``), need
    not validate; a key it lacks or holds in another type reads as unknown (None)."""
    audit = _section(raw, "audit")
    policy = _section(raw, "report").get("policy")
    return ReportConfig(
        privacy=privacy_settings(raw),
        name=None if raw.get("name") is None else str(raw["name"]),
        seed=_whole(raw.get("seed")),
        audit_seed=_whole(_section(audit, "settings").get("seed")),
        audited=audit.get("enabled") is not False,
        file=file,
        record=raw,
        policy=None if policy is None else load_policy(Path(policy)),
    )


def privacy_settings(raw: dict[str, Any]) -> PrivacySettings:
    """The DP level (:func:`contracts.dp_level.resolve_dp_level`), the record-level
    accountant's name, delta, declared size and input canaries of a config read as plain data
    (:class:`RunFileError` when ``dp.level`` is not a DP level)."""
    dp = raw.get("dp")
    section: dict[str, Any] = dp if isinstance(dp, dict) else {}
    level: DPLevel | None = None
    if "dp" in raw:
        target = section.get("target_epsilon")
        try:
            level = resolve_dp_level(
                section.get("level"),
                enabled=bool(section.get("enabled") if isinstance(dp, dict) else dp),
                record_epsilon_inf=isinstance(target, int | float) and math.isinf(target),
            )
        except ValueError as exc:
            raise RunFileError(f"config.yaml: {exc}") from exc
    input_canaries = finite(audit_value(_section(raw, "audit"), "input_canaries"))
    accountant = str(section.get("accountant") or "rdp")
    secure = _section(raw, "fl").get("secure_aggregation", "none")
    return PrivacySettings(
        dp_level=level,
        record_accountant=(record_accountant_name(accountant) if level in RECORD_LEVELS else None),
        delta=finite(section.get("delta")),
        input_canaries=int(input_canaries) if input_canaries and input_canaries > 0 else None,
        secure_aggregation="ideal" if secure == "ideal" else "none",
        declared_size=_whole(section.get("declared_size")),
    )


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
