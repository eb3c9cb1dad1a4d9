"""Attribute inference as a membership game on real records, and its eps lower bound.

Which game. Each repeat pairs members with real held-out records of the same label (the
two-sided game's label pairing, :mod:`audit.panoramia.pairing`) and a fair coin per slot
shows one of the two (:func:`audit.panoramia.game.draw_game`). The guess of membership is
the attack's *lift*: how much more the model-based guess believes the record's true value
of the sensitive field than the baseline, which never sees the model, does
(:attr:`~audit.tabular.attribute_attack.Guesses.lift`). Both guesses are trained on records
that never play, so the lift is a fixed function of the shown record and the model; the
non-members are real records of the members' distribution (c = 0, as for RM;RN), so the
Clopper-Pearson bound of :func:`audit.stats.bounds.lower_bound` on its precision is a lower
bound on the model's epsilon. Both sides are read ("member" guesses on a high lift,
"non-member" guesses on a low one, :mod:`audit.panoramia.sides`), each at beta/2, and the
larger is the bound.

Why the lift and not "is the guess right": the right/wrong bit has two levels, and most
records are guessed the same with and without the model; the lift ranks the records whose
true value the model singles out, which is what a model that fitted its members shows. The
accuracies (and their advantage on members, Yeom et al.'s attribute advantage) are
reported beside it for the reader, over the same pairs.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.panoramia.game import ATTRIBUTE_STREAM, draw_game
from panoramia_fl.audit.panoramia.pairing import pair_members
from panoramia_fl.audit.panoramia.reference_pool import ReferencePoolGenerator
from panoramia_fl.audit.panoramia.sides import SIDES, break_ties, oriented
from panoramia_fl.audit.panoramia.splits import cut_at, shuffled_groups
from panoramia_fl.audit.panoramia.task import AuditTask
from panoramia_fl.audit.result import Interval
from panoramia_fl.audit.stats import bounds
from panoramia_fl.audit.tabular.attribute_attack import (
    Guessers,
    Guesses,
    SensitiveField,
    sensitive_attribute,
)
from panoramia_fl.audit.tabular.attribute_result import (
    AttributeInferenceConfig,
    AttributeInferenceResult,
)

SIDE_SHARES = 2
"""The two sides share beta: beta/2 each."""


def _split_holdout(nonmembers: Records, fraction: float, seed: int) -> tuple[Records, Records]:
    """``(reference, players)``: a share of the held-out records trains the guesses, the
    rest play (whole groups kept on one side)."""
    order, allowed = shuffled_groups(
        len(nonmembers), nonmembers.groups, np.random.default_rng([seed, 0xA7])
    )
    ref, players = cut_at(order, allowed, [int(round(fraction * len(nonmembers)))])
    return nonmembers.take(ref), nonmembers.take(players)


def _pairs(
    members: Records, nonmembers: Records, num_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(members, non-members)`` of one repeat's slots: each member paired with an
    unused held-out record of its label (slots without one are dropped)."""
    # The pairing reads labels only: index records stand in for the rows.
    pool = Records(np.arange(len(nonmembers))[:, None], nonmembers.y)
    source = ReferencePoolGenerator(pool, resample_labels=False, num_classes=num_classes)
    source.fit(Records(pool.x[:0], None), seed=seed)
    index = Records(np.arange(len(members))[:, None], members.y)
    kept, alternatives, _ = pair_members(source, index, seed=seed)
    return kept.x[:, 0], alternatives.x[:, 0]


def _repeat_seed(seed: int, r: int) -> int:
    return int(np.random.SeedSequence([seed, r, 0xA1]).generate_state(1)[0])


def play(
    guesses_members: Guesses,
    guesses_nonmembers: Guesses,
    members: Records,
    nonmembers: Records,
    *,
    num_classes: int,
    repeats: int,
    beta: float,
    seed: int,
) -> dict[str, list[float]]:
    """Every repeat's bound per side and accuracies (see the module docstring)."""
    lift_m, lift_n = guesses_members.lift, guesses_nonmembers.lift
    out: dict[str, list[float]] = {}

    def keep(name: str, value: float) -> None:
        out.setdefault(name, []).append(float(value))

    for r in range(repeats):
        rseed = _repeat_seed(seed, r)
        mi, ni = _pairs(members, nonmembers, num_classes, rseed)
        if len(mi) < 2:
            raise ValueError(
                f"attribute inference: {len(mi)} members found a held-out record of their "
                "label; the game needs at least 2 pairs"
            )
        game = draw_game(len(mi), seed=rseed, stream=ATTRIBUTE_STREAM)
        shown = break_ties(game.pick(lift_m[mi], lift_n[ni]), seed=rseed)
        sides = {}
        for side in SIDES:
            t, s = oriented(shown, game.membership, side)
            sides[side] = max(0.0, bounds.lower_bound(t, s, beta=beta / SIDE_SHARES).lower_bound)
            keep(f"eps_lb_{side}", sides[side])
        keep("eps_lb", max(sides.values()))
        keep("ceiling", bounds.ceiling(game.membership, beta=beta / SIDE_SHARES))
        keep("pairs", len(mi))
        for prefix, which in (("", "attack"), ("baseline_", "baseline")):
            on_m = guesses_members.correct(getattr(guesses_members, which))[mi].mean()
            on_n = guesses_nonmembers.correct(getattr(guesses_nonmembers, which))[ni].mean()
            keep(f"{prefix}accuracy_members", on_m)
            keep(f"{prefix}accuracy_nonmembers", on_n)
            keep(f"{prefix}advantage", on_m - on_n)
    return out


def attribute_inference_audit(
    task: AuditTask,
    model: torch.nn.Module,
    members: Records,
    nonmembers: Records,
    *,
    config: AttributeInferenceConfig,
    schema: dict | None,
    public: Records | None = None,
    beta: float,
    seed: int,
    device: torch.device,
) -> AttributeInferenceResult:
    """Attribute inference on ``model``'s ``members`` against real held-out ``nonmembers``.

    The guesses train on ``public`` records when given, else on a share
    (``config.reference_fraction``) of ``nonmembers``, which then do not play. Raises
    :class:`~audit.tabular.attribute_attack.UnknownFieldError` (naming the key and listing
    the fields) when ``config.field`` is not a field of the records.
    """
    began = time.perf_counter()
    attribute = sensitive_attribute(config.field, schema, members.x, modality=str(task.modality))
    if public is not None and len(public) > 0:
        reference, players, where = public, nonmembers, "public"
    else:
        reference, players = _split_holdout(nonmembers, config.reference_fraction, seed)
        where = "holdout"
    field = SensitiveField.fit(attribute, reference.x, bins=config.bins)
    model.eval()
    guessers = Guessers.fit(field, reference, num_classes=task.num_classes, seed=seed)
    g_m = guessers.guess(task, model, members, device=device)
    g_n = guessers.guess(task, model, players, device=device)
    played = play(
        g_m,
        g_n,
        members,
        players,
        num_classes=task.num_classes,
        repeats=config.repeats,
        beta=beta,
        seed=seed,
    )
    ref_codes = field.codes(reference.x)

    def over(name: str) -> Interval:
        return Interval.of(played[name])

    return AttributeInferenceResult(
        field=config.field,
        levels=field.levels,
        n_members=len(members),
        n_nonmembers=len(players),
        n_reference=len(reference),
        reference=where,
        pairs=int(round(float(np.mean(played["pairs"])))),
        beta=beta,
        eps_lb=over("eps_lb"),
        eps_lb_member=over("eps_lb_member"),
        eps_lb_nonmember=over("eps_lb_nonmember"),
        ceiling=float(np.mean(played["ceiling"])),
        accuracy_members=over("accuracy_members"),
        accuracy_nonmembers=over("accuracy_nonmembers"),
        advantage=over("advantage"),
        baseline_accuracy_members=over("baseline_accuracy_members"),
        baseline_accuracy_nonmembers=over("baseline_accuracy_nonmembers"),
        baseline_advantage=over("baseline_advantage"),
        majority_share=float(np.bincount(ref_codes).max() / len(ref_codes)),
        seconds=time.perf_counter() - began,
    )
