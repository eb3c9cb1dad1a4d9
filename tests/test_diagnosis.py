"""Power flags: saturation, c_lb not tight, and RM;RN pinned at its own ceiling."""

from __future__ import annotations

import pytest

from audit.diagnosis import diagnose
from audit.result import Interval


@pytest.mark.parametrize(
    ("eps_tilde", "rm_rn", "rm_rn_ceiling", "raised", "reason"),
    [
        # eps_tilde's interval above an RM;RN that had room to read more: the baseline may
        # be too weak (RM;RN is itself a lower bound, so the flag says "may")
        ((1.0, 1.02, 1.04), (0.3, 0.32, 0.34), 2.5, "c_lb_not_tight", "c_lb may not be tight"),
        # a mean above RM;RN but an interval that reaches it: noise, no flag
        ((-0.02, 0.07, 0.16), (0.0, 0.0, 0.0), 2.5, None, None),
        # RM;RN's ceiling leaves no room to show eps_tilde's value: no verdict
        ((2.55, 2.6, 2.65), (1.9, 2.0, 2.1), 2.3, "rm_rn_capped", "RM;RN capped"),
        # eps_tilde within RM;RN's interval: nothing to say
        ((0.4, 0.5), (0.4, 0.6), 1.3, None, None),
    ],
)
def test_rm_rn_comparison(eps_tilde, rm_rn, rm_rn_ceiling, raised, reason) -> None:
    flags = diagnose(
        c_lb=Interval.of([0.0, 0.1]),
        eps_tilde=Interval.of(list(eps_tilde)),
        ceiling=3.0,
        rm_rn=Interval.of(list(rm_rn)),
        rm_rn_ceiling=rm_rn_ceiling,
        saturation_margin=0.3,
    )
    assert not flags.saturated
    for name in ("c_lb_not_tight", "rm_rn_capped"):
        assert getattr(flags, name) == (name == raised)
    if reason is None:
        assert flags.reasons == []
    else:
        assert len(flags.reasons) == 1 and flags.reasons[0].startswith(reason)
        assert f"{rm_rn_ceiling:.2f}" in flags.reasons[0] or raised == "c_lb_not_tight"
