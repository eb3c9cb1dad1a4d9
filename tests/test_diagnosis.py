"""Power flags: saturation, c_lb not tight, and RM;RN pinned at its own ceiling."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.assembly import _two_sided
from panoramia_fl.audit.panoramia.diagnosis import diagnose
from panoramia_fl.audit.result import BoundSummary, Interval, SideRepeat, TwoSidedRepeat


@pytest.mark.parametrize(
    ("eps_tilde", "rm_rn", "rm_rn_ceiling", "generated", "raised", "reasons"),
    [
        # eps_tilde's interval above an RM;RN that had room to read more: the baseline may
        # be too weak (RM;RN is itself a lower bound, so the flag says "may"); the mean is
        # above too
        (
            (1.0, 1.02, 1.04),
            (0.3, 0.32, 0.34),
            2.5,
            True,
            {"c_lb_not_tight", "above_real_nonmembers"},
            ["c_lb may not be tight", "reads above real non-members"],
        ),
        # a mean above RM;RN but an interval that reaches it: not the interval flag, but the
        # plain-words one (a user reads the mean)
        (
            (-0.02, 0.07, 0.16),
            (0.0, 0.0, 0.0),
            2.5,
            True,
            {"above_real_nonmembers"},
            ["reads above real non-members"],
        ),
        # the same readings with a reference pool's real non-members: the pool cannot read
        # "unreal", and RM;RN's smaller game reads lower on the same distribution; the
        # interval flag alone still applies
        ((1.0, 1.02, 1.04), (0.3, 0.32, 0.34), 2.5, False, {"c_lb_not_tight"}, ["c_lb may"]),
        ((-0.02, 0.07, 0.16), (0.0, 0.0, 0.0), 2.5, False, set(), []),
        # a mean within the tolerance of RM;RN's: nothing to say
        ((-0.02, 0.04, 0.1), (0.0, 0.0, 0.0), 2.5, True, set(), []),
        # RM;RN's ceiling leaves no room to show eps_tilde's value: no verdict
        ((2.55, 2.6, 2.65), (1.9, 2.0, 2.1), 2.3, True, {"rm_rn_capped"}, ["RM;RN capped"]),
        # eps_tilde within RM;RN's interval: nothing to say
        ((0.4, 0.5), (0.4, 0.6), 1.3, True, set(), []),
    ],
)
def test_rm_rn_comparison(eps_tilde, rm_rn, rm_rn_ceiling, generated, raised, reasons) -> None:
    flags = diagnose(
        c_lb=Interval.of([0.0, 0.1]),
        eps_tilde=Interval.of(list(eps_tilde)),
        ceiling=3.0,
        rm_rn=Interval.of(list(rm_rn)),
        rm_rn_ceiling=rm_rn_ceiling,
        saturation_margin=0.3,
        generated=generated,
    )
    assert not flags.saturated
    for name in ("c_lb_not_tight", "rm_rn_capped", "above_real_nonmembers"):
        assert getattr(flags, name) == (name in raised)
    assert len(flags.reasons) == len(reasons)
    for said, start in zip(flags.reasons, reasons, strict=True):
        assert said.startswith(start)
        # the tolerance is stated wherever it decides
        assert "0.05" in said or start == "RM;RN capped"
    if "rm_rn_capped" in raised:
        assert f"{rm_rn_ceiling:.2f}" in flags.reasons[0]


def _side(eps: float) -> SideRepeat:
    bound = BoundSummary(0.0, 0.0, 0, 0, 0.0, 0.0, 0.0125)
    return SideRepeat(0.1, 0.1 + eps, eps, 3.0, bound, bound, rm_rn_eps_lb=0.0, rm_rn_ceiling=2.5)


def test_the_headline_is_compared_with_real_nonmembers_too() -> None:
    """Sides that take turns carrying the headline pass their own check (each interval
    reaches RM;RN's 0), yet the headline (their max, every repeat 0.4) lies above real
    non-members' reading: the headline's own flag says so, with the tolerance."""
    games = [
        TwoSidedRepeat(0.0125, _side(a), _side(b), max(a, b), rm_rn_eps_lb=0.0)
        for a, b in [(0.4, 0.0), (0.0, 0.4)] * 3
    ]
    two = _two_sided(AuditConfig(), [SimpleNamespace(two_sided=g) for g in games], generated=True)  # type: ignore[misc]  # only .two_sided is read
    for side in (two.member, two.nonmember):
        assert not side.flags.c_lb_not_tight and side.eps_tilde.low <= 0.0
    assert two.flags is not None and two.flags.c_lb_not_tight
    assert two.flags.above_real_nonmembers
    assert "by more than 0.05" in two.flags.reasons[0]
