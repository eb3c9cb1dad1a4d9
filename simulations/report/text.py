"""Display formatting and the plain statement of what eps_tilde means (shared by md and html)."""

from __future__ import annotations

import math

from audit.result import EPS_TILDE_MEANING

from .schema import FlagsReport, IntervalReport, SiteReport

MISSING = "-"

MEANING_POINTS: tuple[str, ...] = (
    EPS_TILDE_MEANING,
    "Read eps_tilde as a lower bound on epsilon only when c_lb is tight; it is never an upper "
    "bound, and eps_tilde = 0 does not show that the model is private (the audit found no "
    "evidence, which a weak audit also finds).",
    "saturated: c_lb is within the saturation margin of the ceiling (the bound a perfect "
    "scorer reaches on this audit set). eps_tilde can then only read the headroom "
    "ceiling - c_lb, which is a limit of the audit, not leakage of the model.",
    "c_lb_not_tight: eps_tilde lies above the RM;RN bound's interval. The baseline is too "
    "weak, so eps_tilde overstates the leakage.",
    "rm_rn_capped: eps_tilde lies above RM;RN, but RM;RN's own ceiling (its audit set is cut "
    "from the site's real non-members, fewer than the game's) leaves no room to show that "
    "value, so the comparison can neither confirm nor refute eps_tilde.",
    "RM;RN (real held-out non-members, c = 0) and O(1) (Steinke et al. 2023) are lower "
    "bounds on epsilon at the audit's level beta. DP eps is the accountant's epsilon, an "
    "upper bound under DP-SGD's assumptions; a lower bound above it would signal a bug.",
    "O(1) > 0 with eps_tilde = RM;RN = 0: O(1) also guesses 'non-member' (for records of high "
    "loss), while PANORAMIA and RM;RN count only 'member' guesses (the generator's closeness "
    "is one-sided, Definition 3). A model whose members and non-members are equally easy at "
    "the top of its confidence, but which fails on more non-members, leaks through its "
    "generalization gap (f loss: members vs holdout) without any member standing out; only "
    "the two-sided O(1) can read that.",
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


def fmt_loss_gap(site: SiteReport) -> str:
    """f's mean loss on the site's members / on its holdout (the generalization gap)."""
    q = site.quality
    return f"{fmt(q.get('target_loss_members'))} / {fmt(q.get('target_loss_nonmembers'))}"


def flag_labels(flags: FlagsReport | None) -> list[str]:
    """Short labels of the raised flags, in a fixed order."""
    if flags is None:
        return []
    labels = []
    if flags.saturated:
        labels.append("saturated")
    if flags.c_lb_not_tight:
        labels.append("c_lb not tight")
    if flags.rm_rn_capped:
        labels.append("RM;RN capped")
    return labels
