"""MST generator, discretisation and the real-vs-synthetic filter on small tables."""

from __future__ import annotations

import numpy as np
import pytest

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.tabular.attributes import Discretizer, rare_value_mask
from panoramia_fl.audit.tabular.generators import MSTGenerator
from panoramia_fl.audit.tabular.mst import (
    TreeSynthesizer,
    marginal_tv,
    maximum_spanning_tree,
    mutual_information,
    zcdp_rho,
)
from panoramia_fl.contracts.tabular_schema import infer_attributes, resolve_attributes


def small_table(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Encoded rows with dependent columns: a 3-level one-hot, an age-like continuous column,
    a lattice column (rounded to 0.5) tied to the category, and a label tied to both."""
    rng = np.random.default_rng(seed)
    cat = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    age = rng.normal(40 + 10 * cat, 8)
    score = np.round(2 * (cat + rng.normal(0, 0.7, n))) / 2
    logit = 0.08 * (age - 45) + 0.8 * (cat == 2)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    onehot = np.eye(3, dtype=np.float32)[cat]
    x = np.column_stack([onehot, (age - 45) / 10, score]).astype(np.float32)
    return x, y


def codes_of(gen: MSTGenerator, rec: Records) -> np.ndarray:
    labels = np.searchsorted(gen.labels, rec.y)
    return np.column_stack([labels, gen.discretizer.encode(rec.x)])


def test_infer_attributes_finds_one_hot_group_and_numeric_columns() -> None:
    x, _ = small_table(500, 0)
    attrs = infer_attributes(x)
    assert [(a.kind, a.start, a.width) for a in attrs] == [
        ("onehot", 0, 3),
        ("numeric", 3, 1),
        ("numeric", 4, 1),
    ]
    schema = {
        "columns": [
            {"name": "c", "kind": "categorical", "start": 0, "width": 3},
            {"name": "age", "kind": "numeric", "start": 3, "width": 1},
            {"name": "s", "kind": "numeric", "start": 4, "width": 1},
        ]
    }
    assert [a.name for a in resolve_attributes(x, schema)] == ["c", "age", "s"]
    with pytest.raises(ValueError, match="covers 4 encoded columns"):
        resolve_attributes(x, {"columns": schema["columns"][:2]})


def test_discretizer_round_trip_keeps_codes_and_lattice() -> None:
    x, _ = small_table(800, 1)
    disc = Discretizer(bins=8).fit(x, infer_attributes(x))
    codes = disc.encode(x)
    back = disc.decode(codes, rng=np.random.default_rng(0))
    assert np.array_equal(disc.encode(back), codes)
    # One-hot rows stay one-hot; the lattice column only takes values seen in training.
    assert np.array_equal(back[:, :3].sum(axis=1), np.ones(len(x)))
    assert np.isin(back[:, 4], np.unique(x[:, 4])).all()
    # The continuous column is smoothed: decoded values are not copies of training values.
    assert np.isin(back[:, 3], x[:, 3]).mean() < 0.05


def test_mst_selects_tree_and_noise_follows_budget() -> None:
    weights = np.array([[0, 5, 1, 0], [5, 0, 4, 2], [1, 4, 0, 3], [0, 2, 3, 0]], float)
    assert sorted(maximum_spanning_tree(weights)) == [(0, 1), (1, 2), (2, 3)]
    assert zcdp_rho(1.0, 1e-6) < zcdp_rho(10.0, 1e-6) < zcdp_rho(1000.0, 1e-6)
    a = np.array([0, 0, 1, 1] * 50)
    assert mutual_information(np.bincount(a * 2 + a, minlength=4).reshape(2, 2)) == pytest.approx(
        np.log(2)
    )
    codes = np.column_stack([a, a, 1 - a])
    low = TreeSynthesizer(epsilon=1.0).fit(codes, [2, 2, 2], rng=np.random.default_rng(0))
    high = TreeSynthesizer(epsilon=1000.0).fit(codes, [2, 2, 2], rng=np.random.default_rng(0))
    assert low.sigma > 10 * high.sigma
    sample = high.sample(500, rng=np.random.default_rng(1))
    # Deterministic relations along tree edges are reproduced exactly at large epsilon.
    assert np.array_equal(sample[:, 0], sample[:, 1])
    assert np.array_equal(sample[:, 2], 1 - sample[:, 0])


def test_mst_marginals_close_to_real_and_far_from_random_table() -> None:
    x, y = small_table(3000, 2)
    gen = MSTGenerator()
    quality = gen.fit(Records(x, y), seed=0)
    synth = gen.sample(3000, seed=1)
    assert synth.x.shape == x.shape and synth.y.dtype == np.int64
    sizes = [len(gen.labels), *gen.discretizer.sizes]
    real_codes = codes_of(gen, Records(x, y))
    tv1, tv2 = marginal_tv(real_codes, codes_of(gen, synth), sizes)
    # A table of independent uniform codes over the same domains fails the same bounds.
    rng = np.random.default_rng(3)
    noise = np.column_stack([rng.integers(0, s, len(x)) for s in sizes])
    rtv1, rtv2 = marginal_tv(real_codes, noise, sizes)
    assert tv1.max() < 0.05 and tv2.mean() < 0.06
    assert rtv1.max() > 0.2 and rtv2.mean() > 0.2
    assert quality["tv_1way_max"] < 0.05 and 0 <= quality["rare_value_fraction"] < 0.2
    # Labels are generated jointly: the label-category dependence survives.
    cat_real, cat_syn = x[:, :3].argmax(1), synth.x[:, :3].argmax(1)
    for c in range(3):
        assert abs(y[cat_real == c].mean() - synth.y[cat_syn == c].mean()) < 0.08
    # Same seed, same rows.
    again = gen.sample(3000, seed=1)
    assert np.array_equal(again.x, synth.x) and np.array_equal(again.y, synth.y)
    assert not np.array_equal(gen.sample(3000, seed=2).x, synth.x)


def test_generator_with_filter_only_returns_rows_below_the_threshold() -> None:
    x, y = small_table(1500, 4)
    gen = MSTGenerator(filter=True, filter_confidence=0.6)
    quality = gen.fit(Records(x, y), seed=0)
    assert gen.kind == "mst+filter"
    assert 0.0 <= quality["filter_keep_rate"] <= 1.0 and 0.0 <= quality["filter_auc"] <= 1.0
    kept = gen.sample(500, seed=6)
    assert len(kept) == 500
    assert (gen.filter.synthetic_probability(kept.x, kept.y) < 0.6).all()
    assert gen.drawn >= 500 and gen.acceptance_rate == gen.kept / gen.drawn


def test_filter_removes_obvious_artefacts() -> None:
    x, y = small_table(1500, 7)
    gen = MSTGenerator(filter=True, filter_confidence=0.9)
    gen.fit(Records(x, y), seed=0)
    good = gen._draw(600, np.random.default_rng(8))
    bad = Records(good.x.copy(), good.y)
    bad.x[:, 3] += 8.0  # ages 80 years beyond anything real
    # Refit the filter on real vs a mix that contains such artefacts, then sample a mix.
    mix = Records(np.vstack([good.x, bad.x]), np.concatenate([good.y, bad.y]))
    gen.filter.fit(x, y, mix.x, mix.y, seed=1)
    keep = gen.filter.keep(mix.x, mix.y)
    assert keep[:600].mean() > 0.8
    assert keep[600:].mean() < 0.05


def test_rare_value_mask_flags_extremes_and_rare_levels() -> None:
    x, _ = small_table(1000, 9)
    x[0, 3] = 50.0  # extreme age
    attrs = infer_attributes(x)
    mask = rare_value_mask(x, attrs)
    assert mask.shape == (1000, 3) and mask[0, 1] and mask[1:, 1].mean() < 0.01
    # A level held by < 1% of rows is rare.
    x2 = x.copy()
    x2[:, :3] = 0.0
    x2[:, 0] = 1.0
    x2[:5, 0], x2[:5, 2] = 0.0, 1.0
    mask2 = rare_value_mask(x2, infer_attributes(x2))
    assert mask2[:5, 0].all() and not mask2[5:, 0].any()


def test_generator_needs_labels() -> None:
    x, _ = small_table(50, 10)
    with pytest.raises(ValueError, match="labelled"):
        MSTGenerator().fit(Records(x, None), seed=0)
