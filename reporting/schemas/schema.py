"""Typed models of the consortium report (``report.json``), a site's own report and the sweep
report (``sweep.json``); docs/run_outputs.md says what each key holds.

Plain frozen dataclasses; a site's report holds its audit file as read, and its PANORAMIA
result is the :class:`audit.result.PanoramiaResult` itself:
each number is held once, where it belongs (an estimate with its interval, a game with its
flags, a guarantee with its accountant). :func:`report_json` serialises them, the audit's
types through their view (:data:`VIEWS`), so the report never carries raw records,
per-record scores or curves: only summary numbers of the run's files.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

from panoramia_fl.audit.canaries.client_canaries import ClientCanaryResult
from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.audit.panoramia.sides import SIDES
from panoramia_fl.audit.result import (
    AuditFlags,
    Interval,
    PanoramiaResult,
    RepeatResult,
    SideResult,
    TwoSidedResult,
    finite,
)
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.dp_level import DPLevel, SecureAggregationMode
from panoramia_fl.contracts.json_values import dataclass_of, json_safe
from panoramia_fl.contracts.model_flags import CheckRecord
from panoramia_fl.contracts.run_log import ClientDPFile, PlatformInfo, RoundRecord
from panoramia_fl.contracts.site_audit import SiteAuditFile

from .gate_schema import GateVerdict
from .replicate_schema import ReplicateReport, ReplicateSite

SCHEMA_VERSION = 5
"""The version of report.json, sweep.json and ``site-reports/site-<id>.json`` (one shape of
a site, :class:`SiteReport`, in all three). 5: ``privacy.inversion``, the two-sided
headline's own ``flags``, the ``above_real_nonmembers`` flag (and ``two_sided_flagged``'s
``headline`` entry), the site page's ``standing`` as a rank and a band."""

SiteStatus = Literal["ok", "failed", "missing"]
DPSource = Literal["audit", "metrics"]
"""Where a site's record-level epsilon came from: its audit file or metrics.jsonl."""

SCORERS: tuple[str, ...] = ("baseline", "mia", "rm_rn")
"""Score vectors with a ROC: b, the MIA (the game) and RM;RN (real non-members)."""

TPR_FPR_KEYS: tuple[str, ...] = ("0.01", "0.001")
"""FPR levels of ``tpr_at_fpr``; the audit's ``audit.stats.roc.LOW_FPRS`` formatted ``:g``."""


def mean_of(iv: Interval | None) -> float | None:
    """An estimate's mean (None when absent or not finite): a cell's unrounded tooltip."""
    return None if iv is None or not math.isfinite(iv.mean) else iv.mean


@dataclass(frozen=True)
class Flag:
    """How a flag of :class:`audit.result.AuditFlags` is shown (its prose:
    :data:`~.flag_prose.FLAG_PROSE`)."""

    label: str
    """Its short label (tables, badges, reasons)."""
    badge: str
    """The CSS kind of its badge (``saturated``: yellow, ``not-tight``: red)."""


FLAGS: dict[str, Flag] = {
    "saturated": Flag("saturated", badge="saturated"),
    "c_lb_not_tight": Flag("c_lb not tight", badge="not-tight"),
    "rm_rn_capped": Flag("RM;RN capped", badge="saturated"),
    "above_real_nonmembers": Flag("above real non-members", badge="not-tight"),
}
"""Each flag of :class:`audit.result.AuditFlags` (by field name), in display order."""


@dataclass(frozen=True)
class Key:
    """One key of the report's view of an audit result type (:data:`VIEWS`)."""

    name: str
    get: Callable[[Any], Any]
    kind: type | None = None
    """The dataclass its value is (or is viewed as): report.csv's columns of an absent one."""


def _key(name: str, kind: type | None = None) -> Key:
    return Key(name, attrgetter(name), kind)


def _number(name: str, path: str | None = None) -> Key:
    """A number, under ``name``, of the attribute at ``path`` (default: ``name``)."""
    get = attrgetter(path or name)
    return Key(name, lambda obj: finite(get(obj)))


def _two_sided_number(name: str, path: str) -> Key:
    """A number of a repeat's two-sided game (None for a repeat without one)."""
    get = attrgetter(path)
    return Key(name, lambda r: None if r.two_sided is None else finite(get(r.two_sided)))


def scorers(result: PanoramiaResult) -> dict[str, dict[str, Any]]:
    """Per scorer of :data:`SCORERS` that the audit ran: its ``auc`` and ``tpr_at_fpr`` at
    the FPRs of :data:`TPR_FPR_KEYS` (fixed keys, so that every site names the same)."""
    found = {}
    for name in SCORERS:
        auc, roc = result.auc(name), result.roc.get(name)
        if auc is None and roc is None:
            continue
        tpr = None if roc is None else {k: finite(roc.tpr_at_fpr.get(k)) for k in TPR_FPR_KEYS}
        found[name] = {"auc": auc, "tpr_at_fpr": tpr}
    return found


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class PrivacyReport:
    """Every guarantee that speaks for a site's records, with its accountant, and the
    canaries it trained with (the site's row of the privacy ledger)."""

    dp_epsilon: float | None
    """The guarantee the site's records have against the server: the record-level epsilon
    (DP-SGD at the site) alone, since the server sees the site's update before any
    client-level noise; None without record-level DP (or when no accountant reported)."""
    dp_epsilon_source: DPSource | None
    dp_delta: float | None
    record_accountant: str | None
    client_epsilon: float | None
    """Site-level epsilon of client-level DP (add or remove the whole site)."""
    client_epsilon_record: float | None
    """The record-level epsilon client-level DP implies for the site's records, against
    those who see only the global model (never against the server)."""
    client_accountant: str | None
    client_sampling: str | None
    client_neighboring_relation: str | None
    client_delta: float | None
    client_rounds: int | None
    client_eps_estimate: float | None
    """The canary clients' Gaussian-mechanism estimate of the client-level epsilon (final
    model, pooled variance; run-wide, the same for every site), beside ``client_epsilon``.
    An estimate, not a bound; None without ``audit.canary_clients``."""
    client_eps_estimate_low: float | None
    client_eps_estimate_high: float | None
    client_eps_estimate_two_variance: float | None
    """The sensitivity reading with one variance per side; None when unbounded or absent."""
    client_eps_lb: float | None
    """The canary clients' f-DP lower bound on the client-level epsilon (final model)."""
    client_eps_lb_beta: float | None
    canaries: int | None
    client_epsilon_server: float | None = None
    """Site-level client epsilon against the server itself: distributed DP only (each
    update it received carried the site's noise share, or it held only the sum under
    secure aggregation); None when the server saw the update before any noise."""
    client_epsilon_record_server: float | None = None
    """The record-level epsilon ``client_epsilon_server`` implies."""
    declared_size: int | None = None
    """Record level: the public record count its DP-SGD's sampling rate, steps and divisor
    came from (``dp.declared_size``); None: the site's own member count (not sent)."""
    outside_guarantee: list[str] = field(default_factory=list)
    """Under DP (record or client level): the keys of its train replies that its guarantee
    does not cover (``contracts.reply_keys.REPLY_KEYS``), e.g. ``dp-epsilon`` derived from
    its own member count, or an older run's ``train-loss``."""
    client_level: bool = False
    """Client-level DP (central or distributed) was on: its guarantee decides what the site's
    train replies may carry."""


CONFORMANCE_PREFIX = "dp_conformance_"
"""The ``bound`` key of a failed conformance check of a site's DP-SGD: this prefix and the
check's name (:data:`audit.conformance.checks.CHECKS`)."""


@dataclass(frozen=True)
class BoundViolation:
    """A measured lower bound on epsilon above the guarantee it measures (record level;
    client level for the canary clients' bound), or a failed conformance check of the
    site's DP-SGD steps (its ``bound`` key starts with :data:`CONFORMANCE_PREFIX`).

    Under correct DP training and accounting a lower bound exceeds the guarantee, or a
    statistical check fails, with probability at most its level: a violation is a bug
    (accounting, training or audit) or a 1-in-1/beta event.
    """

    bound: str
    """The key of its :func:`~.report_parts.lower_bounds` entry, or :data:`CONFORMANCE_PREFIX`
    and the check's name."""
    label: str
    value: float
    """The bound; for a conformance check, its measured factor (NaN: none)."""
    dp_epsilon: float
    """The guarantee it was checked against: the record-level one in the released model,
    or the site-level client epsilon for ``client_eps_lb``."""
    level: float | None
    message: str

    @property
    def conformance(self) -> bool:
        """A failed check of the site's DP-SGD steps, not a bound above the guarantee."""
        return self.bound.startswith(CONFORMANCE_PREFIX)


@dataclass(frozen=True)
class ChecksReport:
    """The ordering check (every measured lower bound at most the guarantee) and the best
    one-run lower bound."""

    bound_violations: list[BoundViolation] = field(default_factory=list)
    eps_tilde_above_accountant: str | None = None
    """Why eps_tilde (one- or two-sided) is above the guarantee, or None: not a violation,
    eps_tilde is a measurement, not a bound."""
    best_eps_lb: float | None = None
    """The largest one-run lower bound (canary or O(1); Steinke et al. or f-DP)."""
    best_eps_lb_method: str | None = None
    fdp_delta: float | None = None


SiteAuditRead = SiteAuditFile[SiteResults]
"""A site's audit file as the report reads it."""


@dataclass(frozen=True)
class SiteReport:
    """One site: its audit as read (None when it sent none), its guarantees and the checks
    between them. The audit's numbers are read through it, never copied: its PANORAMIA
    result is :attr:`panoramia` (key ``audit`` in report.json, :data:`VIEWS`), its sizes,
    time and rounds are the audit file's. Built by
    :func:`reporting.assembly.aggregate.site_report` only; read by the consortium report, a
    site's own report, the ledger and the sweeps."""

    site_id: int
    audit: SiteAuditRead | None
    """The site's audit file as read: ``ok`` with its results, or ``failed`` saying why (a
    file that does not read as the site's audit reads as failed); None: the site has none."""
    privacy: PrivacyReport
    checks: ChecksReport
    partition_records: tuple[int | None, int | None] = (None, None)
    """A site without an audit file: its members and held-out records by partition.json."""

    @property
    def status(self) -> SiteStatus:
        return "missing" if self.audit is None else self.audit.status

    @property
    def results(self) -> SiteResults:
        """Every kind of audit the site ran (none when it has no audit file)."""
        return SiteResults() if self.audit is None else self.audit.results

    @property
    def panoramia(self) -> PanoramiaResult | None:
        """The PANORAMIA game's result on the final model: None when the audit failed or is
        missing."""
        return self.results.panoramia

    @property
    def error(self) -> str | None:
        """Why the site has no result (its failed audit's error); None otherwise."""
        return None if self.audit is None or self.panoramia is not None else self.audit.error

    @property
    def n_members(self) -> int | None:
        return self.partition_records[0] if self.audit is None else self.audit.n_members

    @property
    def n_holdout(self) -> int | None:
        return self.partition_records[1] if self.audit is None else self.audit.n_holdout

    @property
    def elapsed_s(self) -> float | None:
        return None if self.audit is None else self.audit.elapsed_s

    @property
    def by_round(self) -> list[RoundLeakage]:
        """The audits of the global models by round (``audit.rounds`` / ``audit.every``)."""
        return self.results.by_round

    @property
    def updates(self) -> list[RoundLeakage]:
        """The audits of the site's own updates by round (``audit.updates``)."""
        return self.results.updates

    def update_rows(self) -> list[UpdateRow]:
        """Each audited update beside the same round's global model."""
        globals_ = {line.round: line for line in self.by_round}
        return [UpdateRow(u.round, u, globals_.get(u.round)) for u in self.updates]


@dataclass(frozen=True)
class UpdateRow:
    """The audit of a site's update of one round beside that round's global model."""

    round: int
    update: RoundLeakage
    global_model: RoundLeakage | None


@dataclass(frozen=True)
class SitePrivacy:
    """A site's ``privacy`` in report.json and its row of ledger.csv: its guarantees
    (:class:`PrivacyReport`) beside the result of each kind of audit that has no key of its
    own in the site's report, read from the site's audit (:data:`VIEWS`), never copied."""

    site: SiteReport


SHOWN_ELSEWHERE = frozenset({"panoramia", "by_round", "updates"})
"""The kinds of audit a site's report shows under keys of their own; every other field of
``SiteResults`` is a key of its ``privacy``."""

_KINDS_AFTER: dict[str, tuple[str, ...]] = {
    "canaries": ("input_canaries", "gradient_canaries", "inversion", "dishonest_server"),
    "declared_size": ("attribute_inference",),
}
"""Where report.json has always placed these kinds (after the key named); others go last."""
_KIND_KEYS = {"input_canaries": "canary"}
"""The privacy key of a kind that is not its name (``canary``: as report.json has it)."""


def _privacy_keys() -> tuple[Key, ...]:
    """The keys of :class:`SitePrivacy`: each field of :class:`PrivacyReport`, and each kind
    of audit not :data:`SHOWN_ELSEWHERE` in its place (:data:`_KINDS_AFTER`)."""
    guarantees, kinds = typing.get_type_hints(PrivacyReport), typing.get_type_hints(SiteResults)

    def guarantee(name: str) -> Key:
        return Key(name, lambda p: getattr(p.site.privacy, name), dataclass_of(guarantees[name]))

    def kind(name: str) -> Key:
        get = attrgetter(f"site.results.{name}")
        return Key(_KIND_KEYS.get(name, name), get, dataclass_of(kinds[name]))

    placed = {name for after in _KINDS_AFTER.values() for name in after}
    keys = []
    for f in dataclasses.fields(PrivacyReport):
        keys += [guarantee(f.name), *map(kind, _KINDS_AFTER.get(f.name, ()))]
    rest = [n for n in kinds if n not in SHOWN_ELSEWHERE | placed]
    return (*keys, *map(kind, rest))


_GAME = (
    _key("c_lb", Interval),
    _key("c_eps_lb", Interval),
    _key("eps_tilde", Interval),
    _number("ceiling"),
    _key("headroom"),
    _key("flags", AuditFlags),
    _key("rm_rn_eps_lb", Interval),
    _number("rm_rn_ceiling"),
)
VIEWS: dict[type, tuple[Key, ...]] = {
    SideResult: _GAME,
    TwoSidedResult: (
        _number("beta"),
        _key("eps_tilde", Interval),
        _key("side"),
        _key("rm_rn_eps_lb", Interval),
        _key("member", SideResult),
        _key("nonmember", SideResult),
        _key("flags", AuditFlags),
    ),
    RepeatResult: (
        Key("seed", lambda r: int(r.seed)),
        Key("m", lambda r: int(r.m)),
        *(_number(k, f"one_sided.{k}") for k in ("c_lb", "c_eps_lb", "eps_tilde", "ceiling")),
        *map(_number, ("baseline_auc", "mia_auc")),
        _number("rm_rn_eps_lb", "one_sided.rm_rn_eps_lb"),
        _number("o1_eps_lb"),
        _two_sided_number("eps_tilde_two_sided", "eps_tilde"),
        *(_two_sided_number(f"{s}_{b}", f"{s}.{b}") for s in SIDES for b in ("c_lb", "c_eps_lb")),
        _two_sided_number("rm_rn_eps_lb_two_sided", "rm_rn_eps_lb"),
    ),
    PanoramiaResult: (
        _key("modality"),
        _key("generator_kind"),
        _number("beta"),
        Key("n_repeats", lambda a: len(a.repeats)),
        _key("one_sided", SideResult),
        _key("two_sided", TwoSidedResult),
        _key("o1_eps_lb", Interval),
        _key("o1_eps_lb_fdp", Interval),
        Key("o1_fdp_mu", lambda a: None if a.o1_fdp_mu is None else finite(a.o1_fdp_mu.mean)),
        Key("scorers", scorers),
        Key(
            "levels", lambda a: {k: v for k, x in a.levels.items() if (v := finite(x)) is not None}
        ),
        Key("sizes", lambda a: {k: int(v) for k, v in a.sizes.items() if _is_number(v)}),
        Key("quality", lambda a: {k: float(v) for k, v in a.quality.items() if _is_number(v)}),
        # Curves, ROCs and per-record scores stay in audits/: the report keeps the scalars.
        _key("repeats"),
        _key("per_class"),
    ),
    SiteReport: (
        *map(_key, ("site_id", "status", "error", "n_members", "n_holdout", "elapsed_s")),
        Key("audit", attrgetter("panoramia"), PanoramiaResult),
        Key("privacy", SitePrivacy, SitePrivacy),
        _key("checks", ChecksReport),
        *map(_key, ("by_round", "updates")),
    ),
    SitePrivacy: _privacy_keys(),
}
"""What the report holds of each audit result type, key by key, in report.json's order:
the audit's own numbers (never recomputed) and the few derived ones (headroom, mean AUCs);
and of a site, what it reads of its audit file (its PANORAMIA result under ``audit``)."""


def report_json(obj: Any) -> Any:
    """Plain JSON values of a report (:func:`contracts.json_values.json_safe`), each audit
    result type in its view (:data:`VIEWS`)."""
    return json_safe(obj, view=_viewed)


def _viewed(obj: Any) -> dict[str, Any] | None:
    keys = VIEWS.get(type(obj))
    return None if keys is None else {k.name: k.get(obj) for k in keys}


HEADLINE = "headline"
"""``ConsortiumSummary.two_sided_flagged``'s key of the two-sided headline's own flags (the
others are the sides)."""


@dataclass(frozen=True)
class FlaggedSites:
    """Ids of the ok sites with each flag raised in one game (or one side of it)."""

    saturated: list[int]
    c_lb_not_tight: list[int]
    rm_rn_capped: list[int]
    above_real_nonmembers: list[int]


@dataclass(frozen=True)
class ConsortiumSummary:
    """Consortium-wide reading of the ok sites."""

    n_sites: int
    n_ok: int
    n_failed: int
    n_missing: int
    max_eps_tilde_two_sided: float | None
    leakiest_site_id_two_sided: int | None
    max_eps_tilde: float | None
    median_eps_tilde: float | None
    leakiest_site_id: int | None
    flagged: FlaggedSites
    two_sided_flagged: dict[str, FlaggedSites]
    failed_sites: list[int]
    missing_sites: list[int]
    max_dp_epsilon: float | None
    rounds_completed: int
    final_global_loss: float | None
    final_global_accuracy: float | None
    bound_violation_sites: list[int]
    eps_tilde_above_accountant_sites: list[int]
    first_leaking_round: dict[str, int | None] = field(default_factory=dict)
    """Per site audited over rounds (id as text): the first audited round whose two-sided
    eps_tilde interval excludes 0 (None: none does)."""
    empty_rounds: list[int] = field(default_factory=list)
    """Rounds in which no site's update was aggregated (the model was carried over)."""


@dataclass(frozen=True)
class RunReport:
    """Everything ``report.json`` holds."""

    schema_version: int
    run: dict[str, Any]
    partition: dict[str, Any]
    rounds: list[RoundRecord]
    sites: list[SiteReport]
    consortium: ConsortiumSummary
    dp_level: DPLevel | None
    """The run's ``dp.level``; None: the config says nothing about DP."""
    canaries: int | None
    client_dp: ClientDPFile | None
    client_canaries: ClientCanaryResult | None
    noise: str | None
    """How the run's DP noise was drawn (``contracts.run_files.NOISE_NOTES``)."""
    meaning: str
    two_sided_meaning: str
    replicates: ReplicateReport | None = None
    """The replicate set this run belongs to (``replicates.json`` beside its folder)."""
    secure_aggregation: SecureAggregationMode = "none"
    """``fl.secure_aggregation``: ``ideal`` when the server held only each round's sum."""
    gate: GateVerdict | None = None
    """The verdict of the run's release policy (``report.policy``); None: it names none."""


Verdict = Literal["evidence", "flagged", "inconclusive", "none", "no result"]


@dataclass(frozen=True)
class PlainReading:
    """A site's result in plain language, for a privacy officer (no notation needed)."""

    verdict: Verdict
    """Two-sided eps_tilde's: "evidence": interval above 0; "flagged": above 0 under a flag of
    NOT_A_FINDING; "inconclusive": interval reaching 0; "none": reads 0; "no result": failed."""
    headline: str
    measured: list[str]
    meaning: list[str]
    not_shown: list[str]


@dataclass(frozen=True)
class ConsortiumStanding:
    """Where a site stands among the consortium's audited sites, without naming any other.

    Ranked by the two-sided eps_tilde (1 = the most leakage measured), with the rank's
    third (:func:`~.standing.rank_band`); no statistic of the other sites' values.
    """

    available: bool
    note: str
    rank: int | None = None
    n_ranked: int | None = None
    band: str | None = None


@dataclass(frozen=True)
class ReproManifest:
    """What it takes to reproduce a site's audit."""

    config_file: str | None
    config_sha256: str | None
    run_seed: int | None
    audit_seed: int | None
    """``audit.settings.seed`` of the config; each site derives its audit seed from it."""
    repeat_seeds: list[int]
    packages: dict[str, str | None]
    """Versions of the environment that wrote this report (None: not installed)."""
    python: str
    git_commit: str | None
    git_dirty: bool | None
    data_sizes: dict[str, int]
    platform: PlatformInfo | None = None
    """The machine that trained the run (``platform.json``); None for runs older than it."""


@dataclass(frozen=True)
class SitePageReport:
    """Everything a site's own report (``site-reports/site-<id>.json`` / ``.html``) holds.

    Only the site's own numbers and consortium-wide statistics: no other site's numbers or
    ids, and never the site-local exposed records themselves (only a link to their file).
    """

    schema_version: int
    run_name: str | None
    site: SiteReport
    reading: PlainReading
    threat_model: list[str]
    standing: ConsortiumStanding
    manifest: ReproManifest
    exposed_records_link: str | None
    source: Literal["consortium", "site"]
    """"consortium": written by the report aggregator; "site": rebuilt by the site from its
    own audit file alone (``panoramia-fl report RUN_DIR --site ID``)."""
    between_runs: ReplicateSite | None = None
    """This site's numbers over the replicate set the run belongs to, when it has one."""
    inversion_gallery_link: str | None = None
    """The site-local gallery of its records beside their reconstructions, relative to the
    page (linked, never copied); None when the site wrote none."""
    rebuilt_gallery_link: str | None = None
    """The site-local thumbnails of its records beside what a dishonest server rebuilt of
    them (images), relative to the page (linked, never copied); None when there are none."""
    secure_aggregation: SecureAggregationMode = "none"
    """``ideal``: the server held only each round's sum (what its readings attack)."""
    gate: GateVerdict | None = None
    """The run's release policy on this site's own rules alone; None: the run names none."""
    model_checks: list[CheckRecord] = field(default_factory=list)
    """The received models this site's checks flagged (``fl.model_checks``), by round."""


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by a report writer (None for a format it does not write)."""

    json_path: Path
    html_path: Path
    csv_path: Path | None = None
    md_path: Path | None = None
    site_reports: list[ReportFiles] = field(default_factory=list)
    ledger_csv_path: Path | None = None
    warnings: list[str] = field(default_factory=list)
    """Lines a command prints on stderr: each input the report left out (an audit file of no
    listed site) and each bound violation (a bug or a 1-in-1/beta event)."""
