"""Turn parsed run inputs into the typed :class:`~.schema.RunReport`.

Numbers are copied from the AuditResults (eps_tilde, one- and two-sided, included: they are
never recomputed here); the only derived numbers are the headrooms (ceiling - c_lb), the mean
AUCs over repeats, the consortium's max / median, and the privacy ledger's choice of the
guarantee that applies and its ordering check (:mod:`.privacy_ledger`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from audit.result import (
    EPS_TILDE_MEANING,
    TWO_SIDED_MEANING,
    AuditFlags,
    AuditResult,
    Interval,
    RepeatResult,
    RocSummary,
    SideResult,
    TwoSidedResult,
)
from contracts.run_files import NOISE_NOTES

from .client_canaries import load_client_canaries, report_section
from .inputs import RunInputs, SiteAuditInput
from .privacy_ledger import (
    PrivacySettings,
    ledger_row,
    privacy_settings,
    run_canaries,
    site_privacy,
    with_checks,
)
from .schema import (
    REPORT_SCHEMA_VERSION,
    SIDES,
    TPR_FPR_KEYS,
    ClientDPReport,
    ConsortiumSummary,
    FlaggedSites,
    FlagsReport,
    IntervalReport,
    RepeatReport,
    RoundReport,
    RunReport,
    SideReport,
    SiteReport,
    TwoSidedReport,
    flag_specs,
    flagged_lists,
)


def build_report(inputs: RunInputs) -> RunReport:
    """Aggregate one run's inputs into a report (pure: writes nothing)."""
    settings = privacy_settings(inputs.config)
    sites = [
        site_report(audit, rounds=inputs.rounds, settings=settings, client_dp=inputs.client_dp)
        for _, audit in sorted(inputs.audits.items(), key=lambda kv: kv[0])
    ]
    consortium = consortium_summary(sites, inputs.rounds)
    canary_clients = load_client_canaries(inputs.run_dir)
    return RunReport(
        schema_version=REPORT_SCHEMA_VERSION,
        run=inputs.config,
        partition=inputs.partition,
        rounds=list(inputs.rounds),
        sites=sites,
        consortium=consortium,
        dp_level=settings.dp_level,
        canaries=run_canaries(settings, sites),
        client_dp=inputs.client_dp,
        ledger=[
            ledger_row(
                s,
                settings,
                inputs.client_dp,
                global_accuracy=consortium.final_global_accuracy,
                client_canaries=canary_clients,
            )
            for s in sites
        ],
        client_canaries=report_section(canary_clients),
        noise=noise_note(settings, inputs),
    )


def noise_note(settings: PrivacySettings, inputs: RunInputs) -> str | None:
    """The one line on how the DP noise was drawn; None when the run has no DP."""
    if not settings.private and inputs.client_dp is None:
        return None
    return NOISE_NOTES[inputs.noise_source or "seeded"]


def site_report(
    audit: SiteAuditInput,
    *,
    rounds: list[RoundReport],
    settings: PrivacySettings | None = None,
    client_dp: ClientDPReport | None = None,
) -> SiteReport:
    """One site's :class:`SiteReport`: the only place one is built (the consortium report,
    a site's own report and the sweeps all read it). The AuditResult's numbers for an ok
    site, their defaults (None, empty) otherwise; the audit file's fields; the guarantees and
    canaries; then the ordering check.

    Parameters
    ----------
    audit
        The site's audit file as read.
    rounds
        metrics.jsonl (the accountant epsilons of a site whose audit file lacks them).
    settings
        The run config's DP level, accountant, delta and canaries (None: no config).
    client_dp
        The server's client-level DP ledger, when the run has one.
    """
    privacy = site_privacy(audit, rounds, settings or privacy_settings({}), client_dp).fields()
    result = audit.result if audit.status == "ok" else None
    numbers = {} if result is None else _audit_numbers(result)
    canary = privacy["canary"]
    # One delta for both f-DP bounds: the audit's, else (a failed audit) the canary's.
    numbers["fdp_delta"] = numbers.get("fdp_delta") or (
        None if canary is None else canary.fdp_delta
    )
    site = SiteReport(
        site_id=audit.site_id,
        status=audit.status,  # type: ignore[arg-type]
        error=audit.error if result is None else None,
        n_members=audit.n_members,
        n_holdout=audit.n_holdout,
        elapsed_s=audit.elapsed_s,
        **numbers,
        **privacy,
    )
    return with_checks(site)


def _audit_numbers(result: AuditResult) -> dict[str, Any]:
    """The SiteReport fields an AuditResult gives, by name (copied, never recomputed)."""
    ceiling = _finite(result.ceiling)
    c_lb = _finite(result.c_lb.mean)
    two = result.two_sided
    return {
        "modality": result.modality,
        "generator_kind": result.generator_kind,
        "beta": _finite(result.beta),
        "n_repeats": len(result.repeats),
        "c_lb": c_lb,
        "c_lb_interval": _interval(result.c_lb),
        "c_eps_lb": _finite(result.c_eps_lb.mean),
        "c_eps_lb_interval": _interval(result.c_eps_lb),
        "eps_tilde": _finite(result.eps_tilde.mean),
        "eps_tilde_interval": _interval(result.eps_tilde),
        "ceiling": ceiling,
        "headroom": _headroom(ceiling, c_lb),
        "flags": _flags(result.flags),
        "rm_rn_eps_lb": _mean(result.rm_rn_eps_lb),
        "rm_rn_eps_lb_interval": _interval(result.rm_rn_eps_lb),
        "o1_eps_lb": _mean(result.o1_eps_lb),
        "o1_eps_lb_interval": _interval(result.o1_eps_lb),
        "o1_eps_lb_fdp": _mean(result.o1_eps_lb_fdp),
        "o1_eps_lb_fdp_interval": _interval(result.o1_eps_lb_fdp),
        "o1_fdp_mu": _mean(result.o1_fdp_mu),
        "fdp_delta": _finite(result.delta),
        "baseline_auc": _mean_of([r.baseline_auc for r in result.repeats]),
        "mia_auc": _mean_of([r.mia_auc for r in result.repeats]),
        "eps_tilde_two_sided": None if two is None else _mean(two.eps_tilde),
        "eps_tilde_two_sided_interval": None if two is None else _interval(two.eps_tilde),
        "two_sided_side": None if two is None else two.side,
        "two_sided": _two_sided(two),
        "rm_rn_eps_lb_two_sided": None if two is None else _mean(two.rm_rn_eps_lb),
        "rm_rn_eps_lb_two_sided_interval": None if two is None else _interval(two.rm_rn_eps_lb),
        "rm_rn_auc": _auc(result.roc.get("rm_rn")),
        "baseline_tpr_at_fpr": _tpr_at_fpr(result.roc.get("baseline")),
        "mia_tpr_at_fpr": _tpr_at_fpr(result.roc.get("mia")),
        "rm_rn_tpr_at_fpr": _tpr_at_fpr(result.roc.get("rm_rn")),
        "levels": {str(k): float(v) for k, v in result.levels.items() if _finite(v) is not None},
        "sizes": {str(k): int(v) for k, v in result.sizes.items() if _is_number(v)},
        "quality": {str(k): float(v) for k, v in result.quality.items() if _is_number(v)},
        "repeats": _repeats(result),
    }


def consortium_summary(sites: list[SiteReport], rounds: list[RoundReport]) -> ConsortiumSummary:
    """Max / median eps_tilde over ok sites, the leakiest site, flagged sites and counts."""
    ok = [s for s in sites if s.status == "ok"]
    scored = [s.eps_tilde for s in ok if s.eps_tilde is not None]
    leakiest = _leakiest(ok, lambda s: s.eps_tilde)
    leakiest_two = _leakiest(ok, lambda s: s.eps_tilde_two_sided)
    one_sided = _flagged(ok, lambda s: s.flags)
    dp = [s.dp_epsilon for s in sites if s.dp_epsilon is not None]
    last = rounds[-1] if rounds else None
    return ConsortiumSummary(
        n_sites=len(sites),
        n_ok=len(ok),
        n_failed=sum(s.status == "failed" for s in sites),
        n_missing=sum(s.status == "missing" for s in sites),
        max_eps_tilde=None if leakiest is None else leakiest.eps_tilde,
        median_eps_tilde=float(statistics.median(scored)) if scored else None,
        leakiest_site_id=None if leakiest is None else leakiest.site_id,
        max_eps_tilde_two_sided=None if leakiest_two is None else leakiest_two.eps_tilde_two_sided,
        leakiest_site_id_two_sided=None if leakiest_two is None else leakiest_two.site_id,
        **{name: getattr(one_sided, name) for name, _, _ in flagged_lists()},
        two_sided_flagged_sites=(
            {side: _flagged(ok, _side_flags(side)) for side in SIDES}
            if any(s.two_sided is not None for s in ok)
            else {}
        ),
        failed_sites=[s.site_id for s in sites if s.status == "failed"],
        missing_sites=[s.site_id for s in sites if s.status == "missing"],
        max_dp_epsilon=max(dp) if dp else None,
        rounds_completed=len(rounds),
        final_global_loss=None if last is None else last.global_loss,
        final_global_accuracy=None if last is None else last.global_accuracy,
        meaning=EPS_TILDE_MEANING,
        two_sided_meaning=TWO_SIDED_MEANING,
        bound_violation_sites=[s.site_id for s in sites if s.bound_violations],
        eps_tilde_above_accountant_sites=[s.site_id for s in sites if s.eps_tilde_above_accountant],
    )


def _leakiest(
    sites: list[SiteReport], value: Callable[[SiteReport], float | None]
) -> SiteReport | None:
    """The site with the largest value; ties go to the smallest id, so the choice is fixed."""
    scored = [s for s in sites if value(s) is not None]
    return min(scored, key=lambda s: (-value(s), s.site_id)) if scored else None  # type: ignore[operator]


def _flagged(
    sites: list[SiteReport], flags_of: Callable[[SiteReport], FlagsReport | None]
) -> FlaggedSites:
    """Ids of the sites whose flags (as ``flags_of`` picks them) are raised."""
    flags = [(s.site_id, flags_of(s)) for s in sites]
    return FlaggedSites(
        **{
            name: [sid for sid, f in flags if f and getattr(f, flag)]
            for name, flag, _ in flagged_lists()
        }
    )


def _side_flags(side: str) -> Callable[[SiteReport], FlagsReport | None]:
    def flags_of(site: SiteReport) -> FlagsReport | None:
        return None if site.two_sided is None else getattr(site.two_sided, side).flags

    return flags_of


def _repeats(result: AuditResult) -> list[RepeatReport]:
    # Curves, ROCs and per-record scores stay in audits/: the report keeps the scalars only.
    return [_repeat(r) for r in result.repeats]


def _repeat(r: RepeatResult) -> RepeatReport:
    two = r.two_sided
    return RepeatReport(
        seed=int(r.seed),
        m=int(r.m),
        c_lb=_finite(r.c_lb),
        c_eps_lb=_finite(r.c_eps_lb),
        eps_tilde=_finite(r.eps_tilde),
        ceiling=_finite(r.ceiling),
        baseline_auc=_finite(r.baseline_auc),
        mia_auc=_finite(r.mia_auc),
        rm_rn_eps_lb=_finite(r.rm_rn_eps_lb),
        o1_eps_lb=_finite(r.o1_eps_lb),
        eps_tilde_two_sided=None if two is None else _finite(two.eps_tilde),
        member_c_lb=None if two is None else _finite(two.member.c_lb),
        member_c_eps_lb=None if two is None else _finite(two.member.c_eps_lb),
        nonmember_c_lb=None if two is None else _finite(two.nonmember.c_lb),
        nonmember_c_eps_lb=None if two is None else _finite(two.nonmember.c_eps_lb),
        rm_rn_eps_lb_two_sided=None if two is None else _finite(two.rm_rn_eps_lb),
    )


def _two_sided(two: TwoSidedResult | None) -> TwoSidedReport | None:
    if two is None:
        return None
    return TwoSidedReport(
        beta=_finite(two.beta),
        member=_side(two.member),
        nonmember=_side(two.nonmember),
    )


def _side(side: SideResult) -> SideReport:
    """One side's block; the same shape for the member and the non-member side."""
    ceiling = _finite(side.ceiling)
    c_lb = _mean(side.c_lb)
    return SideReport(
        c_lb=c_lb,
        c_lb_interval=_interval(side.c_lb),
        c_eps_lb=_mean(side.c_eps_lb),
        c_eps_lb_interval=_interval(side.c_eps_lb),
        eps_tilde=_mean(side.eps_tilde),
        eps_tilde_interval=_interval(side.eps_tilde),
        ceiling=ceiling,
        headroom=_headroom(ceiling, c_lb),
        flags=_flags(side.flags),
        rm_rn_eps_lb=_mean(side.rm_rn_eps_lb),
        rm_rn_eps_lb_interval=_interval(side.rm_rn_eps_lb),
        rm_rn_ceiling=_finite(side.rm_rn_ceiling),
    )


def _flags(flags: AuditFlags) -> FlagsReport:
    """Each flag of :class:`FlagsReport` from the AuditFlags field of its name."""
    return FlagsReport(
        **{name: bool(getattr(flags, name)) for name, _ in flag_specs()},
        reasons=[str(r) for r in flags.reasons],
    )


def _headroom(ceiling: float | None, c_lb: float | None) -> float | None:
    return None if ceiling is None or c_lb is None else ceiling - c_lb


def _auc(roc: RocSummary | None) -> float | None:
    return None if roc is None else _finite(roc.auc)


def _tpr_at_fpr(roc: RocSummary | None) -> dict[str, float | None] | None:
    # Fixed keys, so every site (and the CSV) names the same FPR levels.
    if roc is None:
        return None
    return {key: _finite(roc.tpr_at_fpr.get(key)) for key in TPR_FPR_KEYS}


def _interval(iv: Interval | None) -> IntervalReport | None:
    if iv is None:
        return None
    return IntervalReport(
        mean=_finite(iv.mean),
        std=_finite(iv.std),
        low=_finite(iv.low),
        high=_finite(iv.high),
        n=None if iv.n is None else int(iv.n),
    )


def _mean(iv: Interval | None) -> float | None:
    return None if iv is None else _finite(iv.mean)


def _mean_of(values: list[float | None]) -> float | None:
    finite = [float(v) for v in values if _finite(v) is not None]
    return math.fsum(finite) / len(finite) if finite else None


def _finite(value: float | None) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
