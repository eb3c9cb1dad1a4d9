"""Phase 1 of the audit: cut the members, fit G on D_G, draw the game's non-members and the
helper's synthetic (and real) records."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from audit.config import AuditConfig
from audit.panoramia.components import AuditContext, Generator, Records, make_generator
from audit.panoramia.pairing import pair_members
from audit.panoramia.splits import MemberSplits, split_members
from audit.panoramia.timing import StageTimer

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
    with timer.stage("split"):
        cut = split_members(len(members), config.splits, seed=config.seed, groups=members.groups)
    say(f"splits: {cut.sizes.describe()}")
    d_g = members.take(cut.generator)
    d_in = members.take(np.concatenate([cut.train, cut.val, cut.test]))
    generator = make_generator(config, context)
    with timer.stage("generator_fit"):
        quality = generator.fit(d_g, seed=config.seed)
    say(f"generator {generator.kind}: fitted on {len(d_g)} records")

    n_in = len(d_in)
    n_helper = max(2, math.ceil(config.synthetic_multiplier * len(cut.train)))
    n_helper_val = max(2, math.ceil(0.2 * n_helper))
    with timer.stage("sampling"):
        helper: tuple[Records, Records] | None = None
        source = generator.remaining
        if (
            config.pairing == "label"
            and source is not None
            and source < n_in + n_helper + n_helper_val
        ):
            # A finite source too small for both: pairing can leave out members it cannot
            # serve, the helper cannot shrink to nothing, so its share (at most a quarter of
            # the source) is drawn first.
            n_helper, n_helper_val = _helper_split(
                min(n_helper + n_helper_val, max(12, source // 4))
            )
            helper = _draw_helper(generator, n_helper, n_helper_val, seed=config.seed)
            say(f"helper set capped at {n_helper} + {n_helper_val} records by the source")
        if config.pairing == "label":
            d_in, d_out, dropped = pair_members(generator, d_in, seed=config.seed + 303)
            quality["pairing_dropped"] = dropped
            if dropped:
                say(f"pairing: {dropped} members without a same-label alternative left out")
            n_in = len(d_in)
        else:
            # The game's non-members first: a finite source (reference pool) serves them
            # before the helper, whose set is then capped by what is left.
            d_out = generator.sample(n_in, seed=config.seed + 303)
        remaining = generator.remaining
        if helper is None and remaining is not None and n_helper + n_helper_val > remaining:
            n_helper, n_helper_val = _helper_split(remaining)
            if n_helper < 2:
                raise ValueError(
                    f"generator {generator.kind!r}: only {remaining} records left for the "
                    f"helper after drawing {n_in} non-members; give a larger source"
                )
            say(f"helper set capped at {n_helper} + {n_helper_val} records by the source")
        if helper is None:
            helper = _draw_helper(generator, n_helper, n_helper_val, seed=config.seed)
        helper_train, helper_val = helper
    if len(d_out) != n_in or len(helper_train) != n_helper:
        raise RuntimeError(f"generator {generator.kind!r} returned the wrong number of records")
    real = _helper_real(config, generator, d_g, context.public_pool)
    if real is not None:
        say(
            f"helper: also trains on {real.total} real records ({real.public} public, "
            f"{real.site} of D_G)"
        )
    return Sources(
        cut,
        generator,
        d_in,
        d_out,
        helper_train,
        helper_val,
        {k: float(v) for k, v in quality.items()},
        paired=config.pairing == "label",
        real=real,
    )
