"""Comparisons that need real non-members (simulation only): RM;RN and O(1).

RM;RN runs the MIA pipeline with real held-out non-members instead of generated ones
(c = 0, so its bound is an eps lower bound), on both sides. O(1) is the loss-threshold audit
of Steinke et al. (2023) with abstention: each slot shows a real member or a real
non-member by a fair coin, as the privacy game does. The same guesses also give O(1)'s f-DP
(Gaussian) bound at ``config.delta`` (:mod:`audit.stats.one_run`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.audit_sets import FeatureSet, classifier_data, game_data
from panoramia_fl.audit.panoramia.calibration import log_likelihood
from panoramia_fl.audit.panoramia.components import AuditContext, make_classifier
from panoramia_fl.audit.panoramia.game import O1_STREAM, RM_RN_STREAM, draw_game
from panoramia_fl.audit.panoramia.score_attack import Candidates
from panoramia_fl.audit.panoramia.sides import SIDES, BoundRule, Scored, Side, break_ties
from panoramia_fl.audit.panoramia.splits import MemberSplits, cut_at, shuffled_groups
from panoramia_fl.audit.result import RocSummary
from panoramia_fl.audit.stats.o1 import o1_lower_bound
from panoramia_fl.audit.stats.one_run import one_run_bound
from panoramia_fl.audit.stats.roc import roc_summary


def clip(v: float) -> float:
    """c and eps are non-negative: a negative raw bound rejects nothing."""
    return max(0.0, float(v))


@dataclass(frozen=True)
class RmRnOutcome:
    """RM;RN in one repeat."""

    eps_lb: float
    """Member side at the paper's level (as the one-sided game)."""
    ceiling: float
    side_eps_lb: dict[Side, float]
    """Each side at the two-sided game's level."""
    side_ceiling: dict[Side, float]
    roc: RocSummary
    sizes: dict[str, int]


def _proportional(n: int, parts: list[int]) -> list[int]:
    """Cut ``n`` records in the proportions of ``parts`` (the last part takes the rest)."""
    total = sum(parts)
    out = [int(math.floor(n * p / total)) for p in parts[:-1]]
    return out + [n - sum(out)]


def _cut_nonmembers(
    nonmembers: FeatureSet, ins: MemberSplits, rseed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Real non-members cut in the proportions of the member splits, groups kept whole; a
    split the members do not have (a score-only attack trains nothing) stays empty."""
    n_non = len(nonmembers)
    member_sizes = (len(ins.train), len(ins.val), len(ins.test))
    cuts = iter(_proportional(n_non, [k for k in member_sizes if k > 0]))
    k_tr, k_val, k_te = (min(next(cuts), k) if k > 0 else 0 for k in member_sizes)

    def too_few(tr: int, va: int, te: int) -> bool:
        return (member_sizes[0] > 0 and tr < 1) or (member_sizes[1] > 0 and va < 1) or te < 2

    if too_few(k_tr, k_val, k_te):
        raise ValueError(
            f"nonmembers: {n_non} real non-members are too few for RM;RN (cut into "
            f"train={k_tr}, val={k_val}, test={k_te}; need >= 1 in each split the members "
            "use and >= 2 in test)"
        )
    order, allowed = shuffled_groups(
        n_non, nonmembers.records.groups, np.random.default_rng([rseed, 0x4E4E])
    )
    n_tr, n_va, n_te, _ = cut_at(order, allowed, [k_tr, k_val, k_te])
    if too_few(len(n_tr), len(n_va), len(n_te)):
        raise ValueError(
            f"nonmembers: {n_non} real non-members in {len(allowed) - 1} groups are too few "
            "for RM;RN once each group (document) is kept whole"
        )
    return n_tr[:k_tr], n_va[:k_val], n_te[:k_te]


def rm_rn(
    config: AuditConfig,
    context: AuditContext,
    members: FeatureSet,
    nonmembers: FeatureSet,
    ins: MemberSplits,
    *,
    rseed: int,
    paper: BoundRule,
    two_sided: BoundRule,
) -> RmRnOutcome:
    """The MIA pipeline with real non-members; each split pairs as many members as it has
    non-members, so both classes stay balanced. The member side is selected and bounded as
    the paper's game, the non-member side as the two-sided game's."""
    n_tr, n_va, n_te = _cut_nonmembers(nonmembers, ins, rseed)
    game = draw_game(len(n_te), seed=rseed, stream=RM_RN_STREAM)
    s = game.membership
    mem_te, non_te = members.take(ins.test[: len(n_te)]), nonmembers.take(n_te)
    mem_va, non_va = members.take(ins.val[: len(n_va)]), nonmembers.take(n_va)
    scored: dict[Side, Scored] = {}
    if config.classifier.design == "score":
        cands = Candidates.of(game, mem_te, non_te, mem_va, non_va, view="f", seed=rseed)
        for side, rule in zip(SIDES, (paper, two_sided), strict=True):
            scored[side] = cands.choose(s, side, rule)[1]
    else:
        reference = config.classifier.helper_reference
        train = classifier_data(
            members.take(ins.train[: len(n_tr)]),
            nonmembers.take(n_tr),
            view="f",
            reference=reference,
        )
        val = classifier_data(mem_va, non_va, view="f", reference=reference)
        test = game_data(game, mem_te, non_te, view="f", reference=reference)
        for side, rule in zip(SIDES, (paper, two_sided), strict=True):
            clf = make_classifier(config, context)
            clf.fit(train, val, select_by=rule.selection_score(side), seed=rseed)
            scored[side] = Scored(
                break_ties(clf.score(test), seed=rseed),
                break_ties(clf.score(val), seed=rseed),
                val.membership,
            )
    return RmRnOutcome(
        eps_lb=clip(paper.bound(scored["member"], s, "member").lower_bound),
        ceiling=paper.ceiling(s, "member"),
        side_eps_lb={
            side: clip(two_sided.bound(scored[side], s, side).lower_bound) for side in SIDES
        },
        side_ceiling={side: two_sided.ceiling(s, side) for side in SIDES},
        roc=roc_summary(scored["member"].scores, s),
        sizes={"rm_rn_train": len(n_tr), "rm_rn_val": len(n_va), "rm_rn_m": len(n_te)},
    )


@dataclass(frozen=True)
class O1Outcome:
    """O(1) in one repeat: Steinke et al.'s bound and the f-DP one on the same guesses."""

    eps_lb: float
    eps_lb_fdp: float
    fdp_mu: float


def o1_eps_lb(
    members: FeatureSet, nonmembers: FeatureSet, *, beta: float, delta: float, rseed: int
) -> O1Outcome:
    """O(1) with abstention on f's log-likelihood; slot ``i`` shows member ``i`` or
    non-member ``i`` by an independent fair coin (Steinke et al.'s inclusion coins). Both
    bounds search the same threshold pairs with the union bound inside (level ``beta``)."""
    k = min(len(members), len(nonmembers))
    rng = np.random.default_rng([rseed, 0x01])
    pm, pn = rng.permutation(len(members))[:k], rng.permutation(len(nonmembers))[:k]

    def log_p(side: FeatureSet, idx: np.ndarray) -> np.ndarray:
        y = side.records.y
        return log_likelihood(side.f[idx], None if y is None else y[idx])

    game = draw_game(k, seed=rseed, stream=O1_STREAM)
    scores = game.pick(log_p(members, pm), log_p(nonmembers, pn))
    fdp = one_run_bound(scores, game.membership, method="fdp", beta=beta, delta=delta)
    return O1Outcome(
        eps_lb=clip(o1_lower_bound(scores, game.membership, beta=beta).lower_bound),
        eps_lb_fdp=fdp.eps_lb,
        fdp_mu=float(fdp.mu or 0.0),
    )
