"""A site's own report's tables, declared as :mod:`.columns` declares the run's: its bounds
per game, low-FPR rates, leakage per round, update audits and per-class game (the
conformance checks' are in :mod:`.gradient_canary_report`, the inversion audit's in
:mod:`.inversion_report`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.audit.result import ClassSliceResult, SideResult

from ..numbers.formatting import (
    FPR_LABELS,
    MISSING,
    SCORER_LABELS,
    SIDE_LABELS,
    flag_labels,
    fmt,
    fmt_est,
)
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import (
    Value,
    round_o1,
    round_two_sided,
)
from ..pages.html_page import flag_badges, td
from ..schemas.schema import (
    TPR_FPR_KEYS,
    UpdateRow,
    mean_of,
)
from .columns import (
    Column,
    _estimate,
    _titled,
    column,
)


class Game(NamedTuple):
    """A row of a site's bounds table: one game, or one side of the two-sided one."""

    name: str
    game: SideResult
    level: float | None


BOUNDS_COLUMNS: tuple[Column[Game], ...] = (
    column("game", lambda g: g.name, cls="text"),
    column("c_lb [95% CI]", lambda g: fmt_est(g.game.c_lb)),
    column("{c+eps}_lb [95% CI]", lambda g: fmt_est(g.game.c_eps_lb)),
    _estimate("eps_tilde [95% CI]", lambda g: g.game.eps_tilde),
    _titled("ceiling", lambda g: g.game.ceiling),
    _titled("headroom", lambda g: g.game.headroom),
    column("RM;RN [95% CI]", lambda g: fmt_est(g.game.rm_rn_eps_lb)),
    column("RM;RN ceiling", lambda g: fmt(g.game.rm_rn_ceiling)),
    column("level of each bound", lambda g: fmt(g.level, 4)),
    Column(
        "flags",
        md=lambda g: ", ".join(flag_labels(g.game.flags)) or MISSING,
        html=lambda g: td(flag_badges(flag_labels(g.game.flags)) or MISSING, raw=True, cls="text"),
    ),
)
"""A site's bounds per game and side (its own report)."""


class Item(NamedTuple):
    """A row of a two- or three-column table: a name, its value and what it is."""

    name: str
    value: str
    what: str = ""


def item_columns(
    name: str, value: str, what: str | None = "what it is"
) -> tuple[Column[Item], ...]:
    """The columns of a table of :class:`Item` rows, headed ``name``, ``value``, ``what``."""
    return (
        column(name, lambda i: i.name, cls="text"),
        column(value, lambda i: i.value, cls="text" if what is None else None),
        *((column(what, lambda i: i.what, cls="text"),) if what is not None else ()),
    )


def _nth(i: int) -> Callable[[tuple[str, list[float | None]]], str]:
    return lambda r: fmt(r[1][i])


LOW_FPR_COLUMNS: tuple[Column[tuple[str, list[float | None]]], ...] = (
    column("scorer", lambda r: SCORER_LABELS[r[0]], cls="text"),
    column("AUC", _nth(0)),
    *(column(f"TPR at {FPR_LABELS[k]} FPR", _nth(1 + i)) for i, k in enumerate(TPR_FPR_KEYS)),
)
"""A site's AUC and TPR at low FPRs per scorer (its own report)."""


BY_ROUND_COLUMNS: tuple[Column[RoundLeakage], ...] = (
    column("round", lambda e: str(e.round)),
    _estimate("eps_tilde two-sided [95% CI]", round_two_sided),
    column("side", lambda e: SIDE_LABELS.get(e.side, e.side), cls="text"),
    _estimate("O(1) [95% CI]", round_o1),
    _titled("MIA AUC", lambda e: e.mia_auc),
    _titled(f"MIA TPR at {FPR_LABELS['0.01']} FPR", lambda e: e.tpr_at_1pct_fpr),
    _titled(f"MIA TPR at {FPR_LABELS['0.001']} FPR", lambda e: e.tpr_at_01pct_fpr),
    _titled("global accuracy", lambda e: e.global_accuracy),
)
"""A site's leakage per audited round (its own report, report.md and report.html)."""


def _of(line: RoundLeakage | None, get: Callable[[RoundLeakage], Value]) -> Value:
    return None if line is None else get(line)


UPDATE_COLUMNS: tuple[Column[UpdateRow], ...] = (
    column("round", lambda r: str(r.round)),
    _estimate("update: eps_tilde two-sided [95% CI]", lambda r: r.update.eps_tilde_two_sided),
    _estimate("update: RM;RN two-sided", lambda r: r.update.rm_rn_eps_lb),
    _estimate("update: O(1)", lambda r: r.update.o1_eps_lb),
    _estimate(
        "global: eps_tilde two-sided [95% CI]",
        lambda r: _of(r.global_model, lambda e: e.eps_tilde_two_sided),
    ),
    _estimate("global: RM;RN two-sided", lambda r: _of(r.global_model, lambda e: e.rm_rn_eps_lb)),
    _estimate("global: O(1)", lambda r: _of(r.global_model, lambda e: e.o1_eps_lb)),
    _titled("DP-SGD epsilon after the round", lambda r: r.update.dp_epsilon, off=True),
)
"""A site's audits of its own updates beside the same rounds' global models (its own
report, report.md and report.html)."""


PER_CLASS_COLUMNS: tuple[Column[ClassSliceResult], ...] = (
    column("label", lambda c: str(c.label)),
    column("game slots", lambda c: str(c.slots)),
    _estimate("eps_tilde two-sided [95% CI]", lambda c: c.eps_tilde),
    _titled(f"MIA TPR at {FPR_LABELS['0.01']} FPR", lambda c: mean_of(c.tpr_at_1pct_fpr)),
    column("level of each bound", lambda c: f"{c.level:.2g}"),
    column("", lambda c: NOTES[Note.TOO_FEW_FOR_CLASS] if c.too_few else "", cls="text"),
)
"""A site's two-sided game per label (its own report)."""
