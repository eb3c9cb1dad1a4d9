"""The per-site privacy ledger: which guarantee applies to a site's records, and the check
that every measured lower bound on epsilon stays at or below it.

Record-level DP (DP-SGD at the site, Opacus) gives ``dp_epsilon``; client-level DP (clipped
site updates, a noised aggregate, Flower's accountant) gives a site-level epsilon and the
record-level one it implies (one record moves the clipped update by at most twice the
clipping norm). Only the record-level one holds against the server, which sees each update
before the noise: that is ``dp_epsilon``. Against readers of the released model the smaller
applies (:func:`released_model_epsilon`), and the measured bounds, which read that model, are
checked against it.

Each measured lower bound (canary, O(1), RM;RN, their f-DP readings) exceeds a correct
guarantee with probability at most its level: above it is a bug or a 1-in-1/beta event. The
canary clients' bound (``client_eps_lb``) measures the client level and is checked against the
site-level client epsilon. A failed conformance check of a site's real DP-SGD steps
(:func:`conformance_violations`) is listed with them.
Steinke's bounds are pure-epsilon (delta = 0), so they are loud only as far as the
mechanism's delta part is negligible; the f-DP readings state epsilon at the run's delta for a
Gaussian trade-off curve (docs/one_run_bounds.md). eps_tilde is not a bound: above the
guarantee it is flagged, never a violation. The best lower bound (:func:`best_lower_bound`)
is a reading aid, not a new test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from panoramia_fl.audit.canaries.client_canaries import ClientCanaryResult, ThreatModel
from panoramia_fl.audit.result import finite
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.audit.stats.one_run import METHOD_LABELS, Method
from panoramia_fl.contracts.dp_level import (
    CLIENT_LEVELS,
    RECORD_LEVELS,
    DPLevel,
    SecureAggregationMode,
)
from panoramia_fl.contracts.reply_keys import COVERED, NUM_EXAMPLES, REPLY_KEYS, TRAIN_LOSS
from panoramia_fl.contracts.run_log import ClientDPFile, RoundRecord, SiteRound
from panoramia_fl.contracts.site_audit import SiteAuditFile

from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import (
    EPS_TILDE,
    EPS_TILDE_TWO_SIDED,
    INPUT_CANARY,
    INPUT_CANARY_FDP,
    O1,
    O1_FDP,
    Metric,
)
from ..numbers.report_parts import lower_bounds
from ..schemas.schema import (
    CONFORMANCE_PREFIX,
    BoundViolation,
    ChecksReport,
    DPSource,
    PrivacyReport,
    SiteReport,
    mean_of,
)

RECORD_ACCOUNTANTS: dict[str, str] = {"rdp": "Opacus RDP", "prv": "Opacus PRV"}
"""``dp.accountant`` -> the name the ledger shows."""


def record_accountant_name(accountant: str) -> str:
    """The name the ledger shows for a record-level ``dp.accountant``."""
    return RECORD_ACCOUNTANTS.get(accountant, f"Opacus {accountant}")


CLIENT_CANARY_THREAT: ThreatModel = "final"
"""The canary clients' threat model the ledger shows (who sees the released model, as every
other audit of the report); report.json's ``client_canaries`` holds both."""


_RECORD_SCOPE = "one record in the released model"
_UPDATE_SCOPE = "one record in the site's updates up to that round"
_CLIENT_SCOPE = "the whole site (client level)"
"""What a violated guarantee covers, in its message."""
_TOLERANCE = 1e-9
"""Bounds equal to the guarantee up to rounding are not violations."""


@dataclass(frozen=True)
class PrivacySettings:
    """What a run config says about DP and input canaries (read by the config's owner,
    ``simulations.config_file.privacy_settings``)."""

    dp_level: DPLevel | None
    """None when the config says nothing about DP."""
    record_accountant: str | None
    """"Opacus RDP" / "Opacus PRV" when record-level DP is on."""
    delta: float | None
    """``dp.delta`` (record level; client level too unless its ledger states its own)."""
    input_canaries: int | None
    """``audit.input_canaries`` (older configs: ``audit.canaries``) when positive."""
    secure_aggregation: SecureAggregationMode = "none"
    """``fl.secure_aggregation``: ``ideal`` when the server held only each round's sum."""
    declared_size: int | None = None
    """``dp.declared_size``: the public record count every site's DP-SGD used; None: each
    site declared its own member count."""

    @property
    def record_level(self) -> bool:
        return self.dp_level in RECORD_LEVELS

    @property
    def client_level(self) -> bool:
        return self.dp_level in CLIENT_LEVELS

    @property
    def private(self) -> bool | None:
        """True with DP at any level, False without, None when the config says nothing."""
        return None if self.dp_level is None else self.dp_level != "none"


def site_privacy(
    site_id: int,
    audit: SiteAuditFile[SiteResults] | None,
    rounds: list[RoundRecord],
    settings: PrivacySettings,
    client_dp: ClientDPFile | None,
    client_canaries: ClientCanaryResult | None = None,
) -> PrivacyReport:
    """The site's guarantees with their accountants, delta and canaries, and the canary
    clients' client-level readings (run-wide, final model: :data:`CLIENT_CANARY_THREAT`).

    Record level: the audit file's ``dp_epsilon``, else the last metrics round's. Client
    level: the server ledger's, else (site level only) the last metrics round's
    ``dp_epsilon_client``; against the server itself, the ledger's (distributed DP only).
    """
    record, source = _record_epsilon(site_id, audit, rounds)
    record_on = record is not None or settings.record_level
    results = SiteResults() if audit is None else audit.results
    ledger_site = None if client_dp is None else client_dp.sites.get(str(site_id))
    client = ledger_site.epsilon if ledger_site is not None else None
    if client is None:
        client = _last_round(site_id, rounds, "dp_epsilon_client")
    # DP on without an accountant's number yet (a run cut short): delta is still known.
    delta = settings.delta if record is not None or settings.private or client is not None else None
    client_on = settings.client_level or client is not None or client_dp is not None
    canary = results.input_canaries
    est = None if client_canaries is None else client_canaries.estimates.get(CLIENT_CANARY_THREAT)
    return PrivacyReport(
        dp_epsilon=record,
        dp_epsilon_source=source,
        dp_delta=delta,
        record_accountant=(settings.record_accountant or "Opacus") if record_on else None,
        declared_size=settings.declared_size if record_on else None,
        outside_guarantee=(
            outside_guarantee(site_id, rounds, settings) if record_on or client_on else []
        ),
        client_level=client_on,
        client_epsilon=client,
        client_epsilon_record=None if ledger_site is None else ledger_site.epsilon_record,
        client_accountant=None if client_dp is None else client_dp.accountant,
        client_sampling=None if client_dp is None else client_dp.sampling,
        client_neighboring_relation=None if client_dp is None else client_dp.neighboring_relation,
        client_delta=((client_dp and client_dp.delta) or settings.delta) if client_on else None,
        client_rounds=None if ledger_site is None else len(ledger_site.rounds),
        client_eps_estimate=None if est is None else est.eps_estimate,
        client_eps_estimate_low=None if est is None else est.eps_estimate_low,
        client_eps_estimate_high=None if est is None else est.eps_estimate_high,
        client_eps_estimate_two_variance=(
            None if est is None else finite(est.eps_estimate_two_variance)
        ),
        client_eps_lb=None if est is None else est.eps_lb,
        client_eps_lb_beta=None if client_canaries is None else client_canaries.beta,
        canaries=canary.n_canaries
        if canary is not None and canary.n_canaries
        else settings.input_canaries,
        client_epsilon_server=None if ledger_site is None else ledger_site.epsilon_server,
        client_epsilon_record_server=(
            None if ledger_site is None else ledger_site.epsilon_record_server
        ),
    )


def sent_keys(site: SiteRound) -> list[str]:
    """The keys of one train reply: as the server received them, or (files written before
    it kept them) those of its numbers that are there."""
    if site.sent is not None:
        return site.sent
    present = ((TRAIN_LOSS, site.train_loss), (NUM_EXAMPLES, site.num_examples))
    return [key for key, value in present if value is not None]


def outside_guarantee(
    site_id: int, rounds: list[RoundRecord], settings: PrivacySettings
) -> list[str]:
    """The train-reply keys the site sent that its DP guarantee (record or client level) does
    not cover (:data:`contracts.reply_keys.REPLY_KEYS`): those computed from its records
    without noise (a run before client-level replies left the loss and count at the site),
    those derived from its declared size when that is its own member count
    (``declared``), and any key the table does not know."""
    covered = COVERED | ({"declared"} if settings.declared_size is not None else set())
    sent = {k for r in rounds if (s := r.sites.get(str(site_id))) for k in sent_keys(s)}
    return sorted(
        key for key in sent if key not in REPLY_KEYS or REPLY_KEYS[key].train not in covered
    )


def _record_epsilon(
    site_id: int, audit: SiteAuditFile[SiteResults] | None, rounds: list[RoundRecord]
) -> tuple[float | None, DPSource | None]:
    """The audit's dp_epsilon, else the last metrics round's (a failed audit may lack it)."""
    if audit is not None and audit.dp_epsilon is not None and math.isfinite(audit.dp_epsilon):
        return audit.dp_epsilon, "audit"
    eps = _last_round(site_id, rounds, "dp_epsilon")
    return (eps, "metrics") if eps is not None else (None, None)


def released_model_epsilon(privacy: PrivacyReport) -> float | None:
    """The epsilon of one of the site's records in the released global model: the smaller of
    the record-level epsilon and the one client-level DP implies (None without either).

    It holds against anyone who sees only the global model, not against the server; the
    audits measure that model, so their lower bounds are checked against it.
    """
    present = [e for e in (privacy.dp_epsilon, privacy.client_epsilon_record) if e is not None]
    return min(present) if present else None


def server_epsilon(privacy: PrivacyReport) -> float | None:
    """The epsilon of one of the site's records against the server itself: the smaller of
    the record-level epsilon (DP-SGD at the site) and the one distributed client-level DP
    implies against it (None without either: central client-level DP gives the server
    nothing, it sees each update before the noise)."""
    present = [
        e for e in (privacy.dp_epsilon, privacy.client_epsilon_record_server) if e is not None
    ]
    return min(present) if present else None


def _last_round(site_id: int, rounds: list[RoundRecord], name: str) -> float | None:
    """The site's ``name`` in the last metrics round that reported one."""
    for rnd in reversed(rounds):
        site = rnd.sites.get(str(site_id))
        value = None if site is None else getattr(site, name)
        if value is not None and math.isfinite(value):
            return float(value)
    return None


def bound_violations(site: SiteReport) -> list[BoundViolation]:
    """The measured lower bounds (:func:`~.report_parts.lower_bounds`) above the guarantee they
    measure: that of the site's records in the released model
    (:func:`released_model_epsilon`); for the canary clients' bound the site-level client
    epsilon; for the white-box bounds the site's DP-SGD epsilon (what holds against the
    server). Nothing is checked without DP."""
    guarantees = {
        "released": released_model_epsilon(site.privacy),
        "client": site.privacy.client_epsilon,
        "site_dp": site.privacy.dp_epsilon,
    }
    found = []
    for bound in lower_bounds():
        assert bound.checked is not None and bound.level is not None
        dp, value = guarantees[bound.checked], bound.value(site)
        if dp is None or value is None or not value > dp + _TOLERANCE:
            continue
        level, label = bound.level(site), bound.title
        if bound.checked == "site_dp":
            message = white_box_violation_message(site.site_id, label, value, dp, level)
        else:
            scope = _CLIENT_SCOPE if bound.checked == "client" else _RECORD_SCOPE
            message = violation_message(site.site_id, label, value, dp, level, of=scope)
        found.append(BoundViolation(bound.key, label, value, dp, level, message))
    return found + conformance_violations(site) + update_violations(site)


def update_violations(site: SiteReport) -> list[BoundViolation]:
    """The lower bounds (RM;RN two-sided, O(1)) measured on the site's update of a round,
    and on that round's global model, above the site's DP-SGD epsilon after the round: it
    covers the update, and the global model as a function of the updates so far."""
    found = []
    for row in site.update_rows():
        eps = row.update.dp_epsilon
        if eps is None:
            continue
        for model, line in (("update", row.update), ("global model", row.global_model)):
            for label, value in (
                ("RM;RN two-sided", None if line is None else mean_of(line.rm_rn_eps_lb)),
                ("O(1)", None if line is None else mean_of(line.o1_eps_lb)),
            ):
                if value is None or not value > eps + _TOLERANCE:
                    continue
                name = f"{label} of the round-{row.round} {model}"
                message = violation_message(site.site_id, name, value, eps, None, of=_UPDATE_SCOPE)
                key = f"round_{row.round}_{model.replace(' ', '_')}"
                found.append(BoundViolation(key, name, value, eps, None, message))
    return found


def conformance_violations(site: SiteReport) -> list[BoundViolation]:
    """The failed conformance checks of the site's real DP-SGD steps
    (:mod:`audit.conformance.checks`), each a violation of the guarantee as stated."""
    gradient = site.results.gradient_canaries
    conformance = None if gradient is None else gradient.conformance
    if conformance is None:
        return []
    dp = site.privacy.dp_epsilon
    return [
        BoundViolation(
            CONFORMANCE_PREFIX + check.name,
            f"DP-SGD {check.name.replace('_', ' ')}",
            math.nan if check.factor is None else check.factor,
            math.nan if dp is None else dp,
            check.level,
            conformance_message(site.site_id, check.message, check.level),
        )
        for check in conformance.failed
    ]


def conformance_message(site_id: int, measured: str, level: float | None) -> str:
    """The plain-words sentence of a failed conformance check."""
    odds = f", or a 1-in-{1 / level:.0f} chance" if level else ""
    return (
        f"site {site_id}: its DP-SGD does not do what its accountant assumes: {measured}. "
        f"The check watched the site's real training steps: a DP bug{odds}. The site's "
        "guarantee does not hold as stated."
    )


def white_box_violation_message(
    site_id: int, label: str, value: float, dp_epsilon: float, level: float | None
) -> str:
    """The plain-words sentence of a white-box bound above the site's DP-SGD epsilon."""
    odds = f" (or a 1-in-{1 / level:.0f} chance)" if level else ""
    return (
        f"site {site_id}: {label} = {value:.3f} is above the epsilon {dp_epsilon:.3f} its "
        "DP-SGD accountant reports. The canaries watched the site's own noisy gradients, so "
        "the training added less noise, clipped less or sampled more than the accountant "
        f"assumes: a DP bug or a wrong accountant{odds}. The site's guarantee does not hold "
        "as stated."
    )


_ONE_RUN_BOUNDS: tuple[tuple[str, Method, Metric], ...] = (
    ("canary audit", "steinke", INPUT_CANARY),
    ("canary audit", "fdp", INPUT_CANARY_FDP),
    ("O(1)", "steinke", O1),
    ("O(1)", "fdp", O1_FDP),
)
"""(audit, method, lower bound) of each one-run lower bound; on a tie the earlier one is
named."""


def best_lower_bound(site: SiteReport, fdp_delta: float | None) -> tuple[float | None, str | None]:
    """The largest one-run lower bound of the site and its name, e.g. ``"canary audit:
    f-DP, Gaussian (Mahloujifar et al. 2025), delta = 1e-05"``; ``(None, None)`` without
    any."""
    found = [
        (value, name, method)
        for name, method, bound in _ONE_RUN_BOUNDS
        if (value := bound.value(site)) is not None
    ]
    if not found:
        return None, None
    value, name, method = max(found, key=lambda x: x[0])
    delta = 0.0 if method == "steinke" else fdp_delta
    at_delta = "" if delta is None else f", delta = {delta:g}"
    return value, f"{name}: {METHOD_LABELS[method]}{at_delta}"


def violation_message(
    site_id: int,
    label: str,
    value: float,
    dp_epsilon: float,
    level: float | None,
    *,
    of: str = _RECORD_SCOPE,
) -> str:
    """The loud sentence of one violation (report banners and stderr)."""
    chance = (
        f"a chance event of probability at most beta = {level:g} (1 in {1 / level:.0f})"
        if level
        else "a chance event of probability at most the bound's level beta"
    )
    return (
        f"site {site_id}: {label} = {value:.3f} is above the DP accountants' epsilon "
        f"{dp_epsilon:.3f} for {of}. A measured lower bound "
        "cannot exceed a correct guarantee: "
        f"this is a bug (in the accounting, the DP training or the audit) or {chance}."
    )


def eps_tilde_above(site: SiteReport) -> str | None:
    """Why eps_tilde (one- or two-sided) is above the released model's epsilon
    (:func:`released_model_epsilon`), or None when it is not."""
    dp = released_model_epsilon(site.privacy)
    if dp is None:
        return None
    above = [
        f"{name} {value:.3f}"
        for name, metric in (("eps_tilde", EPS_TILDE), ("eps_tilde two-sided", EPS_TILDE_TWO_SIDED))
        if (value := metric.value(site)) is not None and value > dp + _TOLERANCE
    ]
    if not above:
        return None
    return f"{NOTES[Note.EPS_TILDE_ABOVE]} ({', '.join(above)} > DP eps {dp:.3f})"


def checks(site: SiteReport, fdp_delta: float | None) -> ChecksReport:
    """The site's ordering check (violations and the eps_tilde flag) and its best one-run
    lower bound."""
    best, method = best_lower_bound(site, fdp_delta)
    return ChecksReport(
        bound_violations=bound_violations(site),
        eps_tilde_above_accountant=eps_tilde_above(site),
        best_eps_lb=best,
        best_eps_lb_method=method,
        fdp_delta=fdp_delta,
    )


def run_input_canaries(settings: PrivacySettings, sites: list[SiteReport]) -> int | None:
    """Canaries per site of the run: the config's, else the largest count a site reports."""
    if settings.input_canaries:
        return settings.input_canaries
    counts = [c for s in sites if (c := s.privacy.canaries)]
    return max(counts) if counts else None
