"""Aggregating repeats into an :class:`PanoramiaResult`: intervals, ceilings, ROC and flags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.class_slices import aggregate_slices
from panoramia_fl.audit.panoramia.diagnosis import diagnose
from panoramia_fl.audit.panoramia.sides import SIDES, Side
from panoramia_fl.audit.panoramia.timing import StageTimer
from panoramia_fl.audit.result import (
    Interval,
    PanoramiaResult,
    RepeatResult,
    SideRepeat,
    SideResult,
    TwoSidedResult,
)
from panoramia_fl.audit.stats.roc import mean_roc


def _all_or_none(values: list[float | None]) -> list[float] | None:
    """Every repeat's value, or None when the repeats have none (a comparison not run)."""
    if values[0] is None:
        return None
    present = [float(v) for v in values if v is not None]
    if len(present) != len(values):
        raise ValueError("some repeats have a value and others have none")
    return present


def _interval(values: list[float | None]) -> Interval | None:
    present = _all_or_none(values)
    return None if present is None else Interval.of(present)


def _mean(values: list[float | None]) -> float | None:
    present = _all_or_none(values)
    return None if present is None else float(np.mean(present))


def _side(config: AuditConfig, per_repeat: Sequence[SideRepeat], *, generated: bool) -> SideResult:
    """Intervals over repeats, the mean ceilings and the diagnosis of one game (the paper's,
    or a side of the two-sided game)."""
    c_lb = Interval.of([x.c_lb for x in per_repeat])
    eps = Interval.of([x.eps_tilde for x in per_repeat])
    ceiling = float(np.mean([x.ceiling for x in per_repeat]))
    rm_rn = _interval([x.rm_rn_eps_lb for x in per_repeat])
    rm_rn_ceiling = _mean([x.rm_rn_ceiling for x in per_repeat])
    return SideResult(
        c_lb=c_lb,
        c_eps_lb=Interval.of([x.c_eps_lb for x in per_repeat]),
        eps_tilde=eps,
        ceiling=ceiling,
        flags=diagnose(
            c_lb=c_lb,
            eps_tilde=eps,
            ceiling=ceiling,
            rm_rn=rm_rn,
            rm_rn_ceiling=rm_rn_ceiling,
            saturation_margin=config.saturation_margin,
            generated=generated,
        ),
        rm_rn_eps_lb=rm_rn,
        rm_rn_ceiling=rm_rn_ceiling,
    )


def _two_sided(
    config: AuditConfig, repeats: list[RepeatResult], *, generated: bool
) -> TwoSidedResult:
    games = [r.two_sided for r in repeats if r.two_sided is not None]
    sides: dict[Side, SideResult] = {
        side: _side(config, [getattr(g, side) for g in games], generated=generated)
        for side in SIDES
    }
    eps = Interval.of([g.eps_tilde for g in games])
    rm_rn = _interval([g.rm_rn_eps_lb for g in games])
    result = TwoSidedResult(
        beta=games[0].beta,
        eps_tilde=eps,
        member=sides["member"],
        nonmember=sides["nonmember"],
        rm_rn_eps_lb=rm_rn,
    )
    # The headline itself against RM;RN's two-sided reading: a side can pass its own check
    # and still carry the headline above what real non-members read.
    named = sides["nonmember" if result.side == "nonmember" else "member"]
    flags = diagnose(
        c_lb=named.c_lb,
        eps_tilde=eps,
        ceiling=named.ceiling,
        rm_rn=rm_rn,
        rm_rn_ceiling=named.rm_rn_ceiling,
        saturation_margin=config.saturation_margin,
        generated=generated,
    )
    return replace(result, flags=flags)


def assemble(
    config: AuditConfig,
    *,
    generator_kind: str,
    generated: bool,
    modality: str,
    repeats: list[RepeatResult],
    sizes: dict[str, int],
    quality: dict[str, float],
    timer: StageTimer,
) -> PanoramiaResult:
    """Intervals over repeats, the mean ceiling, per-side diagnosis, mean ROC and levels.

    ``generated`` says whether the game's non-members are generated records (a trained
    generator's draws) rather than a reference pool's real ones; it decides whether a
    reading above RM;RN's can mean "unreal records" (:func:`audit.panoramia.diagnosis.diagnose`).
    """
    paper = _side(config, [x.one_sided for x in repeats], generated=generated)
    quality = dict(quality)
    quality["baseline_auc"] = float(np.mean([x.baseline_auc for x in repeats]))
    quality["mia_auc"] = float(np.mean([x.mia_auc for x in repeats]))
    roc = {name: mean_roc([x.roc[name] for x in repeats]) for name in repeats[0].roc}
    levels = {
        "c_lb": config.one_sided_level,
        "c_eps_lb": config.one_sided_level,
        "two_sided_each": config.two_sided_level,
    }
    if paper.rm_rn_eps_lb is not None:
        levels.update(
            rm_rn=config.one_sided_level,
            rm_rn_two_sided_each=config.two_sided_level,
            o1=config.beta,
            o1_fdp=config.beta,
        )
    return PanoramiaResult(
        modality=modality,
        generator_kind=generator_kind,
        beta=config.beta,
        one_sided=paper,
        repeats=repeats,
        sizes=sizes,
        quality=quality,
        timings=timer.total(),
        o1_eps_lb=_interval([x.o1_eps_lb for x in repeats]),
        two_sided=_two_sided(config, repeats, generated=generated),
        roc=roc,
        levels=levels,
        o1_eps_lb_fdp=_interval([x.o1_eps_lb_fdp for x in repeats]),
        o1_fdp_mu=_interval([x.o1_fdp_mu for x in repeats]),
        delta=config.delta,
        per_class=aggregate_slices([x.per_class for x in repeats]),
    )
