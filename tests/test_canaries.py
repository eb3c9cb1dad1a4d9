"""Input canaries per site (``audit.input_canaries``): coins, site files, the one-run audit,
a real run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import TINY_AUDIT, run_files
from scipy import stats

from panoramia_fl.audit.canaries.input_canaries import (
    INPUT_CANARY_SCORE,
    InputCanaryResult,
    input_canary_audit,
)
from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.stats.o1 import o1_lower_bound
from panoramia_fl.clients.audit_handler import (
    SiteAuditPolicy,
    input_canary_audit_of,
    make_audit_runner,
)
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.ml.canary_records import (
    INPUT_CANARY_KINDS,
    draw_input_canaries,
    input_canary_coins,
)
from panoramia_fl.ml.datasets import Dataset, load_dataset
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import DatasetMeta, prepare_run_dir
from panoramia_fl.simulations.run_task import make_task

pytestmark = pytest.mark.ray


def _digits_config(name: str = "canaries", **sections: dict) -> object:
    raw: dict = {
        "name": name,
        "seed": 5,
        "data": {"name": "digits"},
        "partition": {"scheme": "iid", "num_sites": 2},
        "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 32},
        "audit": {"enabled": True, "input_canaries": 40, "settings": TINY_AUDIT},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return validate_config(raw)


def _rows(x: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in np.ascontiguousarray(x).reshape(len(x), -1)}


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset("digits")


# -- coins ------------------------------------------------------------------------------


def test_coins_are_independent_fair_coins() -> None:
    n, seeds = 100, range(300)
    counts = np.array([input_canary_coins(n, seed=s, site_id=0).sum() for s in seeds])
    # Binomial(100, 1/2): mean 50, variance 25. A fixed half would have variance 0.
    assert abs(counts.mean() - 50) < 1.5
    assert 15 < counts.var() < 37
    assert (counts != n // 2).sum() > 200
    # Each position is its own fair coin: no slot is biased across seeds.
    by_slot = np.array([input_canary_coins(n, seed=s, site_id=0) for s in seeds]).mean(axis=0)
    assert stats.binomtest(int(round(by_slot[0] * 300)), 300).pvalue > 1e-4
    assert np.abs(by_slot - 0.5).max() < 0.15


def test_coins_depend_only_on_seed_and_site(digits: Dataset, tmp_path: Path) -> None:
    coins = input_canary_coins(60, seed=5, site_id=1)
    # Another image dataset (float pixels, another shape and label count) and the text and
    # tabular record kinds: other contents, the same coins.
    other = Dataset(
        name="float_images",
        modality="image",
        x=np.random.default_rng(0).random((50, 3, 4, 4)).astype(np.float32),
        y=np.zeros(50, dtype=np.int64),
        num_classes=3,
        input_shape=(3, 4, 4),
    )
    text = Dataset(
        name="tokens",
        modality="text",
        x=np.zeros((10, 16), dtype=np.int64),
        y=None,
        num_classes=50,
        input_shape=(16,),
    )
    for dataset in (digits, other, text):
        drawn = draw_input_canaries(dataset, 60, seed=5, site_id=1)
        np.testing.assert_array_equal(drawn.included, coins)
    assert not np.array_equal(coins, input_canary_coins(60, seed=5, site_id=0))
    assert not np.array_equal(coins, input_canary_coins(60, seed=6, site_id=1))

    # Through prepare_run_dir: other partition and audit settings, the same coins per site.
    a = _digits_config("a")
    b = _digits_config(
        "b",
        partition={"scheme": "dirichlet", "num_sites": 3, "alpha": 0.3},
        audit={"settings": {**TINY_AUDIT, "beta": 0.1}},
    )
    prepare_run_dir(a, run_files(tmp_path / "a"))
    prepare_run_dir(b, run_files(tmp_path / "b"))
    for site in (0, 1):
        ca = SiteData.load(run_files(tmp_path / "a").site_file(site)).input_canary_included
        cb = SiteData.load(run_files(tmp_path / "b").site_file(site)).input_canary_included
        np.testing.assert_array_equal(ca, cb)
        np.testing.assert_array_equal(ca, input_canary_coins(40, seed=5, site_id=site))


def test_coins_are_independent_of_canary_labels(digits: Dataset) -> None:
    drawn = draw_input_canaries(digits, 3000, seed=11, site_id=2)
    table = np.zeros((2, digits.num_classes))
    np.add.at(table, (drawn.included.astype(int), drawn.y), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-3
    # Labels are uniform over the classes too.
    assert stats.chisquare(table.sum(axis=0)).pvalue > 1e-3


# -- canary contents ----------------------------------------------------------------------


def test_image_canaries_are_noise_unlike_every_record(digits: Dataset) -> None:
    drawn = draw_input_canaries(digits, 200, seed=0, site_id=0)
    assert drawn.kind == INPUT_CANARY_KINDS["image"] == "noise_image"
    assert drawn.x.shape == (200, *digits.x.shape[1:]) and drawn.x.dtype == digits.x.dtype
    assert drawn.x.min() >= digits.x.min() and drawn.x.max() <= digits.x.max()
    # Uniform noise: the mean pixel is mid-range, unlike the mostly dark digits.
    assert abs(drawn.x.mean() - 127.5) < 5
    assert drawn.y.dtype == np.int64 and set(drawn.y) <= set(range(digits.num_classes))
    real = _rows(digits.x) | _rows(digits.public_x)
    assert not _rows(drawn.x) & real
    assert len(_rows(drawn.x)) == 200
    again = draw_input_canaries(digits, 200, seed=0, site_id=0)
    np.testing.assert_array_equal(again.x, drawn.x)


def test_tabular_canaries_are_rare_rows_with_unexpected_labels() -> None:
    from sklearn.linear_model import LogisticRegression

    data = load_dataset("randhie")
    drawn = draw_input_canaries(data, 100, seed=0, site_id=0)
    assert drawn.kind == "rare_row" and drawn.x.dtype == np.float32
    assert drawn.x.shape == (100, data.x.shape[1])
    assert not _rows(drawn.x) & _rows(data.x) and len(_rows(drawn.x)) == 100
    for col in data.info["schema"]["columns"]:
        block = drawn.x[:, col["start"] : col["start"] + col["width"]]
        real = data.x[:, col["start"] : col["start"] + col["width"]]
        if col["kind"] == "categorical":
            assert (block.sum(axis=1) == 1).all()
            counts = real.sum(axis=0)
            # Every canary level is among the least frequent quarter of the levels.
            cutoff = np.sort(counts)[max(1, math.ceil(col["width"] / 4)) - 1]
            assert (counts[block.argmax(axis=1)] <= cutoff).all()
        else:
            lo, hi = np.quantile(real[:, 0], [0.01, 0.99])
            assert ((block[:, 0] <= lo) | (block[:, 0] >= hi)).all(), col["name"]
    plain = LogisticRegression(max_iter=1000).fit(data.x, data.y)
    predicted = plain.predict(drawn.x)
    assert (drawn.y != predicted).all()


def test_text_canaries_are_random_tokens() -> None:
    text = Dataset(
        name="tokens",
        modality="text",
        x=np.random.default_rng(1).integers(0, 300, size=(40, 32)),
        y=None,
        num_classes=300,
        input_shape=(32,),
    )
    drawn = draw_input_canaries(text, 500, seed=0, site_id=3)
    assert drawn.kind == "random_tokens" and drawn.y is None
    assert drawn.x.shape == (500, 32) and drawn.x.dtype == text.x.dtype
    assert drawn.x.min() >= 0 and drawn.x.max() < 300
    # Uniform over the vocabulary.
    assert stats.chisquare(np.bincount(drawn.x.ravel(), minlength=300)).pvalue > 1e-3


# -- site files: canaries are never members -----------------------------------------------


def _check_site_file(path: Path, n_canaries: int) -> SiteData:
    data = SiteData.load(path)
    assert data.has_input_canaries and len(data.input_canary_x) == n_canaries
    assert data.input_canary_included.dtype == bool and isinstance(data.input_canary_kind, str)
    members = data.records("train")
    assert members.x is data.train_x
    assert not _rows(members.x) & _rows(data.input_canary_x)
    included = data.input_canary_included
    np.testing.assert_array_equal(
        data.training_x, np.concatenate([data.train_x, data.input_canary_x[included]])
    )
    assert len(data.training_x) == len(data.train_x) + included.sum()
    if data.train_y is not None:
        np.testing.assert_array_equal(
            data.training_y, np.concatenate([data.train_y, data.input_canary_y[included]])
        )
    x, coins = data.input_canary_records()
    np.testing.assert_array_equal(x.x, data.input_canary_x)
    np.testing.assert_array_equal(coins, included)
    return data


def test_digits_run_dir_keeps_canaries_out_of_members(tmp_path: Path) -> None:
    config = _digits_config()
    prepare_run_dir(config, run_files(tmp_path))
    for site in (0, 1):
        data = _check_site_file(run_files(tmp_path).site_file(site), 40)
        assert data.input_canary_kind == "noise_image"
        np.testing.assert_array_equal(
            data.input_canary_included, input_canary_coins(40, seed=5, site_id=site)
        )
    # No canaries configured: nothing in the file, training = members.
    plain = _digits_config("plain", audit={"input_canaries": 0})
    prepare_run_dir(plain, run_files(tmp_path / "plain"))
    data = SiteData.load(run_files(tmp_path / "plain").site_file(0))
    assert not data.has_input_canaries and data.input_canary_kind is None
    assert data.training_x is data.train_x and data.training_y is data.train_y


def test_tabular_and_text_run_dirs_keep_canaries_out_of_members(tmp_path: Path) -> None:
    tabular = validate_config(
        {
            "name": "tab",
            "data": {"name": "randhie", "options": {"max_rows": 600}},
            "partition": {"scheme": "iid", "num_sites": 2},
            "model": {"name": "mlp"},
            "audit": {"input_canaries": 30},
        }
    )
    prepare_run_dir(tabular, run_files(tmp_path / "tab"))
    assert (
        _check_site_file(run_files(tmp_path / "tab").site_file(1), 30).input_canary_kind
        == "rare_row"
    )

    text = validate_config(
        {
            "name": "text",
            "data": {
                "name": "bible",
                "options": {"max_documents": 30, "vocab_size": 300, "max_chunks_per_document": 4},
            },
            "partition": {"scheme": "iid", "num_sites": 2},
            "model": {"name": "gpt2_small"},
            "audit": {"input_canaries": 25},
        }
    )
    prepare_run_dir(text, run_files(tmp_path / "text"))
    data = _check_site_file(run_files(tmp_path / "text").site_file(0), 25)
    assert data.input_canary_kind == "random_tokens" and data.input_canary_y is None
    assert data.training_y is None


def test_site_file_round_trip_without_pickle(tmp_path: Path) -> None:
    x = np.arange(24, dtype=np.uint8).reshape(6, 1, 2, 2)
    data = SiteData(
        site_id=4,
        train_x=x[:4],
        train_y=np.arange(4),
        holdout_x=x[:0],
        holdout_y=np.arange(0),
        test_x=x[:0],
        test_y=np.arange(0),
    ).with_input_canaries(x[4:], np.array([1, 2]), np.array([True, False]), kind="noise_image")
    data.save(tmp_path / "site.npz")
    with np.load(tmp_path / "site.npz", allow_pickle=False) as f:
        assert f["input_canary_kind"].dtype.kind == "U" and f["input_canary_kind"].ndim == 0
    back = SiteData.load(tmp_path / "site.npz")
    assert back.input_canary_kind == "noise_image"
    np.testing.assert_array_equal(back.input_canary_included, [True, False])
    np.testing.assert_array_equal(back.training_x, x[:5])
    np.testing.assert_array_equal(back.training_y, [0, 1, 2, 3, 1])
    # A site file from before the input canaries' keys said which (canary_x, ...) reads the same.
    with np.load(tmp_path / "site.npz", allow_pickle=False) as f:
        older = {key.removeprefix("input_"): f[key] for key in f.files}
    np.savez(tmp_path / "older.npz", **older)
    old = SiteData.load(tmp_path / "older.npz")
    assert "canary_x" in older and old.input_canary_kind == "noise_image"
    for key in ("x", "y", "included"):
        name = f"input_canary_{key}"
        np.testing.assert_array_equal(getattr(old, name), getattr(back, name))
    with pytest.raises(ValueError, match="3 coins"):
        data.with_input_canaries(x[4:], np.array([1, 2]), np.ones(3, bool), kind="noise_image")


# -- the one-run audit --------------------------------------------------------------------


def test_canary_audit_separated_losses() -> None:
    coins = input_canary_coins(200, seed=0, site_id=0)
    losses = np.where(coins, 0.01, 3.0) + np.random.default_rng(0).uniform(0, 1e-3, 200)
    result = input_canary_audit(losses, coins, beta=0.05, kind="noise_image")
    assert result.eps_lb > 1.0 and result.correct == result.guesses
    lo, hi = result.eps_interval
    assert lo == result.eps_lb and hi is None  # every guess right: no finite upper end
    assert result.n_canaries == 200 and result.n_included == int(coins.sum())
    assert result.member_guesses + result.nonmember_guesses == result.guesses
    assert result.score == INPUT_CANARY_SCORE and result.kind == "noise_image"
    # The f-DP reading of the same guesses at the default delta, with its GDP mu.
    assert result.fdp_delta == 1e-5 and result.fdp_mu is not None and result.fdp_mu > 0
    assert result.eps_lb_fdp is not None and result.eps_lb_fdp >= result.eps_lb
    text = json.dumps(json_safe(result), allow_nan=False)
    assert from_dict(InputCanaryResult, json.loads(text)) == result

    # Mostly separated: a finite interval around the selected rule's accuracy.
    noisy = np.where(coins, 1.0, 2.0) + np.random.default_rng(1).normal(0, 0.6, 200)
    result = input_canary_audit(noisy, coins, beta=0.05, kind="x")
    lo, hi = result.eps_interval
    assert 0 < lo <= hi < math.inf and result.correct < result.guesses
    assert math.log(result.correct / (result.guesses - result.correct)) <= hi


def test_canary_audit_is_o1_on_negative_losses() -> None:
    rng = np.random.default_rng(3)
    for trial in range(20):
        coins = input_canary_coins(150, seed=trial, site_id=1)
        losses = rng.exponential(1.0, 150) - 0.4 * coins
        result = input_canary_audit(losses, coins, beta=0.05, kind="k")
        o1 = o1_lower_bound(-losses, coins.astype(int), beta=0.05)
        assert result.eps_lb == o1.lower_bound
        assert (result.guesses, result.correct) == (o1.guesses, o1.correct)
        assert result.n_pairs_tried == o1.n_pairs_tried


def test_canary_audit_under_the_null_rarely_certifies() -> None:
    beta, trials = 0.05, 400
    positives = 0
    for trial in range(trials):
        coins = input_canary_coins(200, seed=trial, site_id=0)
        losses = np.random.default_rng(10_000 + trial).exponential(1.0, 200)
        positives += input_canary_audit(losses, coins, beta=beta, kind="k").eps_lb > 0
    # At most beta of the trials (plus three binomial standard deviations).
    assert positives / trials <= beta + 3 * math.sqrt(beta * (1 - beta) / trials)


def test_canary_audit_needs_both_classes() -> None:
    with pytest.raises(ValueError, match="none of the 5 canaries is excluded"):
        input_canary_audit(np.ones(5), np.ones(5, bool), beta=0.05, kind="k")
    with pytest.raises(ValueError, match="none of the 5 canaries is included"):
        input_canary_audit(np.ones(5), np.zeros(5, bool), beta=0.05, kind="k")


def test_trained_model_reveals_its_canaries(digits: Dataset, tmp_path: Path) -> None:
    """Ground truth end to end without Flower: a model trained on members plus the included
    canaries, audited by the site's own code path, certifies eps > 0."""
    config = _digits_config(audit={"input_canaries": 100})
    prepare_run_dir(config, run_files(tmp_path))
    data = SiteData.load(run_files(tmp_path).site_file(0))
    task = make_task(config, DatasetMeta.of(digits))
    model = task.make_model()
    # Ten epochs already fit every included canary (92 of 92 guesses right); trained on the
    # members alone (the canaries left out), the same audit reads 0.
    task.train_model(
        model, data.training_x, data.training_y, epochs=10, seed=0, device=torch.device("cpu")
    )
    out = input_canary_audit_of(task, model, data, beta=0.05, delta=1e-6, device_name="cpu")
    assert out.n_canaries == 100 and out.kind == "noise_image"
    assert out.fdp_delta == 1e-6 and out.eps_lb_fdp is not None
    assert out.eps_lb > 0, out


def test_site_audit_fails_fast_on_one_sided_coins() -> None:
    x = np.zeros((6, 1, 2, 2), dtype=np.uint8)
    data = SiteData(
        site_id=1,
        train_x=x[:3],
        train_y=np.zeros(3, dtype=np.int64),
        holdout_x=x[:0],
        holdout_y=np.zeros(0, dtype=np.int64),
        test_x=x[:0],
        test_y=np.zeros(0, dtype=np.int64),
    ).with_input_canaries(x[3:], np.zeros(3, dtype=np.int64), np.ones(3, bool), kind="noise_image")
    runner = make_audit_runner(SiteAuditPolicy(settings=AuditConfig()))
    # Before PANORAMIA runs (no task or model is touched).
    with pytest.raises(ValueError, match="all 3 canary coins came out included"):
        runner(None, torch.nn.Identity(), data, 0, {}, {})


# -- a real federated run -----------------------------------------------------------------


@pytest.mark.slow
def test_federated_run_writes_canary_audit(tmp_path: Path) -> None:
    from panoramia_fl.simulations.runner import run_experiment

    config = _digits_config(
        "fl-canaries", partition={"scheme": "quantity", "num_sites": 2, "sizes": [500, 500]}
    )
    run_dir = tmp_path / "run"
    run_experiment(config, run_dir, write_report=False)
    audit = json.loads((run_dir / "audits" / "site-0.json").read_text())
    assert audit["status"] == "ok", audit.get("error")
    canary = audit["input_canaries"]
    data = SiteData.load(run_files(run_dir).site_file(0))
    assert canary["n_canaries"] == 40 and canary["kind"] == "noise_image"
    assert canary["n_included"] == int(data.input_canary_included.sum())
    assert canary["eps_interval"][0] == canary["eps_lb"]
    # It is the audit of these canaries against the final global model: redone here, it
    # reads the same.
    from panoramia_fl.ml.saved_models import load_global_model, task_from_meta

    model, checkpoint = load_global_model(run_dir / "global_model.pt")
    task = task_from_meta(checkpoint.meta)
    again = input_canary_audit_of(
        task, model, data, beta=canary["beta"], delta=canary["fdp_delta"], device_name="cpu"
    )
    assert (again.guesses, again.correct) == (canary["guesses"], canary["correct"])
    assert again.eps_lb == pytest.approx(canary["eps_lb"], rel=1e-9, abs=1e-12)
    assert canary["fdp_delta"] == config.dp.delta  # the run's delta reaches the site
    assert again.eps_lb_fdp == pytest.approx(canary["eps_lb_fdp"], rel=1e-9, abs=1e-12)
    # The site trained on its members plus exactly its included canaries.
    rounds = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rounds[-1]["sites"]["0"]["num_examples"] == len(data.training_x)
    assert audit["n_members"] == len(data.train_x)


def test_too_few_canaries_is_a_config_error_naming_the_key():
    from panoramia_fl.simulations.experiment_config import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"audit\.input_canaries: 0 \(off\) or at least 20"):
        validate_config({"audit": {"input_canaries": 5}})
    assert validate_config({"audit": {"input_canaries": 20}}).audit.input_canaries == 20
    # The key's older name (older configs, older runs' config.yaml) reads as the new one.
    assert validate_config({"audit": {"canaries": 20}}).audit.input_canaries == 20
    with pytest.raises(ConfigError, match=r"audit: canaries is the older name of input_canaries"):
        validate_config({"audit": {"canaries": 20, "input_canaries": 20}})
