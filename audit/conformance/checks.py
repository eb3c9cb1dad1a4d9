"""Conformance checks of a site's real DP-SGD against what its accountant assumes (numpy,
scipy).

From what the site observed of its own steps (:class:`ConformanceEvidence`), each check
compares one part of the real path with the reference values: the accountant's *recorded*
noise multiplier ``sigma`` and sampling rate ``q`` and the *configured* clipping norm ``C``
(never the optimizer's own, possibly faulty, attributes).

Statistical checks, each a test at ``beta / 9`` (together at ``beta``; tail probabilities
from :mod:`audit.conformance.distributions`):

* ``noise_level``: the noise the consumed gradients carry, ``u - a S`` with the scale ``a``
  fitted over every step, against ``sigma C`` (one-sided: less noise);
* ``noise_per_step``: each step's noise against the other steps' (F law, Bonferroni): less
  noise on some steps, or a scale that changes from step to step (a division by the realised
  batch size, which reveals it);
* ``noise_shape``: the noise's kurtosis against a Gaussian's (two-sided);
* ``noise_lag1``: successive steps' noise correlations (``N(0, 1/d)`` each; two-sided);
* ``noise_reuse``: every pair of steps, over all rounds, on a fixed random coordinate subset
  (the largest ``|correlation|``, Bonferroni over the pairs);
* ``batch_total`` / ``batch_dispersion``: the loader's batch sizes against Binomial(N, q);
* ``record_dispersion`` / ``record_extremes``: each record's inclusion count against the
  Binomial(T, q) law of independent Poisson draws.

Deterministic checks (no share of beta): ``observed`` (every consumed step passed through the
real clipping and noise calls, and the rows clipped are the records the loader drew),
``clipping`` (the clean sum equals the per-sample gradients clipped at ``C``, and they sum to
the batch gradient), ``steps`` (the accountant's history holds every noisy step taken) and
``epsilon`` (the accountant's epsilon over the steps taken is within the target the noise was
calibrated for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy

from panoramia_fl.audit.conformance.distributions import (
    binomial_sum_tails,
    count_pmf,
    dispersion_p,
    kurtosis_moments,
    kurtosis_z,
    largest_pair_correlation,
    normal_p,
    unit_correlation_sf,
)
from panoramia_fl.audit.conformance.observed_steps import (
    NO_ACCOUNTANT_STEP,
    NO_CLEAN_SUM,
    NO_NOISE_CALL,
    ConformanceEvidence,
)

__all__ = [
    "CHECKS",
    "STATISTICAL_CHECKS",
    "ConformanceCheck",
    "ConformanceResult",
    "check_level",
    "conformance_audit",
]

CHECKS: dict[str, str] = {
    "observed": "every step the optimizer took passed through the real clipping and noise "
    "calls, the accountant recorded it, and the rows clipped are the records the loader drew",
    "clipping": "the clean clipped sum equals the per-sample gradients clipped at the "
    "configured C, and those sum to the batch's gradient",
    "noise_level": "the noise on the model's own coordinates against the accountant's sigma C",
    "noise_per_step": "each step's noise against the other steps'",
    "noise_shape": "the noise's kurtosis against a Gaussian's",
    "noise_lag1": "the correlation of each step's noise with the previous step's",
    "noise_reuse": "the correlation of every pair of steps' noise, over all rounds",
    "batch_total": "the loader's batch sizes, in total, against Binomial(N, q)",
    "batch_dispersion": "the spread of the loader's batch sizes against Binomial(N, q)",
    "record_dispersion": "the spread of the records' inclusion counts against Binomial(T, q)",
    "record_extremes": "the most and least drawn records against Binomial(T, q)",
    "steps": "the noisy steps taken against the steps in the site's accountant history",
    "epsilon": "the accountant's epsilon over the steps taken against the target the noise "
    "was calibrated for",
}
"""Every check, in report order, with what it compares."""

STATISTICAL_CHECKS = (
    "noise_level",
    "noise_per_step",
    "noise_shape",
    "noise_lag1",
    "noise_reuse",
    "batch_total",
    "batch_dispersion",
    "record_dispersion",
    "record_extremes",
)
"""The checks that are statistical tests: they share beta."""

CLIP_TOLERANCE = 1e-3
"""Relative distance at which the clean sum differs from the reference clipping (float32
sums of the same terms agree to about 1e-6)."""
EPSILON_TOLERANCE = 0.011
"""Opacus calibrates sigma to within 0.01 of the target epsilon."""


def check_level(beta: float) -> float:
    """Each statistical check's level: they share the conformance audit's ``beta``."""
    return beta / len(STATISTICAL_CHECKS)


@dataclass(frozen=True)
class ConformanceCheck:
    """One check of the site's real DP-SGD."""

    name: str
    passed: bool
    factor: float | None
    """The measured value over what the accountant assumes (e.g. 0.50: half the noise)."""
    p_value: float | None
    """The test's p-value (None: a deterministic check, or nothing to test)."""
    level: float | None
    """The test's level, its share of beta (None: deterministic)."""
    message: str
    """What was measured, in plain words (a failure says what is wrong and by how much)."""


@dataclass(frozen=True)
class ConformanceResult:
    """A site's conformance checks of its DP-SGD over every round."""

    steps: int
    rounds: int
    coordinates: int
    records: int
    beta: float
    checks: tuple[ConformanceCheck, ...]

    @property
    def failed(self) -> tuple[ConformanceCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)


def _check(name: str, passed: bool, message: str, **kw: Any) -> ConformanceCheck:
    values = {"factor": None, "p_value": None, "level": None} | kw
    for key in ("factor", "p_value"):
        if values[key] is not None and not math.isfinite(values[key]):
            values[key] = None
    return ConformanceCheck(name=name, passed=bool(passed), message=message, **values)


def _test(
    name: str, p: float, level: float, factor: float, message: str, *, honest: str
) -> ConformanceCheck:
    """A statistical check: what was measured, what an honest run gives, and the p-value
    against the check's level (a failure crossed it)."""
    passed = p >= level
    where = "at or above" if passed else "below"
    text = f"{message}, where an honest run gives {honest} (p = {p:.2g}, {where} the level "
    text += f"{level:.2g})"
    return _check(name, passed, text, factor=factor, p_value=p, level=level)


def _untested(name: str, why: str) -> ConformanceCheck:
    return _check(name, True, f"not tested: {why}")


@dataclass(frozen=True)
class _Noise:
    """The noise of the observed steps, in units of the accountant's sigma C."""

    y: np.ndarray
    """Per step, the residual's mean square over (sigma C)^2, at the step's own scale."""
    scale: float
    """a: the consumed gradient over the clean sum, fitted over every step."""
    scale_var: float
    """The relative variance of ``scale`` that the noise causes."""
    dof: int
    """Residual degrees of freedom per step (d - 1)."""

    @property
    def factor_sq(self) -> float:
        """Measured noise variance over (a sigma C)^2."""
        return float(self.y.mean() / (self.scale * self.scale))


def _noise(ev: ConformanceEvidence) -> tuple[_Noise, np.ndarray] | None:
    s = ev.steps
    ref = (s["sigma"] * ev.clip_norm) ** 2
    usable = np.isfinite(s["rss"]) & np.isfinite(ref) & (ref > 0) & (s["ss"] > 0)
    if usable.sum() == 0 or ev.coordinates < 2:
        return None
    ss, us, ref_u = s["ss"][usable], s["us"][usable], ref[usable]
    scale = float(us.sum() / ss.sum())
    if not scale > 0:
        return None
    dof = ev.coordinates - 1
    noise = _Noise(
        y=s["rss"][usable] / ref_u / dof,
        scale=scale,
        scale_var=float((ref_u * ss).sum() / ss.sum() ** 2),
        dof=dof,
    )
    return noise, usable


def _noise_level(noise: _Noise, level: float) -> ConformanceCheck:
    n = noise.y.size * noise.dof
    spread = math.sqrt(2.0 / n + 4.0 * noise.scale_var)
    z = math.log(noise.factor_sq) / spread if noise.factor_sq > 0 else -math.inf
    factor = math.sqrt(noise.factor_sq)
    p = normal_p(z, side="low")
    return _test(
        "noise_level",
        p,
        level,
        factor,
        f"noise {factor:.2f} x what the accountant assumes (sigma C, measured over "
        f"{noise.y.size} steps)",
        honest=f"1.00 x (+- {spread / 2:.2g})",
    )


def _noise_per_step(noise: _Noise, names: list[str], level: float) -> ConformanceCheck:
    t = noise.y.size
    if t < 2:
        return _untested("noise_per_step", "fewer than two steps")
    others = (noise.y.sum() - noise.y) / (t - 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # no noise at all: noise_level
        ratio = np.nan_to_num(noise.y / others, nan=1.0, posinf=1.0)
    worst = int(np.argmin(ratio))
    p_one = float(scipy.stats.f.cdf(ratio[worst], noise.dof, (t - 1) * noise.dof))
    factor = math.sqrt(float(ratio[worst]))
    return _test(
        "noise_per_step",
        min(1.0, t * p_one),
        level,
        factor,
        f"the least noisy step ({names[worst]}) carries {factor:.2f} x the noise of the "
        "other steps (in the consumed gradient: less noise there, or a step-dependent scale "
        "such as a division by the realised batch size, which reveals it)",
        honest="1.00 x on every step, up to the F law's spread over the steps",
    )


def _noise_shape(ev: ConformanceEvidence, usable: np.ndarray, level: float) -> ConformanceCheck:
    rss, r4 = ev.steps["rss"][usable], ev.steps["r4"][usable]
    rss, r4 = rss[rss > 0], r4[rss > 0]  # steps without noise: the checks above
    if rss.size == 0:
        return _untested("noise_shape", "no step carried noise")
    kurt = ev.coordinates * r4 / (rss * rss)
    mean, _ = kurtosis_moments(ev.coordinates)
    observed = float(kurt.mean())
    z = float(kurtosis_z(kurt, ev.coordinates).sum()) / math.sqrt(kurt.size)
    p = normal_p(z, side="both")
    return _test(
        "noise_shape",
        p,
        level,
        observed / mean,
        f"the noise's kurtosis averages {observed:.4f} over {kurt.size} steps, a combined "
        f"z-statistic of {z:.1f}",
        honest=f"a kurtosis of {mean:.4f} (Gaussian noise) and a z-statistic about N(0, 1)",
    )


def _noise_lag1(ev: ConformanceEvidence, level: float) -> ConformanceCheck:
    lag = ev.steps["lag1"]
    lag = lag[np.isfinite(lag)]
    if lag.size == 0:
        return _untested("noise_lag1", "no two successive noisy steps")
    z = float(lag.sum()) * math.sqrt(ev.coordinates) / math.sqrt(lag.size)
    mean = float(lag.mean())
    return _test(
        "noise_lag1",
        normal_p(z, side="both"),
        level,
        mean,
        f"successive steps' noise correlates at {mean:+.2g} on average over {lag.size} pairs",
        honest=f"0 +- {1 / math.sqrt(ev.coordinates * lag.size):.2g} (independent noise)",
    )


def _noise_reuse(ev: ConformanceEvidence, level: float) -> ConformanceCheck:
    rows = ev.subset
    kept = np.isfinite(rows).all(axis=1) & (np.abs(rows).sum(axis=1) > 0)
    k, index = rows.shape[1], np.flatnonzero(kept)
    if index.size < 2 or k < 2:
        return _untested("noise_reuse", "fewer than two noisy steps")
    best, i, j = largest_pair_correlation(rows[index].astype(np.float64))
    pairs = index.size * (index.size - 1) / 2
    p = min(1.0, pairs * unit_correlation_sf(best, k))
    a, b = _step_names(ev, index[[i, j]])
    return _test(
        "noise_reuse",
        p,
        level,
        best,
        f"the most alike pair of steps' noise ({a} and {b}) correlates at {best:.2f} on "
        f"{k} coordinates, of {int(pairs)} pairs",
        honest=f"correlations of about +- {1 / math.sqrt(k):.2g} (independent noise)",
    )


def _step_names(ev: ConformanceEvidence, index: np.ndarray) -> list[str]:
    """``"round r, step s"`` (both from 1) of the steps at ``index``."""
    rounds = ev.steps["round"].astype(int)
    first = {int(r): int(np.argmax(rounds == r)) for r in np.unique(rounds)}
    return [f"round {rounds[i] + 1}, step {i - first[rounds[i]] + 1}" for i in index]


def _noise_checks(ev: ConformanceEvidence, level: float) -> list[ConformanceCheck]:
    fitted = _noise(ev)
    if fitted is None:
        why = "no step with both a clean clipped sum and a consumed gradient"
        return [
            _untested(name, why) for name in ("noise_level", "noise_per_step", "noise_shape")
        ] + [_noise_lag1(ev, level), _noise_reuse(ev, level)]
    noise, usable = fitted
    return [
        _noise_level(noise, level),
        _noise_per_step(noise, _step_names(ev, np.flatnonzero(usable)), level),
        _noise_shape(ev, usable, level),
        _noise_lag1(ev, level),
        _noise_reuse(ev, level),
    ]


def _round_rates(ev: ConformanceEvidence) -> np.ndarray:
    """Per round, the sampling rate the accountant recorded for its steps (NaN: none, or
    more than one)."""
    rates = np.full(ev.rounds, np.nan)
    for r in range(ev.rounds):
        q = ev.steps["rate"][ev.steps["round"] == r]
        q = np.unique(q[np.isfinite(q)])
        if q.size == 1:
            rates[r] = q[0]
    return rates


def _batch_checks(ev: ConformanceEvidence, rates: np.ndarray, level: float):
    q = rates[ev.draw_round] if ev.draw_round.size else np.zeros(0)
    known = np.isfinite(q)
    if known.sum() == 0:
        why = "no loader draw with a recorded sampling rate"
        return [_untested("batch_total", why), _untested("batch_dispersion", why)]
    sizes, q, n = ev.draw_size[known], q[known], ev.records
    low, high = binomial_sum_tails(int(sizes.sum()), trials=n, rates=q)
    factor = float(sizes.sum() / (n * q.sum()))
    total = _test(
        "batch_total",
        min(1.0, 2.0 * min(low, high)),
        level,
        factor,
        f"the loader's {sizes.size} batches hold {sizes.mean():.1f} records on average, where "
        f"the accountant's q = {q.mean():.4g} of {n} records gives {n * q.mean():.1f}: "
        f"sampling at {factor:.2f} x the accountant's rate",
        honest="1.00 x, up to Binomial(N, q)'s spread",
    )
    var = n * q * (1 - q)
    statistic = float(((sizes - n * q) ** 2 / var).sum())
    spread = float((2.0 + (1.0 - 6.0 * q * (1 - q)) / var).sum())
    ratio = statistic / sizes.size
    dispersion = _test(
        "batch_dispersion",
        dispersion_p(statistic, mean=sizes.size, variance=spread, side="both"),
        level,
        ratio,
        f"the loader's batch sizes vary {ratio:.2f} x as much about N q as Poisson sampling "
        "at the accountant's rate does",
        honest="1.00 x, up to the spread of the variance over the batches",
    )
    return [total, dispersion]


def _record_checks(ev: ConformanceEvidence, rates: np.ndarray, level: float):
    groups: dict[float, int] = {}
    for r, q in enumerate(rates):
        if np.isfinite(q):
            groups[float(q)] = groups.get(float(q), 0) + int((ev.draw_round == r).sum())
    if not groups or ev.records < 2:
        why = "no loader draw with a recorded sampling rate"
        return [_untested("record_dispersion", why), _untested("record_extremes", why)]
    trials = np.array(list(groups.values()), float)
    q = np.array(list(groups.keys()))
    mean, var = float((trials * q).sum()), float((trials * q * (1 - q)).sum())
    fourth = float((trials * q * (1 - q) * (1 - 6 * q * (1 - q))).sum())
    counts, n = ev.counts.astype(float), ev.records
    statistic = float(((counts - mean) ** 2).sum() / var)
    ratio = statistic / n
    dispersion = _test(
        "record_dispersion",
        dispersion_p(statistic, mean=n, variance=n * (2.0 + fourth / var**2), side="both"),
        level,
        ratio,
        f"the records' inclusion counts vary {ratio:.2f} x as much as independent Poisson "
        f"draws at the accountant's rate give ({int(trials.sum())} draws)",
        honest="1.00 x, up to the spread of the variance over the records",
    )
    pmf = count_pmf([(int(t), float(p)) for t, p in zip(trials, q, strict=True)])
    top, bottom = int(np.argmax(counts)), int(np.argmin(counts))
    p_high = n * float(pmf[int(counts[top]) :].sum())
    p_low = n * float(pmf[: int(counts[bottom]) + 1].sum())
    worst = top if p_high <= p_low else bottom
    extremes = _test(
        "record_extremes",
        min(1.0, 2.0 * min(p_high, p_low)),
        level,
        float(counts[worst] / mean),
        f"record {worst} was drawn {int(counts[worst])} times in {int(trials.sum())} draws, "
        f"where the accountant's rate gives {mean:.1f} on average (most drawn "
        f"{int(counts[top])}, least {int(counts[bottom])})",
        honest=f"extremes within Binomial({int(trials.sum())}, q)'s tails over {n} records",
    )
    return [dispersion, extremes]


def _observed(ev: ConformanceEvidence, rates: np.ndarray) -> ConformanceCheck:
    flags = ev.steps["flags"].astype(int)
    problems = [
        f"{int((flags & bit).astype(bool).sum())} of {flags.size} steps {what}"
        for bit, what in (
            (NO_CLEAN_SUM, "reached the optimizer without passing through the real clipping"),
            (NO_NOISE_CALL, "reached the optimizer without a call of its noise"),
            (NO_ACCOUNTANT_STEP, "left no record in the accountant"),
        )
        if (flags & bit).any()
    ]
    unmatched = 0
    for r in range(ev.rounds):
        drawn = ev.draw_size[(ev.draw_round == r) & (ev.draw_size > 0)]
        clipped = ev.steps["batch"][(ev.steps["round"] == r) & ((flags & NO_CLEAN_SUM) == 0)]
        used = min(drawn.size, clipped.size)
        unmatched += int((drawn[:used] != clipped[:used]).sum()) + clipped.size - used
    if unmatched:
        problems.append(f"{unmatched} steps clipped other rows than the loader drew")
    if unknown := int((~np.isfinite(rates)).sum()):
        problems.append(f"{unknown} rounds have no single sampling rate in the accountant")
    if flags.size == 0:
        problems.append("no step was observed")
    if problems:
        return _check(
            "observed",
            False,
            f"{'; '.join(problems)}, where an honest run has none (an exact check: one such "
            "step fails it)",
        )
    return _check(
        "observed",
        True,
        f"all {flags.size} steps passed through the real clipping and noise calls, the "
        f"accountant recorded each, and their rows are the loader's {ev.draw_size.size} draws",
    )


def _clipping(ev: ConformanceEvidence) -> ConformanceCheck:
    clip_err, sample_err = ev.steps["clip_err"], ev.steps["sample_err"]
    clip_worst = float(np.nanmax(clip_err)) if np.isfinite(clip_err).any() else 0.0
    sample_worst = float(np.nanmax(sample_err)) if np.isfinite(sample_err).any() else 0.0
    if sample_worst > CLIP_TOLERANCE:
        ratio = float(np.nanmedian(ev.steps["sample_ratio"]))
        return _check(
            "clipping",
            False,
            f"the per-sample gradients sum to {ratio:.2f} x the batch's gradient (relative "
            f"distance up to {sample_worst:.3g}): they are computed wrong, so the clipping "
            f"bounds something other than each record's gradient; an honest run gives 1.00 x "
            f"(distance about 1e-6, float32 rounding), the check fails above {CLIP_TOLERANCE:g}",
            factor=ratio,
        )
    if clip_worst > CLIP_TOLERANCE:
        ratios = ev.clip_ratio[np.isfinite(ev.clip_ratio)]
        used = float(np.median(ratios)) if ratios.size else None
        at = "" if used is None else f": the real clipping clips at {used:.2f} x C"
        return _check(
            "clipping",
            False,
            f"the clean clipped sum differs from the per-sample gradients clipped at the "
            f"configured C = {ev.clip_norm:g} (relative distance up to {clip_worst:.3g}){at}; an "
            f"honest run gives about 1e-6 (float32 rounding), the check fails above "
            f"{CLIP_TOLERANCE:g}",
            factor=used,
        )
    return _check(
        "clipping",
        True,
        f"every clean sum equals the per-sample gradients clipped at C = {ev.clip_norm:g} "
        f"(relative distance up to {clip_worst:.1g}), and those sum to the batch's gradient",
        factor=1.0,
    )


def _steps(ev: ConformanceEvidence, accounted_steps: int) -> ConformanceCheck:
    """The accountant's history against the steps taken: per round (its own record of the
    round) and in total. A history holding more steps than were observed in total, with
    every round matching, is conservative (a round trained again after a restart)."""
    taken = ev.n_steps
    per_round = np.bincount(ev.steps["round"].astype(int), minlength=ev.rounds)
    factor = accounted_steps / taken if taken else None
    if np.array_equal(per_round, ev.accounted_steps) and accounted_steps >= taken:
        extra = (
            ""
            if accounted_steps == taken
            else f" (and {accounted_steps - taken} more, e.g. a round trained again after a "
            "restart: conservative)"
        )
        return _check(
            "steps",
            True,
            f"the accountant's history holds all {taken} noisy steps taken over {ev.rounds} "
            f"rounds{extra}",
            factor=factor,
        )
    rounds = (
        ""
        if np.array_equal(per_round, ev.accounted_steps)
        else f"; per round the accountant recorded {', '.join(map(str, ev.accounted_steps))} "
        f"where {', '.join(map(str, per_round))} were taken"
    )
    return _check(
        "steps",
        False,
        f"the site's accountant history accounts for {accounted_steps} of the {taken} noisy steps "
        f"taken over {ev.rounds} rounds{rounds}: its epsilon does not cover the training as "
        "taken; an honest run's history holds every step taken (an exact check: one step "
        "missing fails it)",
        factor=factor,
    )


def _epsilon(taken: float, accounted: float, target: float | None, steps: int) -> ConformanceCheck:
    over = f"over the {steps} steps taken, at the noise and rate the accountant recorded"
    above = []
    if taken > accounted + EPSILON_TOLERANCE:
        above.append(f"above the {accounted:.2f} the site's accountant reports")
    if target is not None and taken > target + EPSILON_TOLERANCE:
        above.append(
            f"{taken / target:.2f} x the target {target:g} the noise was calibrated for (the "
            "noise was calibrated for fewer steps, or a lower sampling rate, than taken)"
        )
    if above:
        factor = taken / target if target is not None else taken / accounted if accounted else None
        return _check(
            "epsilon",
            False,
            f"{over}, epsilon is {taken:.2f}: {'; '.join(above)}; an honest run stays within "
            f"{EPSILON_TOLERANCE:g} of both (Opacus's calibration tolerance), the threshold "
            "it crossed",
            factor=factor,
        )
    goal = "" if target is None else f", within the target {target:g}"
    return _check("epsilon", True, f"{over}, epsilon is {taken:.2f}{goal}")


def conformance_audit(
    evidence: ConformanceEvidence,
    *,
    beta: float,
    accounted_steps: int,
    epsilon_taken: float,
    epsilon_accounted: float,
    epsilon_target: float | None,
) -> ConformanceResult:
    """Every check of :data:`CHECKS` on a site's ``evidence``.

    ``accounted_steps`` and ``epsilon_accounted``: what the site's accountant history holds;
    ``epsilon_taken``: the run's accountant over :meth:`ConformanceEvidence.history` (the
    steps observed, at the recorded noise and rate); ``epsilon_target``: the epsilon the
    noise was calibrated for (None: a noise multiplier was given).
    """
    level = check_level(beta)
    rates = _round_rates(evidence)
    found = [
        _observed(evidence, rates),
        _clipping(evidence),
        *_noise_checks(evidence, level),
        *_batch_checks(evidence, rates, level),
        *_record_checks(evidence, rates, level),
        _steps(evidence, accounted_steps),
        _epsilon(epsilon_taken, epsilon_accounted, epsilon_target, evidence.n_steps),
    ]
    by_name = {c.name: c for c in found}
    return ConformanceResult(
        steps=evidence.n_steps,
        rounds=evidence.rounds,
        coordinates=evidence.coordinates,
        records=evidence.records,
        beta=float(beta),
        checks=tuple(by_name[name] for name in CHECKS),
    )
