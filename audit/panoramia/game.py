"""The privacy game of Definition 2.

``m`` paired slots: slot ``i`` holds the member ``D_in^te[i]`` and the non-member
``D_out^te[i]``; a fair coin ``s_i`` picks which one is shown (``s_i = 1``: the member). The
baseline and the MIA score the same shown records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.panoramia.components import Records


@dataclass(frozen=True)
class PrivacyGame:
    """Coins of one game; ``membership[i] = 1`` shows the member of pair ``i``."""

    membership: np.ndarray

    @property
    def m(self) -> int:
        return int(self.membership.size)

    @property
    def members_shown(self) -> int:
        return int(self.membership.sum())

    def pick(self, member_side: np.ndarray, nonmember_side: np.ndarray) -> np.ndarray:
        """Row ``i`` of ``member_side`` where ``s_i = 1``, else row ``i`` of ``nonmember_side``.

        Works for records, labels or feature matrices (leading dimension ``m``).
        """
        if len(member_side) != self.m or len(nonmember_side) != self.m:
            raise ValueError(
                f"game of m={self.m} pairs got {len(member_side)} member-side and "
                f"{len(nonmember_side)} non-member-side rows"
            )
        mask = self.membership.astype(bool).reshape((-1,) + (1,) * (member_side.ndim - 1))
        return np.where(mask, member_side, nonmember_side)

    def records(self, members: Records, nonmembers: Records) -> Records:
        """The audit set X = s * D_in^te + (1 - s) * D_out^te."""
        x = self.pick(members.x, nonmembers.x)
        if members.y is None or nonmembers.y is None:
            return Records(x, None)
        return Records(x, self.pick(members.y, nonmembers.y))


GAME_STREAM = 0
RM_RN_STREAM = 1
O1_STREAM = 2
ATTRIBUTE_STREAM = 3
"""Coin streams: each game of a repeat draws its own coins (never a prefix of another's)."""


def draw_game(m: int, *, seed: int, stream: int = GAME_STREAM) -> PrivacyGame:
    """Draw ``s ~ Bernoulli(1/2)^m`` from ``seed`` and the coin ``stream``.

    Both outcomes must occur for the bounds to be defined; with m >= 2 a draw without one of
    them has probability 2^(1-m) and is redrawn (the coins stay independent of everything
    the classifiers see). Streams keep the games of one repeat (PANORAMIA's, RM;RN's, O(1)'s,
    attribute inference's) and of different repeats on independent coins.
    """
    if m < 2:
        raise ValueError(f"the privacy game needs at least 2 pairs, got m={m}")
    key = [seed, 0x6A3E] if stream == GAME_STREAM else [seed, 0x6A3E, stream]
    rng = np.random.default_rng(key)
    while True:
        s = rng.integers(0, 2, size=m).astype(np.int64)
        if 0 < s.sum() < m:
            return PrivacyGame(s)
