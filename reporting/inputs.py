"""Read a run directory (:class:`contracts.run_files.RunLayout`) into typed inputs for the
report; its config comes typed from the caller (:class:`.run_config.ReportConfig`).

A missing or malformed ``partition.json`` / ``metrics.jsonl`` line, and a
malformed ``client_dp.json`` (absent unless client-level DP is on) or ``client_canaries.json``
(absent unless the run had canary clients), raise :class:`~contracts.errors.RunFileError`
naming the file (and line or key). A site's audit file that is missing or unreadable does
not: that site becomes "missing" / "failed" and the others stay; a malformed ``canary``
block in it only drops the canary numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from audit.canaries.canary import CanaryResult
from audit.canaries.client_canaries import ClientCanaryResult
from audit.canaries.gradient_canaries import GradientCanaryResult
from audit.inversion.scores import InversionResult
from audit.panoramia.over_rounds import RoundLeakage
from audit.result import AuditResult
from contracts.errors import RunFileError
from contracts.run_files import NOISE_NOTES, RunLayout, SiteAuditFile
from contracts.run_log import ClientDPLedgerFile, RoundRecord, read_json, read_record, read_rounds

from .schema import ReplicateReport, SiteStatus

if TYPE_CHECKING:
    from .run_config import ReportConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class SiteAuditInput:
    """One ``audits/site-<id>.json`` as read (``result`` parsed, ``status`` checked)."""

    site_id: int
    status: SiteStatus
    n_members: int | None
    n_holdout: int | None
    error: str | None = None
    dp_epsilon: float | None = None
    """The site's record-level (Opacus) accountant epsilon, or None."""
    elapsed_s: float | None = None
    result: AuditResult | None = None
    canary: CanaryResult | None = None
    """The site's canary audit, when the run trained with canaries."""
    by_round: list[RoundLeakage] = field(default_factory=list)
    """The file's ``by_round`` lines (an unreadable one is dropped with a warning)."""
    gradient_canaries: GradientCanaryResult | None = None
    """The site's white-box audit of its DP-SGD, when it ran gradient canaries."""
    inversion: list[InversionResult] = field(default_factory=list)
    """The site's gradient-inversion audit of its updates, one per attacked round."""


@dataclass(frozen=True)
class RunInputs:
    """The parsed contents of a run directory."""

    layout: RunLayout
    config: ReportConfig
    partition: dict[str, Any]
    rounds: list[RoundRecord]
    audits: dict[int, SiteAuditInput] = field(default_factory=dict)
    """One entry per site in partition.json or audits/ (status "missing" when no file)."""
    has_metrics: bool = True
    client_dp: ClientDPLedgerFile | None = None
    """``client_dp.json``, when the run has one (client-level DP)."""
    client_canaries: ClientCanaryResult | None = None
    """``client_canaries.json``, when the run had ``audit.canary_clients``."""
    noise_source: str | None = None
    """``noise.json``'s ``source`` (``contracts.run_files.NoiseSource``); None: no file
    (runs older than it, all simulated, so seeded)."""
    replicates: ReplicateReport | None = None
    """The replicate set the run belongs to (:func:`load_replicates`)."""


def load_run(layout: RunLayout, config: ReportConfig) -> RunInputs:
    """Read ``partition.json``, ``metrics.jsonl`` (no rounds and ``has_metrics`` False
    without one), ``client_dp.json``, ``noise.json`` and ``audits/``; ``config`` is the
    run's, as its caller read it.

    Raises :class:`RunFileError` as the module says.
    """
    partition = _load_partition(layout.partition)
    audit_files = layout.audit_files()
    partition_sites = {int(s["site_id"]): s for s in partition["sites"]}
    audits: dict[int, SiteAuditInput] = {}
    for site_id in sorted(set(partition_sites) | set(audit_files)):
        part = partition_sites.get(site_id, {})
        if site_id in audit_files:
            audits[site_id] = _load_site_audit(audit_files[site_id], site_id, part)
        else:
            audits[site_id] = SiteAuditInput(
                site_id, "missing", _opt_int(part.get("train")), _opt_int(part.get("holdout"))
            )
    return RunInputs(
        layout=layout,
        config=config,
        partition=partition,
        rounds=read_rounds(layout),
        audits=audits,
        has_metrics=layout.metrics.exists(),
        client_dp=read_record(ClientDPLedgerFile, layout.client_dp_ledger),
        client_canaries=load_client_canaries(layout.client_canaries),
        noise_source=_noise_source(layout.noise),
        replicates=load_replicates(layout),
    )


def load_replicates(layout: RunLayout) -> ReplicateReport | None:
    """The report of the replicate set that lists the run (``replicates.json`` beside
    its folder), or None. An unreadable one is left out with a warning: the run's own
    report does not depend on it."""
    path = layout.replicates
    if not path.exists():
        return None
    try:
        report = read_record(ReplicateReport, path)
    except RunFileError as err:
        log.warning("replicate numbers left out: %s", err)
        return None
    listed = report is not None and layout.root.name in {r.run_dir for r in report.runs}
    return report if listed else None


def load_client_canaries(path: Path) -> ClientCanaryResult | None:
    """``client_canaries.json`` (what the canary clients measured), or None without one."""
    if not path.exists():
        return None
    data = read_json(path)
    try:
        return ClientCanaryResult.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise RunFileError(f"{path}: not a canary-clients result ({exc})") from None


def _noise_source(path: Path) -> str | None:
    """Where the run's DP noise came from, by ``noise.json``; None when it has none."""
    if not path.exists():
        return None
    data = read_json(path)
    source = data.get("source") if isinstance(data, dict) else None
    if source not in NOISE_NOTES:
        raise RunFileError(f"{path}: key 'source' must be one of {sorted(NOISE_NOTES)}")
    return str(source)


def load_site_audit(layout: RunLayout, site_id: int) -> SiteAuditInput:
    """One site's audit file alone (no partition.json, metrics or other sites needed); a
    :class:`RunFileError` when it does not exist, a "failed" input when unreadable."""
    path = layout.audit(site_id)
    if not path.exists():
        raise RunFileError(f"{path} is missing (site {site_id}'s audit file)")
    return _load_site_audit(path, site_id, {})


def _load_partition(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise RunFileError(f"{path} is missing (the partition summary)")
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("sites"), list):
        raise RunFileError(f"{path}: key 'sites' must be a list of site summaries")
    for i, site in enumerate(data["sites"]):
        if not isinstance(site, dict) or "site_id" not in site:
            raise RunFileError(f"{path}: sites[{i}] has no 'site_id'")
        try:
            int(site["site_id"])
        except (TypeError, ValueError) as exc:
            raise RunFileError(
                f"{path}: sites[{i}].site_id must be an integer, got {site['site_id']!r}"
            ) from exc
    return data


def _load_site_audit(path: Path, site_id: int, part: dict[str, Any]) -> SiteAuditInput:
    """Read one audit file through :class:`SiteAuditFile`; an unreadable or malformed file
    makes the site "failed", with the reason. Sizes the file lacks come from partition.json."""
    members, holdout = _opt_int(part.get("train")), _opt_int(part.get("holdout"))
    try:
        file = SiteAuditFile.from_dict(read_json(path))
    except (RunFileError, ValueError) as exc:
        error = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
        return SiteAuditInput(site_id, "failed", members, holdout, error=error)

    def read(**kw: Any) -> SiteAuditInput:
        return SiteAuditInput(
            site_id,
            n_members=members if file.n_members is None else file.n_members,
            n_holdout=holdout if file.n_holdout is None else file.n_holdout,
            dp_epsilon=file.dp_epsilon,
            elapsed_s=file.elapsed_s,
            **kw,
        )

    if file.site_id != site_id:
        why = f"{path}: claims to be site {file.site_id}'s audit, but is site {site_id}'s file"
        return SiteAuditInput(site_id, "failed", members, holdout, error=why)
    if not file.ok:
        return read(status="failed", error=file.error or "audit failed (no error text)")
    if (wrong := _wrong_size(file, members, holdout)) is not None:
        return SiteAuditInput(site_id, "failed", members, holdout, error=f"{path}: {wrong}")
    if file.result is None:
        return read(status="failed", error=f"{path}: status is 'ok' but key 'result' is null")
    try:
        result = AuditResult.from_dict(file.result)
    except (KeyError, TypeError, ValueError) as exc:
        why = f"{path}: key 'result' is not an AuditResult ({type(exc).__name__}: {exc})"
        return read(status="failed", error=why)
    return read(
        status="ok",
        result=result,
        canary=_one(path, "canary", CanaryResult.from_dict, file.canary),
        by_round=_entries(path, "by_round", RoundLeakage.from_dict, file.by_round),
        gradient_canaries=_one(
            path, "gradient_canaries", GradientCanaryResult.from_dict, file.gradient_canaries
        ),
        inversion=_entries(path, "inversion", InversionResult.from_dict, file.inversion),
    )


def _entries(
    path: Path, key: str, parse: Callable[[dict[str, Any]], T], data: list[dict[str, Any]] | None
) -> list[T]:
    """An optional block of the audit file, entry by entry; a malformed one drops the block
    alone, with a warning."""
    try:
        return [parse(e) for e in data or []]
    except (KeyError, TypeError, ValueError) as err:
        log.warning("%s: key %r dropped: %s", path, key, err)
        return []


def _one(
    path: Path, key: str, parse: Callable[[dict[str, Any]], T], data: dict[str, Any] | None
) -> T | None:
    """An optional block of one entry (:func:`_entries`); None without it."""
    found = _entries(path, key, parse, None if data is None else [data])
    return found[0] if found else None


def _wrong_size(file: SiteAuditFile, members: int | None, holdout: int | None) -> str | None:
    """Why the audit's sizes cannot be the site's (negative, or not partition.json's), or
    None: an audit of other records than the site's is not reported as the site's."""
    for key, claimed, cut in (
        ("n_members", file.n_members, members),
        ("n_holdout", file.n_holdout, holdout),
    ):
        if claimed is not None and claimed < 0:
            return f"key {key!r} is {claimed}, not a number of records"
        if claimed is not None and cut is not None and claimed != cut:
            return f"key {key!r} is {claimed}, but partition.json gives the site {cut} records"
    return None


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)
