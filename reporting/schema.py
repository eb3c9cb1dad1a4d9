"""Typed models of the consortium report (``report.json``) and the sweep report (``sweep.json``).

Plain frozen dataclasses: the writers render them, :func:`to_jsonable` serialises them. The
report never carries raw records or per-record scores: only summary numbers from ``audits/``,
``metrics.jsonl`` and ``partition.json``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

REPORT_SCHEMA_VERSION = 3
"""2: two-sided game per site and side, low-FPR ROC figures, bound levels. 3: the per-site
privacy ledger (record- and client-level accountant epsilons, canaries, ordering check)."""
SWEEP_SCHEMA_VERSION = 3
"""2: the two-sided eps_tilde beside the one-sided one. 3: accountant epsilons per level,
canaries, per-site accuracy and the ordering check per site."""
SITE_REPORT_SCHEMA_VERSION = 2
"""1: a site's own report (site-reports/site-<id>.json). 2: its site carries the privacy
ledger's fields (see :data:`REPORT_SCHEMA_VERSION` 3) and the run's canary count."""

SiteStatus = Literal["ok", "failed", "missing"]
Side = Literal["member", "nonmember"]
DPLevel = Literal["none", "record", "client", "both"]
"""``dp.level`` of the run config: record = DP-SGD at each site, client = clipped site
updates and a noised aggregate on the server."""
DPSource = Literal["audit", "metrics", "client_dp"]
"""Where a site's ``dp_epsilon`` came from: its audit file or metrics.jsonl (record level,
Opacus); ``client_dp`` only in reports written before ``dp_epsilon`` became record-level
alone."""

SIDES: tuple[Side, ...] = ("member", "nonmember")
"""The two sides of the two-sided game, in display order."""

SCORERS: tuple[str, ...] = ("baseline", "mia", "rm_rn")
"""Score vectors with a ROC: b, the MIA (the game) and RM;RN (real non-members)."""

TPR_FPR_KEYS: tuple[str, ...] = ("0.01", "0.001")
"""FPR levels of ``<scorer>_tpr_at_fpr``; the audit's ``audit.roc.LOW_FPRS`` formatted ``:g``."""

CsvKind = Literal["value", "interval", "nested", "keys", "pair", "join"]
"""How a field spreads into CSV columns (see :class:`FieldSpec`)."""


@dataclass(frozen=True)
class FieldSpec:
    """What a report field is besides its JSON value: its CSV columns, its own table column,
    the report field a projection copies it from. Declared once, on the field (:func:`spec`);
    the CSV writers, the Markdown / HTML tables and the projections read it from there.

    CSV kinds (``csv``; None: not in the CSV):

    - ``"value"``: one column, the field's name.
    - ``"interval"``: the value's column, then its ``<name>_interval`` (an
      :class:`IntervalReport`) spread as ``<name>_low``, ``_high``, ``_std``, ``_n``.
    - ``"nested"``: a dataclass, its own CSV fields prefixed ``<name>_`` (``csv_prefix``);
      every column empty when it is None.
    - ``"keys"``: a dict, one column per key of ``csv_keys``, prefixed ``<name>_``
      (``csv_prefix``).
    - ``"pair"``: a ``[low, high]`` list as ``<name>_low`` and ``<name>_high``.
    - ``"join"``: a list in one cell, ``"; "``-joined (a violation by its message).
    """

    csv: CsvKind | None = "value"
    csv_after: str | None = None
    """The CSV puts this field's columns right after that field's (applied in field order);
    without it, field order. Kept for fields older report.csv files have elsewhere: a new
    field needs none, so its columns come last and older columns keep their positions."""
    csv_prefix: str | None = None
    """Column prefix of a ``nested`` / ``keys`` field (default ``<name>_``)."""
    csv_keys: tuple[str, ...] = ()
    """The keys of a ``keys`` field, in column order."""
    label: str | None = None
    """A column of its own, headed ``label``, in the Markdown and HTML tables of the
    dataclass, where the table's declaration places its labelled fields
    (:func:`.columns.labelled_columns`); None: shown by a declared column or not at all."""
    digits: int = 3
    """Decimals shown in that column."""
    copy_of: str | None = None
    """Projections (:func:`project`): the :class:`SiteReport` field copied (default: the
    field of the same name)."""
    quality_key: str | None = None
    """Projections: the :attr:`SiteReport.quality` key copied instead of a field."""


@dataclass(frozen=True)
class Flag:
    """What a flag of :class:`FlagsReport` says, for every place that shows it."""

    label: str
    """Its short label (tables, badges, reasons)."""
    badge: str
    """The CSS kind of its badge (``saturated``: yellow, ``not-tight``: red)."""
    meaning: str
    """What it means (the report's "what eps_tilde means" list)."""
    plain: str
    """What it means to a privacy officer (a site's own report)."""


_SPEC = "report"
_FLAG = "flag"
_FLAGGED = "flagged"


def spec(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    **kw: Any,
) -> Any:
    """A dataclass field with its :class:`FieldSpec` (keyword arguments); required unless
    given a ``default`` or a ``factory``."""
    metadata = {_SPEC: FieldSpec(**kw)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def flag(label: str, *, badge: str, meaning: str, plain: str) -> Any:
    """A flag of :class:`FlagsReport`: a CSV column of its own, False by default."""
    return field(
        default=False,
        metadata={_SPEC: FieldSpec(), _FLAG: Flag(label, badge, meaning, plain)},
    )


def flagged(flag_name: str, label: str) -> Any:
    """A list of :class:`FlaggedSites`: the sites whose flag ``flag_name`` is raised."""
    return field(default_factory=list, metadata={_FLAGGED: (flag_name, label)})


def field_spec(f: dataclasses.Field[Any]) -> FieldSpec | None:
    """The field's :class:`FieldSpec`, None for a field without one."""
    return f.metadata.get(_SPEC)


def flag_specs() -> list[tuple[str, Flag]]:
    """``(field name, Flag)`` of each flag of :class:`FlagsReport`, in field order."""
    return [
        (f.name, f.metadata[_FLAG]) for f in dataclasses.fields(FlagsReport) if _FLAG in f.metadata
    ]


def flagged_lists() -> list[tuple[str, str, str]]:
    """``(field name, flag name, label)`` of each list of :class:`FlaggedSites`."""
    return [(f.name, *f.metadata[_FLAGGED]) for f in dataclasses.fields(FlaggedSites)]


@dataclass(frozen=True)
class IntervalReport:
    """Mean, std and 95% t-interval over repeats, as in :class:`audit.result.Interval`.

    In the CSV beside its value's column (which is the mean): ``_low``, ``_high``, ``_std``,
    ``_n``."""

    mean: float | None
    std: float | None = spec(csv_after="high")
    low: float | None = spec()
    high: float | None = spec()
    n: int | None = spec()


@dataclass(frozen=True)
class FlagsReport:
    """The audit's power diagnosis (see :class:`audit.result.AuditFlags`).

    A flag is declared here once (:func:`flag`): its CSV column, label, badge and the two
    texts that explain it follow from the declaration, and the AuditFlags field of the same
    name fills it. Listing its sites in the consortium summary takes a :class:`FlaggedSites`
    list and a :class:`ConsortiumSummary` field of the same name.
    """

    saturated: bool = flag(
        "saturated",
        badge="saturated",
        meaning="saturated: c_lb is within the saturation margin of the ceiling (the bound a "
        "perfect scorer reaches on this audit set). eps_tilde can then only read the headroom "
        "ceiling - c_lb, which is a limit of the audit, not leakage of the model.",
        plain="The audit hit its own ceiling: the look-alike records were already easy to "
        "tell from real ones without the model, so the number shows a limit of the audit, not "
        "how exposed your records are.",
    )
    c_lb_not_tight: bool = flag(
        "c_lb not tight",
        badge="not-tight",
        meaning="c_lb_not_tight: eps_tilde's interval lies above the RM;RN bound's interval. "
        "RM;RN is itself only a lower bound, so this proves nothing, but the baseline may be "
        "too weak and eps_tilde may overstate the leakage.",
        plain="A cross-check against real records the model never saw (RM;RN) reads "
        "lower, so the number may overstate the leakage.",
    )
    reasons: list[str] = spec(factory=list, csv="join", csv_after="rm_rn_capped")
    rm_rn_capped: bool = flag(
        "RM;RN capped",
        badge="saturated",
        meaning="rm_rn_capped: eps_tilde lies above RM;RN, but RM;RN's own ceiling (its audit "
        "set is cut from the site's real non-members, fewer than the game's) leaves no room to "
        "show that value, so the comparison can neither confirm nor refute eps_tilde.",
        plain="The cross-check against real records the model never saw had too few "
        "records to confirm or refute the number.",
    )


@dataclass(frozen=True)
class RepeatReport:
    """Scalars of one repeat (no curves, no per-record scores)."""

    seed: int
    m: int
    c_lb: float | None
    c_eps_lb: float | None
    eps_tilde: float | None
    ceiling: float | None
    baseline_auc: float | None
    mia_auc: float | None
    rm_rn_eps_lb: float | None
    o1_eps_lb: float | None
    eps_tilde_two_sided: float | None = None
    member_c_lb: float | None = None
    """The two-sided game's member side (level beta/4), not the one-sided c_lb (beta/2)."""
    member_c_eps_lb: float | None = None
    nonmember_c_lb: float | None = None
    nonmember_c_eps_lb: float | None = None
    rm_rn_eps_lb_two_sided: float | None = None


@dataclass(frozen=True)
class SideReport:
    """One side of the two-sided game (see :class:`audit.result.SideResult`)."""

    c_lb: float | None = spec()
    c_lb_interval: IntervalReport | None
    c_eps_lb: float | None = spec()
    c_eps_lb_interval: IntervalReport | None
    eps_tilde: float | None = spec()
    eps_tilde_interval: IntervalReport | None
    ceiling: float | None = spec()
    headroom: float | None = spec()
    """ceiling - c_lb on this side."""
    flags: FlagsReport = spec(csv="nested", csv_prefix="", csv_after="rm_rn_ceiling")
    rm_rn_eps_lb: float | None = spec()
    rm_rn_eps_lb_interval: IntervalReport | None
    rm_rn_ceiling: float | None = spec()


@dataclass(frozen=True)
class TwoSidedReport:
    """Both sides of the two-sided game; each of its four bounds is at level ``beta``."""

    beta: float | None = spec()
    member: SideReport = spec(csv="nested")
    nonmember: SideReport = spec(csv="nested")


@dataclass(frozen=True)
class CanaryReport:
    """A site's canary audit (one run, Steinke et al. 2023), as its audit file states it.

    Canary records were trained on by independent fair coins; the audit guesses the coins
    from the final model. ``eps_lb`` is a lower bound on epsilon at level ``beta``.
    """

    n_canaries: int | None
    n_included: int | None
    eps_lb: float | None
    eps_interval: list[float | None] | None
    """[low, high] of the epsilons consistent with the guesses, as the audit states them."""
    guesses: int | None
    correct: int | None
    member_guesses: int | None
    nonmember_guesses: int | None
    beta: float | None
    score: str | None
    kind: str | None
    n_pairs_tried: int | None = None
    """Threshold pairs the audit tried (its union bound)."""
    eps_lb_fdp: float | None = None
    """The f-DP (Gaussian) lower bound on epsilon at ``fdp_delta``, same guesses and level."""
    fdp_mu: float | None = None
    """The Gaussian-DP mu that bound rejects."""
    fdp_delta: float | None = None
    fdp_guesses: int | None = None
    fdp_correct: int | None = None


@dataclass(frozen=True)
class ClientDPSiteReport:
    """One site in the server's client-level DP ledger (``client_dp.json``)."""

    rounds: list[int]
    """The rounds the site's update was aggregated in."""
    epsilon: float | None
    """Site-level guarantee: adding or removing the whole site."""
    epsilon_record: float | None
    """The record-level guarantee client-level DP implies (one record changes the site's
    clipped update by up to twice the clipping norm)."""


@dataclass(frozen=True)
class ClientDPReport:
    """The server's client-level DP ledger (``client_dp.json``), when client-level DP is on."""

    schema_version: int | None
    accountant: str | None
    noise_multiplier: float | None
    clipping: str | None
    clipping_side: str | None
    clipping_norm: float | None
    delta: float | None
    population_size: int | None
    sites_per_round: int | None
    sampling: str | None
    neighboring_relation: str | None
    rounds_done: int | None
    sites: dict[str, ClientDPSiteReport] = field(default_factory=dict)


@dataclass(frozen=True)
class BoundViolation:
    """A measured lower bound on epsilon above the site's record-level guarantee.

    Under correct DP training and accounting a lower bound exceeds the guarantee with
    probability at most its level: a violation is a bug (accounting, training or audit) or
    a 1-in-1/beta event.
    """

    bound: str
    """Field name: canary_eps_lb, canary_eps_lb_fdp, o1_eps_lb, o1_eps_lb_fdp, rm_rn_eps_lb,
    rm_rn_eps_lb_two_sided, rm_rn_eps_lb_member or rm_rn_eps_lb_nonmember."""
    label: str
    value: float
    dp_epsilon: float
    level: float | None
    """The bound's level beta, when the audit states it."""
    message: str


@dataclass(frozen=True)
class SiteReport:
    """One site's audit, or why there is none (``status`` "failed" / "missing").

    The one shape of a site's result: ``report.json``'s ``sites``, report.csv's rows (each
    field's :class:`FieldSpec` says its columns) and the views :class:`LedgerRow` and
    :class:`SweepSiteRow` (:func:`project`). Built by one function,
    :func:`reporting.aggregate.site_report`; the fields past ``n_holdout`` default to their
    value for a site without an audit result.
    """

    site_id: int = spec()
    status: SiteStatus = spec()
    error: str | None = spec()
    n_members: int | None = spec()
    n_holdout: int | None = spec()
    modality: str | None = spec(None)
    generator_kind: str | None = spec(None)
    beta: float | None = spec(None)
    n_repeats: int | None = spec(None)
    c_lb: float | None = spec(None, csv="interval")
    c_lb_interval: IntervalReport | None = None
    c_eps_lb: float | None = spec(None, csv="interval")
    c_eps_lb_interval: IntervalReport | None = None
    eps_tilde: float | None = spec(None, csv="interval")
    """The AuditResult's eps_tilde mean, copied, never recomputed."""
    eps_tilde_interval: IntervalReport | None = None
    ceiling: float | None = spec(None)
    headroom: float | None = spec(None)
    """ceiling - c_lb: the most eps_tilde could read on this audit set."""
    flags: FlagsReport | None = spec(None, csv="nested", csv_prefix="")
    rm_rn_eps_lb: float | None = spec(None, csv="interval")
    rm_rn_eps_lb_interval: IntervalReport | None = None
    o1_eps_lb: float | None = spec(None, csv="interval")
    o1_eps_lb_interval: IntervalReport | None = None
    dp_epsilon: float | None = spec(None)
    """The guarantee the site's records have against the server: ``dp_epsilon_record``
    (DP-SGD at the site) alone, since the server sees the site's update before any
    client-level noise; None without record-level DP (or when no accountant reported)."""
    dp_epsilon_source: DPSource | None = spec(None)
    baseline_auc: float | None = spec(None)
    mia_auc: float | None = spec(None)
    elapsed_s: float | None = spec(None, csv_after="rm_rn_tpr_at_fpr")
    eps_tilde_two_sided: float | None = spec(None, csv="interval", csv_after="eps_tilde")
    """The two-sided eps_tilde mean (max over the sides per repeat), copied."""
    eps_tilde_two_sided_interval: IntervalReport | None = None
    two_sided_side: Side | None = spec(None, csv_after="eps_tilde_two_sided")
    """The side whose mean eps_tilde is larger."""
    two_sided: TwoSidedReport | None = spec(None, csv="nested", csv_after="o1_eps_lb")
    rm_rn_eps_lb_two_sided: float | None = spec(None, csv="interval", csv_after="rm_rn_eps_lb")
    rm_rn_eps_lb_two_sided_interval: IntervalReport | None = None
    rm_rn_auc: float | None = spec(None)
    baseline_tpr_at_fpr: dict[str, float | None] | None = spec(
        None, csv="keys", csv_keys=TPR_FPR_KEYS
    )
    """TPR at the FPRs :data:`TPR_FPR_KEYS` (mean over repeats); likewise for mia and rm_rn."""
    mia_tpr_at_fpr: dict[str, float | None] | None = spec(None, csv="keys", csv_keys=TPR_FPR_KEYS)
    rm_rn_tpr_at_fpr: dict[str, float | None] | None = spec(None, csv="keys", csv_keys=TPR_FPR_KEYS)
    levels: dict[str, float] = field(default_factory=dict)
    """Level of each bound, as the audit states it (empty for audit schema version 1)."""
    sizes: dict[str, int] = field(default_factory=dict)
    quality: dict[str, float] = spec(
        factory=dict,
        csv="keys",
        csv_keys=("target_loss_members", "target_loss_nonmembers"),
        csv_prefix="",
        csv_after="two_sided",
    )
    repeats: list[RepeatReport] = field(default_factory=list)
    dp_epsilon_record: float | None = spec(None)
    """Record-level accountant epsilon of the site's DP-SGD (Opacus, ``dp.accountant``)."""
    dp_epsilon_client: float | None = spec(None)
    """Site-level epsilon of client-level DP (add or remove the whole site)."""
    dp_epsilon_client_record: float | None = spec(None)
    """The record-level epsilon client-level DP implies for the site's records, against
    those who see only the global model (never against the server)."""
    dp_delta: float | None = spec(None)
    """delta of the guarantee ``dp_epsilon`` states (None without DP)."""
    canaries: int | None = spec(None)
    """Canary records trained with at the site; None when the run had none."""
    canary_eps_lb: float | None = spec(None)
    """The canary audit's lower bound on epsilon (at the canary audit's beta)."""
    canary_eps_interval: list[float | None] | None = spec(None, csv="pair")
    canary: CanaryReport | None = None
    bound_violations: list[BoundViolation] = spec(factory=list, csv="join")
    """Measured lower bounds (canary, O(1), RM;RN on either side) above ``dp_epsilon``."""
    eps_tilde_above_accountant: bool = spec(False)
    """eps_tilde (one- or two-sided) above ``dp_epsilon``: not a violation, eps_tilde is a
    measurement, not a bound (c_lb is not tight)."""
    eps_tilde_above_accountant_reason: str | None = spec(None)
    canary_eps_lb_fdp: float | None = spec(None)
    """The canary audit's f-DP (Gaussian) lower bound on epsilon at ``fdp_delta``."""
    canary_fdp_mu: float | None = spec(None)
    """The Gaussian-DP mu the canary guesses reject."""
    o1_eps_lb_fdp: float | None = spec(None, csv="interval")
    """O(1)'s f-DP (Gaussian) lower bound at ``fdp_delta`` (mean over repeats)."""
    o1_eps_lb_fdp_interval: IntervalReport | None = None
    o1_fdp_mu: float | None = spec(None)
    """The Gaussian-DP mu O(1)'s guesses reject (mean over repeats)."""
    fdp_delta: float | None = spec(None)
    """delta at which the f-DP bounds state epsilon (the run's ``dp.delta``)."""
    best_eps_lb: float | None = spec(None)
    """The largest one-run lower bound (canary or O(1); Steinke et al. or f-DP)."""
    best_eps_lb_method: str | None = spec(None)
    """Which audit and method gave ``best_eps_lb``."""


@dataclass(frozen=True)
class LedgerRow:
    """One site's privacy ledger: every guarantee beside every measurement (report.json
    ``ledger``, ledger.csv and the "Privacy ledger" table). A view of :class:`SiteReport`
    (:func:`project`): a field names the SiteReport field or quality key it copies (by
    default the field of the same name); the others (``own``) come from the run's config and
    the server's client-level DP ledger."""

    site_id: int = spec()
    status: SiteStatus = spec()
    dp_level: DPLevel | None = spec()
    """The run's ``dp.level`` (None: the config says nothing about DP). Own."""
    dp_epsilon: float | None = spec()
    """The site's records against the server: record-level DP alone (see
    :attr:`SiteReport.dp_epsilon`)."""
    dp_delta: float | None = spec()
    record_accountant: str | None = spec()
    """"Opacus RDP" / "Opacus PRV" when the site trained with DP-SGD. Own."""
    dp_epsilon_record: float | None = spec()
    record_delta: float | None = spec()
    """Own."""
    client_accountant: str | None = spec()
    """The server ledger's accountant, when client-level DP is on. Own, as are the other
    ``client_`` fields."""
    client_sampling: str | None = spec()
    client_neighboring_relation: str | None = spec()
    client_delta: float | None = spec()
    client_rounds: int | None = spec()
    """Rounds the site's update was aggregated in under client-level DP."""
    dp_epsilon_client: float | None = spec()
    dp_epsilon_client_record: float | None = spec()
    canaries: int | None = spec()
    canary_eps_lb: float | None = spec()
    canary_eps_interval: list[float | None] | None = spec(
        csv="pair", csv_after="eps_tilde_above_accountant"
    )
    eps_tilde: float | None = spec()
    eps_tilde_two_sided: float | None = spec()
    two_sided_side: Side | None = spec()
    rm_rn_eps_lb: float | None = spec()
    rm_rn_eps_lb_two_sided: float | None = spec()
    o1_eps_lb: float | None = spec()
    global_accuracy: float | None = spec()
    """The final global model's accuracy on the public test split (the same for all rows).
    Own."""
    accuracy_members: float | None = spec(quality_key="target_accuracy_members")
    """f's accuracy on the site's audited members (the audit's ``quality``)."""
    accuracy_holdout: float | None = spec(quality_key="target_accuracy_nonmembers")
    """f's accuracy on the site's held-out records (the audit's ``quality``)."""
    loss_members: float | None = spec(quality_key="target_loss_members")
    loss_holdout: float | None = spec(quality_key="target_loss_nonmembers")
    bound_violations: list[BoundViolation] = spec(csv="join")
    eps_tilde_above_accountant: bool = spec()
    canary_eps_lb_fdp: float | None = spec()
    canary_fdp_mu: float | None = spec()
    o1_eps_lb_fdp: float | None = spec()
    o1_fdp_mu: float | None = spec()
    fdp_delta: float | None = spec()
    best_eps_lb: float | None = spec()
    """The largest one-run lower bound and (``best_eps_lb_method``) which one it is."""
    best_eps_lb_method: str | None = spec()
    client_eps_estimate: float | None = spec(None)
    """Canary clients' Gaussian-fit estimate of the client-level epsilon (final model, at
    the run's delta; the same for all rows), beside ``dp_epsilon_client``. Own."""
    client_eps_lb: float | None = spec(None)
    """Canary clients' f-DP lower bound on the client-level epsilon (final model). Own."""


@dataclass(frozen=True)
class SiteRoundReport:
    """One site's numbers in one round of ``metrics.jsonl``."""

    train_loss: float | None
    dp_epsilon: float | None
    """Record-level accountant epsilon so far (DP-SGD at the site)."""
    num_examples: int | None
    dp_epsilon_client: float | None = None
    """Site-level epsilon of client-level DP so far."""


@dataclass(frozen=True)
class RoundReport:
    """One line of ``metrics.jsonl``."""

    round: int
    global_loss: float | None
    global_accuracy: float | None
    elapsed_s: float | None
    sites: dict[str, SiteRoundReport] = field(default_factory=dict)


@dataclass(frozen=True)
class FlaggedSites:
    """Ids of the ok sites with each flag raised (one game or one side of it). The
    consortium summary holds the one-sided game's lists under the same names."""

    saturated_sites: list[int] = flagged("saturated", "saturated sites")
    not_tight_sites: list[int] = flagged("c_lb_not_tight", "c_lb not tight")
    rm_rn_capped_sites: list[int] = flagged("rm_rn_capped", "RM;RN capped")


@dataclass(frozen=True)
class ConsortiumSummary:
    """Consortium-wide reading of the ok sites."""

    n_sites: int
    n_ok: int
    n_failed: int
    n_missing: int
    max_eps_tilde: float | None
    median_eps_tilde: float | None
    leakiest_site_id: int | None
    max_eps_tilde_two_sided: float | None
    leakiest_site_id_two_sided: int | None
    saturated_sites: list[int]
    not_tight_sites: list[int]
    rm_rn_capped_sites: list[int]
    two_sided_flagged_sites: dict[str, FlaggedSites]
    """Per side ("member", "nonmember") of the two-sided game; empty when no site has one."""
    failed_sites: list[int]
    missing_sites: list[int]
    max_dp_epsilon: float | None
    rounds_completed: int
    final_global_loss: float | None
    final_global_accuracy: float | None
    meaning: str
    two_sided_meaning: str
    bound_violation_sites: list[int] = field(default_factory=list)
    """Sites with a measured lower bound above their record-level guarantee."""
    eps_tilde_above_accountant_sites: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RunReport:
    """Everything ``report.json`` holds."""

    schema_version: int
    run: dict[str, Any]
    partition: dict[str, Any]
    rounds: list[RoundReport]
    sites: list[SiteReport]
    consortium: ConsortiumSummary
    dp_level: DPLevel | None = None
    """The run's ``dp.level`` (old configs: ``dp.enabled`` means record); None: not stated."""
    canaries: int | None = None
    """Canary records per site the model was trained with; None when it had none."""
    client_dp: ClientDPReport | None = None
    """The server's client-level DP ledger, when client-level DP is on."""
    ledger: list[LedgerRow] = field(default_factory=list)
    """The privacy ledger, one row per site."""
    client_canaries: dict[str, Any] | None = None
    """What the canary clients measured (``reporting.client_canaries``); None without."""
    noise: str | None = None
    """How the run's DP noise was drawn, in one line (``contracts.run_files.NOISE_NOTES``):
    seeded (a simulation) or from the OS's entropy (a deployment); None without DP."""


@dataclass(frozen=True)
class SweepSiteRow:
    """One site of one sweep point: a view of :class:`SiteReport` (:func:`project`), its
    fields of the same name unless a field says otherwise."""

    site_id: int
    status: SiteStatus
    error: str | None
    theoretical_eps: float | None = spec(csv=None)
    """The guarantee of the site's records in the released model, which the measured bounds
    read (``reporting.privacy_ledger.released_model_epsilon``); None when DP is off
    (plotted at "inf") or unknown. Own."""
    eps_tilde: float | None
    eps_tilde_interval: IntervalReport | None
    eps_tilde_two_sided: float | None
    eps_tilde_two_sided_interval: IntervalReport | None
    two_sided_side: Side | None
    c_lb: float | None
    ceiling: float | None
    flags: FlagsReport | None
    rm_rn_eps_lb: float | None
    rm_rn_eps_lb_interval: IntervalReport | None
    rm_rn_eps_lb_two_sided: float | None
    rm_rn_eps_lb_two_sided_interval: IntervalReport | None
    o1_eps_lb: float | None
    o1_eps_lb_interval: IntervalReport | None
    dp_epsilon_record: float | None = None
    dp_epsilon_client: float | None = None
    dp_epsilon_client_record: float | None = None
    dp_delta: float | None = None
    canaries: int | None = None
    canary_eps_lb: float | None = None
    canary_eps_interval: list[float | None] | None = None
    global_accuracy: float | None = None
    """The point's final global accuracy (public test split). Own."""
    accuracy_holdout: float | None = spec(None, csv=None, quality_key="target_accuracy_nonmembers")
    """f's accuracy on the site's held-out records (the audit's ``quality``)."""
    bound_violations: list[BoundViolation] = field(default_factory=list)
    eps_tilde_above_accountant: bool = False


@dataclass(frozen=True)
class SweepPointReport:
    """One point of a sweep: a run with some config overrides."""

    label: str
    overrides: dict[str, Any]
    run_dir: str
    status: Literal["complete", "incomplete"]
    problems: list[str]
    private: bool | None
    """True when DP is on at any level (record, client or both), False when off, None when
    the run says neither."""
    theoretical_eps: float | None
    """Largest site accountant epsilon (the consortium's weakest guarantee)."""
    global_accuracy: float | None
    global_loss: float | None
    rounds_completed: int
    max_eps_tilde: float | None
    max_eps_tilde_two_sided: float | None
    sites: list[SweepSiteRow]
    report_html: str | None
    """Relative path of the point's own report.html, when one exists."""
    dp_level: DPLevel | None = None
    canaries: int | None = None
    """Canary records per site the point's model was trained with (None: none)."""


@dataclass(frozen=True)
class SweepReport:
    """Everything ``sweep.json`` holds."""

    schema_version: int
    points: list[SweepPointReport]
    meaning: str
    two_sided_meaning: str


@dataclass(frozen=True)
class PlainReading:
    """A site's result in plain language, for a privacy officer (no notation needed)."""

    verdict: Literal["evidence", "inconclusive", "none", "no result"]
    """"evidence": the two-sided eps_tilde's 95% interval lies above 0; "inconclusive": its
    mean is above 0 but the interval reaches 0; "none": it reads 0; "no result": failed."""
    headline: str
    measured: list[str]
    """What was measured."""
    meaning: list[str]
    """What it means for the site's records (flags included)."""
    not_shown: list[str]
    """What it does not show."""


@dataclass(frozen=True)
class ConsortiumStanding:
    """Where a site stands among the consortium's audited sites, without naming any other.

    Ranked by the two-sided eps_tilde (1 = the most leakage measured). The median and max
    are withheld below :data:`~.standing.MIN_SITES_FOR_STATISTICS` ranked sites, where
    they would give another site's own number away.
    """

    available: bool
    note: str
    rank: int | None = None
    n_ranked: int | None = None
    median_eps_tilde_two_sided: float | None = None
    max_eps_tilde_two_sided: float | None = None


@dataclass(frozen=True)
class ReproManifest:
    """What it takes to reproduce a site's audit."""

    config_file: str | None
    """The config read (relative to the run directory), or None when there was none."""
    config_sha256: str | None
    run_seed: int | None
    audit_seed: int | None
    """``audit.settings.seed`` of the config; each site derives its audit seed from it."""
    repeat_seeds: list[int]
    """The seeds the site's audit repeats used, as its result records them."""
    packages: dict[str, str | None]
    """Versions of the environment that wrote this report (None: not installed)."""
    python: str
    git_commit: str | None
    """The project's commit where it runs from a git checkout, else None."""
    git_dirty: bool | None
    """True when tracked files differ from that commit (uncommitted changes)."""
    data_sizes: dict[str, int]
    """The audit's ``sizes`` (members, game size m, splits, generated records, ...)."""


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
    """Relative link to the site-local exposed-records file, when it exists."""
    source: Literal["consortium", "site"]
    """"consortium": written by the report aggregator; "site": rebuilt by the site from its
    own audit file alone (``panoramia-fl report RUN_DIR --site ID``)."""
    ledger: LedgerRow | None = None
    """The site's row of the privacy ledger (its accountants beside its measurements)."""


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by a report writer (None for a format it does not write)."""

    json_path: Path
    html_path: Path
    csv_path: Path | None = None
    md_path: Path | None = None
    site_reports: list[ReportFiles] = field(default_factory=list)
    """Each site's own report (``site-reports/site-<id>.*``), written beside report.*."""
    ledger_csv_path: Path | None = None
    """``ledger.csv``: the privacy ledger, one row per site."""
    warnings: list[str] = field(default_factory=list)
    """Lines a command prints on stderr: each bound violation (a bug or a 1-in-1/beta event)."""


_View = TypeVar("_View")


def project(view: type[_View], site: SiteReport, **own: Any) -> _View:
    """A view of a site (:class:`LedgerRow`, :class:`SweepSiteRow`): each field of ``view``
    from ``own`` when given there, else the site's field (or quality key) its
    :class:`FieldSpec` names, else the site's field of the same name (copied).

    Raises
    ------
    TypeError
        When ``own`` names a field ``view`` lacks.
    AttributeError
        When a field is not in ``own`` and the site has no field of its name.
    """
    names = {f.name for f in dataclasses.fields(view)}  # type: ignore[arg-type]
    unknown = sorted(set(own) - names)
    if unknown:
        raise TypeError(f"{view.__name__} has no field {unknown}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(view):  # type: ignore[arg-type]
        s = field_spec(f)
        if f.name in own:
            values[f.name] = own[f.name]
        elif s is not None and s.quality_key is not None:
            values[f.name] = site.quality.get(s.quality_key)
        else:
            values[f.name] = copy.copy(getattr(site, (s and s.copy_of) or f.name))
    return view(**values)


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types from dataclasses; non-finite floats become None (JSON has no inf/nan)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
