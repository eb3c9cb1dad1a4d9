"""The two-sided game's statistics: side orientation, split threshold selection, coin
streams, O(1)'s coins and the ROC summaries (no training: fast)."""

from __future__ import annotations

import numpy as np
import pytest

from panoramia_fl.audit.panoramia.game import GAME_STREAM, O1_STREAM, RM_RN_STREAM, draw_game
from panoramia_fl.audit.panoramia.sides import SIDES, BoundRule, Scored, break_ties, oriented
from panoramia_fl.audit.stats import bounds
from panoramia_fl.audit.stats.roc import LOW_FPRS, mean_roc, roc_summary


def _scores(seed: int, m: int = 400, shift: float = 0.0):
    rng = np.random.default_rng(seed)
    s = draw_game(m, seed=seed).membership
    return rng.normal(size=m) + shift * s, s


def test_nonmember_side_is_the_member_side_on_flipped_data() -> None:
    t, s = _scores(0, shift=1.0)
    rule = BoundRule(0.0125)
    scored = Scored(t, t, s)
    flipped = Scored(-t, -t, 1 - s)
    assert rule.bound(scored, s, "nonmember") == rule.bound(flipped, 1 - s, "member")
    assert rule.ceiling(s, "nonmember") == rule.ceiling(1 - s, "member")
    with pytest.raises(ValueError, match="side must be"):
        oriented(t, s, "both")  # type: ignore[arg-type]  # a bad side on purpose


def test_low_scores_all_nonmembers_show_on_the_nonmember_side_only() -> None:
    rng = np.random.default_rng(1)
    s = draw_game(600, seed=1).membership
    t = rng.normal(size=600)
    low = np.flatnonzero(s == 0)[:120]
    t[low] = -10 - rng.random(120)  # the 120 lowest scores are all non-members
    rule = BoundRule(0.0125)
    scored = Scored(t, t, s)
    assert rule.bound(scored, s, "nonmember").lower_bound > 1.5
    assert rule.bound(scored, s, "member").lower_bound < 0.3


@pytest.mark.parametrize("shift", [0.0, 1.5])
def test_split_selection_is_one_test_at_the_validation_cut(shift: float) -> None:
    t_val, s_val = _scores(2, m=300, shift=shift)
    t, s = _scores(3, m=600, shift=shift)
    got = bounds.split_lower_bound(t_val, s_val, t, s, beta=0.0125)
    # One Clopper-Pearson test at the cut's counts, no union over thresholds.
    p = bounds.clopper_pearson_lower(got.true_positives, got.predictions, 0.0125)
    assert got.lower_bound == pytest.approx(bounds.logit(p))
    assert got.lower_bound <= bounds.split_ceiling(s, beta=0.0125) + 1e-12
    # The cut takes the same share of records on the audit set as chosen on validation.
    assert 1 <= got.predictions <= len(t)
    perfect = np.where(s == 1, 10.0, 0.0) + np.arange(len(s)) * 1e-6
    perfect_val = np.where(s_val == 1, 10.0, 0.0) + np.arange(len(s_val)) * 1e-6
    best = bounds.split_lower_bound(perfect_val, s_val, perfect, s, beta=0.0125)
    # The validation cut's share transfers, not the audit set's own member count.
    assert best.recall == 1.0 and best.lower_bound > 1.5


def test_split_selection_holds_its_level_under_the_null() -> None:
    """Scores independent of membership: the split bound exceeds 0 in at most ~beta of
    games (one exact test per game)."""
    beta, games = 0.1, 400
    positive = 0
    for g in range(games):
        t_val, s_val = _scores(10_000 + g, m=200)
        t, s = _scores(20_000 + g, m=200)
        positive += bounds.split_lower_bound(t_val, s_val, t, s, beta=beta).lower_bound > 0
    assert positive / games <= beta + 3 * np.sqrt(beta * (1 - beta) / games)


def test_coin_streams_are_independent_across_games_and_repeats() -> None:
    """RM;RN's coins are no prefix of the next repeat's game coins (they used to be)."""
    rseed = 7 * 1009
    game_next = draw_game(500, seed=rseed + 1).membership
    for stream in (RM_RN_STREAM, O1_STREAM):
        coins = draw_game(300, seed=rseed, stream=stream).membership
        assert not np.array_equal(coins, game_next[:300])
        assert not np.array_equal(coins, draw_game(300, seed=rseed).membership)
    # The paper's game keeps its historical coins.
    assert np.array_equal(
        draw_game(50, seed=3, stream=GAME_STREAM).membership, draw_game(50, seed=3).membership
    )


def test_break_ties_keeps_sides_distinct() -> None:
    t = np.repeat([0.0, 1.0, 2.0], 50)
    out = break_ties(t, seed=0)
    assert np.unique(out).size == t.size and np.unique(-out).size == t.size
    assert (np.argsort(out, kind="stable")[:50] < 50).all()


def test_roc_summary_reads_low_fpr_and_averages_on_one_grid() -> None:
    s = np.r_[np.ones(1000), np.zeros(1000)].astype(np.int64)
    t = np.r_[np.linspace(1, 2, 1000), np.linspace(0, 1.5, 1000)]  # top half: members only
    roc = roc_summary(t, s)
    assert set(roc.tpr_at_fpr) == {f"{x:g}" for x in LOW_FPRS}
    assert roc.tpr_at_fpr["0.001"] >= 1 / 3  # members above 1.5 come before any non-member
    assert roc.fpr[0] == pytest.approx(1e-3) and roc.fpr[-1] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(roc.tpr, roc.tpr[1:], strict=False))
    flipped = roc_summary(-t, s)
    both = mean_roc([roc, flipped])
    assert both.auc == pytest.approx((roc.auc + flipped.auc) / 2)


def test_sides_cover_both_guess_kinds() -> None:
    assert SIDES == ("member", "nonmember")
