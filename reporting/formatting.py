"""Display formatting and the plain statement of what eps_tilde means (shared by md and html)."""

from __future__ import annotations

import math

from audit.result import EPS_TILDE_MEANING, TWO_SIDED_MEANING

from .privacy_ledger import EPS_TILDE_ABOVE_NOTE
from .schema import (
    SCORERS,
    SIDES,
    TPR_FPR_KEYS,
    BoundViolation,
    ConsortiumSummary,
    FlaggedSites,
    FlagsReport,
    IntervalReport,
    SiteReport,
    SweepSiteRow,
    flag_specs,
    flagged_lists,
)

MISSING = "-"

SIDE_LABELS: dict[str, str] = {"member": "member", "nonmember": "non-member"}
SCORER_LABELS: dict[str, str] = {"baseline": "b", "mia": "MIA", "rm_rn": "RM;RN"}
FPR_LABELS: dict[str, str] = {"0.01": "1%", "0.001": "0.1%"}

MEANING_POINTS: tuple[str, ...] = (
    EPS_TILDE_MEANING,
    "Read eps_tilde as a lower bound on epsilon only when c_lb is tight; it is never an upper "
    "bound, and eps_tilde = 0 does not show that the model is private (the audit found no "
    "evidence, which a weak audit also finds).",
    *(flag.meaning for _, flag in flag_specs()),
    "RM;RN (real held-out non-members, c = 0) and O(1) (Steinke et al. 2023) are lower "
    "bounds on epsilon at the audit's level beta. DP eps is the accountant's epsilon, an "
    "upper bound under DP-SGD's assumptions; a lower bound above it would signal a bug.",
    "DP eps per site is the record-level guarantee that applies to its records: the smaller "
    "of the record-level accountant's (DP-SGD at the site) and the record-level epsilon that "
    "client-level DP implies (one record moves the site's clipped update by at most twice the "
    "clipping norm). Client-level DP's own epsilon is site-level: it covers adding or removing "
    "the whole site. Every measured lower bound (canary, O(1), RM;RN on either side) must stay "
    "at or below DP eps; eps_tilde may exceed it without contradiction, as it is a measurement, "
    "not a bound.",
    TWO_SIDED_MEANING,
    "Each side of the two-sided game has its own c_lb, ceiling and flags (saturated, c_lb "
    "not tight against that side's RM;RN, RM;RN capped), diagnosed as above; side names the "
    "side whose eps_tilde is larger. The one-sided eps_tilde (the paper's) is reported "
    "unchanged beside it.",
    "Levels: the one-sided c_lb and {c+eps}_lb are each at beta/2 (so eps_tilde holds at "
    "beta), as are RM;RN's two; the two-sided game's four bounds (b and MIA on each side) "
    "are at beta/4 each, as are RM;RN's two-sided ones; O(1) is at beta.",
    "TPR at 1% / 0.1% FPR: the fraction of members a scorer flags while flagging at most "
    "1% / 0.1% of the non-members (generated records for b and the MIA, real held-out "
    "records for RM;RN). It shows whether a few records are exposed with high confidence, "
    "which the AUC averages away.",
    "O(1) > 0 with the one-sided eps_tilde = RM;RN = 0: O(1) also guesses 'non-member' (for "
    "records of high loss), while the one-sided PANORAMIA and RM;RN count only 'member' "
    "guesses (the generator's closeness is one-sided, Definition 3). A model whose members "
    "and non-members are equally easy at the top of its confidence, but which fails on more "
    "non-members, leaks through its generalization gap (f loss: members vs holdout) without "
    "any member standing out; the two-sided values (side: non-member) and O(1) can read that.",
)


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


def fmt_interval(iv: IntervalReport | None, digits: int = 3) -> str:
    """``[low, high]`` for display, empty when there is no interval."""
    if iv is None or iv.low is None or iv.high is None:
        return ""
    return f"[{fmt(iv.low, digits)}, {fmt(iv.high, digits)}]"


def fmt_with_interval(value: float | None, iv: IntervalReport | None, digits: int = 3) -> str:
    """``mean [low, high]`` for display."""
    text = fmt(value, digits)
    bounds = fmt_interval(iv, digits)
    return f"{text} {bounds}" if value is not None and bounds else text


def fmt_dp(value: float | None, delta: float | None = None, what: str | None = None) -> str:
    """An accountant's epsilon with its delta and name, "off" without one."""
    if value is None:
        return "off"
    details = [d for d in (what, None if delta is None else f"delta {delta:g}") if d]
    return f"{fmt(value)} ({'; '.join(details)})" if details else fmt(value)


def fmt_theoretical_eps(eps: float | None, private: bool | None) -> str:
    """A sweep's theoretical eps: "inf (no DP)" without DP, "unknown (DP on)" when DP is on
    but no accountant reported."""
    if eps is not None:
        return fmt(eps, 2)
    if private is True:
        return "unknown (DP on)"
    return "inf (no DP)" if private is False else MISSING


def fmt_canary(value: float | None, interval: list[float | None] | None, count: int | None) -> str:
    """``eps_lb [low, high] (N canaries)`` of a canary audit."""
    if count is None and value is None:
        return MISSING
    text = fmt(value)
    if value is not None and interval and len(interval) == 2:
        text += f" [{fmt(interval[0])}, {fmt(interval[1])}]"
    return f"{text} ({count} canaries)" if count else text


def fmt_fdp(value: float | None, mu: float | None, delta: float | None) -> str:
    """``eps_lb (GDP mu 1.02, delta 1e-05)`` of an f-DP one-run bound."""
    if value is None:
        return MISSING
    details = [f"GDP mu {fmt(mu)}" if mu is not None else "", f"delta {delta:g}" if delta else ""]
    details = [d for d in details if d]
    return f"{fmt(value)} ({', '.join(details)})" if details else fmt(value)


def fmt_best(value: float | None, method: str | None) -> str:
    """``value (method)`` of the best one-run lower bound."""
    if value is None:
        return MISSING
    return f"{fmt(value)} ({method})" if method else fmt(value)


def fmt_loss_gap(site: SiteReport) -> str:
    """f's mean loss on the site's members / on its holdout (the generalization gap)."""
    q = site.quality
    return f"{fmt(q.get('target_loss_members'))} / {fmt(q.get('target_loss_nonmembers'))}"


def flag_labels(flags: FlagsReport | None) -> list[str]:
    """Short labels of the raised flags, in a fixed order."""
    if flags is None:
        return []
    return [flag.label for name, flag in flag_specs() if getattr(flags, name)]


def flag_scopes(site: SiteReport) -> list[tuple[str, FlagsReport]]:
    """The site's flags per game: the one-sided game, then each side of the two-sided one."""
    scopes = [("one-sided", site.flags)] if site.flags else []
    if site.two_sided is not None:
        scopes += [
            (f"{SIDE_LABELS[side]} side", getattr(site.two_sided, side).flags) for side in SIDES
        ]
    return scopes


def scoped_flag_labels(site: SiteReport) -> list[tuple[str, list[str]]]:
    """``(scope, labels)`` for each scope with a raised flag."""
    return [(scope, labels) for scope, f in flag_scopes(site) if (labels := flag_labels(f))]


def scoped_reasons(site: SiteReport) -> list[tuple[str, str]]:
    """``(scope, reason)`` for every flag reason of the site."""
    return [(scope, r) for scope, f in flag_scopes(site) for r in f.reasons]


def fmt_two_sided(site: SiteReport | SweepSiteRow) -> str:
    """``mean [low, high] (side)`` of the two-sided eps_tilde."""
    text = fmt_with_interval(site.eps_tilde_two_sided, site.eps_tilde_two_sided_interval)
    if site.two_sided_side is None:
        return text
    return f"{text} ({SIDE_LABELS[site.two_sided_side]})"


def fmt_side_c_lb(site: SiteReport, side: str) -> str:
    """``c_lb / ceiling`` of one side of the two-sided game."""
    if site.two_sided is None:
        return MISSING
    block = getattr(site.two_sided, side)
    return f"{fmt(block.c_lb)} / {fmt(block.ceiling)}"


def fmt_per_scorer(site: SiteReport, value_of: str, key: str | None = None) -> str:
    """``b / MIA / RM;RN`` values of ``<scorer>_<value_of>`` (a dict's ``key`` when given)."""
    cells = []
    for scorer in SCORERS:
        value = getattr(site, f"{scorer}_{value_of}")
        if key is not None:
            value = None if value is None else value.get(key)
        cells.append(fmt(value))
    return " / ".join(cells)


def scorer_headers() -> list[str]:
    """Headers of the AUC and TPR-at-FPR columns (see :func:`scorer_cells`)."""
    scorers = " / ".join(SCORER_LABELS[s] for s in SCORERS)
    return [f"AUC {scorers}"] + [f"TPR@{FPR_LABELS[k]} FPR {scorers}" for k in TPR_FPR_KEYS]


def scorer_cells(site: SiteReport) -> list[str]:
    """The AUC and TPR-at-FPR cells of a site, in :func:`scorer_headers` order."""
    return [fmt_per_scorer(site, "auc")] + [
        fmt_per_scorer(site, "tpr_at_fpr", key) for key in TPR_FPR_KEYS
    ]


def levels_lines(sites: list[SiteReport]) -> list[str]:
    """One line per distinct set of bound levels, naming the sites that share it."""
    groups: dict[tuple[tuple[str, float], ...], list[int]] = {}
    for site in sites:
        if site.levels:
            groups.setdefault(tuple(site.levels.items()), []).append(site.site_id)
    return [
        f"bound levels, site{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}: "
        + ", ".join(f"{name} {value:g}" for name, value in levels)
        for levels, ids in groups.items()
    ]


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def flagged_text(flagged: FlaggedSites) -> str:
    """``saturated sites: ..; c_lb not tight: ..; RM;RN capped: ..``."""
    return "; ".join(
        f"{label}: {_ids(getattr(flagged, name))}" for name, _, label in flagged_lists()
    )


def consortium_lines(c: ConsortiumSummary) -> list[str]:
    """The consortium summary as plain lines (md list items, html <li>)."""
    leakiest = MISSING if c.leakiest_site_id is None else c.leakiest_site_id
    leakiest_two = MISSING if c.leakiest_site_id_two_sided is None else c.leakiest_site_id_two_sided
    one_sided = FlaggedSites(**{name: getattr(c, name) for name, _, _ in flagged_lists()})
    return [
        f"sites: {c.n_sites} ({c.n_ok} ok, {c.n_failed} failed, {c.n_missing} missing)",
        f"max eps_tilde (one-sided) over ok sites: {fmt(c.max_eps_tilde)} "
        f"(leakiest site: {leakiest})",
        f"median eps_tilde (one-sided) over ok sites: {fmt(c.median_eps_tilde)}",
        f"max eps_tilde two-sided over ok sites: {fmt(c.max_eps_tilde_two_sided)} "
        f"(leakiest site: {leakiest_two})",
        f"one-sided game: {flagged_text(one_sided)}",
        *[
            f"two-sided game, {SIDE_LABELS[side]} side: {flagged_text(flagged)}"
            for side, flagged in c.two_sided_flagged_sites.items()
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
            f"; eps_tilde above DP eps (not a bound) at sites "
            f"{_ids(c.eps_tilde_above_accountant_sites)}"
            if c.eps_tilde_above_accountant_sites
            else ""
        ),
        f"rounds: {c.rounds_completed}; final global accuracy {fmt(c.final_global_accuracy)}, "
        f"loss {fmt(c.final_global_loss)}",
    ]


VIOLATION_TITLE = "BOUND VIOLATION"
"""The banner's title: a measured lower bound above the record-level guarantee."""


def canary_banner(canaries: int) -> str:
    """Every report of a run trained with canaries says so."""
    return (
        f"This run was trained with {canaries} canaries per site: this model is not the plain "
        "model. A fair coin decided for each canary record whether its site trained on it (for "
        "the canary audit); the accuracy and every audit number shown are this "
        "canary-trained model's."
    )


def violation_banner_lines(violations: list[BoundViolation]) -> list[str]:
    """The banner's lines: one per violation, then what to do."""
    if not violations:
        return []
    return [
        *(v.message for v in violations),
        "Do not trust the guarantee or the bound until the cause is found: check the "
        "accountant's inputs (noise, sampling, rounds, delta), the DP training and the audit.",
    ]


def ordering_text(violations: list[BoundViolation], eps_tilde_above: bool, dp: float | None) -> str:
    """The ordering check in a table cell."""
    if violations:
        return "VIOLATION: " + "; ".join(
            f"{v.label} {fmt(v.value)} > {fmt(v.dp_epsilon)}" for v in violations
        )
    if dp is None:
        return "no DP (nothing to check)"
    if eps_tilde_above:
        return f"ok; eps_tilde above DP eps ({EPS_TILDE_ABOVE_NOTE})"
    return "ok (every lower bound <= DP eps)"
