"""Plausibility: the new global model against the previous one and the agreed training.

A round of honest FedAvg moves each weight by a (weighted) mean of the sites' moves, so by no
more than the largest of them. What bounds a site's move:

- **Adam** (the project's optimizers ``adam`` / ``adamw``, default betas, a fresh optimizer
  each round): one step moves a coordinate by ``lr * |m_hat| / (sqrt(v_hat) + eps)``, and by
  Cauchy-Schwarz ``|m_t| <= (1 - b1) / sqrt(1 - b2) * sqrt(1 / (1 - b1**2 / b2)) * sqrt(v_t)``;
  with the bias corrections the ratio stays below :data:`ADAM_STEP_BOUND` (7.27) at every step,
  whatever the gradients (DP-SGD's noise and clipping included). So a round of ``T`` local
  steps moves no weight by more than ``7.27 * lr * T`` (AdamW adds ``lr * wd * |w|`` a step).
  The statistic is ``max |w_new - w_prev| / (lr * T * rounds)``: the largest move in units of
  the agreed step size; its bound is a proof, not a fit.
- **Client-level DP** (fixed clipping norm ``C``, noise multiplier ``z``, ``m`` sites
  averaged): the mean of clipped updates has norm at most ``C`` and the noise on the mean is
  ``N(0, (z C / m)^2 I)``, whose norm exceeds ``z C / m * sqrt(chi2_d(1 - 1e-9))`` with
  probability 1e-9. The statistic is ``||w_new - w_prev|| / (rounds * (C + that))`` (bound 1).

Plain SGD without client-level clipping has no bound of either kind: not checked (None).
Only trained parameters are compared (BatchNorm's running statistics move by averaging).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import scipy

from panoramia_fl.audit.received_model.thresholds import THRESHOLDS
from panoramia_fl.contracts.model_flags import CheckOutcome

ADAM_BETAS = (0.9, 0.999)
"""torch's defaults, which the project's optimizers use."""


def _chi2_quantile(q: float, dof: int) -> float:
    """``scipy.stats.chi2.ppf(q, dof)``, by the same formula, without importing scipy.stats:
    every site process imports this module, and scipy.stats alone costs about a second."""
    return 2.0 * float(scipy.special.gammaincinv(dof / 2, q))


def adam_step_bound(b1: float = ADAM_BETAS[0], b2: float = ADAM_BETAS[1]) -> float:
    """The most one Adam step (bias-corrected, any gradients) moves a coordinate, in units
    of the learning rate: ``(1 - b1) / sqrt(1 - b2) / sqrt(1 - b1**2 / b2)`` (its limit over
    steps, which it approaches from below)."""
    return (1 - b1) / math.sqrt(1 - b2) / math.sqrt(1 - b1**2 / b2)


ADAM_STEP_BOUND = adam_step_bound()
NOISE_TAIL = 1e-9
"""The chance that client-level DP's noise alone exceeds the norm the check allows."""


@dataclass(frozen=True)
class ClientClipping:
    """Client-level DP with fixed clipping: what bounds the global model's move."""

    clipping_norm: float
    noise_multiplier: float
    sites: int
    """Updates averaged per round (the noise on the mean is ``z C / sites``)."""


@dataclass(frozen=True)
class AgreedTraining:
    """The training every site agreed to (the run's config)."""

    optimizer: str
    """``adam``, ``adamw`` or ``sgd``."""
    learning_rate: float
    local_steps: int
    """The most local steps any site takes in one round."""
    weight_decay: float = 0.0
    client_clipping: ClientClipping | None = None


def plausibility(
    previous: Mapping[str, np.ndarray],
    new: Mapping[str, np.ndarray],
    *,
    agreed: AgreedTraining,
    rounds: int = 1,
) -> CheckOutcome | None:
    """The check of ``new`` (trained parameters by name) against ``previous``, ``rounds``
    global rounds apart; None when the agreed training bounds no move (plain SGD)."""
    names = sorted(set(previous) & set(new))
    if set(previous) != set(new):
        return _outcome(math.inf, 1.0, f"parameters differ: {sorted(set(previous) ^ set(new))}")
    moves = {k: np.asarray(new[k], np.float64) - np.asarray(previous[k], np.float64) for k in names}
    clip = agreed.client_clipping
    if clip is not None:
        d = sum(m.size for m in moves.values())
        noise = clip.noise_multiplier * clip.clipping_norm / clip.sites
        allowed = rounds * (
            clip.clipping_norm + noise * math.sqrt(_chi2_quantile(1 - NOISE_TAIL, d))
        )
        norm = math.sqrt(sum(float(np.sum(m * m)) for m in moves.values()))
        detail = f"update norm {norm:.4g}, allowed {allowed:.4g} (C={clip.clipping_norm:g})"
        return _outcome(norm / allowed, 1.0, detail, bound="client")
    if agreed.optimizer not in ("adam", "adamw"):
        return None
    step = agreed.learning_rate * agreed.local_steps * rounds
    largest, where = max((float(np.max(np.abs(m), initial=0.0)), k) for k, m in moves.items())
    decay = 0.0
    if agreed.optimizer == "adamw":
        decay = agreed.weight_decay * max(
            float(np.max(np.abs(previous[k]), initial=0.0)) for k in names
        )
    detail = (
        f"largest move {largest:.4g} in {where!r}; {rounds} round(s) of {agreed.local_steps} "
        f"steps at lr {agreed.learning_rate:g} allow {ADAM_STEP_BOUND * step:.4g}"
    )
    return _outcome(largest / step - decay, ADAM_STEP_BOUND, detail, bound="adam")


def _outcome(statistic: float, threshold: float, detail: str, *, bound: str = "") -> CheckOutcome:
    honest = THRESHOLDS["plausibility"][1]
    why = {
        "adam": f"at most {ADAM_STEP_BOUND:.2f} lr-steps a step (Adam's bound); {honest}",
        "client": "at most 1 (clipping norm plus noise quantile)",
    }.get(bound, honest)
    finite = statistic if math.isfinite(statistic) else 1e300
    return CheckOutcome(
        check="plausibility",
        statistic=finite,
        threshold=threshold,
        honest_range=why,
        detail=detail,
    )
