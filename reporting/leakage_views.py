"""Leakage over rounds and per-class slices, as the site page and report.html show them.

The numbers come from the audit (:mod:`audit.over_rounds`, :mod:`audit.class_slices`);
this module only draws and tabulates them.
"""

from __future__ import annotations

import math

from audit.class_slices import CLASS_SLICES_MEANING
from audit.over_rounds import RoundLeakage, first_leaking_round
from audit.result import ClassSliceResult

from .formatting import fmt
from .html_page import esc, figure, td, th_row
from .schema import ConsortiumSummary, SiteReport
from .svg_axes import Axes, LegendEntry, Style
from .svg_chart import render_figure

_TWO_SIDED = "#800000"
_O1 = "#9467bd"
_ACCURACY = "#ff7f0e"


def by_round_plot(by_round: list[RoundLeakage], *, title: str = "") -> str | None:
    """Two-sided eps_tilde (95% CI) and O(1) per audited round, beside global accuracy."""
    if not by_round:
        return None
    xs = [float(e.round) for e in by_round]
    ticks = [(x, f"{x:g}") for x in xs] if len(xs) <= 12 else None
    leak = Axes(title="leakage", xlabel="round", ylabel="epsilon (nats)", xticks=ticks)
    leak.plot(xs, [e.eps_tilde_two_sided.mean for e in by_round], Style(_TWO_SIDED, marker="D"))
    for x, e in zip(xs, by_round):
        iv = e.eps_tilde_two_sided
        leak.point(x, iv.mean, Style(_TWO_SIDED, marker="D"), low=iv.low, high=iv.high)
    o1 = [math.nan if e.o1_eps_lb is None else e.o1_eps_lb.mean for e in by_round]
    if any(not math.isnan(v) for v in o1):
        leak.plot(xs, o1, Style(_O1, marker="^", dash="6 3"))
    accuracy = Axes(
        title="global accuracy", xlabel="round", ylabel="accuracy (fraction)", xticks=ticks
    )
    accuracy.plot(
        xs,
        [math.nan if e.global_accuracy is None else e.global_accuracy for e in by_round],
        Style(_ACCURACY, marker="s"),
    )
    legend = [
        LegendEntry("eps_tilde two-sided (95% CI)", Style(_TWO_SIDED, marker="D"), "marker"),
        LegendEntry("O(1) eps lower bound", Style(_O1, marker="^"), "marker"),
        LegendEntry("global accuracy", Style(_ACCURACY, marker="s"), "marker"),
    ]
    return render_figure(
        [leak, accuracy],
        panel_width=320.0,
        panel_height=270.0,
        cols=2,
        title=title,
        legend=legend,
    )


def first_leaking_text(by_round: list[RoundLeakage]) -> str:
    """One sentence: the first audited round whose two-sided interval excludes 0."""
    first = first_leaking_round(by_round)
    audited = ", ".join(str(e.round) for e in by_round)
    if first is None:
        return f"No audited round ({audited}) has a two-sided interval above 0."
    return (
        f"Leakage first shows at round {first}: of the audited rounds ({audited}), the first "
        "whose two-sided eps_tilde interval excludes 0."
    )


def by_round_section(by_round: list[RoundLeakage], *, heading: str = "h3") -> list[str]:
    """The site page's "Leakage over rounds" block; empty when no earlier round was audited."""
    if not by_round:
        return []
    rows = [
        "<tr>"
        + td(str(e.round))
        + td(
            f"{fmt(e.eps_tilde_two_sided.mean)} [{fmt(e.eps_tilde_two_sided.low)}, "
            f"{fmt(e.eps_tilde_two_sided.high)}]"
        )
        + td(e.side)
        + td(fmt(None if e.o1_eps_lb is None else e.o1_eps_lb.mean))
        + td(fmt(e.mia_auc))
        + td(fmt(e.tpr_at_1pct_fpr))
        + td(fmt(e.tpr_at_01pct_fpr))
        + td(fmt(e.global_accuracy))
        + "</tr>"
        for e in by_round
    ]
    header = th_row(
        (
            "round",
            "eps_tilde two-sided [95% CI]",
            "side",
            "O(1)",
            "MIA AUC",
            "TPR @ 1% FPR",
            "TPR @ 0.1% FPR",
            "global accuracy",
        )
    )
    return [
        f"<{heading}>Leakage over rounds</{heading}>",
        f"<p>{esc(first_leaking_text(by_round))} Every round is audited with the same "
        "non-members, helper, reference models and games: only the model changes.</p>",
        figure(
            by_round_plot(by_round),
            "Two-sided eps_tilde per audited round (95% t-interval over repeats) and O(1), "
            "beside the global model's accuracy.",
            alt="leakage against round",
        ),
        f'<table id="by-round">{header}{"".join(rows)}</table>',
    ]


def per_class_section(slices: list[ClassSliceResult], *, heading: str = "h3") -> list[str]:
    """The site page's per-class table; empty for an audit without label slices."""
    if not slices:
        return []
    header = th_row(
        ("label", "game slots", "eps_tilde two-sided [95% CI]", "MIA TPR @ 1% FPR", "level", "")
    )
    rows = [
        "<tr>"
        + td(str(c.label))
        + td(str(c.slots))
        + td(f"{fmt(c.eps_tilde.mean)} [{fmt(c.eps_tilde.low)}, {fmt(c.eps_tilde.high)}]")
        + td(fmt(None if c.tpr_at_1pct_fpr is None else c.tpr_at_1pct_fpr.mean))
        + td(f"{c.level:.2g}")
        + td("too few records for a bound" if c.too_few else "")
        + "</tr>"
        for c in slices
    ]
    return [
        f"<{heading}>Which of your classes are exposed</{heading}>",
        f"<p>{esc(CLASS_SLICES_MEANING)}</p>",
        f'<table id="per-class">{header}{"".join(rows)}</table>',
    ]


def consortium_first_leaks(first: dict[str, int | None]) -> str | None:
    """The consortium summary's line: per site, the first audited round that leaks."""
    if not first:
        return None
    parts = [
        f"site {sid}: {'none' if r is None else f'round {r}'}"
        for sid, r in sorted(first.items(), key=lambda kv: int(kv[0]))
    ]
    return (
        "First audited round whose two-sided eps_tilde interval excludes 0 - "
        + "; ".join(parts)
        + "."
    )


def consortium_rounds_block(sites: list[SiteReport], summary: ConsortiumSummary) -> list[str]:
    """report.html's "Leakage over rounds": the summary line and each site's plot; empty
    when no site audited earlier rounds."""
    line = consortium_first_leaks(summary.first_leaking_round)
    if line is None:
        return []
    return [
        "<h2>Leakage over rounds</h2>",
        f"<p>{esc(line)}</p>",
        *[
            figure(
                by_round_plot(s.by_round, title=f"site {s.site_id}"),
                f"Site {s.site_id}: two-sided eps_tilde per audited round (95% t-interval) "
                "and O(1), beside the global model's accuracy.",
                alt=f"site {s.site_id}: leakage against round",
            )
            for s in sites
            if s.by_round
        ],
    ]
