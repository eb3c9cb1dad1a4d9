"""Turn parsed run inputs into the typed :class:`~.schema.RunReport`.

A site's report holds its audit file as read (report.json shows its PanoramiaResult
through :data:`.schema.VIEWS`); the numbers derived here are the consortium's max / median, and the
privacy ledger's guarantees and ordering check (:mod:`.privacy_ledger`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

from panoramia_fl.audit.canaries.client_canaries import ClientCanaryResult
from panoramia_fl.audit.panoramia.over_rounds import first_leaking_round
from panoramia_fl.audit.panoramia.sides import SIDES
from panoramia_fl.audit.result import AuditFlags, PanoramiaResult, finite
from panoramia_fl.contracts.run_files import NOISE_NOTES
from panoramia_fl.contracts.run_log import ClientDPFile, RoundRecord, empty_rounds

from ..gate.gate import gate_lines, verdict_of
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import EPS_TILDE, EPS_TILDE_TWO_SIDED
from ..privacy.privacy_ledger import PrivacySettings, checks, run_input_canaries, site_privacy
from ..schemas.schema import (
    FLAGS,
    HEADLINE,
    SCHEMA_VERSION,
    ChecksReport,
    ConsortiumSummary,
    FlaggedSites,
    RunReport,
    SiteAuditRead,
    SiteReport,
)
from .inputs import RunInputs


def build_report(inputs: RunInputs) -> RunReport:
    """Aggregate one run's inputs into a report (pure: writes nothing)."""
    settings = inputs.config.privacy
    sites = [
        site_report(
            site_id,
            audit,
            sizes=inputs.sizes(site_id),
            rounds=inputs.rounds,
            settings=settings,
            client_dp=inputs.client_dp,
            client_canaries=inputs.client_canaries,
        )
        for site_id, audit in sorted(inputs.audits.items())
    ]
    policy = inputs.config.policy
    return RunReport(
        schema_version=SCHEMA_VERSION,
        run=inputs.config.record,
        partition=inputs.partition,
        rounds=list(inputs.rounds),
        sites=sites,
        consortium=consortium_summary(sites, inputs.rounds),
        dp_level=settings.dp_level,
        canaries=run_input_canaries(settings, sites),
        client_dp=inputs.client_dp,
        client_canaries=inputs.client_canaries,
        noise=noise_note(settings, inputs),
        meaning=NOTES[Note.EPS_TILDE],
        two_sided_meaning=NOTES[Note.TWO_SIDED],
        replicates=inputs.replicates,
        secure_aggregation=settings.secure_aggregation,
        gate=None if policy is None else verdict_of(policy, gate_lines(policy, sites)),
    )


def noise_note(settings: PrivacySettings, inputs: RunInputs) -> str | None:
    """The one line on how the DP noise was drawn; None when the run has no DP."""
    if not settings.private and inputs.client_dp is None:
        return None
    return NOISE_NOTES[inputs.noise_source or "seeded"]


def site_report(
    site_id: int,
    audit: SiteAuditRead | None,
    *,
    sizes: tuple[int | None, int | None] = (None, None),
    rounds: list[RoundRecord],
    settings: PrivacySettings,
    client_dp: ClientDPFile | None,
    client_canaries: ClientCanaryResult | None = None,
) -> SiteReport:
    """One site's :class:`SiteReport`: the only place one is built (the consortium report,
    a site's own report and the sweeps all read it). ``audit``: the site's audit file as
    read, None when it has none ("missing"); ``sizes``: its members and holdout records
    when the file does not say; ``rounds`` give the accountant epsilons of a site whose
    audit file lacks them; ``client_canaries`` (run-wide) the canary clients' client-level
    readings."""
    result = None if audit is None else audit.results.panoramia  # set for an ok audit only
    site = SiteReport(
        site_id=site_id,
        audit=audit,
        privacy=site_privacy(site_id, audit, rounds, settings, client_dp, client_canaries),
        checks=ChecksReport(),
        partition_records=sizes if audit is None else (None, None),
    )
    canary = site.results.input_canaries
    fdp_delta = finite(result.delta) if result is not None else None
    if fdp_delta is None and canary is not None:
        fdp_delta = canary.fdp_delta  # one delta for both f-DP bounds
    return dataclasses.replace(site, checks=checks(site, fdp_delta))


def consortium_summary(sites: list[SiteReport], rounds: list[RoundRecord]) -> ConsortiumSummary:
    """Max / median eps_tilde over ok sites, the leakiest site, flagged sites and counts."""
    ok = [s for s in sites if s.panoramia is not None]
    one = {s.site_id: EPS_TILDE.value(s) for s in ok}
    two = {s.site_id: EPS_TILDE_TWO_SIDED.value(s) for s in ok}
    leakiest, leakiest_two = _leakiest(one), _leakiest(two)
    scored = [v for v in one.values() if v is not None]
    dp = [s.privacy.dp_epsilon for s in sites if s.privacy.dp_epsilon is not None]
    last = rounds[-1] if rounds else None
    return ConsortiumSummary(
        n_sites=len(sites),
        n_ok=len(ok),
        n_failed=sum(s.status == "failed" for s in sites),
        n_missing=sum(s.status == "missing" for s in sites),
        max_eps_tilde_two_sided=None if leakiest_two is None else two[leakiest_two],
        leakiest_site_id_two_sided=leakiest_two,
        max_eps_tilde=None if leakiest is None else one[leakiest],
        median_eps_tilde=float(statistics.median(scored)) if scored else None,
        leakiest_site_id=leakiest,
        flagged=_flagged(ok, lambda a: a.one_sided.flags),
        two_sided_flagged=(
            {key: _flagged(ok, _two_sided_flags(key)) for key in (HEADLINE, *SIDES)}
            if any(s.panoramia and s.panoramia.two_sided for s in ok)
            else {}
        ),
        failed_sites=[s.site_id for s in sites if s.status == "failed"],
        missing_sites=[s.site_id for s in sites if s.status == "missing"],
        max_dp_epsilon=max(dp) if dp else None,
        rounds_completed=len(rounds),
        final_global_loss=None if last is None else last.global_loss,
        final_global_accuracy=None if last is None else last.global_accuracy,
        bound_violation_sites=[s.site_id for s in sites if s.checks.bound_violations],
        eps_tilde_above_accountant_sites=[
            s.site_id for s in sites if s.checks.eps_tilde_above_accountant
        ],
        first_leaking_round={
            str(s.site_id): first_leaking_round(s.by_round) for s in ok if s.by_round
        },
        empty_rounds=empty_rounds(rounds),
    )


def _leakiest(values: dict[int, float | None]) -> int | None:
    """The site with the largest value; ties go to the smallest id, so the choice is fixed."""
    scored = [(-v, sid) for sid, v in values.items() if v is not None]
    return min(scored)[1] if scored else None


def _two_sided_flags(key: str) -> Callable[[PanoramiaResult], AuditFlags | None]:
    """The flags of the two-sided headline (``HEADLINE``) or of one side."""

    def flags(a: PanoramiaResult) -> AuditFlags | None:
        two = a.two_sided
        if two is None:
            return None
        return two.flags if key == HEADLINE else getattr(two, key).flags

    return flags


def _flagged(
    sites: list[SiteReport], flags_of: Callable[[PanoramiaResult], AuditFlags | None]
) -> FlaggedSites:
    """Ids of the sites whose flags (of the game or headline ``flags_of`` picks) are raised."""
    games = [(s.site_id, flags_of(s.panoramia)) for s in sites if s.panoramia is not None]
    return FlaggedSites(
        **{name: [sid for sid, f in games if f is not None and getattr(f, name)] for name in FLAGS}
    )
