"""One-run audit on input canaries (Steinke, Nasr and Jagielski, 2023), delta = 0, and its
f-DP reading (Mahloujifar, Melis and Chaudhuri, 2025) at ``delta``.

A site draws ``n`` input canaries (made-up records) and includes each in its training data
by an independent fair coin before training starts. After training, the canaries are
scored by the negative per-record loss of the final model (lower loss: guessed "included")
and the guesses with abstention and their bound come from the same code as the O(1) comparison
(:func:`audit.stats.o1.o1_lower_bound`): guess "included" for the highest scores, "excluded" for
the lowest, abstain in between, and bound eps from the number of correct guesses against
``Binomial(guesses, sigmoid(eps))``, with a union bound over the threshold pairs tried.

Unlike O(1) on real members and holdout records, the coins here were tossed *before*
training, so this is the paper's one-run audit proper: ``eps_lb`` is a lower bound on the
training run's eps (delta = 0) at level ``beta``, valid whatever the model or the canaries
(its power depends on how easy the canaries are to memorise).

The same guesses also give the f-DP (Gaussian) bound of :mod:`audit.stats.one_run` over the same
threshold pairs and union bound: ``eps_lb_fdp`` at ``fdp_delta``, with the Gaussian-DP
``fdp_mu`` it converts. It is the tighter of the two when the canaries are easy (at 200
canaries all guessed right and beta = 0.05: 4.5 at delta = 1e-5, Steinke's 3.1 at delta = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.stats.bounds import clopper_pearson_lower, logit
from panoramia_fl.audit.stats.o1 import O1Summary, o1_lower_bound
from panoramia_fl.audit.stats.one_run import DEFAULT_DELTA, one_run_bound

__all__ = ["INPUT_CANARY_SCORE", "InputCanaryResult", "input_canary_audit"]

INPUT_CANARY_SCORE = "negative per-record loss of the final model"
"""What the input-canary audit scores each canary by (higher: guessed "included")."""


@dataclass(frozen=True)
class InputCanaryResult:
    """The input-canary audit of one site: counts, the certified bound and the guessing rule."""

    n_canaries: int
    n_included: int
    """Canaries whose coin put them in the training data."""
    eps_lb: float
    """Lower bound on eps (delta = 0) at level ``beta``, clipped at 0."""
    eps_interval: tuple[float, float | None]
    """``(eps_lb, hi)``: ``hi`` is the logit of the Clopper-Pearson *upper* bound of
    ``correct / guesses`` of the selected guessing rule at the same per-pair level
    ``beta / n_pairs_tried``, clipped at 0; ``None`` when every guess was right (no finite
    upper end). It describes the selected rule's accuracy, not an upper bound on the
    model's privacy loss: a better guessing rule could certify more."""
    guesses: int
    correct: int
    member_guesses: int
    nonmember_guesses: int
    n_pairs_tried: int
    beta: float
    score: str
    kind: str
    """How the canaries were made (e.g. ``noise_image``, ``rare_row``, ``random_tokens``)."""
    eps_lb_fdp: float | None = None
    """f-DP (Gaussian) lower bound on eps at ``fdp_delta``, same level and guessing rules
    (None in files written before it existed)."""
    fdp_mu: float | None = None
    """The largest Gaussian-DP mu the guesses reject."""
    fdp_delta: float | None = None
    fdp_guesses: int | None = None
    """Guesses and right ones of the rule that gave ``eps_lb_fdp``."""
    fdp_correct: int | None = None


def input_canary_audit(
    losses: np.ndarray,
    included: np.ndarray,
    *,
    beta: float,
    kind: str,
    delta: float = DEFAULT_DELTA,
) -> InputCanaryResult:
    """Lower-bound eps from the final model's losses on canaries with known coins.

    Parameters
    ----------
    losses
        Per-record loss of the final model on every canary, shape ``(n,)``.
    included
        The canaries' coins, shape ``(n,)``: true (1) where the canary was trained on.
        Both values must occur.
    beta
        Level of the test in (0, 1); the union bound over the guessing rules is inside.
    kind
        How the canaries were made; recorded in the result.
    delta
        delta at which the f-DP bound states eps (the run's ``dp.delta``).

    Returns
    -------
    InputCanaryResult
        ``eps_lb`` from :func:`audit.stats.o1.o1_lower_bound` on ``-losses`` and the coins, and
        the selected rule's counts and interval; ``eps_lb_fdp`` and ``fdp_mu`` from
        :func:`audit.stats.one_run.one_run_bound` on the same scores and threshold pairs.
    """
    loss, membership = _checked_inputs(losses, included)
    summary = o1_lower_bound(-loss, membership, beta=beta)
    hi = _rule_upper_end(summary)
    fdp = one_run_bound(-loss, membership, method="fdp", beta=beta, delta=delta)
    return InputCanaryResult(
        n_canaries=int(membership.size),
        n_included=int(membership.sum()),
        eps_lb=summary.lower_bound,
        eps_interval=(summary.lower_bound, hi),
        guesses=summary.guesses,
        correct=summary.correct,
        member_guesses=summary.member_guesses,
        nonmember_guesses=summary.nonmember_guesses,
        n_pairs_tried=summary.n_pairs_tried,
        beta=summary.beta,
        score=INPUT_CANARY_SCORE,
        kind=str(kind),
        eps_lb_fdp=fdp.eps_lb,
        fdp_mu=fdp.mu,
        fdp_delta=fdp.delta,
        fdp_guesses=fdp.guesses,
        fdp_correct=fdp.correct,
    )


def _checked_inputs(losses: np.ndarray, included: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The losses as floats and the coins as 0/1 integers, both coin values present."""
    loss = np.asarray(losses, dtype=float)
    coins = np.asarray(included)
    if loss.ndim != 1 or coins.ndim != 1 or loss.size != coins.size:
        raise ValueError(
            f"losses and included must be 1-d of one length, got shapes {loss.shape} and "
            f"{coins.shape}"
        )
    if not np.isin(coins, (0, 1)).all():
        raise ValueError("included must hold booleans (or 0/1)")
    membership = coins.astype(np.int64)
    n_included = int(membership.sum())
    if n_included in (0, membership.size):
        which = "included" if n_included == 0 else "excluded"
        raise ValueError(
            "the input-canary audit needs included and excluded canaries; none of the "
            f"{membership.size} canaries is {which}"
        )
    return loss, membership


def _rule_upper_end(summary: O1Summary) -> float | None:
    """Logit of the selected rule's Clopper-Pearson upper end, clipped at 0 (None: infinite)."""
    level = summary.beta / summary.n_pairs_tried
    # Upper Clopper-Pearson bound of correct / guesses = 1 - lower bound of the wrong ones.
    p_hi = 1.0 - float(
        clopper_pearson_lower(summary.guesses - summary.correct, summary.guesses, level)
    )
    hi = float(logit(p_hi))
    return max(0.0, hi) if math.isfinite(hi) else None
