"""Read a run directory (:class:`contracts.run_files.RunLayout`) into typed inputs for the
report; its config comes typed from the caller (:class:`.run_config.ReportConfig`).

A missing or malformed ``partition.json`` / ``metrics.jsonl`` line, and a
malformed ``client_dp.json`` (absent unless client-level DP is on) or ``client_canaries.json``
(absent unless the run had canary clients), raise :class:`~contracts.errors.RunFileError`
naming the file (and line or key). A site's audit file that is missing or does not read as
the site's audit (:class:`~contracts.site_audit.SiteAuditFile`, every key checked) does
not: that site becomes "missing" / "failed", with the file and key, and the others stay.
An audit file of a site that partition.json does not list is no site of the consortium:
it is left out, with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from panoramia_fl.audit.canaries.client_canaries import ClientCanaryResult
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.json_values import from_dict
from panoramia_fl.contracts.run_files import NOISE_NOTES, RunLayout
from panoramia_fl.contracts.run_log import (
    ClientDPFile,
    RoundRecord,
    read_json,
    read_record,
    read_rounds,
)

from ..schemas.replicate_schema import ReplicateReport
from ..schemas.schema import SiteAuditRead

if TYPE_CHECKING:
    from .run_config import ReportConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunInputs:
    """The parsed contents of a run directory."""

    layout: RunLayout
    config: ReportConfig
    partition: dict[str, Any]
    rounds: list[RoundRecord]
    audits: dict[int, SiteAuditRead | None] = field(default_factory=dict)
    """One entry per site in partition.json: its audit file as read (one that does not read
    as the site's audit reads as failed, saying why), None when it has none ("missing")."""
    has_metrics: bool = True
    client_dp: ClientDPFile | None = None
    """``client_dp.json``, when the run has one (client-level DP)."""
    client_canaries: ClientCanaryResult | None = None
    """``client_canaries.json``, when the run had ``audit.canary_clients``."""
    noise_source: str | None = None
    """``noise.json``'s ``source`` (``contracts.run_files.NoiseSource``); None: no file
    (runs older than it, all simulated, so seeded)."""
    replicates: ReplicateReport | None = None
    """The replicate set the run belongs to (:func:`load_replicates`)."""
    warnings: list[str] = field(default_factory=list)
    """What reading left out, one line each (for stderr): audit files of no listed site."""

    def sizes(self, site_id: int) -> tuple[int | None, int | None]:
        """The site's members and holdout records by partition.json (None: unknown)."""
        return _sizes(self.partition, site_id)


def load_run(layout: RunLayout, config: ReportConfig) -> RunInputs:
    """Read ``partition.json``, ``metrics.jsonl`` (no rounds and ``has_metrics`` False
    without one), ``client_dp.json``, ``noise.json`` and ``audits/``; ``config`` is the
    run's, as its caller read it.

    Raises :class:`RunFileError` as the module says.
    """
    partition = _load_partition(layout.partition)
    sites = sorted({int(s["site_id"]) for s in partition["sites"]})
    files = layout.audit_files()
    warnings = [
        f"{path}: site {site_id} is not in {layout.partition.name}, so its audit file is no "
        "site of this consortium's and is left out of the report"
        for site_id, path in sorted(files.items())
        if site_id not in sites
    ]
    return RunInputs(
        layout=layout,
        config=config,
        partition=partition,
        rounds=read_rounds(layout),
        audits={
            s: _load_site_audit(files[s], s, _sizes(partition, s)) if s in files else None
            for s in sites
        },
        has_metrics=layout.metrics.exists(),
        client_dp=read_record(ClientDPFile, layout.client_dp_accounting),
        client_canaries=load_client_canaries(layout.client_canaries),
        noise_source=_noise_source(layout.noise),
        replicates=load_replicates(layout),
        warnings=warnings,
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
        return from_dict(ClientCanaryResult, data)
    except ValueError as exc:
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


def load_site_audit(layout: RunLayout, site_id: int) -> SiteAuditRead:
    """One site's audit file alone (no partition.json, metrics or other sites needed); a
    :class:`RunFileError` when it does not exist, a "failed" audit when unreadable."""
    path = layout.audit(site_id)
    if not path.exists():
        raise RunFileError(f"{path} is missing (site {site_id}'s audit file)")
    return _load_site_audit(path, site_id, (None, None))


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


def _load_site_audit(
    path: Path, site_id: int, sizes: tuple[int | None, int | None]
) -> SiteAuditRead:
    """Read one audit file through :class:`SiteAuditFile`; a file that does not read as the
    site's audit makes the site "failed", saying why. Sizes the file lacks come from
    ``sizes`` (partition.json's)."""
    members, holdout = sizes

    def failed(why: str) -> SiteAuditRead:
        return SiteAuditRead(
            site_id=site_id,
            status="failed",
            error=why if str(path) in why else f"{path}: {why}",
            n_members=members,
            n_holdout=holdout,
            results=SiteResults(),
        )

    try:
        file = from_dict(SiteAuditRead, read_json(path))
    except (RunFileError, ValueError) as exc:
        return failed(str(exc))
    if file.site_id != site_id:
        return failed(f"claims to be site {file.site_id}'s audit, but is site {site_id}'s file")
    file = dataclasses.replace(
        file,
        n_members=members if file.n_members is None else file.n_members,
        n_holdout=holdout if file.n_holdout is None else file.n_holdout,
    )
    if not file.ok:  # what a failed audit says is its error alone
        error = file.error or "audit failed (no error text)"
        return dataclasses.replace(file, error=error, results=SiteResults())
    if (wrong := _wrong_size(file, members, holdout)) is not None:
        return failed(wrong)
    if file.results.panoramia is None:
        return failed("status is 'ok' but key 'result' is null")
    return file


def _wrong_size(file: SiteAuditRead, members: int | None, holdout: int | None) -> str | None:
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


def _sizes(partition: dict[str, Any], site_id: int) -> tuple[int | None, int | None]:
    part: dict[str, Any] = next((s for s in partition["sites"] if int(s["site_id"]) == site_id), {})
    return _opt_int(part.get("train")), _opt_int(part.get("holdout"))


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)
