"""Cutting the member set D_f into D_G, D_in^tr, D_in^val and D_in^te (Algorithm 1, step 1).

Sizes are fractions of the set (``0 < v < 1``) or record counts (``v >= 1``). D_G is drawn
once; the rest (D_in) is re-cut into train / validation / test for every repeat, and the test
split takes everything the other splits leave, so the game's ``m`` is as large as the member
set allows. Everything is deterministic from the seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from audit.config import SplitConfig


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


def split_members(total: int, spec: SplitConfig, *, seed: int) -> MemberSplits:
    """Disjoint random splits of ``range(total)``; the test split gets the rest."""
    sizes = split_sizes(total, spec)
    perm = np.random.default_rng([seed, 0x5EED]).permutation(total)
    g, tr, va = sizes.generator, sizes.train, sizes.val
    return MemberSplits(
        generator=np.sort(perm[:g]),
        train=perm[g : g + tr],
        val=perm[g + tr : g + tr + va],
        test=perm[g + tr + va :],
    )


def resplit(indices: np.ndarray, train: int, val: int, *, seed: int) -> MemberSplits:
    """Re-cut ``indices`` (D_in) into train / val / test for one repeat (no generator part)."""
    n = len(indices)
    if train + val >= n:
        raise SplitError(
            f"splits: cannot cut {n} records into train={train}, val={val} and a non-empty test"
        )
    perm = np.asarray(indices)[np.random.default_rng([seed, 0xA11]).permutation(n)]
    return MemberSplits(
        generator=np.zeros(0, dtype=np.int64),
        train=perm[:train],
        val=perm[train : train + val],
        test=perm[train + val :],
    )
