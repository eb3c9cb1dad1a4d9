"""Label-paired games and score-only attacks.

Pairing: every slot's two records share a label, drawn from the pool without reuse, from a
conditional generator, or by sorting a generator's draws by label. Score-only attacks train
nothing, play every member outside D_G, and under pairing a statistic that depends on the
label alone reads 0, where the unpaired game reads a false positive.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from panoramia_fl.audit import AuditConfig, Records, run_audit
from panoramia_fl.audit.panoramia.audit_sets import FeatureSet
from panoramia_fl.audit.panoramia.components import AuditContext, make_generator
from panoramia_fl.audit.panoramia.pairing import pair_members
from panoramia_fl.audit.panoramia.reference_pool import ReferencePoolGenerator
from panoramia_fl.audit.panoramia.repeat import RepeatInputs, play_repeat
from panoramia_fl.audit.panoramia.settings import resolve_config
from panoramia_fl.audit.panoramia.timing import StageTimer
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task


def _pool(n: int, classes: int, seed: int) -> Records:
    rng = np.random.default_rng(seed)
    return Records(rng.normal(size=(n, 3)), rng.integers(0, classes, n))


def test_reference_pool_pairs_each_member_with_an_unused_record_of_its_label() -> None:
    pool = _pool(300, 3, seed=0)
    gen = ReferencePoolGenerator(pool, resample_labels=True, num_classes=3)
    gen.fit(Records(pool.x[:0], pool.y[:0]), seed=0)
    members = Records(np.zeros((60, 3)), np.repeat([0, 1, 2], 20))
    kept, alts, dropped = pair_members(gen, members, seed=1)
    assert dropped == 0 and np.array_equal(alts.y, members.y)
    first = set(map(tuple, alts.x))
    kept2, alts2, _ = pair_members(gen, members, seed=2)
    assert not first & set(map(tuple, alts2.x))  # never handed out twice
    assert np.array_equal(kept2.y, members.y)


def test_a_pool_out_of_one_label_drops_those_members_and_counts_them() -> None:
    pool = Records(np.arange(30, dtype=float)[:, None], np.array([0] * 25 + [1] * 5))
    gen = ReferencePoolGenerator(pool, resample_labels=True, num_classes=2)
    gen.fit(Records(pool.x[:0], pool.y[:0]), seed=0)
    members = Records(np.zeros((20, 1)), np.array([0] * 10 + [1] * 10))
    kept, alts, dropped = pair_members(gen, members, seed=0)
    assert dropped == 5 and gen.label_shortfall == 5
    assert np.array_equal(kept.y, alts.y) and np.bincount(kept.y).tolist() == [10, 5]


class _UnconditionalSource:
    """A labeled source that cannot condition on a label (as a trained MST or labeler)."""

    kind = "unconditional"
    remaining = None

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        return {}

    def sample(self, n: int, *, seed: int) -> Records:
        rng = np.random.default_rng(seed)
        y = rng.choice(4, size=n, p=[0.7, 0.2, 0.1, 0.0])  # label 3 never comes
        return Records(y[:, None] + rng.random((n, 1)), y)

    def sampling_quality(self) -> dict[str, float]:
        return {}


def test_sources_without_conditional_sampling_are_sorted_into_slots_by_label() -> None:
    members = Records(np.zeros((40, 1)), np.array([0, 1, 2, 3] * 10))
    kept, alts, dropped = pair_members(_UnconditionalSource(), members, seed=0)
    assert dropped == 10  # the label the source never draws
    assert np.array_equal(kept.y, alts.y)
    assert np.array_equal(np.floor(alts.x[:, 0]), alts.y)  # each record is of its label


def test_conditional_image_generator_samples_the_slot_labels(digits) -> None:
    config = resolve_config(
        AuditConfig(generator={"kind": "cgan", "epochs": 1}), modality="image", has_pool=False
    )
    task = _task(digits)
    gen = make_generator(config, AuditContext(task=task, device=torch.device("cpu")))
    gen.fit(Records(digits.x[:200], digits.y[:200]), seed=0)
    members = Records(digits.x[200:260], digits.y[200:260])
    kept, alts, dropped = pair_members(gen, members, seed=0)
    assert dropped == 0 and np.array_equal(alts.y, members.y)
    assert alts.x.shape == members.x.shape


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def _task(data):
    return build_task("image", model_name="small_cnn", num_classes=10, input_shape=data.input_shape)


def _label_only_features(y: np.ndarray, logit_of_label: np.ndarray) -> np.ndarray:
    """[loss, logits] of a model whose confidence depends on the label alone."""
    z = np.zeros((len(y), 3))
    z[np.arange(len(y)), y] = logit_of_label[y]
    loss = -(z[np.arange(len(y)), y] - np.log(np.exp(z).sum(axis=1)))
    return np.column_stack([loss, z])


@pytest.mark.parametrize("paired", [True, False])
def test_a_label_only_statistic_reads_zero_only_in_the_paired_game(digits, paired: bool) -> None:
    """f is confident on label 0 only and h is confident on nothing: the only signal is the
    label. Members are mostly label 0; unpaired non-members are balanced, so the MIA tells
    them apart by the label, which b cannot (eps_tilde > 0 against a model that learned
    nothing about the members). Paired, each slot's two records share a label: 0."""
    rng = np.random.default_rng(0)
    n = 1200
    y_mem = np.where(rng.random(n) < 0.8, 0, rng.integers(1, 3, n))
    y_gen = y_mem.copy() if paired else rng.integers(0, 3, n)
    confident = np.array([6.0, 0.0, 0.0])
    flat = np.zeros(3)

    def features(y: np.ndarray) -> FeatureSet:
        return FeatureSet(
            Records(np.zeros((len(y), 1)), y),
            _label_only_features(y, confident),
            _label_only_features(y, flat),
        )

    config = resolve_config(
        AuditConfig(classifier={"feature_sets": ["loss"]}), modality="image", has_pool=True
    )
    assert config.classifier.design == "score"
    inputs = RepeatInputs(
        config=config,
        context=AuditContext(task=_task(digits), device=torch.device("cpu")),
        members=features(y_mem),
        generated=features(y_gen),
        nonmembers=None,
        n_train=0,
        n_val=0,
        paired=paired,
    )
    two = [play_repeat(inputs, r, StageTimer())[0].two_sided for r in range(3)]
    values = [x.eps_tilde for x in two if x is not None]
    if paired:
        assert values == [0.0, 0.0, 0.0]
    else:
        assert min(values) > 0.5


def test_score_design_trains_nothing_and_plays_every_member_outside_dg(digits) -> None:
    task = _task(digits)
    torch.manual_seed(0)
    target = task.make_model()
    members = Records(digits.x[:300], digits.y[:300])
    task.train_model(target, members.x, members.y, epochs=30, seed=0, device=torch.device("cpu"))
    result = run_audit(
        task,
        target.eval(),
        members,
        AuditConfig(
            quick=True,
            repeats=2,
            classifier={"feature_sets": ["loss"]},
            splits={"generator": 0.05},
            calibration={"reference_models": 2, "epochs": 3},
        ),
        nonmembers=Records(digits.x[300:600], digits.y[300:600]),
        public_pool=Records(digits.x[600:], digits.y[600:]),
    )
    dropped = int(result.quality["pairing_dropped"])
    assert result.sizes["train"] == 0 and result.sizes["val"] == 0
    assert result.sizes["m"] == 300 - result.sizes["generator"] - dropped
    for rep in result.repeats:
        assert rep.selected["mia"]["design"] == "score"
        assert rep.selected["mia"]["statistic"] in {"log_p", "lira_offline", "rmia_offline"}
    # Three candidate statistics share each bound's level (a union bound over them).
    assert result.repeats[0].two_sided.member.mia.beta == pytest.approx(0.05 / 4 / 3)
    # An over-fit target leaks: the two-sided eps_tilde rises above 0.
    assert result.two_sided.eps_tilde.mean > 0


def test_pairing_label_on_records_without_labels_is_a_named_error() -> None:
    with pytest.raises(ValueError, match="pairing='label'.*no labels"):
        resolve_config(
            AuditConfig(pairing="label"), modality="text", has_pool=False, has_labels=False
        )
    unpaired = resolve_config(AuditConfig(), modality="text", has_pool=False, has_labels=False)
    assert unpaired.pairing == "none"
    assert resolve_config(AuditConfig(), modality="image", has_pool=True).classifier.design == (
        "gbm"
    )


def test_a_pool_smaller_than_members_and_helper_keeps_the_helper_and_drops_slots(
    digits,
) -> None:
    """A site's own small image folder: the pool cannot pair every member and also train the
    helper. The helper's share is drawn first, the game plays the members it can pair."""
    task = _task(digits)
    torch.manual_seed(0)
    target = task.make_model().eval()
    result = run_audit(
        task,
        target,
        Records(digits.x[:400], digits.y[:400]),
        AuditConfig(
            quick=True,
            classifier={"feature_sets": ["loss"]},
            splits={"generator": 0.05},
            calibration={"reference_models": 0},
        ),
        public_pool=Records(digits.x[400:600], digits.y[400:600]),
    )
    sizes = result.sizes
    assert sizes["synthetic_helper_train"] + sizes["synthetic_helper_val"] == 50  # 200 // 4
    assert result.quality["pairing_dropped"] > 0
    assert sizes["m"] + result.quality["pairing_dropped"] == 400 - sizes["generator"]
    assert sizes["m"] <= 150  # what the pool has left after the helper
