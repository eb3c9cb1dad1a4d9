"""Phase 1 of the audit: cut the members, fit G on D_G, draw the game's non-members and the
helper's synthetic (and real) records."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import AuditContext, Generator, Records, make_generator
from panoramia_fl.audit.panoramia.pairing import pair_members
from panoramia_fl.audit.panoramia.splits import MemberSplits, split_members
from panoramia_fl.audit.panoramia.timing import StageTimer

ProgressFn = Callable[[str], None]
"""Receives one human-readable line per stage."""


@dataclass(frozen=True)
class Sources:
    """Phase 1's output: the member cut, the generator and everything drawn from it."""

    cut: MemberSplits
    generator: Generator
    d_in: Records
    d_out: Records
    helper_train: Records
    helper_val: Records
    quality: dict[str, float]
    paired: bool
    """Row ``i`` of ``d_out`` is the same-label alternative of row ``i`` of ``d_in``."""
    real: HelperReal | None = None
    """Real records the helper also trains on (trained generators only)."""


@dataclass(frozen=True)
class HelperReal:
    """Real records beside the helper's synthetic ones, cut as the helper's own sets are.

    With a trained generator f has learnt what real records look like from every site's
    records and b's synthetic-only helper has not, so f's "not a member" guesses on
    unrealistic generated records would pass for leakage (docs/reading_the_numbers.md).
    """

    train: Records
    val: Records
    public: int
    """How many of them are public records (the pool); the rest are D_G's."""

    @property
    def total(self) -> int:
        return len(self.train) + len(self.val)

    @property
    def site(self) -> int:
        """How many are the site's own D_G records."""
        return self.total - self.public


def _helper_real(
    config: AuditConfig, generator: Generator, d_g: Records, public_pool: Records | None
) -> HelperReal | None:
    """The public pool and D_G, neither ever a game record, for a trained generator's helper;
    ``None`` for a finite source (a reference pool: its records are real already) or when
    ``helper_real_records`` is off."""
    if not config.helper_real_records or generator.remaining is not None:
        return None
    parts = [r for r in (public_pool, d_g) if r is not None and len(r) > 0]
    if not parts:
        return None
    real = Records.concat(parts)
    order = np.random.default_rng([config.seed, 0x4EA1]).permutation(len(real))
    n_train, _ = _helper_split(len(real))
    return HelperReal(
        real.take(order[:n_train]),
        real.take(order[n_train:]),
        public=0 if public_pool is None else len(public_pool),
    )


def _helper_split(total: int) -> tuple[int, int]:
    """``(train, validation)`` records of a helper set of ``total`` records."""
    val = max(2, total // 6)
    return total - val, val


def _draw_helper(
    generator: Generator, n_train: int, n_val: int, *, seed: int
) -> tuple[Records, Records]:
    return generator.sample(n_train, seed=seed + 101), generator.sample(n_val, seed=seed + 202)


def draw_sources(
    members: Records,
    config: AuditConfig,
    context: AuditContext,
    timer: StageTimer,
    say: ProgressFn,
) -> Sources:
    """Phase 1: the member cut, G fitted on D_G, and every record drawn from G."""
    with timer.stage("split"):
        cut = split_members(len(members), config.splits, seed=config.seed, groups=members.groups)
    say(f"splits: {cut.sizes.describe()}")
    d_g = members.take(cut.generator)
    d_in = members.take(np.concatenate([cut.train, cut.val, cut.test]))
    generator = make_generator(config, context)
    with timer.stage("generator_fit"):
        quality = generator.fit(d_g, seed=config.seed)
    say(f"generator {generator.kind}: fitted on {len(d_g)} records")
    with timer.stage("sampling"):
        game = _draw_game(generator, d_in, n_train=len(cut.train), config=config, say=say)
    quality.update(game.quality)
    real = _helper_real(config, generator, d_g, context.public_pool)
    if real is not None:
        say(
            f"helper: also trains on {real.total} real records ({real.public} public, "
            f"{real.site} of D_G)"
        )
    return Sources(
        cut,
        generator,
        game.d_in,
        game.d_out,
        game.helper_train,
        game.helper_val,
        {k: float(v) for k, v in quality.items()},
        paired=config.pairing == "label",
        real=real,
    )


@dataclass(frozen=True)
class _Game:
    """The game's members and non-members and the helper's synthetic sets, as drawn."""

    d_in: Records
    d_out: Records
    helper_train: Records
    helper_val: Records
    quality: dict[str, float]
    """What pairing reports (``pairing_dropped``)."""


def _draw_game(
    generator: Generator, d_in: Records, *, n_train: int, config: AuditConfig, say: ProgressFn
) -> _Game:
    """The game's non-members and the helper's sets, in the order a finite source serves them
    best."""
    n_helper = max(2, math.ceil(config.synthetic_multiplier * n_train))
    n_helper_val = max(2, math.ceil(0.2 * n_helper))
    helper: tuple[Records, Records] | None = None
    source = generator.remaining
    if (
        config.pairing == "label"
        and source is not None
        and source < len(d_in) + n_helper + n_helper_val
    ):
        # A finite source too small for both: pairing can leave out members it cannot
        # serve, the helper cannot shrink to nothing, so its share (at most a quarter of
        # the source) is drawn first.
        n_helper, n_helper_val = _helper_split(min(n_helper + n_helper_val, max(12, source // 4)))
        helper = _draw_helper(generator, n_helper, n_helper_val, seed=config.seed)
        say(f"helper set capped at {n_helper} + {n_helper_val} records by the source")
    d_in, d_out, quality = _draw_nonmembers(generator, d_in, config=config, say=say)
    if helper is None:
        n_helper, n_helper_val = _helper_left(
            generator, n_helper, n_helper_val, n_in=len(d_in), say=say
        )
        helper = _draw_helper(generator, n_helper, n_helper_val, seed=config.seed)
    if len(d_out) != len(d_in) or len(helper[0]) != n_helper:
        raise RuntimeError(f"generator {generator.kind!r} returned the wrong number of records")
    return _Game(d_in, d_out, helper[0], helper[1], quality)


def _draw_nonmembers(
    generator: Generator, d_in: Records, *, config: AuditConfig, say: ProgressFn
) -> tuple[Records, Records, dict[str, float]]:
    """The game's non-members: a same-label alternative per member (members without one are
    left out) under label pairing, else as many records as members."""
    if config.pairing == "label":
        d_in, d_out, dropped = pair_members(generator, d_in, seed=config.seed + 303)
        if dropped:
            say(f"pairing: {dropped} members without a same-label alternative left out")
        return d_in, d_out, {"pairing_dropped": dropped}
    # The game's non-members first: a finite source (reference pool) serves them
    # before the helper, whose set is then capped by what is left.
    return d_in, generator.sample(len(d_in), seed=config.seed + 303), {}


def _helper_left(
    generator: Generator, n_helper: int, n_helper_val: int, *, n_in: int, say: ProgressFn
) -> tuple[int, int]:
    """The helper's set sizes, capped by what a finite source has left after the game."""
    remaining = generator.remaining
    if remaining is None or n_helper + n_helper_val <= remaining:
        return n_helper, n_helper_val
    n_helper, n_helper_val = _helper_split(remaining)
    if n_helper < 2:
        raise ValueError(
            f"generator {generator.kind!r}: only {remaining} records left for the "
            f"helper after drawing {n_in} non-members; give a larger source"
        )
    say(f"helper set capped at {n_helper} + {n_helper_val} records by the source")
    return n_helper, n_helper_val
