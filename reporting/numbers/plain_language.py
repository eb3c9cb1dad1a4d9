"""A site's audit in plain language, for a privacy officer who does not read the notation.

Every sentence is built from the site's own numbers (:class:`~.schema.SiteReport`); the
exact values and their definitions stay in the page's detail section.
"""

from __future__ import annotations

import math

from panoramia_fl.audit.conformance.checks import ConformanceResult
from panoramia_fl.audit.result import Interval, PanoramiaResult

from ..schemas.schema import FLAGS, PlainReading, SiteReport, Verdict, mean_of
from .flag_prose import FLAG_PROSE
from .formatting import SIDE_LABELS, fmt, scorer_values
from .headline_flags import flag_effects, headline_flags, not_a_finding
from .meanings import NOTES, Note
from .metrics import O1, RM_RN, RM_RN_TWO_SIDED


def plain_reading(site: SiteReport, *, exposed_records: bool) -> PlainReading:
    """The headline and the three plain-language lists of a site's report;
    ``exposed_records``: whether the site keeps its own list of most exposed records."""
    audit = site.panoramia
    if audit is None:
        why = site.error or "no audit file"
        return PlainReading(
            verdict="no result",
            headline=f"Your site's audit did not produce a result ({site.status}): {why}",
            measured=["Nothing: the audit stopped before it produced any number."],
            meaning=["Without a result, nothing can be said about your records."],
            not_shown=[_not_shown_records(exposed_records)],
        )
    two = audit.two_sided
    interval = audit.one_sided.eps_tilde if two is None else two.eps_tilde
    value = mean_of(interval)
    verdict = _verdict(value, interval)
    if verdict in ("evidence", "inconclusive") and not_a_finding(audit):
        verdict = "flagged"
    side = None if two is None else two.side
    headline = _headline(verdict, value, interval, side)
    effects = flag_effects(audit)
    if verdict == "flagged" and effects is not None:
        headline = _flagged_headline(site, value, interval, side, effects)
    return PlainReading(
        verdict=verdict,
        headline=headline,
        measured=_measured(site, audit),
        meaning=_meaning(site, audit, verdict, value),
        not_shown=[
            NOTES[Note.NOT_PROOF],
            NOTES[Note.LOWER_BOUND_WHEN],
            _not_shown_records(exposed_records),
            _coverage(site),
        ],
    )


def _coverage(site: SiteReport) -> str:
    """What the audit covered: the final model, plus the earlier rounds audited, if any."""
    earlier = sorted(line.round for line in site.by_round)[:-1]
    models = (
        "the final shared model"
        if not earlier
        else f"the shared model after round{'s' if len(earlier) > 1 else ''} "
        f"{', '.join(map(str, earlier))} and the final one"
    )
    rounds = "" if earlier else "not earlier rounds, "
    updates = (
        "the updates exchanged during training only through the gradient canaries above"
        if site.results.gradient_canaries is not None
        else "not the updates exchanged during training"
    )
    return (
        f"It covers {models} and your own training records only: {rounds}{updates}, not "
        "other sites' data."
    )


def _verdict(value: float | None, interval: Interval | None) -> Verdict:
    if value is None or value <= 0:
        return "none"
    # One repeat has no spread to judge by: the reading stays inconclusive.
    if interval is not None and interval.n >= 2 and interval.low > 0:
        return "evidence"
    return "inconclusive"


def _span(value: float | None, interval: Interval | None) -> str:
    text = f"eps_tilde = {fmt(value)}"
    if interval is None or interval.n < 2:
        return text
    return f"{text} (95% interval {fmt(interval.low)} to {fmt(interval.high)})"


def _headline(
    verdict: str, value: float | None, interval: Interval | None, side: str | None
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


def _flagged_headline(
    site: SiteReport, value: float | None, interval: Interval | None, side: str | None, why: str
) -> str:
    """The headline of a number whose flags say it does not measure leakage: what they mean
    for it, and the cross-checks with real records to read instead."""
    name = "two-sided " if side is not None else ""
    checks = [
        f"{label} {fmt(v)}"
        for label, v in (("RM;RN", RM_RN_TWO_SIDED.value(site)), ("O(1)", O1.value(site)))
        if v is not None
    ]
    read = (
        f" The cross-checks with your real held-out records read {' and '.join(checks)}."
        if checks
        else ""
    )
    return (
        f"The audit's {name}{_span(value, interval)} is not evidence that the shared model "
        f"gives away your records: {why}.{read}"
    )


def _measured(site: SiteReport, audit: PanoramiaResult) -> list[str]:
    m = audit.sizes.get("m")
    canary, canaries = site.results.input_canaries, site.privacy.canaries
    lookalikes = (
        "real public records of the same kind that no site trained on"
        if audit.generator_kind == "reference_pool"
        else "synthetic records from a generator fitted on a small share of your records"
    )
    repeats = len(audit.repeats)
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
        f"counts only the first; it reads {fmt(mean_of(audit.one_sided.eps_tilde))} here.",
    ]
    if canaries:
        lines.append(
            f"Your site also trained on {canaries} canary records, each kept or left out "
            "by a fair coin, and guessed afterwards which were kept: a lower bound on epsilon "
            f"of {fmt(None if canary is None else canary.eps_lb)}. The canaries changed the "
            "model: it is not the one the consortium would have trained without them."
        )
    white_box = site.results.gradient_canaries
    mechanism = None if white_box is None else white_box.mechanism
    server = None if white_box is None else white_box.server
    if mechanism is not None:
        lines.append(
            "What the server could learn: gradient canaries inside your own DP-SGD show that "
            "an observer of every noisy training step could tell one of your records apart "
            f"with epsilon at least {fmt(mechanism.eps_lb_fdp)} (estimate "
            f"{fmt(mechanism.eps_estimate)}), against the {fmt(site.privacy.dp_epsilon)} your "
            "accountant guarantees"
            + (
                f"; from your round updates alone, at least {fmt(server.eps_lb_fdp)}."
                if server is not None
                else "."
            )
        )
    if white_box is not None and white_box.conformance is not None:
        lines.append(conformance_sentence(white_box.conformance))
    if RM_RN.get(site) is not None or O1.get(site) is not None:
        lines.append(
            "Two cross-checks used real records of your site that the model never saw: RM;RN "
            f"(the same attack, {fmt(RM_RN_TWO_SIDED.value(site))} two-sided) and O(1) (a "
            f"simpler loss-threshold test, {fmt(O1.value(site))})."
        )
    return lines


def _meaning(
    site: SiteReport, audit: PanoramiaResult, verdict: str, value: float | None
) -> list[str]:
    lines: list[str] = []
    side = None if audit.two_sided is None else audit.two_sided.side
    if verdict == "evidence" and value is not None:
        lines.append(
            f"Seeing the model can make an attacker's confident guess about one of your records "
            f"about e^{fmt(value, 2)} = {math.exp(value):.1f} times as likely to be right (in "
            "odds) as without the model. On the scale of differential privacy, the model "
            f"protects your records no better than epsilon = {fmt(value, 2)} would, provided "
            "the baseline is as strong as any attacker without the model."
        )
        if side == "nonmember":
            lines.append(NOTES[Note.NONMEMBER_SIDE])
        elif side is not None:
            lines.append(NOTES[Note.MEMBER_SIDE])
    elif verdict == "flagged":
        lines.append(NOTES[Note.FLAGGED_READING])
    elif verdict == "inconclusive":
        lines.append(NOTES[Note.INCONCLUSIVE_READING])
    else:
        lines.append(NOTES[Note.NO_LEAKAGE_READING])
    lines += _flag_lines(audit)
    lines.append(_low_fpr_line(audit))
    lines.append(_dp_line(site))
    return [line for line in lines if line]


def _flag_lines(audit: PanoramiaResult) -> list[str]:
    """One sentence per raised flag of the headline (its own, then those of the side it
    comes from, prefixed so), then what the baseline knew about real records."""
    two = audit.two_sided
    own = {n for n in FLAGS if two is not None and two.flags and getattr(two.flags, n)}
    where = "" if two is None else f"On the {SIDE_LABELS[two.side]} side: "
    lines = [
        ("" if name in own else where) + FLAG_PROSE[name].plain for name in headline_flags(audit)
    ]
    return lines + [realness_line(audit)]


def _low_fpr_line(audit: PanoramiaResult) -> str:
    mia, base = (scorer_values(audit, scorer)[1] for scorer in ("mia", "baseline"))
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
    dp_epsilon = site.privacy.dp_epsilon
    if dp_epsilon is None:
        return (
            "Your site trained without differential privacy (DP), so there is no guarantee to "
            "compare with."
        )
    head = f"Your site's records have a DP guarantee of epsilon at most {fmt(dp_epsilon, 2)}; "
    failed = [v.label for v in site.checks.bound_violations if v.conformance]
    if failed:
        return (
            head + f"but a check of your DP-SGD's real steps failed ({', '.join(failed)}): "
            "your training did not do what the accountant assumes, so the guarantee does not "
            "hold as stated until the cause is found."
        )
    if site.checks.bound_violations:
        names = ", ".join(v.label for v in site.checks.bound_violations)
        return (
            head + f"a measured lower bound is above it ({names}). That cannot happen when the "
            "training and its accounting are correct, except by a rare chance: it signals a bug "
            "to investigate before trusting either number."
        )
    if site.checks.eps_tilde_above_accountant:
        return (
            head + f"eps_tilde reads above it. {NOTES[Note.NOT_A_BOUND]}: its "
            "baseline is weaker than the best attacker without the model could be, so this is no "
            "contradiction. Every measured lower bound is below the guarantee, as it should be."
        )
    return head + "every measured value is below it, as it should be."


def _not_shown_records(exposed_records: bool) -> str:
    if exposed_records:
        return NOTES[Note.RECORDS_LISTED]
    return NOTES[Note.RECORDS_NOT_LISTED]


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def realness_line(audit: PanoramiaResult) -> str:
    """What the baseline could know about real records, where its non-members are generated
    and it knew less than the model (``helper_real_*`` in the audit's sizes)."""
    public = audit.sizes.get("helper_real_public")
    own = audit.sizes.get("helper_real_site")
    if audit.generator_kind == "reference_pool" or public is None or own is None or public:
        return ""
    if own:
        return (
            "No public records of your kind were given to the audit, so the baseline learnt "
            f"what real records look like only from {own} of your own records (those spent on "
            "the look-alike generator), where the model learnt it from every site's records. "
            "A reading above the cross-check with real records may then come from the model "
            "telling look-alike records from real ones, not from recognising yours."
        )
    return (
        "The baseline never saw a real record (its helper trained on look-alike records "
        "only), so it cannot know what real records look like as the model does: a reading "
        "above the cross-check with real records may come from the model telling look-alike "
        "records from real ones, not from recognising yours."
    )


def conformance_sentence(result: ConformanceResult) -> str:
    """What the checks of the site's real DP-SGD steps found, in a sentence."""
    checked = (
        f"Your site also checked each of its {result.steps:,} real DP-SGD steps against what "
        "its accountant assumes (the records each batch drew, the clipping at C, the noise "
        "added and its independence, the steps in the accountant's history)"
    )
    if not result.failed:
        return f"{checked}: all {len(result.checks)} checks passed."
    names = ", ".join(c.name.replace("_", " ") for c in result.failed)
    return f"{checked}: {len(result.failed)} failed ({names}); see the violations above."
