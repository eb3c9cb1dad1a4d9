"""Cutting the member set D_f into D_G, D_in^tr, D_in^val and D_in^te (Algorithm 1, step 1).

Sizes are fractions of the set (``0 < v < 1``) or record counts (``v >= 1``). D_G is drawn
once; the rest (D_in) is re-cut into train / validation / test for every repeat, and the test
split takes everything the other splits leave, so the game's ``m`` is as large as the member
set allows. Everything is deterministic from the seed.

With ``groups`` (records of one unit, e.g. the chunks of one document) a group never spans two
splits: correlated records on both sides of the train / test cut would let b and the MIA
recognise a test record's document from its training neighbours, a membership signal that
does not come from the model (measured on text: RM;RN 0.3-0.8 against an untrained model).
Cuts then fall on the group boundary nearest to the requested size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.config import SplitConfig


class SplitError(ValueError):
    """A split would be empty or the splits do not fit the member set."""


@dataclass(frozen=True)
class SplitSizes:
    """Record counts of the four member splits (``test`` = m, the game's slots)."""

    total: int
    generator: int
    train: int
    val: int
    test: int

    def describe(self) -> str:
        return (
            f"members={self.total}: generator={self.generator}, train={self.train}, "
            f"val={self.val}, test={self.test}"
        )


@dataclass(frozen=True)
class MemberSplits:
    """Disjoint index arrays into the member set."""

    generator: np.ndarray
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    @property
    def sizes(self) -> SplitSizes:
        n = sum(len(a) for a in (self.generator, self.train, self.val, self.test))
        return SplitSizes(n, len(self.generator), len(self.train), len(self.val), len(self.test))


def resolve_count(value: float, total: int, *, name: str) -> int:
    """A split size as a record count: fractions are rounded down, counts taken as they are."""
    if value <= 0:
        raise SplitError(f"splits.{name} must be positive, got {value!r}")
    if value < 1:
        return int(math.floor(value * total))
    if value != int(value):
        raise SplitError(
            f"splits.{name}={value!r}: a count must be a whole number (fractions are < 1)"
        )
    return int(value)


def split_sizes(total: int, spec: SplitConfig) -> SplitSizes:
    """Resolve ``spec`` against a member set of ``total`` records.

    Raises
    ------
    SplitError
        If any split (test included) would be empty or the requested splits exceed the set;
        the message names the split and all sizes.
    """
    g = resolve_count(0.3 if spec.generator is None else spec.generator, total, name="generator")
    tr = resolve_count(spec.train, total, name="train")
    va = resolve_count(spec.val, total, name="val")
    test = total - g - tr - va
    sizes = SplitSizes(total, g, tr, va, max(test, 0))
    for name, size in (("generator", g), ("train", tr), ("val", va)):
        if size < 1:
            raise SplitError(
                f"splits.{name} would be empty ({sizes.describe()}); give it a larger "
                "fraction or a record count"
            )
    if test < 1:
        raise SplitError(
            f"splits: the test split (the game's m) would be empty: {total} members but "
            f"generator={g} + train={tr} + val={va} = {g + tr + va}; shrink the other splits"
        )
    return sizes


def shuffled_groups(
    n: int, groups: np.ndarray | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A random order of ``range(n)`` that keeps each group contiguous, and the positions
    where a cut may fall (every position without groups)."""
    if groups is not None and len(groups) != n:
        raise SplitError(f"groups: {len(groups)} group ids for {n} records")
    if groups is None or len(np.unique(groups)) == n:  # every record its own unit
        return rng.permutation(n), np.arange(n + 1)
    _, inverse = np.unique(groups, return_inverse=True)
    rank = rng.permutation(int(inverse.max()) + 1)[inverse]
    order = np.lexsort((rng.random(n), rank))
    starts = np.flatnonzero(np.diff(rank[order])) + 1
    return order, np.concatenate([[0], starts, [n]])


def cut_at(order: np.ndarray, boundaries: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """Cut ``order`` into ``len(sizes)`` consecutive parts plus the rest, each cut on the
    allowed boundary nearest to the running total (and after the previous cut)."""
    parts, start = [], 0
    for size, want in zip(sizes, np.cumsum(sizes), strict=True):
        if size == 0:  # an unused split (a score-only attack trains nothing)
            parts.append(order[start:start])
            continue
        allowed = boundaries[boundaries > start]
        end = int(allowed[np.argmin(np.abs(allowed - want))]) if allowed.size else start
        parts.append(order[start:end])
        start = end
    return parts + [order[start:]]


def split_members(
    total: int, spec: SplitConfig, *, seed: int, groups: np.ndarray | None = None
) -> MemberSplits:
    """Disjoint random splits of ``range(total)``; the test split gets the rest."""
    sizes = split_sizes(total, spec)
    order, bounds = shuffled_groups(total, groups, np.random.default_rng([seed, 0x5EED]))
    g, tr, va, te = cut_at(order, bounds, [sizes.generator, sizes.train, sizes.val])
    cut = MemberSplits(generator=np.sort(g), train=tr, val=va, test=te)
    _check_grouped(cut, requested=sizes)
    return cut


def resplit(
    indices: np.ndarray, train: int, val: int, *, seed: int, groups: np.ndarray | None = None
) -> MemberSplits:
    """Re-cut ``indices`` (D_in; ``groups`` per index) into train / val / test for one
    repeat (no generator part); ``train`` or ``val`` may be 0 (a score-only attack)."""
    n = len(indices)
    if train + val >= n:
        raise SplitError(
            f"splits: cannot cut {n} records into train={train}, val={val} and a non-empty test"
        )
    order, bounds = shuffled_groups(n, groups, np.random.default_rng([seed, 0xA11]))
    tr, va, te = cut_at(np.asarray(indices)[order], bounds, [train, val])
    cut = MemberSplits(generator=np.zeros(0, dtype=np.int64), train=tr, val=va, test=te)
    _check_grouped(cut, requested=SplitSizes(n, 0, train, val, n - train - val))
    return cut


def _check_grouped(cut: MemberSplits, *, requested: SplitSizes) -> None:
    """Group-snapped cuts can empty a split when groups are large; say so with the sizes."""
    got = cut.sizes
    names = ("generator", "train", "val", "test")
    for name in (n for n in names if getattr(requested, n)):
        if getattr(got, name) < 1:
            raise SplitError(
                f"splits.{name} is empty after keeping groups (documents) whole: requested "
                f"{requested.describe()}, got {got.describe()}; the member set has too few "
                "groups for these splits"
            )
