"""The per-site privacy ledger: which guarantee applies to a site's records, and the check
that every measured lower bound on epsilon stays at or below it.

Two accountants can speak for a site. Record-level DP (DP-SGD at the site, Opacus) gives
``dp_epsilon_record``. Client-level DP (clipped site updates, a noised aggregate, Flower's
accountant on the server) gives a site-level epsilon (add or remove the whole site) and the
record-level epsilon it implies for the site's records (one record moves the site's clipped
update by at most twice the clipping norm). Only the record-level one holds against the
server, which sees each site's update before it adds the noise: ``dp_epsilon`` is the
record-level epsilon alone. Against everyone who sees only the released global model both
bound the same thing for a record, so the smaller one applies there
(:func:`released_model_epsilon`), and the measured bounds, which read that model, are
checked against it.

The audits measure lower bounds (canary, O(1), RM;RN): under correct training and
accounting each is above ``dp_epsilon`` with probability at most its level beta, so one
above it is a bug or a 1-in-1/beta event. eps_tilde is not a bound (it is one only when
c_lb is tight): above ``dp_epsilon`` it is flagged, never counted as a violation.

The canary and O(1) bounds of Steinke et al. are pure-epsilon bounds (delta = 0) checked
against (epsilon, delta) guarantees. That is not free: the union bound tests each threshold
pair at beta / 323 (200 canaries), below the 2 m delta failures a delta > 0 hypothesis
allows, so Steinke's bound (:mod:`audit.one_run`) for 200 canaries all guessed right reads
3.07 at delta = 0 but 2.25 at delta = 1e-5. A pure-epsilon value above ``dp_epsilon`` is
loud only as far as the mechanism's delta part is negligible (a Gaussian mechanism with a
small mu rarely gives that many right guesses). The f-DP readings (Mahloujifar et al.)
state epsilon at the run's delta for a Gaussian trade-off curve: above ``dp_epsilon`` they
say the run is less private than a Gaussian mechanism with the accountant's (epsilon,
delta), which for DP-SGD (a composition of subsampled Gaussian steps) is a violation.

The ledger shows the largest one-run bound (canary or O(1), Steinke et al. or f-DP) as the
best lower bound and names it (:func:`best_lower_bound`). Each bound holds at its own level;
picking the largest of them after the fact is a reading aid, not a new test.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from audit.one_run import METHOD_LABELS, Method

from .client_canaries import ClientCanaryResult, ledger_fields
from .inputs import SiteAuditInput
from .schema import (
    BoundViolation,
    CanaryReport,
    ClientDPReport,
    DPLevel,
    DPSource,
    LedgerRow,
    RoundReport,
    SiteReport,
    project,
)

RECORD_ACCOUNTANTS: dict[str, str] = {"rdp": "Opacus RDP", "prv": "Opacus PRV"}
"""``dp.accountant`` -> the name the ledger shows."""

EPS_TILDE_ABOVE_NOTE = "c_lb not tight; eps_tilde is a measurement, not a bound"
"""Why eps_tilde above the accountant's epsilon is a flag, not a violation."""

_TOLERANCE = 1e-9
"""Bounds equal to the guarantee up to rounding are not violations."""

_LEVELS = ("none", "record", "client", "both")


@dataclass(frozen=True)
class PrivacySettings:
    """What a run config says about DP and canaries."""

    dp_level: DPLevel | None
    """None when the config says nothing about DP."""
    record_accountant: str | None
    """"Opacus RDP" / "Opacus PRV" when record-level DP is on."""
    delta: float | None
    """``dp.delta`` (record level; client level too unless its ledger states its own)."""
    canaries: int | None
    """``audit.canaries`` when positive."""

    @property
    def record_level(self) -> bool:
        return self.dp_level in ("record", "both")

    @property
    def client_level(self) -> bool:
        return self.dp_level in ("client", "both")

    @property
    def private(self) -> bool | None:
        """True with DP at any level, False without, None when the config says nothing."""
        return None if self.dp_level is None else self.dp_level != "none"


def dp_level(config: dict[str, Any]) -> DPLevel | None:
    """``dp.level`` of a run config; old configs: ``dp.enabled`` true means record level.

    ``dp: null/false`` (or a section that enables nothing) is "none"; no ``dp`` key: None.
    A ``dp.target_epsilon`` of inf means no record-level DP, as the config loader reads it.
    """
    if "dp" not in config:
        return None
    dp = config["dp"]
    if not isinstance(dp, dict):
        return "record" if dp else "none"
    level = dp.get("level")
    if level in _LEVELS:
        return level  # type: ignore[return-value]
    target = dp.get("target_epsilon")
    no_record = isinstance(target, int | float) and math.isinf(target)
    return "record" if dp.get("enabled") and not no_record else "none"


def privacy_settings(config: dict[str, Any]) -> PrivacySettings:
    """The DP level, the record-level accountant's name, delta and canaries of a config."""
    level = dp_level(config)
    dp = config.get("dp") if isinstance(config.get("dp"), dict) else {}
    audit = config.get("audit") if isinstance(config.get("audit"), dict) else {}
    canaries = audit.get("canaries")  # type: ignore[union-attr]
    accountant = str(dp.get("accountant") or "rdp")  # type: ignore[union-attr]
    delta = dp.get("delta")  # type: ignore[union-attr]
    return PrivacySettings(
        dp_level=level,
        record_accountant=(
            RECORD_ACCOUNTANTS.get(accountant, f"Opacus {accountant}")
            if level in ("record", "both")
            else None
        ),
        delta=_number(delta),
        canaries=int(canaries) if _number(canaries) and canaries > 0 else None,  # type: ignore[operator]
    )


@dataclass(frozen=True)
class SitePrivacy:
    """A site's guarantees and canary audit (the privacy fields of :class:`SiteReport`)."""

    dp_epsilon: float | None
    dp_epsilon_source: DPSource | None
    dp_epsilon_record: float | None
    dp_epsilon_client: float | None
    dp_epsilon_client_record: float | None
    dp_delta: float | None
    canaries: int | None
    canary: CanaryReport | None

    def fields(self) -> dict[str, Any]:
        """Keyword arguments of :class:`SiteReport` (its fields of the same names)."""
        canary = self.canary
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "canary"
        } | {
            "canary": canary,
            "canary_eps_lb": None if canary is None else canary.eps_lb,
            "canary_eps_interval": None if canary is None else canary.eps_interval,
            "canary_eps_lb_fdp": None if canary is None else canary.eps_lb_fdp,
            "canary_fdp_mu": None if canary is None else canary.fdp_mu,
        }


def site_privacy(
    audit: SiteAuditInput,
    rounds: list[RoundReport],
    settings: PrivacySettings,
    client_dp: ClientDPReport | None,
) -> SitePrivacy:
    """The site's accountant epsilons, the guarantee that applies, delta and canaries.

    Record level: the audit file's ``dp_epsilon``, else the last metrics round's. Client
    level: the server ledger's, else (site level only) the last metrics round's
    ``dp_epsilon_client``.
    """
    sid = audit.site_id
    record, record_source = _record_epsilon(audit, rounds)
    ledger_site = None if client_dp is None else client_dp.sites.get(str(sid))
    client = ledger_site.epsilon if ledger_site is not None else None
    if client is None:
        client = _last_round(sid, rounds, "dp_epsilon_client")
    client_record = None if ledger_site is None else ledger_site.epsilon_record
    # Against the server only the site's own DP-SGD counts: the server sees the site's update
    # before its client-level noise is added.
    eps, source = record, record_source
    # DP on without an accountant's number yet (a run cut short): delta is still known.
    delta = settings.delta if record is not None or settings.private or client is not None else None
    canary = audit.canary
    count = canary.n_canaries if canary is not None and canary.n_canaries else settings.canaries
    return SitePrivacy(
        dp_epsilon=eps,
        dp_epsilon_source=source,
        dp_epsilon_record=record,
        dp_epsilon_client=client,
        dp_epsilon_client_record=client_record,
        dp_delta=delta,
        canaries=count,
        canary=canary,
    )


def _record_epsilon(
    audit: SiteAuditInput, rounds: list[RoundReport]
) -> tuple[float | None, DPSource | None]:
    """The audit's dp_epsilon, else the last metrics round's (a failed audit may lack it)."""
    if audit.dp_epsilon is not None:
        return audit.dp_epsilon, "audit"
    eps = _last_round(audit.site_id, rounds, "dp_epsilon")
    return (eps, "metrics") if eps is not None else (None, None)


def released_model_epsilon(site: SiteReport | SitePrivacy) -> float | None:
    """The epsilon of one of the site's records in the released global model: the smaller of
    the record-level epsilon and the one client-level DP implies (None without either).

    It holds against anyone who sees only the global model, not against the server; the
    audits measure that model, so their lower bounds are checked against it.
    """
    present = [e for e in (site.dp_epsilon, site.dp_epsilon_client_record) if e is not None]
    return min(present) if present else None


def _last_round(site_id: int, rounds: list[RoundReport], name: str) -> float | None:
    """The site's ``name`` in the last metrics round that reported one."""
    for rnd in reversed(rounds):
        site = rnd.sites.get(str(site_id))
        value = None if site is None else getattr(site, name)
        if value is not None and math.isfinite(value):
            return float(value)
    return None


_LOWER_BOUNDS: tuple[tuple[str, str, str, Callable[[SiteReport], float | None]], ...] = (
    ("canary_eps_lb", "canary audit eps lower bound", "canary", lambda s: s.canary_eps_lb),
    (
        "canary_eps_lb_fdp",
        "canary audit f-DP eps lower bound",
        "canary",
        lambda s: s.canary_eps_lb_fdp,
    ),
    ("o1_eps_lb", "O(1) eps lower bound", "o1", lambda s: s.o1_eps_lb),
    ("o1_eps_lb_fdp", "O(1) f-DP eps lower bound", "o1_fdp", lambda s: s.o1_eps_lb_fdp),
    ("rm_rn_eps_lb", "RM;RN eps lower bound (one-sided)", "rm_rn", lambda s: s.rm_rn_eps_lb),
    (
        "rm_rn_eps_lb_two_sided",
        "RM;RN eps lower bound (two-sided)",
        "rm_rn_two_sided_each",
        lambda s: s.rm_rn_eps_lb_two_sided,
    ),
    (
        "rm_rn_eps_lb_member",
        "RM;RN eps lower bound (member side)",
        "rm_rn_two_sided_each",
        lambda s: None if s.two_sided is None else s.two_sided.member.rm_rn_eps_lb,
    ),
    (
        "rm_rn_eps_lb_nonmember",
        "RM;RN eps lower bound (non-member side)",
        "rm_rn_two_sided_each",
        lambda s: None if s.two_sided is None else s.two_sided.nonmember.rm_rn_eps_lb,
    ),
)
"""(field, label, key of its level, value) of each measured lower bound on epsilon."""


def bound_violations(site: SiteReport) -> list[BoundViolation]:
    """The measured lower bounds above the guarantee of the site's records in the released
    model (:func:`released_model_epsilon`).

    The reported values (means over repeats for O(1) and RM;RN) are compared; nothing is
    checked without DP.
    """
    dp = released_model_epsilon(site)
    if dp is None:
        return []
    found = []
    for name, label, level_key, value_of in _LOWER_BOUNDS:
        value = value_of(site)
        if value is None or not value > dp + _TOLERANCE:
            continue
        level = (
            site.canary.beta
            if level_key == "canary" and site.canary is not None
            else site.levels.get(level_key)
        )
        found.append(
            BoundViolation(
                bound=name,
                label=label,
                value=value,
                dp_epsilon=dp,
                level=level,
                message=violation_message(site.site_id, label, value, dp, level),
            )
        )
    return found


_ONE_RUN_BOUNDS: tuple[tuple[str, Method, Callable[[SiteReport], float | None]], ...] = (
    ("canary audit", "steinke", lambda s: s.canary_eps_lb),
    ("canary audit", "fdp", lambda s: s.canary_eps_lb_fdp),
    ("O(1)", "steinke", lambda s: s.o1_eps_lb),
    ("O(1)", "fdp", lambda s: s.o1_eps_lb_fdp),
)
"""(audit, method, value) of each one-run lower bound; on a tie the earlier one is named."""


def best_lower_bound(site: SiteReport) -> tuple[float | None, str | None]:
    """The largest one-run lower bound of the site and its name, e.g. ``"canary audit:
    f-DP, Gaussian (Mahloujifar et al. 2025), delta = 1e-05"``; ``(None, None)`` without
    any."""
    found = [
        (value, audit, method)
        for audit, method, of in _ONE_RUN_BOUNDS
        if (value := of(site)) is not None
    ]
    if not found:
        return None, None
    value, audit, method = max(found, key=lambda x: x[0])
    delta = 0.0 if method == "steinke" else site.fdp_delta
    at = "" if delta is None else f", delta = {delta:g}"
    return value, f"{audit}: {METHOD_LABELS[method]}{at}"


def violation_message(
    site_id: int, label: str, value: float, dp_epsilon: float, level: float | None
) -> str:
    """The loud sentence of one violation (report banners and stderr)."""
    chance = (
        f"a chance event of probability at most beta = {level:g} (1 in {1 / level:.0f})"
        if level
        else "a chance event of probability at most the bound's level beta"
    )
    return (
        f"site {site_id}: {label} = {value:.3f} is above the DP accountants' epsilon "
        f"{dp_epsilon:.3f} for one record in the released model. A measured lower bound "
        "cannot exceed a correct guarantee: "
        f"this is a bug (in the accounting, the DP training or the audit) or {chance}."
    )


def eps_tilde_above(site: SiteReport) -> str | None:
    """Why eps_tilde (one- or two-sided) is above the released model's epsilon
    (:func:`released_model_epsilon`), or None when it is not."""
    dp = released_model_epsilon(site)
    if dp is None:
        return None
    above = [
        f"{name} {value:.3f}"
        for name, value in (
            ("eps_tilde", site.eps_tilde),
            ("eps_tilde two-sided", site.eps_tilde_two_sided),
        )
        if value is not None and value > dp + _TOLERANCE
    ]
    if not above:
        return None
    return f"{EPS_TILDE_ABOVE_NOTE} ({', '.join(above)} > DP eps {dp:.3f})"


def with_checks(site: SiteReport) -> SiteReport:
    """The site with its ordering check filled in (violations and the eps_tilde flag) and
    its best one-run lower bound named."""
    reason = eps_tilde_above(site)
    best, method = best_lower_bound(site)
    return dataclasses.replace(
        site,
        best_eps_lb=best,
        best_eps_lb_method=method,
        bound_violations=bound_violations(site),
        eps_tilde_above_accountant=reason is not None,
        eps_tilde_above_accountant_reason=reason,
    )


def ledger_row(
    site: SiteReport,
    settings: PrivacySettings,
    client_dp: ClientDPReport | None,
    *,
    global_accuracy: float | None,
    client_canaries: ClientCanaryResult | None = None,
) -> LedgerRow:
    """One row of the privacy ledger: the site's report fields (:func:`~.schema.project`)
    beside its accountants (and the canary clients' client-level readings, run-wide)."""
    client_on = (
        settings.client_level or site.dp_epsilon_client is not None or (client_dp is not None)
    )
    ledger_site = None if client_dp is None else client_dp.sites.get(str(site.site_id))
    record_on = site.dp_epsilon_record is not None or settings.record_level
    return project(
        LedgerRow,
        site,
        dp_level=settings.dp_level,
        record_accountant=(settings.record_accountant or "Opacus") if record_on else None,
        record_delta=settings.delta if record_on else None,
        client_accountant=None if client_dp is None else client_dp.accountant,
        client_sampling=None if client_dp is None else client_dp.sampling,
        client_neighboring_relation=None if client_dp is None else client_dp.neighboring_relation,
        client_delta=(
            ((client_dp.delta if client_dp is not None else None) or settings.delta)
            if client_on
            else None
        ),
        client_rounds=None if ledger_site is None else len(ledger_site.rounds),
        global_accuracy=global_accuracy,
        **ledger_fields(client_canaries),
    )


def run_canaries(settings: PrivacySettings, sites: list[SiteReport]) -> int | None:
    """Canaries per site of the run: the config's, else the largest count a site reports."""
    if settings.canaries:
        return settings.canaries
    counts = [s.canaries for s in sites if s.canaries]
    return max(counts) if counts else None  # type: ignore[type-var]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
