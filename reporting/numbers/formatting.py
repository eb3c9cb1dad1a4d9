"""Display formatting, the caveat sentences and the plain statement of what eps_tilde means
(shared by every renderer: each caveat is written once, here)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from panoramia_fl.audit.canaries.gradient_canaries import GradientCanaryResult, LevelAudit
from panoramia_fl.audit.canaries.input_canaries import InputCanaryResult
from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage, first_leaking_round
from panoramia_fl.audit.panoramia.sides import SIDES
from panoramia_fl.audit.result import AuditFlags, Interval, PanoramiaResult
from panoramia_fl.contracts.held_rounds import DishonestServerResult

from ..schemas.schema import (
    FLAGS,
    HEADLINE,
    SCORERS,
    TPR_FPR_KEYS,
    ConsortiumSummary,
    FlaggedSites,
    PrivacyReport,
    SiteReport,
    mean_of,
    scorers,
)
from .meanings import NOTES, Note
from .metrics import two_sided

MISSING = "-"

SIDE_LABELS: dict[str, str] = {"member": "member", "nonmember": "non-member"}
SCORER_LABELS: dict[str, str] = {"baseline": "b", "mia": "MIA", "rm_rn": "RM;RN"}
FPR_LABELS: dict[str, str] = {"0.01": "1%", "0.001": "0.1%"}


def fmt(value: float | int | None, digits: int = 3) -> str:
    """A number rounded for display; MISSING for None / non-finite."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return MISSING
    return f"{value:.{digits}f}"


def fmt_interval(iv: Interval | float | None, digits: int = 3) -> str:
    """``[low, high]`` for display, empty when there is no interval."""
    if not isinstance(iv, Interval) or not (math.isfinite(iv.low) and math.isfinite(iv.high)):
        return ""
    return f"[{fmt(iv.low, digits)}, {fmt(iv.high, digits)}]"


def fmt_est(iv: Interval | float | None, digits: int = 3) -> str:
    """An estimate as ``mean [low, high]`` (a number alone as itself); MISSING without one."""
    if not isinstance(iv, Interval):
        return fmt(iv, digits)
    bounds = fmt_interval(iv, digits)
    return f"{fmt(iv.mean, digits)} {bounds}" if math.isfinite(iv.mean) and bounds else fmt(iv.mean)


def _detailed(value: float | None, details: list[str | None], sep: str, none: str) -> str:
    """``value (detail; detail)`` with the details that are there; ``none`` without a value."""
    if value is None:
        return none
    shown = [d for d in details if d]
    return f"{fmt(value)} ({sep.join(shown)})" if shown else fmt(value)


def fmt_dp(value: float | None, delta: float | None = None, what: str | None = None) -> str:
    """An accountant's epsilon with its delta and name, "off" without one."""
    return _detailed(value, [what, None if delta is None else f"delta {delta:g}"], "; ", "off")


def fmt_theoretical_eps(eps: float | None, private: bool | None) -> str:
    """A sweep's theoretical eps: "inf (no DP)" without DP, "unknown (DP on)" when DP is on
    but no accountant reported."""
    if eps is not None:
        return fmt(eps, 2)
    if private is True:
        return "unknown (DP on)"
    return "inf (no DP)" if private is False else MISSING


def fmt_input_canary(canary: InputCanaryResult | None, count: int | None) -> str:
    """``eps_lb [low, high] (N canaries)`` of a canary audit."""
    if count is None and canary is None:
        return MISSING
    text = MISSING if canary is None else fmt(canary.eps_lb)
    if canary is not None:
        text += f" [{fmt(canary.eps_interval[0])}, {fmt(canary.eps_interval[1])}]"
    return f"{text} ({count} canaries)" if count else text


def fmt_fdp(value: float | None, mu: float | None, delta: float | None) -> str:
    """``eps_lb (GDP mu 1.02, delta 1e-05)`` of an f-DP one-run bound."""
    mu_text = None if mu is None else f"GDP mu {fmt(mu)}"
    return _detailed(value, [mu_text, f"delta {delta:g}" if delta else None], ", ", MISSING)


def fmt_white_box(level: LevelAudit | None) -> str:
    """``bound / estimate [low, high]`` of one white-box threat level (f-DP bound)."""
    if level is None:
        return MISSING
    estimate = f"{fmt(level.eps_estimate)} [{fmt(level.eps_estimate_low)}, "
    return f"{fmt(level.eps_lb_fdp)} / {estimate}{fmt(level.eps_estimate_high)}]"


def fmt_conformance(result: GradientCanaryResult | None) -> str:
    """How many checks of the site's real DP-SGD steps passed, and which failed."""
    conformance = None if result is None else result.conformance
    if conformance is None:
        return "off" if result is None else MISSING
    failed = conformance.failed
    if not failed:
        return f"all {len(conformance.checks)} passed ({conformance.steps:,} steps)"
    names = ", ".join(
        c.name.replace("_", " ") + ("" if c.factor is None else f" ({c.factor:.2f} x)")
        for c in failed
    )
    return f"FAILED {len(failed)} of {len(conformance.checks)}: {names}"


def fmt_dishonest_server(results: Sequence[DishonestServerResult]) -> str:
    """The first decoded round: ``72% (baseline 0%), imprint, round 1``, with
    ``inconsistent`` and ``sum`` where they apply; "not attacked" without any."""
    if not results:
        return "not attacked"
    decoded = [r for r in results if r.share_rebuilt is not None]
    r = decoded[0] if decoded else results[0]
    how = r.attack if r.decoded in (None, r.attack) else f"{r.attack} ({r.decoded})"
    held = "; from the round's sum" if r.server_held == "sum" else ""
    if r.share_rebuilt is None:
        return f"{how}, round {r.round}{held}: nothing decoded (the update's audits read it)"
    return (
        f"{r.share_rebuilt:.0%} (baseline {r.baseline_share_rebuilt or 0:.0%}), {how}, "
        f"round {r.round}{held}"
    )


def fmt_best(value: float | None, method: str | None) -> str:
    """``value (method)`` of the best one-run lower bound."""
    return _detailed(value, [method], "", MISSING)


def quality(site: SiteReport, key: str) -> float | None:
    """A number of the audit's ``quality`` (f's accuracy / loss on members or holdout)."""
    return None if site.panoramia is None else site.panoramia.quality.get(key)


def fmt_loss_gap(site: SiteReport, of: str = "loss") -> str:
    """f's mean loss (or ``of``: accuracy) on the site's members / on its holdout (the
    generalization gap)."""
    members, holdout = (quality(site, f"target_{of}_{k}") for k in ("members", "nonmembers"))
    return f"{fmt(members)} / {fmt(holdout)}"


def flag_labels(flags: AuditFlags | None) -> list[str]:
    """Short labels of the raised flags, in a fixed order."""
    return [] if flags is None else [f.label for n, f in FLAGS.items() if getattr(flags, n)]


def _scope(key: str) -> str:
    """``two_sided_flagged``'s key in words: a side, or the two-sided headline."""
    return f"{SIDE_LABELS[key]} side" if key in SIDE_LABELS else key


def flag_scopes(site: SiteReport) -> list[tuple[str, AuditFlags]]:
    """The site's flags per game: the one-sided game, the two-sided headline, then each side
    of the two-sided game."""
    a = site.panoramia
    if a is None:
        return []
    two = a.two_sided
    headline = [] if two is None or two.flags is None else [(_scope(HEADLINE), two.flags)]
    sides = [] if two is None else [(_scope(s), getattr(two, s).flags) for s in SIDES]
    return [("one-sided", a.one_sided.flags), *headline, *sides]


def scoped_flag_labels(site: SiteReport) -> list[tuple[str, list[str]]]:
    """``(scope, labels)`` for each scope with a raised flag."""
    return [(scope, labels) for scope, f in flag_scopes(site) if (labels := flag_labels(f))]


def scoped_reasons(site: SiteReport) -> list[tuple[str, str]]:
    """``(scope, reason)`` for every flag reason of the site."""
    return [(scope, r) for scope, f in flag_scopes(site) for r in f.reasons]


def fmt_two_sided(site: SiteReport, *, interval: bool = True) -> str:
    """``mean [low, high] (side)`` of the two-sided eps_tilde."""
    if (two := two_sided(site)) is None:
        return MISSING
    text = fmt_est(two.eps_tilde) if interval else fmt(mean_of(two.eps_tilde))
    return f"{text} ({SIDE_LABELS[two.side]})"


def fmt_side_c_lb(site: SiteReport, side: str) -> str:
    """``c_lb / ceiling`` of one side of the two-sided game."""
    if (two := two_sided(site)) is None:
        return MISSING
    game = getattr(two, side)
    return f"{fmt(mean_of(game.c_lb))} / {fmt(game.ceiling)}"


def scorer_headers() -> list[str]:
    """Headers of the AUC and TPR-at-FPR columns (see :func:`scorer_cells`)."""
    scorers = " / ".join(SCORER_LABELS[s] for s in SCORERS)
    return [f"AUC {scorers}"] + [f"TPR@{FPR_LABELS[k]} FPR {scorers}" for k in TPR_FPR_KEYS]


def scorer_values(audit: PanoramiaResult | None, scorer: str) -> list[float | None]:
    """AUC and TPR at each FPR of :data:`TPR_FPR_KEYS` of one scorer."""
    s = None if audit is None else scorers(audit).get(scorer)
    if s is None:
        return [None] * (1 + len(TPR_FPR_KEYS))
    return [s["auc"], *((s["tpr_at_fpr"] or {}).get(k) for k in TPR_FPR_KEYS)]


def scorer_cells(site: SiteReport) -> list[str]:
    """The AUC and TPR-at-FPR cells of a site (``b / MIA / RM;RN``), in
    :func:`scorer_headers` order."""
    per_scorer = [scorer_values(site.panoramia, s) for s in SCORERS]
    return [" / ".join(fmt(v[i]) for v in per_scorer) for i in range(1 + len(TPR_FPR_KEYS))]


def levels_lines(sites: list[SiteReport]) -> list[str]:
    """One line per distinct set of bound levels, naming the sites that share it."""
    groups: dict[tuple[tuple[str, float], ...], list[int]] = {}
    for site in sites:
        if site.panoramia is not None and site.panoramia.levels:
            groups.setdefault(tuple(site.panoramia.levels.items()), []).append(site.site_id)
    return [
        f"bound levels, site{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}: "
        + ", ".join(f"{name} {value:g}" for name, value in levels)
        for levels, ids in groups.items()
    ]


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def flagged_text(flagged: FlaggedSites) -> str:
    """``saturated sites: ..; c_lb not tight: ..; RM;RN capped: ..``."""
    label = {"saturated": "saturated sites"}
    return "; ".join(
        f"{label.get(name, flag.label)}: {_ids(getattr(flagged, name))}"
        for name, flag in FLAGS.items()
    )


def first_leaking_text(by_round: list[RoundLeakage]) -> str:
    """A site's sentence: the first audited round that leaks, among those audited."""
    first = first_leaking_round(by_round)
    audited = ", ".join(str(e.round) for e in by_round)
    if first is None:
        return f"No audited round ({audited}) has a two-sided interval above 0."
    return (
        f"Leakage first shows at round {first}, the {NOTES[Note.FIRST_LEAK]} (audited: {audited})."
    )


def first_leaks_line(first: dict[str, int | None]) -> list[str]:
    """The consortium's line on when leakage first shows, per site; none without rounds."""
    if not first:
        return []
    parts = [f"site {sid}: {'none' if r is None else f'round {r}'}" for sid, r in first.items()]
    return [f"{NOTES[Note.FIRST_LEAK]}: " + "; ".join(parts)]


def consortium_lines(c: ConsortiumSummary) -> list[str]:
    """The consortium summary as plain lines (md list items, html <li>), the two-sided game
    (the headline) first."""
    leakiest = MISSING if c.leakiest_site_id is None else c.leakiest_site_id
    leakiest_two = MISSING if c.leakiest_site_id_two_sided is None else c.leakiest_site_id_two_sided
    return [
        f"sites: {c.n_sites} ({c.n_ok} ok, {c.n_failed} failed, {c.n_missing} missing)",
        f"max eps_tilde two-sided over ok sites: {fmt(c.max_eps_tilde_two_sided)} "
        f"(leakiest site: {leakiest_two})",
        f"max eps_tilde (one-sided) over ok sites: {fmt(c.max_eps_tilde)} "
        f"(leakiest site: {leakiest})",
        f"median eps_tilde (one-sided) over ok sites: {fmt(c.median_eps_tilde)}",
        f"one-sided game: {flagged_text(c.flagged)}",
        *[
            f"two-sided game, {_scope(side)}: {flagged_text(flagged)}"
            for side, flagged in c.two_sided_flagged.items()
        ],
        "largest DP eps (record-level guarantee, accountant): "
        + (fmt(c.max_dp_epsilon, 2) if c.max_dp_epsilon is not None else "DP off"),
        "ordering check (every measured lower bound <= DP eps): "
        + (
            f"VIOLATED at sites {_ids(c.bound_violation_sites)}"
            if c.bound_violation_sites
            else "no violation"
        )
        + (
            f"; {NOTES[Note.ABOVE_LABEL]} at sites {_ids(c.eps_tilde_above_accountant_sites)}"
            if c.eps_tilde_above_accountant_sites
            else ""
        ),
        f"rounds: {c.rounds_completed}; final global accuracy {fmt(c.final_global_accuracy)}, "
        f"loss {fmt(c.final_global_loss)}",
        *first_leaks_line(c.first_leaking_round),
    ]


def ordering_text(site: SiteReport) -> str:
    """The ordering check in a table cell."""
    violations = site.checks.bound_violations
    if violations:
        return "VIOLATION: " + "; ".join(
            f"{v.label} failed" + (f" ({fmt(v.value, 2)} x)" if math.isfinite(v.value) else "")
            if v.conformance
            else f"{v.label} {fmt(v.value)} > {fmt(v.dp_epsilon)}"
            for v in violations
        )
    if site.privacy.dp_epsilon is None and site.privacy.client_epsilon is None:
        return "no DP (nothing to check)"
    if site.checks.eps_tilde_above_accountant:
        return f"ok; eps_tilde above DP eps ({NOTES[Note.EPS_TILDE_ABOVE]})"
    return "ok (every lower bound <= DP eps)"


def fmt_outside(p: PrivacyReport) -> str:
    """What the site sent outside its DP guarantee, and its declared size (record level)."""
    if p.record_accountant is None and not p.client_level:
        return "off (no DP)"
    size = (
        "client-level DP"
        if p.record_accountant is None
        else f"declared size {p.declared_size}, public"
        if p.declared_size is not None
        else "declared size: its own member count"
    )
    return f"{', '.join(p.outside_guarantee) or 'nothing'} ({size})"
