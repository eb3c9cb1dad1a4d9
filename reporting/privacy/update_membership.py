"""What the server learns about a site's records from the updates it holds, beside what a
model user learns from the global model: the sweep's update-membership cells.

Each site audits the local models it sent (``audit.updates``) with the same games as the
global model of the same round (:attr:`.schema.SiteReport.updates`). A sweep point reads,
per site, the audited round whose update leaks most (largest two-sided eps_tilde), that
round's global model beside it, whether any audited round's update lies apart from its
global model, and the update's lower bounds against the DP-SGD epsilon that covers it.
Every interval is the 95% t-interval over audit repeats of one trained model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from panoramia_fl.audit.result import Interval

from ..numbers.formatting import MISSING, fmt, fmt_est
from ..schemas.schema import SiteReport, UpdateRow
from ..schemas.sweep_schema import SweepPointReport
from .privacy_ledger import server_epsilon, update_violations

SUM_ONLY = (
    "only each round's sum (ideal secure aggregation): the round's global model, whose "
    "audit is the model users' reading"
)
"""The server's update reading under secure aggregation: it holds no site's update."""
NOT_RUN = "not run (audit.updates off)"
SUM_ONLY_SHORT = "n/a: the server holds only the sum"
"""The update's other cells under secure aggregation, beside :data:`SUM_ONLY`."""

Order = Literal["above", "below", "overlap"]


def order(first: Interval, second: Interval) -> Order:
    """``first`` above or below ``second`` when their intervals lie apart, else overlap."""
    if first.low > second.high:
        return "above"
    if first.high < second.low:
        return "below"
    return "overlap"


@dataclass(frozen=True)
class UpdateReading:
    """A site's update audits at one sweep point, in brief."""

    peak: UpdateRow
    """The audited round whose update reads the largest two-sided eps_tilde (the first
    such round on a tie)."""
    rounds: tuple[int, ...]
    """Every audited round."""
    above: tuple[int, ...]
    """Rounds whose update's interval lies above its global model's."""
    below: tuple[int, ...]
    """Rounds whose update's interval lies below its global model's."""
    unmatched: tuple[int, ...]
    """Rounds whose global model has no audit to compare with."""
    violations: tuple[str, ...]
    """Lower bounds of an update (or its round's global model) above the DP-SGD epsilon
    after the round: :func:`.privacy_ledger.update_violations`' labels."""


def update_reading(site: SiteReport) -> UpdateReading | None:
    """The site's update audits in brief; None when it audited none."""
    rows = site.update_rows()
    if not rows:
        return None
    peak = max(rows, key=lambda r: (r.update.eps_tilde_two_sided.mean, -r.round))
    orders = {
        r.round: order(r.update.eps_tilde_two_sided, r.global_model.eps_tilde_two_sided)
        for r in rows
        if r.global_model is not None
    }
    return UpdateReading(
        peak=peak,
        rounds=tuple(r.round for r in rows),
        above=tuple(k for k, o in orders.items() if o == "above"),
        below=tuple(k for k, o in orders.items() if o == "below"),
        unmatched=tuple(r.round for r in rows if r.global_model is None),
        violations=tuple(v.label for v in update_violations(site)),
    )


def _rounds(rounds: tuple[int, ...]) -> str:
    return ", ".join(map(str, rounds))


def _absent(site: SiteReport, point: SweepPointReport, *, first: bool) -> str | None:
    """Why the site has no update reading at this point (None: it has one); the ``first``
    of its cells says it in full."""
    if point.secure_aggregation == "ideal":
        return SUM_ONLY if first else SUM_ONLY_SHORT
    if site.status != "ok":
        return MISSING
    if site.updates:
        return None
    if any(s.updates for s in point.sites):
        return "not audited at this site"
    return NOT_RUN if first else "not run"


def update_cell(site: SiteReport, point: SweepPointReport) -> str:
    """The largest two-sided eps_tilde of the site's updates, its interval and round."""
    absent = _absent(site, point, first=True)
    reading = update_reading(site)
    if absent is not None or reading is None:
        return absent or MISSING
    peak = reading.peak
    audited = _rounds(reading.rounds)
    return f"{fmt_est(peak.update.eps_tilde_two_sided)} (round {peak.round}; audited {audited})"


def versus_cell(site: SiteReport, point: SweepPointReport) -> str:
    """The peak round's global model beside the update, and the rounds whose update lies
    apart from its global model (a model user's view of the same training)."""
    absent = _absent(site, point, first=False)
    reading = update_reading(site)
    if absent is not None or reading is None:
        return absent or MISSING
    model = reading.peak.global_model
    text = "not audited" if model is None else fmt_est(model.eps_tilde_two_sided)
    if reading.above:
        verdict = f"update above it in round {_rounds(reading.above)} (intervals apart)"
    else:
        verdict = "update not above it in any audited round"
    if reading.below:
        verdict += f"; below it in round {_rounds(reading.below)}"
    if reading.unmatched:
        verdict += f"; round {_rounds(reading.unmatched)}: global model not audited"
    return f"{text}; {verdict}"


def bounds_cell(site: SiteReport, point: SweepPointReport) -> str:
    """The peak update's RM;RN and O(1) lower bounds, the DP-SGD epsilon after its round
    (which covers the update) and any bound above it."""
    absent = _absent(site, point, first=False)
    reading = update_reading(site)
    if absent is not None or reading is None:
        return absent or MISSING
    update = reading.peak.update
    cover = _covered_by(site, update.dp_epsilon)
    text = f"{fmt_est(update.rm_rn_eps_lb)} / {fmt_est(update.o1_eps_lb)} ({cover})"
    if reading.violations:
        text += "; VIOLATION: " + ", ".join(reading.violations) + " above the DP-SGD eps"
    return text


def _covered_by(site: SiteReport, dp_sgd: float | None) -> str:
    """The guarantee of one record against the server that covers the update: the DP-SGD
    epsilon after its round, or the run's (distributed DP's noise share); or none."""
    if dp_sgd is not None:
        return f"DP-SGD eps {fmt(dp_sgd, 2)} after the round"
    whole_run = server_epsilon(site.privacy)
    if whole_run is None:
        return "no guarantee against the server"
    return f"eps {fmt(whole_run, 2)} against the server, all rounds"


def peak_update(site: SiteReport) -> Interval | None:
    """The peak round's update: two-sided eps_tilde (the figure's marker)."""
    reading = update_reading(site)
    return None if reading is None else reading.peak.update.eps_tilde_two_sided


def peak_global(site: SiteReport) -> Interval | None:
    """The peak round's global model: two-sided eps_tilde (the figure's marker)."""
    reading = update_reading(site)
    model = None if reading is None else reading.peak.global_model
    return None if model is None else model.eps_tilde_two_sided
