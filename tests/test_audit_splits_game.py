"""Member splits, the privacy game and the reference pool: sizes, disjointness, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from panoramia_fl.audit.config import AuditConfig, SplitConfig
from panoramia_fl.audit.panoramia.components import AuditContext, Records
from panoramia_fl.audit.panoramia.game import draw_game
from panoramia_fl.audit.panoramia.reference_pool import ReferencePoolGenerator, make_reference_pool
from panoramia_fl.audit.panoramia.settings import resolve_config
from panoramia_fl.audit.panoramia.sides import break_ties
from panoramia_fl.audit.panoramia.splits import SplitError, resplit, split_members, split_sizes


def _all(splits) -> np.ndarray:
    return np.concatenate([splits.generator, splits.train, splits.val, splits.test])


def test_fraction_splits_are_disjoint_and_cover_the_member_set() -> None:
    splits = split_members(1000, SplitConfig(generator=0.3, train=0.3, val=0.1), seed=3)
    assert (len(splits.generator), len(splits.train), len(splits.val)) == (300, 300, 100)
    assert len(splits.test) == 300  # the rest
    joined = _all(splits)
    assert len(np.unique(joined)) == 1000 and joined.min() == 0 and joined.max() == 999


def test_counts_and_fractions_mix_and_test_takes_the_rest() -> None:
    sizes = split_sizes(500, SplitConfig(generator=100, train=0.2, val=50))
    assert (sizes.generator, sizes.train, sizes.val, sizes.test) == (100, 100, 50, 250)


def test_splits_are_deterministic_from_the_seed() -> None:
    spec = SplitConfig()
    a, b = split_members(300, spec, seed=7), split_members(300, spec, seed=7)
    c = split_members(300, spec, seed=8)
    for name in ("generator", "train", "val", "test"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.train, c.train)


def test_resplit_keeps_sizes_and_disjointness() -> None:
    idx = np.arange(50, 150)
    r1, r2 = resplit(idx, 30, 10, seed=1), resplit(idx, 30, 10, seed=2)
    for r in (r1, r2):
        assert (len(r.train), len(r.val), len(r.test)) == (30, 10, 60)
        joined = np.concatenate([r.train, r.val, r.test])
        assert sorted(joined.tolist()) == idx.tolist()
    assert not np.array_equal(r1.test, r2.test)


def _group_sets(groups: np.ndarray, splits) -> list[set]:
    return [set(groups[getattr(splits, n)].tolist()) for n in ("generator", "train", "val", "test")]


def test_groups_never_span_two_splits() -> None:
    groups = np.repeat(np.arange(40), np.random.default_rng(0).integers(5, 20, 40))
    cut = split_members(len(groups), SplitConfig(generator=0.2, train=0.3, val=0.1), seed=4)
    grouped = split_members(
        len(groups), SplitConfig(generator=0.2, train=0.3, val=0.1), seed=4, groups=groups
    )
    sets = _group_sets(groups, grouped)
    assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    assert len(np.unique(_all(grouped))) == len(groups)
    # cuts fall on the group boundary nearest to the requested size
    for name in ("generator", "train", "val"):
        assert abs(len(getattr(grouped, name)) - len(getattr(cut, name))) <= 20
    re = resplit(np.arange(len(groups)), 100, 40, seed=2, groups=groups)
    parts = [set(groups[p].tolist()) for p in (re.train, re.val, re.test)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    # without groups the cut is the record-level one
    assert np.array_equal(
        cut.test,
        split_members(
            len(groups), SplitConfig(generator=0.2, train=0.3, val=0.1), seed=4, groups=None
        ).test,
    )


def test_too_few_groups_is_a_named_error() -> None:
    with pytest.raises(SplitError, match=r"splits\.test is empty after keeping groups .*got"):
        split_members(100, SplitConfig(), seed=0, groups=np.repeat([0, 1, 2], [40, 40, 20]))


def test_empty_test_split_error_names_the_split_and_sizes() -> None:
    with pytest.raises(SplitError, match=r"test split .* empty: 10 members .*generator=5"):
        split_sizes(10, SplitConfig(generator=5, train=4, val=1))


def test_empty_named_split_error() -> None:
    with pytest.raises(SplitError, match=r"splits.val would be empty .*members=20"):
        split_sizes(20, SplitConfig(generator=0.3, train=0.3, val=0.01))


def test_count_must_be_whole() -> None:
    with pytest.raises(SplitError, match="splits.train=2.5"):
        split_sizes(20, SplitConfig(train=2.5))


def test_game_coins_are_balanced_and_pair_slots() -> None:
    game = draw_game(4000, seed=11)
    # A fair coin: 4000 flips land within 4.5 standard deviations of 2000.
    assert abs(game.members_shown - 2000) < 4.5 * np.sqrt(1000)
    members = np.arange(4000)[:, None] * np.ones((1, 3))
    others = -members - 1
    shown = game.pick(members, others)
    assert np.array_equal(shown[:, 0] >= 0, game.membership.astype(bool))
    # Slot i shows either member i or generated record i, never another pair's record.
    assert np.array_equal(np.abs(shown[:, 0]) - (shown[:, 0] < 0), np.arange(4000))
    assert np.array_equal(draw_game(4000, seed=11).membership, game.membership)
    assert not np.array_equal(draw_game(4000, seed=12).membership, game.membership)


def test_game_records_pick_images_and_labels() -> None:
    game = draw_game(20, seed=0)
    mem = Records(np.ones((20, 1, 2, 2), np.uint8), np.zeros(20, np.int64))
    gen = Records(np.zeros((20, 1, 2, 2), np.uint8), np.ones(20, np.int64))
    audit_set = game.records(mem, gen)
    assert np.array_equal(audit_set.x[:, 0, 0, 0], game.membership)
    assert np.array_equal(audit_set.y, 1 - game.membership)
    with pytest.raises(ValueError, match="m=20 pairs"):
        game.pick(np.zeros(19), np.zeros(20))
    with pytest.raises(ValueError, match="at least 2 pairs"):
        draw_game(1, seed=0)


def test_break_ties_keeps_order_and_makes_scores_distinct() -> None:
    scores = np.array([0.0, 1.0, 1.0, 1.0, 2.0, 0.0])
    out = break_ties(scores, seed=0)
    assert np.unique(out).size == scores.size
    assert out[4] == out.max() and set(np.argsort(out)[:2]) == {0, 5}
    assert np.array_equal(break_ties(scores, seed=0), out)


class _Task:
    modality = "image"
    num_classes = 3


def _pool(n: int = 300) -> Records:
    rng = np.random.default_rng(0)
    return Records(
        rng.integers(0, 255, (n, 1, 4, 4), dtype=np.uint8), np.arange(n, dtype=np.int64) % 3
    )


def test_reference_pool_draws_are_disjoint_and_follow_site_labels() -> None:
    pool = _pool()
    gen = make_reference_pool(
        AuditConfig(generator={"kind": "reference_pool"}),
        AuditContext(task=_Task(), device=None, public_pool=pool),  # type: ignore[arg-type]  # stand-in
    )
    site = Records(np.zeros((100, 1, 4, 4), np.uint8), np.array([0] * 80 + [1] * 20))
    gen.fit(site, seed=0)
    draws = [gen.sample(n, seed=i) for i, n in enumerate((60, 20, 30))]
    used = gen.used
    assert used.size == 110 and np.unique(used).size == 110
    # Records are rows of the pool (identified by their bytes), never repeated across draws.
    keys = [bytes(r) for d in draws for r in d.x.reshape(len(d), -1)]
    assert len(set(keys)) == 110
    labels = np.concatenate([d.y for d in draws])
    # Site labels 80/20/0 with add-one smoothing: about 79% / 20% / 1%.
    assert (labels == 2).mean() < 0.05
    assert 0.65 < (labels == 0).mean() < 0.92


def test_reference_pool_hands_out_documents_whole() -> None:
    groups = np.repeat(np.arange(30), 10)
    pool = Records(np.arange(300)[:, None], None, groups)
    gen = ReferencePoolGenerator(pool, resample_labels=True, num_classes=0)
    gen.fit(Records(np.zeros((5, 1)), None), seed=0)
    draws = [gen.sample(n, seed=i) for i, n in enumerate((95, 40))]
    assert [len(d) for d in draws] == [95, 40]
    a, b = (set(d.groups.tolist()) for d in draws)
    assert not a & b and len(a) == 10 and len(b) == 4
    # the cut group's unused half is retired, not handed out later
    assert gen.remaining == 300 - 100 - 40


def test_reference_pool_exhaustion_and_missing_pool_errors() -> None:
    gen = ReferencePoolGenerator(_pool(30), resample_labels=False, num_classes=3)
    gen.fit(Records(np.zeros((5, 1, 4, 4), np.uint8), np.zeros(5, np.int64)), seed=0)
    gen.sample(25, seed=0)
    with pytest.raises(ValueError, match="exhausted: 10 records requested but only 5"):
        gen.sample(10, seed=1)
    with pytest.raises(ValueError, match="needs public records"):
        ReferencePoolGenerator(None, resample_labels=True, num_classes=3)


def test_auto_generator_uses_the_public_pool_when_given() -> None:
    cfg = AuditConfig()
    pooled = resolve_config(cfg, modality="image", has_pool=True)
    assert pooled.generator.kind == "reference_pool" and pooled.splits.generator == 0.1
    trained = resolve_config(cfg, modality="image", has_pool=False)
    assert trained.generator.kind == "cgan" and trained.splits.generator == 0.3
    explicit = AuditConfig(generator={"kind": "vae"}, splits={"generator": 100})
    kept = resolve_config(explicit, modality="image", has_pool=True)
    assert kept.generator.kind == "vae" and kept.splits.generator == 100
    with pytest.raises(ValueError, match="no default generator for modality 'audio'"):
        resolve_config(cfg, modality="audio", has_pool=False)


def test_quick_mode_caps_the_trainings() -> None:
    cfg = resolve_config(
        AuditConfig(quick=True, helper_epochs=20, generator={"epochs": 40}),
        modality="image",
        has_pool=False,
    )
    assert cfg.repeats == 1 and cfg.generator.epochs == 5 and cfg.helper_epochs == 5
    # an explicit repeat count wins over quick mode's single repeat
    assert AuditConfig(quick=True, repeats=4).repeats == 4
    full = resolve_config(AuditConfig(helper_epochs=20), modality="image", has_pool=False)
    assert full.helper_epochs == 20 and full.generator.epochs == 30
