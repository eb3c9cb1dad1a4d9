"""Read a run directory (layout in the team contract) into typed inputs for the report.

Missing or malformed ``config.yaml`` / ``partition.json`` / ``metrics.jsonl`` lines, and a
malformed ``client_dp.json`` (absent unless client-level DP is on), raise
:class:`ReportInputError` naming the file (and line or key). A site's audit file that is
missing or unreadable does not: that site becomes "missing" / "failed" and the others stay;
a malformed ``canary`` block in it only drops the canary numbers.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from audit.over_rounds import RoundLeakage
from audit.result import AuditResult
from contracts.errors import UserError
from contracts.run_files import NOISE_NOTES, RunLayout

from .schema import (
    CanaryReport,
    ClientDPReport,
    ClientDPSiteReport,
    RoundReport,
    SiteRoundReport,
)

"""The server's client-level DP ledger in the run directory (only with client-level DP)."""

log = logging.getLogger(__name__)


class ReportInputError(UserError, ValueError):
    """A run directory's file is missing or malformed (the message names it)."""


@dataclass(frozen=True)
class SiteAuditInput:
    """One ``audits/site-<id>.json`` as read (``result`` parsed, ``status`` checked)."""

    site_id: int
    status: str
    """"ok", "failed" or "missing"."""
    error: str | None
    n_members: int | None
    n_holdout: int | None
    dp_epsilon: float | None
    """The site's record-level (Opacus) accountant epsilon, or None."""
    elapsed_s: float | None
    result: AuditResult | None
    canary: CanaryReport | None = None
    """The site's canary audit, when the run trained with canaries."""
    by_round: list[RoundLeakage] = field(default_factory=list)
    """The file's ``by_round`` lines (an unreadable one is dropped with a warning)."""


@dataclass(frozen=True)
class RunInputs:
    """The parsed contents of a run directory."""

    run_dir: Path
    config: dict[str, Any]
    partition: dict[str, Any]
    rounds: list[RoundReport]
    audits: dict[int, SiteAuditInput] = field(default_factory=dict)
    """One entry per site in partition.json or audits/ (status "missing" when no file)."""
    has_metrics: bool = True
    client_dp: ClientDPReport | None = None
    """``client_dp.json``, when the run has one (client-level DP)."""
    noise_source: str | None = None
    """``noise.json``'s ``source`` (``contracts.run_files.NoiseSource``); None: no file
    (runs older than it, all simulated, so seeded)."""


def load_run(run_dir: Path) -> RunInputs:
    """Read ``config.yaml``, ``partition.json``, ``metrics.jsonl`` and ``audits/`` of a run.

    Parameters
    ----------
    run_dir
        A run directory written by the harness.

    Returns
    -------
    RunInputs
        ``rounds`` is empty and ``has_metrics`` False when ``metrics.jsonl`` is absent.

    Raises
    ------
    ReportInputError
        When the directory, ``config.yaml`` or ``partition.json`` is missing or malformed, or
        a line of ``metrics.jsonl`` is not a valid round record, or ``client_dp.json`` is
        malformed.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportInputError(f"run directory {run_dir} does not exist")
    layout = RunLayout(run_dir)
    config = _load_config(layout.config)
    partition = _load_partition(layout.partition)
    metrics_path = layout.metrics
    rounds = _load_metrics(metrics_path) if metrics_path.exists() else []
    site_ids = {int(s["site_id"]) for s in partition["sites"]}
    audit_files = layout.audit_files()
    partition_sites = {int(s["site_id"]): s for s in partition["sites"]}
    audits: dict[int, SiteAuditInput] = {}
    for site_id in sorted(site_ids | set(audit_files)):
        part = partition_sites.get(site_id, {})
        if site_id in audit_files:
            audits[site_id] = _load_site_audit(audit_files[site_id], site_id, part)
        else:
            audits[site_id] = SiteAuditInput(
                site_id=site_id, status="missing", error=None, result=None, **_file_fields({}, part)
            )
    return RunInputs(
        run_dir=run_dir,
        config=config,
        partition=partition,
        rounds=rounds,
        audits=audits,
        has_metrics=metrics_path.exists(),
        client_dp=load_client_dp(run_dir),
        noise_source=_noise_source(layout.noise),
    )


def _noise_source(path: Path) -> str | None:
    """Where the run's DP noise came from, by ``noise.json``; None when it has none."""
    if not path.exists():
        return None
    data = _read_json(path)
    source = data.get("source") if isinstance(data, dict) else None
    if source not in NOISE_NOTES:
        raise ReportInputError(f"{path}: key 'source' must be one of {sorted(NOISE_NOTES)}")
    return str(source)


def load_client_dp(run_dir: Path) -> ClientDPReport | None:
    """The server's ``client_dp.json`` in ``run_dir``, or None when there is none.

    Raises
    ------
    ReportInputError
        When the file is not a JSON object, or a key holds the wrong type (named).
    """
    path = RunLayout(run_dir).client_dp_ledger
    if not path.exists():
        return None
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ReportInputError(f"{path} must hold a JSON object")
    sites_raw = data.get("sites") or {}
    if not isinstance(sites_raw, dict):
        raise ReportInputError(f"{path}: key 'sites' must map site id to its epsilons")
    sites: dict[str, ClientDPSiteReport] = {}
    for sid, entry in sorted(sites_raw.items(), key=lambda kv: _site_sort_key(kv[0])):
        where = f"{path} sites.{sid}"
        if not isinstance(entry, dict):
            raise ReportInputError(f"{where} must be an object")
        rounds = entry.get("rounds") or []
        if not isinstance(rounds, list) or not all(_opt_int(r) is not None for r in rounds):
            raise ReportInputError(f"{where}.rounds must be a list of round numbers")
        sites[str(sid)] = ClientDPSiteReport(
            rounds=[int(r) for r in rounds],
            epsilon=_finite_or_none(_opt_float(entry.get("epsilon"), f"{where}.epsilon")),
            epsilon_record=_finite_or_none(
                _opt_float(entry.get("epsilon_record"), f"{where}.epsilon_record")
            ),
        )
    return ClientDPReport(
        schema_version=_opt_int(data.get("schema_version")),
        accountant=_opt_str(data.get("accountant")),
        noise_multiplier=_opt_float(data.get("noise_multiplier"), f"{path} noise_multiplier"),
        clipping=_opt_str(data.get("clipping")),
        clipping_side=_opt_str(data.get("clipping_side")),
        clipping_norm=_opt_float(data.get("clipping_norm"), f"{path} clipping_norm"),
        delta=_opt_float(data.get("delta"), f"{path} delta"),
        population_size=_opt_int(data.get("population_size")),
        sites_per_round=_opt_int(data.get("sites_per_round")),
        sampling=_opt_str(data.get("sampling")),
        neighboring_relation=_opt_str(data.get("neighboring_relation")),
        rounds_done=_opt_int(data.get("rounds_done")),
        sites=sites,
    )


def parse_canary(value: Any) -> CanaryReport | None:
    """An audit file's ``canary`` block; None when absent, null or not an object.

    Lenient like the rest of a site's audit file: a malformed number reads as None.
    """
    if not isinstance(value, dict):
        return None
    interval = value.get("eps_interval")
    return CanaryReport(
        n_canaries=_opt_int(value.get("n_canaries")),
        n_included=_opt_int(value.get("n_included")),
        eps_lb=_safe_float(value.get("eps_lb")),
        eps_interval=(
            [_safe_float(v) for v in interval]
            if isinstance(interval, list | tuple) and len(interval) == 2
            else None
        ),
        guesses=_opt_int(value.get("guesses")),
        correct=_opt_int(value.get("correct")),
        member_guesses=_opt_int(value.get("member_guesses")),
        nonmember_guesses=_opt_int(value.get("nonmember_guesses")),
        beta=_safe_float(value.get("beta")),
        score=_opt_str(value.get("score")),
        kind=_opt_str(value.get("kind")),
        n_pairs_tried=_opt_int(value.get("n_pairs_tried")),
        eps_lb_fdp=_safe_float(value.get("eps_lb_fdp")),
        fdp_mu=_safe_float(value.get("fdp_mu")),
        fdp_delta=_safe_float(value.get("fdp_delta")),
        fdp_guesses=_opt_int(value.get("fdp_guesses")),
        fdp_correct=_opt_int(value.get("fdp_correct")),
    )


def audit_file(run_dir: Path, site_id: int) -> Path:
    """``RUN_DIR/audits/site-<id>.json``."""
    return RunLayout(run_dir).audit(site_id)


def load_site_audit(run_dir: Path, site_id: int) -> SiteAuditInput:
    """One site's audit file alone (no partition.json, metrics or other sites needed).

    Raises
    ------
    ReportInputError
        When the site's audit file does not exist. An unreadable or failed one gives a
        "failed" input with the reason, as in :func:`load_run`.
    """
    path = audit_file(run_dir, site_id)
    if not path.exists():
        raise ReportInputError(f"{path} is missing (site {site_id}'s audit file)")
    return _load_site_audit(path, site_id, {})


def load_optional_config(run_dir: Path) -> dict[str, Any]:
    """``config.yaml`` when the run directory has one, else an empty mapping."""
    path = RunLayout(run_dir).config
    return _load_config(path) if path.exists() else {}


def _load_config(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ReportInputError(f"{path} is missing (the run's resolved config)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ReportInputError(f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ReportInputError(f"{path} must hold a mapping, got {type(data).__name__}")
    return data


def _load_partition(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ReportInputError(f"{path} is missing (the partition summary)")
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("sites"), list):
        raise ReportInputError(f"{path}: key 'sites' must be a list of site summaries")
    for i, site in enumerate(data["sites"]):
        if not isinstance(site, dict) or "site_id" not in site:
            raise ReportInputError(f"{path}: sites[{i}] has no 'site_id'")
        try:
            int(site["site_id"])
        except (TypeError, ValueError) as exc:
            raise ReportInputError(
                f"{path}: sites[{i}].site_id must be an integer, got {site['site_id']!r}"
            ) from exc
    return data


def _load_metrics(path: Path) -> list[RoundReport]:
    rounds: list[RoundReport] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReportInputError(f"{where} is not valid JSON: {exc}") from exc
        if not isinstance(rec, dict) or "round" not in rec:
            raise ReportInputError(f"{where}: a round record needs key 'round'")
        sites_raw = rec.get("sites") or {}
        if not isinstance(sites_raw, dict):
            raise ReportInputError(f"{where}: key 'sites' must map site id to metrics")
        sites: dict[str, SiteRoundReport] = {}
        for sid, m in sorted(sites_raw.items(), key=lambda kv: _site_sort_key(kv[0])):
            if not isinstance(m, dict):
                raise ReportInputError(f"{where}: sites[{sid!r}] must be an object")
            sites[str(sid)] = SiteRoundReport(
                train_loss=_opt_float(m.get("train_loss"), f"{where} sites.{sid}.train_loss"),
                dp_epsilon=_opt_float(m.get("dp_epsilon"), f"{where} sites.{sid}.dp_epsilon"),
                num_examples=_opt_int(m.get("num_examples")),
                dp_epsilon_client=_opt_float(
                    m.get("dp_epsilon_client"), f"{where} sites.{sid}.dp_epsilon_client"
                ),
            )
        rounds.append(
            RoundReport(
                round=int(rec["round"]),
                global_loss=_opt_float(rec.get("global_loss"), f"{where} global_loss"),
                global_accuracy=_opt_float(rec.get("global_accuracy"), f"{where} global_accuracy"),
                elapsed_s=_opt_float(rec.get("elapsed_s"), f"{where} elapsed_s"),
                sites=sites,
            )
        )
    rounds.sort(key=lambda r: r.round)
    return rounds


def _load_site_audit(path: Path, site_id: int, part: dict[str, Any]) -> SiteAuditInput:
    """Parse one SiteAudit; an unreadable file makes the site "failed", with the reason."""

    def failed(error: str, data: dict[str, Any] | None = None) -> SiteAuditInput:
        return SiteAuditInput(
            site_id=site_id,
            status="failed",
            error=error,
            result=None,
            **_file_fields(data or {}, part),
        )

    try:
        data = _read_json(path)
    except ReportInputError as exc:
        return failed(str(exc))
    if not isinstance(data, dict):
        return failed(f"{path} must hold a JSON object")
    status = data.get("status")
    if status == "failed":
        error = data.get("error")
        return failed(str(error) if error is not None else "audit failed (no error text)", data)
    if status != "ok":
        return failed(f"{path}: key 'status' must be 'ok' or 'failed', got {status!r}", data)
    if data.get("result") is None:
        return failed(f"{path}: status is 'ok' but key 'result' is null", data)
    try:
        result = AuditResult.from_dict(data["result"])
    except (KeyError, TypeError, ValueError) as exc:
        return failed(f"{path}: key 'result' is not an AuditResult ({type(exc).__name__}: {exc})")
    return SiteAuditInput(
        site_id=site_id,
        status="ok",
        error=None,
        result=result,
        by_round=_by_round(path, data.get("by_round")),
        **_file_fields(data, part),
    )


def _by_round(path: Path, lines: Any) -> list[RoundLeakage]:
    """The audit file's ``by_round``; a malformed one is dropped, with a warning naming it."""
    if not isinstance(lines, list):
        return []
    try:
        return [RoundLeakage.from_dict(e) for e in lines]
    except (ValueError, AttributeError) as err:
        log.warning("%s: key 'by_round' dropped: %s", path, err)
        return []


def _file_fields(data: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """The :class:`SiteAuditInput` fields an audit file states beside its result (sizes
    from partition.json when it lacks them), ok or failed alike; lenient: bad values read
    as None."""
    return {
        "n_members": _safe_int(data.get("n_members"), part.get("train")),
        "n_holdout": _safe_int(data.get("n_holdout"), part.get("holdout")),
        "dp_epsilon": _safe_float(data.get("dp_epsilon")),
        "elapsed_s": _safe_float(data.get("elapsed_s")),
        "canary": parse_canary(data.get("canary")),
    }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReportInputError(f"{path} is not valid JSON: {exc}") from exc
    except OSError as exc:
        raise ReportInputError(f"{path} cannot be read: {exc}") from exc


def _site_sort_key(sid: Any) -> tuple[int, Any]:
    try:
        return (0, int(sid))
    except (TypeError, ValueError):
        return (1, str(sid))


def _opt_float(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportInputError(f"{where} must be a number or null, got {value!r}")
    return float(value)


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _safe_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _safe_int(value: Any, fallback: Any = None) -> int | None:
    got = _opt_int(value)
    return got if got is not None else _opt_int(fallback)
