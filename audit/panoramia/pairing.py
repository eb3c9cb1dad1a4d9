"""Label-paired non-members: slot ``i`` of the game pairs member ``i`` with an alternative of
the same label.

With ``pairing = "label"`` the generator's closeness only has to hold per label,
``P_D(x | y) <= e^c P_G(x | y)`` (and the mirror with c'): the coins are independent of
everything and the slots are independent given the labels, so the game's propositions hold
conditionally on ``(y_1, ..., y_m)`` (docs/two_sided_game.md). The label then carries no
signal that b lacks and the MIA has, whatever the site's label mix and however few records
D_G has to estimate it.

A source that can condition on a label implements ``sample_labels``; any other labeled
source is sampled in batches and its records sorted into the slots by label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from panoramia_fl.audit.panoramia.components import Generator, Records

Pairing = Literal["label", "none"]

REJECTION_ROUNDS = 20
"""Batches a source without conditional sampling may draw before slots are given up."""


@dataclass(frozen=True)
class PairedDraw:
    """Alternatives for the slots that got one, and which slots those are."""

    records: Records
    """One record per kept slot, in slot order; ``records.y`` equals the slots' labels."""
    kept: np.ndarray
    """Indices of the slots (into the labels asked for) that got an alternative."""


def sample_paired(generator: Generator, labels: np.ndarray, *, seed: int) -> PairedDraw:
    """An alternative of label ``labels[i]`` for every slot ``i`` the source can serve.

    Slots a source cannot serve (a finite pool out of that label, a generator that never
    produces it) are dropped; the caller drops their members too and reports the count.
    """
    labels = np.asarray(labels, dtype=np.int64)
    conditional = getattr(generator, "sample_labels", None)
    if conditional is not None:
        draw: PairedDraw = conditional(labels, seed=seed)
        return draw
    return _by_rejection(generator, labels, seed=seed)


def _by_rejection(generator: Generator, labels: np.ndarray, *, seed: int) -> PairedDraw:
    """Draw batches and hand each slot the next drawn record of its label."""
    need = {int(c): np.flatnonzero(labels == c) for c in np.unique(labels)}
    got: dict[int, list[Records]] = {c: [] for c in need}
    have = dict.fromkeys(need, 0)
    for r in range(REJECTION_ROUNDS):
        short = sum(max(0, len(need[c]) - have[c]) for c in need)
        if short == 0:
            break
        batch = generator.sample(max(64, 2 * short), seed=seed + 7919 * r)
        if batch.y is None:
            raise ValueError(
                f"audit.settings.pairing='label': generator {generator.kind!r} draws records "
                "without labels; set pairing: none"
            )
        for c in need:
            idx = np.flatnonzero(batch.y == c)[: max(0, len(need[c]) - have[c])]
            if idx.size:
                got[c].append(batch.take(idx))
                have[c] += idx.size
    slots = np.concatenate([need[c][: have[c]] for c in need]).astype(np.int64)
    parts = [r for c in need for r in got[c]]
    order = np.argsort(slots, kind="stable")
    if not parts:
        raise ValueError(
            f"audit.settings.pairing='label': generator {generator.kind!r} drew no record "
            "of any member's label"
        )
    x = np.concatenate([p.x for p in parts])[order]
    y = np.concatenate([p.y for p in parts if p.y is not None])[order]
    return PairedDraw(Records(x, y), slots[order])


def pair_members(
    generator: Generator, members: Records, *, seed: int
) -> tuple[Records, Records, int]:
    """``(members kept, their alternatives, members dropped)``: row ``i`` of the two record
    sets is slot ``i``, the member and a non-member alternative of the same label."""
    if members.y is None:
        raise ValueError("audit.settings.pairing='label' needs labeled members")
    draw = sample_paired(generator, members.y, seed=seed)
    kept = members.take(draw.kept)
    if draw.records.y is None or kept.y is None or not np.array_equal(draw.records.y, kept.y):
        raise RuntimeError(f"generator {generator.kind!r} returned records of other labels")
    return kept, draw.records, len(members) - len(kept)
