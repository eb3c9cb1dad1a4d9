"""What the flags raised on a site's headline number mean for that number, said where the
number is shown first (a site page's top box, the consortium's headline table): a number
whose flags say it is not a measurement of leakage is never shown as a finding."""

from __future__ import annotations

from panoramia_fl.audit.result import AuditFlags, PanoramiaResult

from ..schemas.schema import FLAGS
from .flag_prose import FLAG_PROSE

NOT_A_FINDING = ("saturated", "c_lb_not_tight", "above_real_nonmembers")
"""Flags under which the headline does not measure the model's leakage: the audit's own
ceiling, a cross-check with real records that reads lower, generated non-members that read
above real ones. (``rm_rn_capped`` only says the cross-check can neither confirm nor refute
the number.)"""


def headline_flags(audit: PanoramiaResult) -> list[str]:
    """The flags raised on the headline, in :data:`~.schema.FLAGS`' order: the two-sided
    headline's own and those of the side it comes from (the one-sided game's when the audit
    has no two-sided game)."""
    two = audit.two_sided
    scopes: list[AuditFlags | None] = (
        [audit.one_sided.flags] if two is None else [two.flags, getattr(two, two.side).flags]
    )
    return [name for name in FLAGS if any(f is not None and getattr(f, name) for f in scopes)]


def not_a_finding(audit: PanoramiaResult) -> bool:
    """Whether the headline's flags say it does not measure the model's leakage."""
    return any(name in NOT_A_FINDING for name in headline_flags(audit))


def flag_effects(audit: PanoramiaResult) -> str | None:
    """``flagged (labels): what they mean for the number``; None without a raised flag."""
    names = headline_flags(audit)
    if not names:
        return None
    labels = ", ".join(FLAGS[name].label for name in names)
    return f"flagged ({labels}): {'; '.join(FLAG_PROSE[name].effect for name in names)}"
