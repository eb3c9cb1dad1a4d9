"""The lines a report opens with when something is off: a bound violation, training that did
not happen as configured, canaries in the model; stderr's warnings say the same.
"""

from __future__ import annotations

from typing import Literal

from panoramia_fl.audit.canaries.client_canaries import ClientCanaryResult
from panoramia_fl.contracts.run_log import RoundRecord, empty_rounds, untrained_reason

from ..numbers.formatting import (
    fmt,
)
from ..numbers.meanings import NOTES, Note
from ..privacy.family_wise import ConsortiumReading, consortium_reading
from ..schemas.schema import (
    BoundViolation,
    SiteReport,
)

VIOLATION_TITLE = "BOUND VIOLATION"
"""The banner's title: a measured lower bound above the guarantee it measures."""


UNTRAINED_HEADLINE = "Training did not happen as configured."
"""The headline of rounds that aggregated no site's update."""


VIOLATION_HEADLINE = f"{VIOLATION_TITLE}: a measured lower bound is above the DP guarantee"

CHANCE_FLAGS_HEADLINE = (
    "DP-SGD check flagged at a site, consistent with chance across the consortium"
)
"""The headline when every violation is a statistical check's flag that does not survive the
family-wise correction: the site's page still shows its flag, the consortium reads it as
chance."""


def violation_warnings(sites: list[SiteReport], prefix: str = "") -> list[str]:
    """A line per bound violation of the sites, for stderr."""
    return [
        f"{VIOLATION_TITLE}: {prefix}{v.message}" for s in sites for v in s.checks.bound_violations
    ]


def chance_flags_warnings(sites: list[tuple[str, SiteReport]], scope: str) -> list[str]:
    """For stderr, after the sites' violation lines: the consortium's reading when every
    violation is a statistical flag consistent with chance (:func:`consortium_banner`)."""
    kind, lines = consortium_banner(sites, scope)
    return [f"{CHANCE_FLAGS_HEADLINE}: {lines[-1]}"] if kind == "chance_flags" else []


def input_canary_banner(canaries: int) -> str:
    """Every report of a run trained with canaries says so."""
    return (
        f"This run was trained with {canaries} canaries per site: this model is not the plain "
        "model. A fair coin decided for each canary record whether its site trained on it (for "
        "the canary audit); the accuracy and every audit number shown are this "
        "canary-trained model's."
    )


def client_canary_lines(result: ClientCanaryResult) -> list[str]:
    """The "Canary clients" section of report.md / report.html, one sentence a line."""
    total = 2 * result.canary_clients
    acc = result.accountant_epsilon
    lines = [
        f"{result.inserted} of {total} canary directions were inserted as clients (scaled to "
        f"the {result.scale}); the other {total - result.inserted} are the null. Epsilon at "
        f"delta = {result.delta:g}:",
        *(
            f"{threat.replace('_', '-')}: estimate {fmt(e.eps_estimate, 2)} "
            f"[{fmt(e.eps_estimate_low, 2)}, {fmt(e.eps_estimate_high, 2)}]"
            + (f" ({e.eps_estimate / acc:.2f} x the accountant's)" if acc else "")
            + f"; two-variance {fmt(e.eps_estimate_two_variance, 2)}; lower bound "
            f"{fmt(e.eps_lb, 2)} (f-DP, beta = {result.beta:g})."
            for threat, e in result.estimates.items()
        ),
    ]
    if acc is not None:
        lines.append(
            f"Client-level accountant: {acc:.2f} for a client in all {result.rounds} rounds."
        )
    cost = result.accuracy_cost
    if cost is not None:
        lines.append(
            f"Global accuracy {fmt(result.accuracy_with_canaries)} with the canaries, "
            f"{fmt(result.accuracy_without_canaries)} without (the run trained again): "
            f"cost {cost:+.3f}."
        )
    if result.outweighed:
        lines.append(
            NOTES[Note.CANARY_CLIENTS_OUTNUMBER].format(
                canaries=result.mean_canaries_per_round, sites=result.sites_per_round
            )
        )
    return [*lines, NOTES[Note.CLIENT_CANARIES]]


def training_banner_lines(rounds: list[RoundRecord]) -> list[str]:
    """The banner's lines when rounds aggregated nothing: a run that never trained (every
    number below is of the initial model), or the rounds that carried the model over."""
    untrained = untrained_reason(rounds)
    if untrained is not None:
        return [f"{untrained[0].upper()}{untrained[1:]}; every number below is of that model."]
    empty = empty_rounds(rounds)
    if not empty:
        return []
    listed = ", ".join(str(r) for r in empty)
    return [
        f"Round{'s' * (len(empty) != 1)} {listed}: no site's update was aggregated; the "
        "global model was carried over unchanged (each round's failures are in "
        "metrics.jsonl)."
    ]


def violation_banner_lines(violations: list[BoundViolation]) -> list[str]:
    """The banner's lines: one per violation, then what to do (a site's own page: each flag
    read at the site's level)."""
    return _with_what_to_do([v.message for v in violations])


_WHAT_TO_DO = (
    "Do not trust the guarantee or the bound until the cause is found: check the "
    "accountant's inputs (noise, sampling, rounds, delta), the DP training and the audit."
)


def _with_what_to_do(messages: list[str]) -> list[str]:
    return [*messages, _WHAT_TO_DO] if messages else []


def _named_message(name: str, site: SiteReport, violation: BoundViolation) -> str:
    """A violation's sentence under the site's name in a banner (``point p, site s`` in a
    sweep): its sentence opens with ``site s:``, which the name replaces."""
    return f"{name}: {violation.message.removeprefix(f'site {site.site_id}: ')}"


def consortium_banner(
    sites: list[tuple[str, SiteReport]], scope: str
) -> tuple[Literal["violation", "chance_flags"], list[str]]:
    """The banner of a run's or a sweep's (``scope``) named sites: their violations, each
    failed statistical conformance check read across every site's checks
    (:func:`~.family_wise.consortium_reading`), then what to do. When every violation is a
    statistical flag consistent with chance, the banner's kind is ``chance_flags`` and its
    last line says so. Returns the banner's kind and lines."""
    violations = [v for _, s in sites for v in s.checks.bound_violations]
    reading = consortium_reading(sites)
    lines = _with_what_to_do(
        [_named_message(name, s, v) for name, s in sites for v in s.checks.bound_violations]
    )
    if reading is None:
        return "violation", lines
    # A bound above the guarantee, a failed exact check or a surviving flag: do not trust.
    only_chance = all(v.conformance and v.level is not None for v in violations) and not any(
        f.survives for f in reading.flags
    )
    last = [NOTES[Note.ONLY_CHANCE]] if only_chance else lines[-1:]
    body = [*lines[:-1], *family_wise_lines(reading, scope), *last]
    return ("chance_flags" if only_chance else "violation"), body


def family_wise_lines(reading: ConsortiumReading, scope: str) -> list[str]:
    """The consortium-level reading of the failed statistical checks, one line each after
    the numbers they are read against."""
    counts = reading.reading
    head = NOTES[Note.FAMILY_WISE].format(
        scope=scope,
        checks=counts.checks,
        sites=reading.sites,
        chance=counts.chance,
        beta=reading.beta,
    )
    flags = [
        NOTES[Note.FLAG_SURVIVES if f.survives else Note.FLAG_BY_CHANCE].format(
            where=f.where,
            check=f.check.name.replace("_", " "),
            p="none" if f.check.p_value is None else f"{f.check.p_value:.2g}",
            checks=counts.checks,
        )
        for f in reading.flags
    ]
    return [head, *flags]
