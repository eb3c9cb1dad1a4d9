"""Flags that say how far an audit's eps_tilde can be trusted (saturated, c_lb not tight)."""

from __future__ import annotations

from dataclasses import dataclass

from panoramia_fl.audit.result import AuditFlags, Interval

NOT_TIGHT_TOLERANCE = 0.05
"""eps_tilde may clear RM;RN by this much before it is flagged (``c_lb_not_tight``: the
intervals; ``above_real_nonmembers``: the means): a single repeat (no interval) or an
all-zero RM;RN would otherwise flag noise of a few hundredths."""


def diagnose(
    *,
    c_lb: Interval,
    eps_tilde: Interval,
    ceiling: float,
    rm_rn: Interval | None,
    saturation_margin: float,
    generated: bool,
    rm_rn_ceiling: float | None = None,
) -> AuditFlags:
    """Saturation and tightness flags with human-readable reasons.

    Parameters
    ----------
    c_lb, eps_tilde
        Aggregated baseline bound and eps_tilde over repeats.
    ceiling
        The bound a perfect scorer reaches on the audit set (mean over repeats).
    rm_rn
        The RM;RN eps bound over repeats, when real non-members were given.
    saturation_margin
        ``c_lb`` within this distance of the ceiling is saturated; RM;RN within it of its
        own ceiling is capped.
    generated
        Whether the game's non-members are generated records. Only then can a reading
        above RM;RN's be the model telling unreal records from real ones
        (``above_real_nonmembers``); a reference pool's records are real already, and the
        interval flag alone applies.
    rm_rn_ceiling
        The ceiling of RM;RN's audit set (mean over repeats).
    """
    headroom = ceiling - c_lb.mean
    saturated = headroom <= saturation_margin
    against = _against_rm_rn(
        eps_tilde=eps_tilde,
        rm_rn=rm_rn,
        rm_rn_ceiling=rm_rn_ceiling,
        saturation_margin=saturation_margin,
        generated=generated,
    )
    reasons: list[str] = []
    if saturated:
        reasons.append(_saturated_reason(c_lb.mean, ceiling, saturation_margin))
    if against.capped:
        assert rm_rn is not None and rm_rn_ceiling is not None
        reasons.append(_capped_reason(eps_tilde, rm_rn, rm_rn_ceiling))
    if against.not_tight:
        assert rm_rn is not None
        reasons.append(_not_tight_reason(eps_tilde, rm_rn))
    if against.above_real:
        assert rm_rn is not None
        reasons.append(_above_real_reason(eps_tilde, rm_rn))
    return AuditFlags(
        saturated=saturated,
        c_lb_not_tight=against.not_tight,
        rm_rn_capped=against.capped,
        reasons=reasons,
        above_real_nonmembers=against.above_real,
    )


@dataclass(frozen=True)
class _AgainstRmRn:
    """How eps_tilde compares with RM;RN, the same attack with real non-members."""

    capped: bool
    """RM;RN's own ceiling leaves no room to show eps_tilde's value."""
    not_tight: bool
    """eps_tilde's interval lies above RM;RN's: c_lb may not be tight."""
    above_real: bool
    """eps_tilde's mean lies above RM;RN's with generated non-members."""


def _against_rm_rn(
    *,
    eps_tilde: Interval,
    rm_rn: Interval | None,
    rm_rn_ceiling: float | None,
    saturation_margin: float,
    generated: bool,
) -> _AgainstRmRn:
    """The three RM;RN flags (all false without RM;RN)."""
    # Intervals, not means: eps_tilde 0.07 [-0.11, 0.25] against RM;RN 0 is noise, not a
    # baseline that is too weak.
    above_rm_rn = rm_rn is not None and eps_tilde.low > rm_rn.high + NOT_TIGHT_TOLERANCE
    # RM;RN's audit set is smaller than the game's: when its ceiling leaves no room to show
    # eps_tilde's value, RM;RN reading less says nothing about the baseline.
    capped = (
        above_rm_rn
        and rm_rn_ceiling is not None
        and eps_tilde.mean >= rm_rn_ceiling - saturation_margin
    )
    # The means, not the intervals: a wide interval can hide a reading far above RM;RN's
    # (0.42 [0.07, 0.77] against 0.03), and a user reads the mean. A reference pool's
    # non-members are real, so "unreal records" cannot be the reason; its means sat 0.05-0.10
    # above RM;RN's smaller game on configs/text.yaml, where f cannot tell the pool from the
    # holdout (docs/null_benchmark.md).
    above_real = (
        generated
        and rm_rn is not None
        and eps_tilde.mean > rm_rn.mean + NOT_TIGHT_TOLERANCE
        and not capped
    )
    return _AgainstRmRn(capped=capped, not_tight=above_rm_rn and not capped, above_real=above_real)


def _saturated_reason(c_lb: float, ceiling: float, saturation_margin: float) -> str:
    headroom = ceiling - c_lb
    return (
        f"saturated: c_lb {c_lb:.2f} is within {saturation_margin:.2f} of the "
        f"ceiling {ceiling:.2f} (the bound of a perfect scorer on this audit set). The "
        "baseline already tells the non-members from real records, so eps_tilde can only "
        f"read the remaining headroom ({max(headroom, 0.0):.2f}), not the model's leakage. "
        "Levers: a closer generator, a reference pool of public records as G, or a larger "
        "m (more members in the game)."
    )


def _capped_reason(eps_tilde: Interval, rm_rn: Interval, rm_rn_ceiling: float) -> str:
    return (
        f"RM;RN capped: eps_tilde {eps_tilde.mean:.2f} exceeds RM;RN {rm_rn.mean:.2f}, but "
        f"RM;RN's own ceiling {rm_rn_ceiling:.2f} (its audit set is cut from the site's "
        "real non-members, fewer than the game's) leaves no room to show that value, so "
        "it can neither confirm nor refute eps_tilde. A larger holdout lifts that ceiling."
    )


def _not_tight_reason(eps_tilde: Interval, rm_rn: Interval) -> str:
    return (
        f"c_lb may not be tight: eps_tilde's interval [{eps_tilde.low:.2f}, "
        f"{eps_tilde.high:.2f}] lies above RM;RN's [{rm_rn.low:.2f}, {rm_rn.high:.2f}] "
        f"by more than {NOT_TIGHT_TOLERANCE:.2f}, measured with real non-members. RM;RN "
        "is itself only a lower bound, so this does not prove an error, but eps_tilde may "
        "overstate the leakage if the baseline is "
        "weaker than it should be; strengthen the baseline (features, training data) or "
        "the generator to check."
    )


def _above_real_reason(eps_tilde: Interval, rm_rn: Interval) -> str:
    return (
        f"reads above real non-members: eps_tilde {eps_tilde.mean:.2f} exceeds RM;RN "
        f"{rm_rn.mean:.2f} (the same attack with the site's real held-out records as "
        f"non-members) by more than {NOT_TIGHT_TOLERANCE:.2f}. Part of it may be the model "
        "telling the game's non-members from real records rather than recognising its "
        "members."
    )
