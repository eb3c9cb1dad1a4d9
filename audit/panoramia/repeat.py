"""One repeat of Algorithm 1's second phase: fresh b / MIA splits, a fresh game, both games.

The paper's one-sided game is computed exactly as the paper states it (member guesses only,
b and the MIA selected on validation by the member-side bound, each bound at the one-sided
level); the two-sided game (:mod:`audit.panoramia.two_sided`) adds the non-member side. The game's
test split only ever reaches ``score`` (never ``fit``), and only after selection. A repeat's
steps: :func:`_cut`, :func:`_score`, :func:`_comparisons`, then the bounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.audit_sets import FeatureSet, View, classifier_data, game_data
from panoramia_fl.audit.panoramia.class_slices import class_slices
from panoramia_fl.audit.panoramia.comparisons import O1Outcome, RmRnOutcome, o1_eps_lb, rm_rn
from panoramia_fl.audit.panoramia.components import AuditContext, ClassifierData, make_classifier
from panoramia_fl.audit.panoramia.game import PrivacyGame, draw_game
from panoramia_fl.audit.panoramia.score_attack import Candidates, candidate_count
from panoramia_fl.audit.panoramia.sides import SIDES, BoundRule, Scored, Side, break_ties
from panoramia_fl.audit.panoramia.splits import MemberSplits, resplit
from panoramia_fl.audit.panoramia.timing import StageTimer
from panoramia_fl.audit.panoramia.two_sided import ScoredGame, side_repeat, two_sided_repeat
from panoramia_fl.audit.result import RepeatResult
from panoramia_fl.audit.stats import bounds
from panoramia_fl.audit.stats.roc import roc_summary

RECALL_GRID = [round(0.05 * k, 2) for k in range(1, 21)]
"""Recall levels of the reported precision / bound curves."""

CLASSIFIERS: tuple[tuple[str, View], ...] = (("baseline", "h"), ("mia", "f"))


@dataclass(frozen=True)
class BoundRules:
    """The paper's one-sided game (beta/2 per bound, union over thresholds) and the
    two-sided game (beta/4 per bound, the configured threshold selection)."""

    paper: BoundRule
    two_sided: BoundRule

    @classmethod
    def of(cls, config: AuditConfig, *, candidates: int = 1) -> BoundRules:
        """``candidates``: score vectors each bound chooses among on the game itself (a
        score-only attack's statistics); a union bound divides the level among them."""
        two_sided_k = candidates if config.threshold_selection == "union" else 1
        grid, spacing = config.threshold_grid, config.threshold_spacing
        return cls(
            paper=BoundRule(config.one_sided_level / candidates, "union", grid, spacing),
            two_sided=BoundRule(
                config.two_sided_level / two_sided_k, config.threshold_selection, grid, spacing
            ),
        )

    def for_side(self, side: Side) -> BoundRule:
        """The rule that selects a side's classifiers (member side: the paper's)."""
        return self.paper if side == "member" else self.two_sided


@dataclass(frozen=True)
class RepeatInputs:
    """What every repeat shares: settings and the featurised members and non-members."""

    config: AuditConfig
    context: AuditContext
    members: FeatureSet
    generated: FeatureSet
    nonmembers: FeatureSet | None
    n_train: int
    n_val: int
    paired: bool = False
    """``generated[i]`` is member ``i``'s same-label alternative: both are cut alike."""

    @property
    def score_only(self) -> bool:
        return self.config.classifier.design == "score"

    def rules(self) -> BoundRules:
        k = candidate_count(self.members) if self.score_only else 1
        return BoundRules.of(self.config, candidates=k)


def _fit_and_score(
    inputs: RepeatInputs,
    train: ClassifierData,
    val: ClassifierData,
    test: ClassifierData,
    *,
    rule: BoundRule,
    side: Side,
    seed: int,
) -> tuple[Scored, dict[str, object]]:
    clf = make_classifier(inputs.config, inputs.context)
    choice = clf.fit(train, val, select_by=rule.selection_score(side), seed=seed)
    scored = Scored(
        break_ties(clf.score(test), seed=seed),
        break_ties(clf.score(val), seed=seed),
        val.membership,
    )
    return scored, choice


SideScorer = Callable[[Side, BoundRule], tuple[Scored, dict[str, object]]]
"""Scores the game for one side under that side's rule; returns the scores and the choice."""


def _side_scorer(
    inputs: RepeatInputs,
    game: PrivacyGame,
    ins: MemberSplits,
    outs: MemberSplits,
    *,
    view: View,
    seed: int,
) -> SideScorer:
    """b (``view="h"``) or the MIA (``"f"``): a score-only attack picks one of its
    statistics per side, a trained design fits and selects a classifier per side."""
    mem, gen = inputs.members, inputs.generated
    mem_te, gen_te = mem.take(ins.test[: game.m]), gen.take(outs.test[: game.m])
    if inputs.score_only:
        cands = Candidates.of(
            game, mem_te, gen_te, mem.take(ins.val), gen.take(outs.val), view=view, seed=seed
        )

        def pick(side: Side, rule: BoundRule) -> tuple[Scored, dict[str, object]]:
            statistic, scored = cands.choose(game.membership, side, rule)
            return scored, {"design": "score", "statistic": statistic}

        return pick
    ref = inputs.config.classifier.helper_reference and view == "f"
    train = classifier_data(mem.take(ins.train), gen.take(outs.train), view=view, reference=ref)
    val = classifier_data(mem.take(ins.val), gen.take(outs.val), view=view, reference=ref)
    test = game_data(game, mem_te, gen_te, view=view, reference=ref)

    def fit(side: Side, rule: BoundRule) -> tuple[Scored, dict[str, object]]:
        return _fit_and_score(inputs, train, val, test, rule=rule, side=side, seed=seed)

    return fit


@dataclass(frozen=True)
class RepeatGame:
    """Repeat ``r``'s cut: its seed, the fresh b / MIA splits of members and generated
    records, and the game drawn on their test splits."""

    seed: int
    ins: MemberSplits
    outs: MemberSplits
    game: PrivacyGame


def _cut(inputs: RepeatInputs, r: int) -> RepeatGame:
    """Re-split D_in / D_out (paired records are cut alike) and draw the game."""
    rseed = inputs.config.seed * 1009 + r
    mem, gen = inputs.members, inputs.generated
    ins = resplit(
        np.arange(len(mem)), inputs.n_train, inputs.n_val, seed=rseed, groups=mem.records.groups
    )
    outs = (
        ins
        if inputs.paired
        else resplit(
            np.arange(len(gen)),
            inputs.n_train,
            inputs.n_val,
            seed=rseed + 7_000_003,
            groups=gen.records.groups,
        )
    )
    # Group-snapped cuts can leave the two test splits a few records apart.
    m = min(len(ins.test), len(outs.test))
    return RepeatGame(rseed, ins, outs, draw_game(m, seed=rseed))


def _score(
    inputs: RepeatInputs, cut: RepeatGame, rules: BoundRules, timer: StageTimer
) -> tuple[ScoredGame, dict[Side, dict[str, object]]]:
    """b's and the MIA's game scores for each side, and what each side selected."""
    scored: ScoredGame = {}
    selected: dict[Side, dict[str, object]] = {side: {} for side in SIDES}
    for name, view in CLASSIFIERS:
        with timer.stage(name):
            score_side = _side_scorer(inputs, cut.game, cut.ins, cut.outs, view=view, seed=cut.seed)
            for side in SIDES:
                scored[name, side], selected[side][name] = score_side(side, rules.for_side(side))
    return scored, selected


def _comparisons(
    inputs: RepeatInputs, cut: RepeatGame, rules: BoundRules, timer: StageTimer
) -> tuple[RmRnOutcome | None, O1Outcome | None]:
    """RM;RN and O(1) on the site's real non-members (None, None without them)."""
    if inputs.nonmembers is None:
        return None, None
    config = inputs.config
    with timer.stage("rm_rn"):
        comparison = rm_rn(
            config,
            inputs.context,
            inputs.members,
            inputs.nonmembers,
            cut.ins,
            rseed=cut.seed,
            paper=rules.paper,
            two_sided=rules.two_sided,
        )
    with timer.stage("o1"):
        o1 = o1_eps_lb(
            inputs.members.take(cut.ins.test),
            inputs.nonmembers,
            beta=config.beta,
            delta=config.delta,
            rseed=cut.seed,
        )
    return comparison, o1


def _kept_scores(scored: ScoredGame, membership: np.ndarray) -> dict[str, list[float]]:
    """The game's per-record scores (``return_scores``; they never leave the site)."""
    kept = {name: [float(v) for v in scored[name, "member"].scores] for name, _ in CLASSIFIERS}
    kept.update(
        {
            f"{name}_nonmember_side": [float(v) for v in scored[name, "nonmember"].scores]
            for name, _ in CLASSIFIERS
        }
    )
    kept["membership"] = [float(v) for v in membership]
    return kept


def play_repeat(
    inputs: RepeatInputs, r: int, timer: StageTimer
) -> tuple[RepeatResult, dict[str, int]]:
    """Repeat ``r``: re-split D_in / D_out, draw the game, train, select and score b and the
    MIA for each side, bound, and run the comparisons when real non-members exist.

    Returns the repeat and the comparison's split sizes (empty without non-members)."""
    config = inputs.config
    rules = inputs.rules()
    cut = _cut(inputs, r)
    s = cut.game.membership
    scored, selected = _score(inputs, cut, rules, timer)
    comparison, o1 = _comparisons(inputs, cut, rules, timer)

    paper_rm_rn = None if comparison is None else (comparison.eps_lb, comparison.ceiling)
    one_sided = side_repeat(scored, s, "member", rules.paper, paper_rm_rn)
    two_sided = two_sided_repeat(
        scored, s, rules.two_sided, comparison, selected=selected["nonmember"]
    )
    roc = {name: roc_summary(scored[name, "member"].scores, s) for name, _ in CLASSIFIERS}
    labels = inputs.members.records.y
    per_class = (
        class_slices(scored, s, labels[cut.ins.test[: cut.game.m]], rules.two_sided)
        if inputs.paired and labels is not None
        else []
    )
    if comparison is not None:
        roc["rm_rn"] = comparison.roc

    def curve(name: str):
        return bounds.bound_curve(
            scored[name, "member"].scores,
            s,
            beta=rules.paper.beta,
            recall_grid=RECALL_GRID,
            threshold_grid=config.threshold_grid,
            spacing=config.threshold_spacing,
        )

    result = RepeatResult(
        seed=cut.seed,
        m=cut.game.m,
        members_shown=cut.game.members_shown,
        one_sided=one_sided,
        baseline_curve=curve("baseline"),
        mia_curve=curve("mia"),
        baseline_auc=roc["baseline"].auc,
        mia_auc=roc["mia"].auc,
        o1_eps_lb=None if o1 is None else o1.eps_lb,
        o1_eps_lb_fdp=None if o1 is None else o1.eps_lb_fdp,
        o1_fdp_mu=None if o1 is None else o1.fdp_mu,
        selected=selected["member"],
        scores=_kept_scores(scored, s) if config.return_scores else None,
        two_sided=two_sided,
        roc=roc,
        per_class=per_class,
    )
    return result, ({} if comparison is None else comparison.sizes)
