"""Image components: generators' record format, the filter, features and the classifiers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.image.classifier import auc, make_image_classifier
from panoramia_fl.audit.image.features import confidence_features, design_matrix, pooled_pixels
from panoramia_fl.audit.image.filter import FilteredGenerator
from panoramia_fl.audit.image.generators import make_cgan, make_vae
from panoramia_fl.audit.panoramia.components import AuditContext, ClassifierData, Records
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    torch.set_num_threads(1)
    ds = load_dataset("digits")
    task = build_task(
        "image",
        model_name="small_cnn",
        num_classes=10,
        input_shape=(1, 8, 8),
        model_options={"width": 8},
    )
    return ds, task


def _context(task) -> AuditContext:
    return AuditContext(task=task, device=CPU)


@pytest.mark.parametrize("factory", [make_cgan, make_vae])
def test_generators_emit_labeled_uint8_records_of_the_input_shape(digits, factory) -> None:
    ds, task = digits
    cfg = AuditConfig(generator={"epochs": 2})
    gen = factory(cfg, _context(task))
    # D_G with only labels 1 and 3: conditional samples must keep to them.
    keep = np.isin(ds.y, [1, 3])
    quality = gen.fit(Records(ds.x[keep][:200], ds.y[keep][:200]), seed=0)
    assert np.isfinite(quality["generator_loss"])
    out = gen.sample(150, seed=1)
    assert out.x.dtype == np.uint8 and out.x.shape == (150, 1, 8, 8)
    assert out.y.dtype == np.int64 and set(np.unique(out.y)) <= {1, 3}
    again = gen.sample(150, seed=1)
    assert np.array_equal(again.x, out.x) and np.array_equal(again.y, out.y)
    assert not np.array_equal(gen.sample(150, seed=2).x, out.x)


def test_generator_fit_is_deterministic(digits) -> None:
    ds, task = digits
    cfg = AuditConfig(generator={"epochs": 1})
    a, b = make_cgan(cfg, _context(task)), make_cgan(cfg, _context(task))
    d_g = Records(ds.x[:128], ds.y[:128])
    a.fit(d_g, seed=3)
    b.fit(d_g, seed=3)
    assert np.array_equal(a.sample(20, seed=0).x, b.sample(20, seed=0).x)


class _MixedSource:
    """A stand-in generator: half its draws are real digits, half are blank images."""

    kind = "mixed"

    def __init__(self, real: Records) -> None:
        self.real = real

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        return {}

    def sample(self, n: int, *, seed: int) -> Records:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(self.real), n)
        x = self.real.x[idx].copy()
        blank = rng.random(n) < 0.5
        x[blank] = 255
        return Records(x, self.real.y[idx])


def test_filter_drops_obvious_fakes_and_keeps_real_looking_samples(digits) -> None:
    ds, task = digits
    cfg = AuditConfig(generator={"filter": True, "filter_confidence": 0.9})
    gen = FilteredGenerator(_MixedSource(Records(ds.x[600:], ds.y[600:])), cfg, _context(task))
    quality = gen.fit(Records(ds.x[:600], ds.y[:600]), seed=0)
    # Half the "synthetic" draws are real digits: a perfect filter reaches AUC 0.75.
    assert quality["filter_holdout_auc"] > 0.7
    out = gen.sample(200, seed=1)
    assert len(out) == 200
    assert gen.dropped > 0 and 0.3 < gen.acceptance_rate < 0.8
    assert (out.x.reshape(200, -1) == 255).all(axis=1).sum() == 0  # no blank image survives


def test_confidence_features_survive_float32_loss_underflow() -> None:
    # Both records have float32 loss 0, but the logits still rank them.
    feats = np.array([[0.0, 40.0, 0.0, 0.0], [0.0, 60.0, 0.0, 0.0]], dtype=np.float32)
    out = confidence_features(feats, np.array([0, 0]))
    assert out.shape == (2, 7)
    assert out[1, 2] > out[0, 2] > 30  # logit-scaled confidence
    assert out[1, 3] == 60 and out[0, 3] == 40  # margin
    assert confidence_features(feats[:, :1], None).shape == (2, 2)


def test_pooled_pixels_shapes() -> None:
    x = np.full((3, 1, 28, 28), 255, np.uint8)
    assert pooled_pixels(x, 14).shape == (3, 196)
    assert pooled_pixels(x, 28).shape == (3, 784)
    assert np.allclose(pooled_pixels(x, 7), 1.0)
    with pytest.raises(ValueError, match=r"\(n, C, H, W\)"):
        pooled_pixels(np.zeros((3, 8, 8)), 4)


def _data(rng, n, shift, features_dim=11):
    x = rng.integers(0, 120, (n, 1, 8, 8)).astype(np.uint8)
    x[:, :, :2] += np.uint8(shift)  # members are brighter at the top
    y = rng.integers(0, 10, n)
    feats = rng.normal(size=(n, features_dim)).astype(np.float32)
    feats[:, 0] = np.abs(feats[:, 0])
    return x, y, feats


def _membership_data(seed: int, n: int = 200) -> ClassifierData:
    rng = np.random.default_rng(seed)
    xm, ym, fm = _data(rng, n, 60)
    xo, yo, fo = _data(rng, n, 0)
    return ClassifierData(
        Records(np.concatenate([xm, xo]), np.concatenate([ym, yo])),
        np.concatenate([fm, fo]),
        np.r_[np.ones(n), np.zeros(n)].astype(np.int64),
    )


@pytest.mark.parametrize("design", ["gbm", "stacked"])
def test_classifier_learns_and_reports_its_validation_choice(digits, design) -> None:
    _, task = digits
    cfg = AuditConfig(
        classifier={
            "design": design,
            "epochs": [2, 4],
            "gbm_iterations": [10, 20],
            "gbm_learning_rates": [0.1],
        }
    )
    clf = make_image_classifier(cfg, _context(task))
    train, val, test = _membership_data(0), _membership_data(1), _membership_data(2)
    seen = []

    def select_by(scores, membership):
        seen.append(len(scores))
        return auc(scores, membership)

    choice = clf.fit(train, val, select_by=select_by, seed=0)
    assert choice["design"] == design
    # Selection only ever looked at validation-sized score vectors.
    assert seen and set(seen) == {len(val.membership)}
    assert auc(clf.score(test), test.membership) > 0.9
    assert choice["val_bound"] == pytest.approx(select_by(clf.score(val), val.membership))


def test_design_matrix_uses_reference_differences(digits) -> None:
    data = _membership_data(0, n=10)
    with_ref = ClassifierData(data.records, data.features, data.membership, data.features)
    a = design_matrix(data, num_classes=10, pixel_side=4)
    b = design_matrix(with_ref, num_classes=10, pixel_side=4)
    assert b.shape[1] == a.shape[1] + 14  # h's 7 statistics and the 7 differences
