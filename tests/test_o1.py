"""Properties of the O(1) black-box bound (audit.stats.o1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from panoramia_fl.audit.stats.o1 import O1Summary, count_grid, o1_lower_bound


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return -math.inf if p <= 0 else math.log(p / (1 - p))


def _brute_force(t: np.ndarray, s: np.ndarray, beta: float, grid_size: int) -> float:
    """Loop over the count pairs with explicit masks (ties included in each side)."""
    counts = count_grid(t.size, grid_size)
    level = beta / (counts.size**2 - 1)
    desc, asc = np.sort(t)[::-1], np.sort(t)
    best = 0.0
    for kp in counts:
        plus = t >= desc[kp - 1] if kp else np.zeros(t.size, bool)
        for km in counts:
            if kp == 0 and km == 0:
                continue
            minus = t <= asc[km - 1] if km else np.zeros(t.size, bool)
            if (plus & minus).any():
                continue
            guesses = int(plus.sum() + minus.sum())
            correct = int(s[plus].sum() + (1 - s[minus]).sum())
            if correct:
                p = stats.beta.ppf(level, correct, guesses - correct + 1)
                best = max(best, _logit(p))
    return best


@pytest.mark.parametrize("seed", range(3))
def test_matches_brute_force_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, 150)
    s[:2] = [0, 1]
    t = np.round(rng.normal(size=150) + 1.5 * s, 1)
    got = o1_lower_bound(t, s, beta=0.05, grid_size=8)
    assert got.lower_bound == pytest.approx(_brute_force(t, s, 0.05, 8), abs=1e-9)
    # The reported thresholds reproduce the reported guesses.
    plus = t >= got.threshold_high
    minus = t < got.threshold_low
    assert not (plus & minus).any()
    assert got.member_guesses == plus.sum() and got.nonmember_guesses == minus.sum()
    assert got.guesses == plus.sum() + minus.sum()
    assert got.correct == s[plus].sum() + (1 - s[minus]).sum()
    assert got.n_pairs_tried == count_grid(150, 8).size ** 2 - 1


def test_pairs_are_modest() -> None:
    assert count_grid(10**6).size == 20
    assert o1_lower_bound(np.arange(1000.0), np.arange(1000) % 2, beta=0.05).n_pairs_tried <= 399


def test_zero_for_random_scores() -> None:
    rng = np.random.default_rng(1)
    zeros = 0
    for _ in range(50):
        s = rng.integers(0, 2, 500)
        s[:2] = [0, 1]
        zeros += o1_lower_bound(rng.normal(size=500), s, beta=0.05).lower_bound == 0.0
    assert zeros >= 45


def test_positive_for_separable_scores() -> None:
    rng = np.random.default_rng(2)
    s = np.repeat([1, 0], 500)
    t = np.where(s == 1, rng.uniform(1, 2, 1000), rng.uniform(0, 1, 1000))
    got = o1_lower_bound(t, s, beta=0.05)
    assert isinstance(got, O1Summary)
    assert got.correct == got.guesses
    # All-correct guesses: p_lo = (beta / pairs)^(1 / guesses), as large as the grid allows.
    assert got.lower_bound == pytest.approx(_logit((0.05 / got.n_pairs_tried) ** (1 / got.guesses)))
    assert got.lower_bound > 4.0
    # Invariant to strictly increasing transforms.
    assert o1_lower_bound(np.exp(t), s, beta=0.05).lower_bound == pytest.approx(got.lower_bound)


def test_coverage() -> None:
    # Records above 1/2 are members with probability sigmoid(eps), below with 1 - sigmoid(eps):
    # every guess of every pair is right with probability <= sigmoid(eps), independently.
    rng = np.random.default_rng(3)
    eps, beta, trials, n = 1.0, 0.05, 1000, 200
    p = _sigmoid(eps)
    exceed = 0
    for _ in range(trials):
        u = rng.random(n)
        s = (rng.random(n) < np.where(u >= 0.5, p, 1 - p)).astype(int)
        s[:2] = [0, 1]
        exceed += o1_lower_bound(u, s, beta=beta).lower_bound > eps
    assert exceed <= beta * trials + 3 * math.sqrt(trials * beta * (1 - beta))


def test_monotone_in_beta() -> None:
    rng = np.random.default_rng(4)
    s = rng.integers(0, 2, 800)
    t = rng.normal(size=800) + 2.0 * s
    values = [o1_lower_bound(t, s, beta=b).lower_bound for b in (1e-4, 0.01, 0.05, 0.3)]
    assert all(a < b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize(
    ("scores", "labels", "beta", "message"),
    [
        ([], [], 0.05, "empty"),
        ([0.1, 0.2], [1, 1], 0.05, "no non-members"),
        ([0.1, float("nan")], [0, 1], 0.05, "NaN"),
        ([0.1, 0.2], [0, 1], 1.0, "beta"),
    ],
)
def test_errors(scores: list, labels: list, beta: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        o1_lower_bound(scores, labels, beta=beta)
