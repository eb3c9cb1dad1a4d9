"""What each flag of a PANORAMIA result says, in every place that shows it: the report's
"what eps_tilde means" list, a site's own report, and a flagged headline."""

from __future__ import annotations

from dataclasses import dataclass

from panoramia_fl.audit.panoramia.diagnosis import NOT_TIGHT_TOLERANCE


@dataclass(frozen=True)
class FlagProse:
    """What a flag of :class:`audit.result.AuditFlags` says, for every place that shows it."""

    meaning: str
    """What it means (the report's "what eps_tilde means" list)."""
    plain: str
    """What it means to a privacy officer (a site's own report)."""
    effect: str
    """What it means for the number it is raised on (a headline shown flagged)."""


FLAG_PROSE: dict[str, FlagProse] = {
    "saturated": FlagProse(
        meaning="saturated: c_lb is within the saturation margin of the ceiling (the bound a "
        "perfect scorer reaches on this audit set). eps_tilde can then only read the headroom "
        "ceiling - c_lb, which is a limit of the audit, not leakage of the model.",
        plain="The audit hit its own ceiling: the look-alike records were already easy to "
        "tell from real ones without the model, so the number shows a limit of the audit, not "
        "how exposed your records are.",
        effect="it reads the audit's own ceiling, not the model's leakage",
    ),
    "c_lb_not_tight": FlagProse(
        meaning="c_lb_not_tight: eps_tilde's interval lies above the RM;RN bound's interval. "
        "RM;RN is itself only a lower bound, so this proves nothing, but the baseline may be "
        "too weak and eps_tilde may overstate the leakage.",
        plain="A cross-check against real records the model never saw (RM;RN) reads "
        "lower, so the number may overstate the leakage.",
        effect="it may overstate the leakage: the same attack reads lower against real "
        "records the model never saw (RM;RN)",
    ),
    "rm_rn_capped": FlagProse(
        meaning="rm_rn_capped: eps_tilde lies above RM;RN, but RM;RN's own ceiling (its audit "
        "set is cut from the site's real non-members, fewer than the game's) leaves no room to "
        "show that value, so the comparison can neither confirm nor refute eps_tilde.",
        plain="The cross-check against real records the model never saw had too few "
        "records to confirm or refute the number.",
        effect="real records the model never saw were too few to confirm or refute it",
    ),
    "above_real_nonmembers": FlagProse(
        meaning="above_real_nonmembers (generated non-members only): eps_tilde's mean exceeds "
        "RM;RN's (the same attack with the site's real held-out records as non-members) by "
        f"more than {NOT_TIGHT_TOLERANCE}, intervals overlapping or not. Part of eps_tilde may "
        "then be the model telling the game's non-members (generated records) from real ones "
        "rather than recognising its members.",
        plain="The same attack reads less when the records the model never saw are real ones "
        "rather than look-alikes: part of the number may come from the model telling "
        "look-alike records from real ones, not from recognising your records.",
        effect="it is not a measurement of leakage: the generated non-members "
        "read above real ones, so the model may be telling look-alike records from real ones "
        "rather than recognising the site's",
    ),
}
"""The prose of each flag of :data:`~.schema.FLAGS` (the same names, in its order)."""
