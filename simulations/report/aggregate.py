"""Turn parsed run inputs into the typed :class:`~.schema.RunReport`.

Numbers are copied from the AuditResults (eps_tilde included: it is never recomputed here);
the only derived numbers are the headroom (ceiling - c_lb), the mean AUCs over repeats and
the consortium's max / median.
"""

from __future__ import annotations

import math
import statistics

from audit.result import EPS_TILDE_MEANING, AuditResult, Interval

from .inputs import RunInputs, SiteAuditInput
from .schema import (
    REPORT_SCHEMA_VERSION,
    ConsortiumSummary,
    FlagsReport,
    IntervalReport,
    RepeatReport,
    RoundReport,
    RunReport,
    SiteReport,
)


def build_report(inputs: RunInputs) -> RunReport:
    """Aggregate one run's inputs into a report (pure: writes nothing)."""
    sites = [
        site_report(audit, rounds=inputs.rounds)
        for _, audit in sorted(inputs.audits.items(), key=lambda kv: kv[0])
    ]
    return RunReport(
        schema_version=REPORT_SCHEMA_VERSION,
        run=inputs.config,
        partition=inputs.partition,
        rounds=list(inputs.rounds),
        sites=sites,
        consortium=consortium_summary(sites, inputs.rounds),
    )


def site_report(audit: SiteAuditInput, *, rounds: list[RoundReport]) -> SiteReport:
    """One site's row: the AuditResult's numbers for an ok site, nulls otherwise."""
    dp_epsilon, dp_source = _dp_epsilon(audit, rounds)
    result = audit.result if audit.status == "ok" else None
    if result is None:
        return SiteReport(
            site_id=audit.site_id,
            status=audit.status,  # type: ignore[arg-type]
            error=audit.error,
            n_members=audit.n_members,
            n_holdout=audit.n_holdout,
            modality=None,
            generator_kind=None,
            beta=None,
            n_repeats=None,
            c_lb=None,
            c_lb_interval=None,
            c_eps_lb=None,
            c_eps_lb_interval=None,
            eps_tilde=None,
            eps_tilde_interval=None,
            ceiling=None,
            headroom=None,
            flags=None,
            rm_rn_eps_lb=None,
            rm_rn_eps_lb_interval=None,
            o1_eps_lb=None,
            o1_eps_lb_interval=None,
            dp_epsilon=dp_epsilon,
            dp_epsilon_source=dp_source,
            baseline_auc=None,
            mia_auc=None,
            elapsed_s=audit.elapsed_s,
        )
    ceiling = _finite(result.ceiling)
    c_lb = _finite(result.c_lb.mean)
    return SiteReport(
        site_id=audit.site_id,
        status="ok",
        error=None,
        n_members=audit.n_members,
        n_holdout=audit.n_holdout,
        modality=result.modality,
        generator_kind=result.generator_kind,
        beta=_finite(result.beta),
        n_repeats=len(result.repeats),
        c_lb=c_lb,
        c_lb_interval=_interval(result.c_lb),
        c_eps_lb=_finite(result.c_eps_lb.mean),
        c_eps_lb_interval=_interval(result.c_eps_lb),
        eps_tilde=_finite(result.eps_tilde.mean),
        eps_tilde_interval=_interval(result.eps_tilde),
        ceiling=ceiling,
        headroom=None if ceiling is None or c_lb is None else ceiling - c_lb,
        flags=FlagsReport(
            saturated=bool(result.flags.saturated),
            c_lb_not_tight=bool(result.flags.c_lb_not_tight),
            rm_rn_capped=bool(result.flags.rm_rn_capped),
            reasons=[str(r) for r in result.flags.reasons],
        ),
        rm_rn_eps_lb=_mean(result.rm_rn_eps_lb),
        rm_rn_eps_lb_interval=_interval(result.rm_rn_eps_lb),
        o1_eps_lb=_mean(result.o1_eps_lb),
        o1_eps_lb_interval=_interval(result.o1_eps_lb),
        dp_epsilon=dp_epsilon,
        dp_epsilon_source=dp_source,
        baseline_auc=_mean_of([r.baseline_auc for r in result.repeats]),
        mia_auc=_mean_of([r.mia_auc for r in result.repeats]),
        elapsed_s=audit.elapsed_s,
        sizes={str(k): int(v) for k, v in result.sizes.items() if _is_number(v)},
        quality={str(k): float(v) for k, v in result.quality.items() if _is_number(v)},
        repeats=_repeats(result),
    )


def consortium_summary(sites: list[SiteReport], rounds: list[RoundReport]) -> ConsortiumSummary:
    """Max / median eps_tilde over ok sites, the leakiest site and the site counts."""
    ok = [s for s in sites if s.status == "ok"]
    scored = [s for s in ok if s.eps_tilde is not None]
    leakiest = None
    if scored:
        # Ties go to the smallest site id, so the choice is deterministic.
        leakiest = min(scored, key=lambda s: (-s.eps_tilde, s.site_id))  # type: ignore[operator]
    dp = [s.dp_epsilon for s in sites if s.dp_epsilon is not None]
    last = rounds[-1] if rounds else None
    return ConsortiumSummary(
        n_sites=len(sites),
        n_ok=len(ok),
        n_failed=sum(s.status == "failed" for s in sites),
        n_missing=sum(s.status == "missing" for s in sites),
        max_eps_tilde=None if leakiest is None else leakiest.eps_tilde,
        median_eps_tilde=(
            float(statistics.median([s.eps_tilde for s in scored])) if scored else None  # type: ignore[misc]
        ),
        leakiest_site_id=None if leakiest is None else leakiest.site_id,
        saturated_sites=[s.site_id for s in ok if s.flags and s.flags.saturated],
        not_tight_sites=[s.site_id for s in ok if s.flags and s.flags.c_lb_not_tight],
        rm_rn_capped_sites=[s.site_id for s in ok if s.flags and s.flags.rm_rn_capped],
        failed_sites=[s.site_id for s in sites if s.status == "failed"],
        missing_sites=[s.site_id for s in sites if s.status == "missing"],
        max_dp_epsilon=max(dp) if dp else None,
        rounds_completed=len(rounds),
        final_global_loss=None if last is None else last.global_loss,
        final_global_accuracy=None if last is None else last.global_accuracy,
        meaning=EPS_TILDE_MEANING,
    )


def last_round_dp_epsilon(site_id: int, rounds: list[RoundReport]) -> float | None:
    """The site's accountant epsilon in the last round it reported one."""
    for rnd in reversed(rounds):
        site = rnd.sites.get(str(site_id))
        if site is not None and site.dp_epsilon is not None:
            return _finite(site.dp_epsilon)
    return None


def _dp_epsilon(
    audit: SiteAuditInput, rounds: list[RoundReport]
) -> tuple[float | None, str | None]:
    """The audit's dp_epsilon, else the last metrics round's (a failed audit may lack it)."""
    if audit.dp_epsilon is not None:
        return audit.dp_epsilon, "audit"
    eps = last_round_dp_epsilon(audit.site_id, rounds)
    return (eps, "metrics") if eps is not None else (None, None)


def _repeats(result: AuditResult) -> list[RepeatReport]:
    # Curves and per-record scores stay in audits/: the report keeps the scalars only.
    return [
        RepeatReport(
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
        )
        for r in result.repeats
    ]


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
