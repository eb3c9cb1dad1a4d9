"""Power flags: saturation, c_lb not tight, and RM;RN pinned at its own ceiling."""

from __future__ import annotations

from audit.diagnosis import diagnose
from audit.result import Interval


def _iv(*values: float) -> Interval:
    return Interval.of(list(values))


def test_eps_tilde_above_a_free_rm_rn_is_not_tight() -> None:
    flags = diagnose(
        c_lb=_iv(0.0, 0.0),
        eps_tilde=_iv(1.0, 1.1),
        ceiling=3.0,
        rm_rn=_iv(0.3, 0.35),
        rm_rn_ceiling=2.5,
        saturation_margin=0.3,
    )
    assert flags.c_lb_not_tight and not flags.rm_rn_capped and not flags.saturated
    assert "c_lb not tight" in flags.reasons[0]


def test_rm_rn_at_its_own_ceiling_cannot_call_eps_tilde_loose() -> None:
    flags = diagnose(
        c_lb=_iv(0.0, 0.0),
        eps_tilde=_iv(2.2, 2.4),
        ceiling=2.6,
        rm_rn=_iv(1.1, 1.2),
        rm_rn_ceiling=1.3,
        saturation_margin=0.3,
    )
    assert flags.rm_rn_capped and not flags.c_lb_not_tight
    assert "RM;RN capped" in flags.reasons[0] and "1.30" in flags.reasons[0]


def test_eps_tilde_within_rm_rn_raises_nothing() -> None:
    flags = diagnose(
        c_lb=_iv(0.1, 0.2),
        eps_tilde=_iv(0.4, 0.5),
        ceiling=3.0,
        rm_rn=_iv(0.4, 0.6),
        rm_rn_ceiling=1.3,
        saturation_margin=0.3,
    )
    assert not (flags.rm_rn_capped or flags.c_lb_not_tight or flags.saturated)
    assert flags.reasons == []
