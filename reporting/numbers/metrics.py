"""The metric registry: each number the reports show of a site, declared once.

An entry holds a typed getter into the site's report (:class:`~.schema.SiteReport`), its
labels, unit, display digits, the level it holds at and a plain-language gloss. The
consortium and sweep tables, the site page, the privacy ledger's ordering check, ledger.csv,
the plots and the replicate pooling all take their numbers from here: a new number is one
entry. The entries of a kind of audit that the consortium's and the sweeps' tables name
live here too; the kind's part (:mod:`.report_parts`) lists them, and a kind's number no
other table names lives in the kind's own module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from panoramia_fl.audit.canaries.gradient_canaries import LevelAudit, reading_level
from panoramia_fl.audit.canaries.input_canaries import InputCanaryResult
from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.audit.result import Interval, PanoramiaResult, TwoSidedResult, finite

from ..schemas.schema import SiteReport, mean_of

Value = Interval | float | None
"""A metric's value: an estimate over repeats (its mean is the number) or a number."""
Unit = Literal["nats", "fraction"]
RANGES: dict[Unit, tuple[float, float]] = {"nats": (0.0, math.inf), "fraction": (0.0, 1.0)}
"""Each unit's range (a between-run interval is clipped to it)."""
Guarantee = Literal["released", "client", "site_dp"]
"""The guarantee a lower bound is checked against: the released model's record-level
epsilon, the site-level client epsilon, or the site's own DP-SGD epsilon."""


@dataclass(frozen=True)
class Metric:
    """One number of a site's report."""

    key: str
    """Its name (ledger.csv's column, a bound violation's ``bound``)."""
    label: str
    """Its column header."""
    get: Callable[[SiteReport], Value]
    name: str = ""
    """What it is in a sentence (a bound violation's; empty: its label)."""
    unit: Unit = "nats"
    """Its unit (:data:`RANGES`: the values it can take)."""
    digits: int = 3
    gloss: str = ""
    """What it means, in plain words."""
    checked: Guarantee | None = None
    """A lower bound on epsilon: the guarantee it must stay at or below; None: not a bound."""
    level: Callable[[SiteReport], float | None] | None = None
    """The level (beta) it holds at."""
    pooled: str | None = None
    """Its key among a replicate set's numbers (``replicates.json``); None: not pooled."""
    pooled_label: str | None = None
    """Its label there (None: :attr:`label`)."""

    @property
    def title(self) -> str:
        """What it is in a sentence."""
        return self.name or self.label

    def value(self, site: SiteReport) -> float | None:
        """The number (an estimate's mean; None when absent or not finite)."""
        return number(self.get(site))


def number(value: Value) -> float | None:
    """A value's number: an estimate's mean; None when absent or not finite."""
    return mean_of(value) if isinstance(value, Interval) else finite(value)


def two_sided(site: SiteReport) -> TwoSidedResult | None:
    """The site's two-sided game; None without an audit or in an audit older than it."""
    return None if site.panoramia is None else site.panoramia.two_sided


def mechanism(site: SiteReport) -> LevelAudit | None:
    """The mechanism level of the site's gradient canaries (every noisy step)."""
    canaries = site.results.gradient_canaries
    return None if canaries is None else canaries.mechanism


def server(site: SiteReport) -> LevelAudit | None:
    """The server level of the site's gradient canaries (its round updates)."""
    canaries = site.results.gradient_canaries
    return None if canaries is None else canaries.server


def _audit(get: Callable[[PanoramiaResult], Value]) -> Callable[[SiteReport], Value]:
    return lambda s: None if s.panoramia is None else get(s.panoramia)


def _two(get: Callable[[TwoSidedResult], Value]) -> Callable[[SiteReport], Value]:
    return lambda s: None if (t := two_sided(s)) is None else get(t)


def _input_canary(get: Callable[[InputCanaryResult], Value]) -> Callable[[SiteReport], Value]:
    return lambda s: None if s.results.input_canaries is None else get(s.results.input_canaries)


def _level(
    of: Callable[[SiteReport], LevelAudit | None], get: Callable[[LevelAudit], Value]
) -> Callable[[SiteReport], Value]:
    return lambda s: None if (level := of(s)) is None else get(level)


def _audit_level(key: str) -> Callable[[SiteReport], float | None]:
    return lambda s: None if s.panoramia is None else s.panoramia.levels.get(key)


def _input_canary_level(site: SiteReport) -> float | None:
    return None if site.results.input_canaries is None else site.results.input_canaries.beta


def _white_box_level(site: SiteReport) -> float | None:
    canaries = site.results.gradient_canaries
    return None if canaries is None else reading_level(canaries.beta)


def _mechanism_estimate(site: SiteReport) -> Interval | None:
    """The white-box mechanism-level estimate with its interval over the canaries."""
    if (m := mechanism(site)) is None:
        return None
    return Interval(m.eps_estimate, 0.0, m.eps_estimate_low, m.eps_estimate_high, n=0)


_RM_RN_EACH = _audit_level("rm_rn_two_sided_each")
_WB = "(gradient canaries)"

C_LB = Metric("c_lb", "c_lb", _audit(lambda a: a.one_sided.c_lb))
C_EPS_LB = Metric("c_eps_lb", "{c+eps}_lb", _audit(lambda a: a.one_sided.c_eps_lb))
CEILING = Metric("ceiling", "ceiling", _audit(lambda a: a.one_sided.ceiling))
HEADROOM = Metric("headroom", "headroom", _audit(lambda a: a.one_sided.headroom))
EPS_TILDE_TWO_SIDED = Metric(
    "eps_tilde_two_sided",
    "eps_tilde two-sided",
    _two(lambda t: t.eps_tilde),
    pooled="eps_tilde_two_sided",
)
EPS_TILDE_MEMBER = Metric(
    "eps_tilde_member",
    "its member side",
    _two(lambda t: t.member.eps_tilde),
    pooled="eps_tilde_member",
)
EPS_TILDE_NONMEMBER = Metric(
    "eps_tilde_nonmember",
    "its non-member side",
    _two(lambda t: t.nonmember.eps_tilde),
    pooled="eps_tilde_nonmember",
)
EPS_TILDE = Metric(
    "eps_tilde",
    "eps_tilde",
    _audit(lambda a: a.one_sided.eps_tilde),
    pooled="eps_tilde",
    pooled_label="eps_tilde one-sided (paper)",
)
RM_RN_TWO_SIDED = Metric(
    "rm_rn_eps_lb_two_sided",
    "RM;RN two-sided",
    _two(lambda t: t.rm_rn_eps_lb),
    name="RM;RN eps lower bound (two-sided)",
    gloss="RM;RN counting 'non-member' guesses too",
    checked="released",
    level=_RM_RN_EACH,
    pooled="rm_rn_two_sided",
)
RM_RN = Metric(
    "rm_rn_eps_lb",
    "RM;RN",
    _audit(lambda a: a.one_sided.rm_rn_eps_lb),
    name="RM;RN eps lower bound (one-sided)",
    gloss="the same attack against real held-out records of the site (c = 0): an eps lower bound",
    checked="released",
    level=_audit_level("rm_rn"),
    pooled="rm_rn",
    pooled_label="RM;RN one-sided",
)
RM_RN_MEMBER = Metric(
    "rm_rn_eps_lb_member",
    "RM;RN member side",
    _two(lambda t: t.member.rm_rn_eps_lb),
    name="RM;RN eps lower bound (member side)",
    checked="released",
    level=_RM_RN_EACH,
)
RM_RN_NONMEMBER = Metric(
    "rm_rn_eps_lb_nonmember",
    "RM;RN non-member side",
    _two(lambda t: t.nonmember.rm_rn_eps_lb),
    name="RM;RN eps lower bound (non-member side)",
    checked="released",
    level=_RM_RN_EACH,
)
O1 = Metric(
    "o1_eps_lb",
    "O(1)",
    _audit(lambda a: a.o1_eps_lb),
    name="O(1) eps lower bound",
    gloss="Steinke et al. (2023): loss-threshold guesses on real members and non-members",
    checked="released",
    level=_audit_level("o1"),
    pooled="o1",
    pooled_label="O(1) (Steinke)",
)
O1_FDP = Metric(
    "o1_eps_lb_fdp",
    "O(1) f-DP",
    _audit(lambda a: a.o1_eps_lb_fdp),
    name="O(1) f-DP eps lower bound",
    gloss="the same guesses against a Gaussian trade-off curve (Mahloujifar et al. 2025), "
    "mean over repeats",
    checked="released",
    level=_audit_level("o1_fdp"),
    pooled="o1_fdp",
    pooled_label="O(1) (f-DP)",
)
INPUT_CANARY = Metric(
    "canary_eps_lb",
    "canary_eps_lb",
    _input_canary(lambda c: c.eps_lb),
    name="canary audit eps lower bound",
    checked="released",
    level=_input_canary_level,
    pooled="canary",
    pooled_label="canary one-run bound (Steinke)",
)
INPUT_CANARY_FDP = Metric(
    "canary_eps_lb_fdp",
    "canary f-DP eps_lb",
    _input_canary(lambda c: c.eps_lb_fdp),
    name="canary audit f-DP eps lower bound",
    checked="released",
    level=_input_canary_level,
    pooled="canary_fdp",
    pooled_label="canary one-run bound (f-DP)",
)
CLIENT_EPS_LB = Metric(
    "client_eps_lb",
    "canary clients' lower bound",
    lambda s: s.privacy.client_eps_lb,
    name="canary clients' client-level f-DP eps lower bound",
    checked="client",
    level=lambda s: s.privacy.client_eps_lb_beta,
    pooled="client_eps_lb",
)
MECHANISM_FDP = Metric(
    "mechanism_eps_lb_fdp",
    "white-box mechanism f-DP eps_lb",
    _level(mechanism, lambda m: m.eps_lb_fdp),
    name=f"white-box mechanism-level f-DP eps lower bound {_WB}",
    checked="site_dp",
    level=_white_box_level,
    pooled="mechanism_fdp",
    pooled_label="white-box mechanism bound (f-DP)",
)
MECHANISM_STEINKE = Metric(
    "mechanism_eps_lb_steinke",
    "white-box mechanism Steinke eps_lb",
    _level(mechanism, lambda m: m.eps_lb_steinke),
    name=f"white-box mechanism-level Steinke eps lower bound {_WB}",
    checked="site_dp",
    level=_white_box_level,
)
MECHANISM_ESTIMATE = Metric(
    "mechanism_estimate",
    "white-box mechanism estimate",
    _mechanism_estimate,
    gloss="the Gaussian estimate [95% interval over the canaries]: not a bound",
    pooled="mechanism_estimate",
)
SERVER_FDP = Metric(
    "server_eps_lb_fdp",
    "white-box server f-DP eps_lb",
    _level(server, lambda m: m.eps_lb_fdp),
    name=f"white-box server-level f-DP eps lower bound {_WB}",
    checked="site_dp",
    level=_white_box_level,
    pooled="server_fdp",
    pooled_label="white-box server bound (f-DP)",
)
SERVER_STEINKE = Metric(
    "server_eps_lb_steinke",
    "white-box server Steinke eps_lb",
    _level(server, lambda m: m.eps_lb_steinke),
    name=f"white-box server-level Steinke eps lower bound {_WB}",
    checked="site_dp",
    level=_white_box_level,
)
HOLDOUT_ACCURACY = Metric(
    "holdout_accuracy",
    "accuracy (site holdout)",
    _audit(lambda a: a.quality.get("target_accuracy_nonmembers")),
    unit="fraction",
    pooled="holdout_accuracy",
    pooled_label="accuracy on the site's holdout",
)
DP_EPSILON = Metric(
    "dp_epsilon",
    "accountant eps record",
    lambda s: s.privacy.dp_epsilon,
    pooled="dp_epsilon",
    pooled_label="record-level accountant eps",
)
CLIENT_EPSILON = Metric(
    "client_epsilon",
    "accountant eps client (site-level)",
    lambda s: s.privacy.client_epsilon,
    pooled="client_epsilon",
    pooled_label="client-level accountant eps",
)


def _first_attack(site: SiteReport) -> float | None:
    attacked = [r for r in site.results.dishonest_server if r.share_rebuilt is not None]
    return attacked[0].share_rebuilt if attacked else None


DISHONEST_SERVER = Metric(
    "dishonest_server_share",
    "dishonest server: share rebuilt",
    _first_attack,
    name="share of the site's records a dishonest server rebuilt (first decoded round)",
    unit="fraction",
    gloss="the share of the records in the attacked update that the server's crafted model "
    "gave back (rows: every field within the tolerance; images: SSIM at least 0.9), read "
    "against the same attack on public records",
    pooled="dishonest_server_share",
    pooled_label="dishonest server: share rebuilt",
)

METRICS: tuple[Metric, ...] = (
    C_LB,
    C_EPS_LB,
    CEILING,
    HEADROOM,
    EPS_TILDE_TWO_SIDED,
    EPS_TILDE_MEMBER,
    EPS_TILDE_NONMEMBER,
    EPS_TILDE,
    RM_RN_TWO_SIDED,
    RM_RN,
    RM_RN_MEMBER,
    RM_RN_NONMEMBER,
    O1,
    O1_FDP,
    INPUT_CANARY,
    INPUT_CANARY_FDP,
    CLIENT_EPS_LB,
    HOLDOUT_ACCURACY,
    DP_EPSILON,
    CLIENT_EPSILON,
)
"""The numbers every site's report is built around (PANORAMIA's, the input canaries', the
accountants'), in the order a replicate set pools them; each other kind of audit adds its
own (:func:`.report_parts.site_metrics`)."""

LOWER_BOUNDS: tuple[Metric, ...] = (
    INPUT_CANARY,
    INPUT_CANARY_FDP,
    O1,
    O1_FDP,
    RM_RN,
    RM_RN_TWO_SIDED,
    RM_RN_MEMBER,
    RM_RN_NONMEMBER,
    CLIENT_EPS_LB,
)
"""The measured lower bounds on epsilon of :data:`METRICS` (the entries with a guarantee to
stay at or below), in the order the ordering check lists its violations (each other kind's
follow: :func:`.report_parts.lower_bounds`)."""


def round_two_sided(e: RoundLeakage) -> Interval:
    """Two-sided eps_tilde of one audited round (:attr:`SiteReport.by_round`)."""
    return e.eps_tilde_two_sided


def round_o1(e: RoundLeakage) -> Interval | None:
    """O(1) of one audited round."""
    return e.o1_eps_lb
