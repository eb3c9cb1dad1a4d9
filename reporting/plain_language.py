"""A site's audit in plain language, for a privacy officer who does not read the notation.

Every sentence is built from the site's own numbers (:class:`~.schema.SiteReport`); the
exact values and their definitions stay in the page's detail section.
"""

from __future__ import annotations

import math

from .formatting import SIDE_LABELS, fmt
from .schema import FlagsReport, IntervalReport, PlainReading, SiteReport, flag_specs

THREAT_MODEL: tuple[str, str, str] = (
    "Who: anyone who holds the final shared model (every site of the consortium, and "
    "whoever the model is given to) and can run it on records of their choice.",
    "What they try: to tell whether a given record of yours was used in training "
    "(membership inference), from how well the model fits that record, with look-alike "
    "records and models that never saw your data for comparison.",
    "Not covered: attackers who watch the model updates exchanged during training, who "
    "collude with the server or other sites, or who try to rebuild records.",
)

_FLAG_SENTENCES: dict[str, str] = {name: flag.plain for name, flag in flag_specs()}
"""A flag's sentence for a privacy officer, by flag (declared with the flag)."""


def plain_reading(site: SiteReport, *, exposed_records: bool) -> PlainReading:
    """The headline and the three plain-language lists of a site's report.

    Parameters
    ----------
    site
        The site's numbers.
    exposed_records
        Whether the site keeps its own list of most exposed records (linked on the page).
    """
    if site.status != "ok":
        why = site.error or "no audit file"
        return PlainReading(
            verdict="no result",
            headline=f"Your site's audit did not produce a result ({site.status}): {why}",
            measured=["Nothing: the audit stopped before it produced any number."],
            meaning=["Without a result, nothing can be said about your records."],
            not_shown=[_not_shown_records(exposed_records)],
        )
    value, interval, two_sided = _headline_value(site)
    verdict = _verdict(value, interval)
    return PlainReading(
        verdict=verdict,
        headline=_headline(verdict, value, interval, site.two_sided_side if two_sided else None),
        measured=_measured(site),
        meaning=_meaning(site, verdict, value, two_sided),
        not_shown=[
            "It is not proof of privacy: a reading of 0 means this audit found no evidence, "
            "and a weaker audit finds none either.",
            "It is a lower bound on the model's privacy loss (its DP epsilon) only when the "
            "baseline is as good as any attacker without the model can be; it is never an "
            "upper bound: a stronger attack could find more.",
            _not_shown_records(exposed_records),
            "It covers the final shared model and your own training records only: not "
            "earlier rounds, not the updates exchanged during training, not other sites' data.",
        ],
    )


def _headline_value(site: SiteReport) -> tuple[float | None, IntervalReport | None, bool]:
    """The two-sided eps_tilde, or the one-sided one for audits that predate it."""
    if site.eps_tilde_two_sided is not None:
        return site.eps_tilde_two_sided, site.eps_tilde_two_sided_interval, True
    return site.eps_tilde, site.eps_tilde_interval, False


def _verdict(value: float | None, interval: IntervalReport | None) -> str:
    if value is None or value <= 0:
        return "none"
    # One repeat has no spread to judge by: the reading stays inconclusive.
    if interval is not None and (interval.n or 0) >= 2 and (interval.low or 0.0) > 0:
        return "evidence"
    return "inconclusive"


def _span(value: float | None, interval: IntervalReport | None) -> str:
    text = f"eps_tilde = {fmt(value)}"
    if interval is None or interval.low is None or interval.high is None or (interval.n or 0) < 2:
        return text
    return f"{text} (95% interval {fmt(interval.low)} to {fmt(interval.high)})"


def _headline(
    verdict: str, value: float | None, interval: IntervalReport | None, side: str | None
) -> str:
    name = "two-sided " if side is not None else ""
    span = f"{name}{_span(value, interval)}"
    if verdict == "evidence":
        how = (
            " Most of it shows in 'not a member' guesses."
            if side == "nonmember"
            else " It shows in 'member' guesses."
            if side == "member"
            else ""
        )
        return (
            "The audit found evidence that the shared model gives away which of your records "
            f"it was trained on: {span}.{how}"
        )
    if verdict == "inconclusive":
        return f"The audit's reading is within noise of zero: {span}. No firm evidence of leakage."
    return (
        f"The audit found no evidence that the model leaks your records: {span}. "
        "This is not proof that it is private."
    )


def _measured(site: SiteReport) -> list[str]:
    m = site.sizes.get("m")
    lookalikes = (
        "real public records of the same kind that no site trained on"
        if site.generator_kind == "reference_pool"
        else "synthetic records from a generator fitted on a small share of your records"
    )
    repeats = site.n_repeats or 0
    lines = [
        f"After training, your site tested the final shared model on {fmt(site.n_members)} of "
        f"your own training records against look-alike records it never trained on "
        f"({lookalikes}).",
        "An attacker that sees the model's fit on each record, and a baseline that does not, "
        "each tried to tell the two apart"
        + (f" in a game of {m} records" if m else "")
        + f", {repeats} time{'s' * (repeats != 1)} with fresh splits. eps_tilde is how much "
        "better the attacker does than the baseline, on a log-odds scale (0 = no better).",
        "The two-sided eps_tilde counts both kinds of confident guesses: 'this record was used "
        "in training' and 'this record was not'. The paper's original (one-sided) eps_tilde "
        f"counts only the first; it reads {fmt(site.eps_tilde)} here.",
    ]
    if site.canaries:
        lines.append(
            f"Your site also trained on {site.canaries} canary records, each kept or left out "
            "by a fair coin, and guessed afterwards which were kept: a lower bound on epsilon "
            f"of {fmt(site.canary_eps_lb)}. The canaries changed the model: it is not the one "
            "the consortium would have trained without them."
        )
    if site.rm_rn_eps_lb is not None or site.o1_eps_lb is not None:
        lines.append(
            "Two cross-checks used real records of your site that the model never saw: RM;RN "
            f"(the same attack, {fmt(site.rm_rn_eps_lb_two_sided)} two-sided) and O(1) (a "
            f"simpler loss-threshold test, {fmt(site.o1_eps_lb)})."
        )
    return lines


def _meaning(site: SiteReport, verdict: str, value: float | None, two_sided: bool) -> list[str]:
    lines: list[str] = []
    if verdict == "evidence" and value is not None:
        lines.append(
            f"Seeing the model can make an attacker's confident guess about one of your records "
            f"about e^{fmt(value, 2)} = {math.exp(value):.1f} times as likely to be right (in "
            "odds) as without the model. On the scale of differential privacy, the model "
            f"protects your records no better than epsilon = {fmt(value, 2)} would, provided "
            "the baseline is as strong as any attacker without the model."
        )
        if two_sided and site.two_sided_side == "nonmember":
            lines.append(
                "The leakage is in 'not a member' guesses: the model fits your training records "
                "much more closely than similar records it never saw, so a record it fits badly "
                "is almost surely not in your data. Ruling people out of a small or known "
                "population also points at those who remain."
            )
        elif two_sided:
            lines.append(
                "The leakage is in 'member' guesses: for some of your records the model is "
                "confident enough to say correctly that they were used in training."
            )
    elif verdict == "inconclusive":
        lines.append(
            "The reading is too close to zero to say the model leaks; more repeats or a larger "
            "audit set could tell."
        )
    else:
        lines.append("This audit measured no leakage about your records.")
    lines += _flag_lines(site)
    lines.append(_low_fpr_line(site))
    lines.append(_dp_line(site))
    return [line for line in lines if line]


def _flag_lines(site: SiteReport) -> list[str]:
    """One sentence per raised flag, for the headline's game (the larger side if two-sided)."""
    flags: FlagsReport | None = site.flags
    where = ""
    if site.two_sided is not None and site.two_sided_side is not None:
        flags = getattr(site.two_sided, site.two_sided_side).flags
        where = f"On the {SIDE_LABELS[site.two_sided_side]} side: "
    if flags is None:
        return []
    raised = [name for name in _FLAG_SENTENCES if getattr(flags, name)]
    return [where + _FLAG_SENTENCES[name] for name in raised]


def _low_fpr_line(site: SiteReport) -> str:
    mia = (site.mia_tpr_at_fpr or {}).get("0.01")
    base = (site.baseline_tpr_at_fpr or {}).get("0.01")
    if mia is None:
        return ""
    return (
        "At a strict setting, where it may wrongly flag at most 1 in 100 look-alike records, "
        f"the attacker flags {_pct(mia)} of your records"
        + (f" and the baseline {_pct(base)}" if base is not None else "")
        + ": a large share would mean some records are exposed with near certainty."
    )


def _dp_line(site: SiteReport) -> str:
    """The guarantee beside the measurements: a lower bound above it is a bug; eps_tilde above
    it is not (eps_tilde is a measurement, not a bound)."""
    dp_epsilon = site.dp_epsilon
    if dp_epsilon is None:
        return (
            "Your site trained without differential privacy (DP), so there is no guarantee to "
            "compare with."
        )
    head = f"Your site's records have a DP guarantee of epsilon at most {fmt(dp_epsilon, 2)}; "
    if site.bound_violations:
        names = ", ".join(v.label for v in site.bound_violations)
        return (
            head + f"a measured lower bound is above it ({names}). That cannot happen when the "
            "training and its accounting are correct, except by a rare chance: it signals a bug "
            "to investigate before trusting either number."
        )
    if site.eps_tilde_above_accountant:
        return (
            head + "eps_tilde reads above it. eps_tilde is a measurement, not a bound: its "
            "baseline is weaker than the best attacker without the model could be, so this is no "
            "contradiction. Every measured lower bound is below the guarantee, as it should be."
        )
    return head + "every measured value is below it, as it should be."


def _not_shown_records(exposed_records: bool) -> str:
    if exposed_records:
        return (
            "It does not say which of your records are exposed. Your site's own list of its "
            "most exposed records is linked below; it stays at your site."
        )
    return (
        "It does not say which of your records are exposed: per-record results never leave "
        "your site (set audit.exposed_records to keep a list of the most exposed ones there)."
    )


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"
