"""gpt2_small + TextLMTask: losses, loss features, training, evaluation, Opacus DP-SGD."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from transformers.pytorch_utils import Conv1D

from panoramia_fl.ml.models import MODELS
from panoramia_fl.ml.tasks import build_task
from panoramia_fl.ml.tasks.base import OptimizerSpec
from panoramia_fl.ml.training import run_epoch

CPU = torch.device("cpu")
VOCAB = 64


def _task(**kw):
    return build_task(
        "text",
        model_name="gpt2_small",
        num_classes=VOCAB,
        input_shape=(16,),
        batch_size=16,
        optimizer=OptimizerSpec(name="adam", learning_rate=3e-3),
        model_options={"n_layer": 1, "n_embd": 32, "n_head": 2, "dropout": 0.0},
        **kw,
    )


def _chunks(n: int, seed: int) -> np.ndarray:
    """Learnable sequences: each row counts up by a row-specific step (mod VOCAB)."""
    rng = np.random.default_rng(seed)
    start, step = rng.integers(0, VOCAB, n), rng.integers(1, 4, n)
    return (start[:, None] + step[:, None] * np.arange(16)[None]) % VOCAB


def test_model_registered_and_dp_friendly() -> None:
    assert MODELS.meta("gpt2_small")["modality"] == "text"
    model = _task().make_model()
    assert not any(isinstance(m, Conv1D) for m in model.modules())
    assert model.lm.lm_head.weight is model.lm.transformer.wte.weight  # tied
    logits = model(torch.as_tensor(_chunks(3, 0)))
    assert logits.shape == (3, 16, VOCAB)


def test_losses_features_training_and_evaluation() -> None:
    task = _task()
    model = task.make_model()
    x = _chunks(64, 1)
    before = task.per_record_loss(model, x, None, device=CPU)
    feats = task.loss_features(model, x, None, device=CPU)
    assert before.shape == (64,) and feats.shape == (64, 16)
    np.testing.assert_allclose(feats[:, 0], before, rtol=1e-5)
    np.testing.assert_allclose(feats[:, 1:].mean(axis=1), before, rtol=1e-5)
    task.train_model(model, x, None, epochs=15, seed=0, device=CPU)
    after = task.per_record_loss(model, x, None, device=CPU)
    assert after.mean() < 0.6 * before.mean()
    ev = task.evaluate(model, x, None, device=CPU)
    assert ev["loss"] == pytest.approx(float(after.mean()), rel=1e-4)
    assert ev["perplexity"] == pytest.approx(np.exp(ev["loss"]), rel=1e-6)
    assert 0.3 < ev["accuracy"] <= 1.0
    with pytest.raises(ValueError, match="integer token ids"):
        task.per_record_loss(model, x.astype(np.float32), None, device=CPU)


def test_opacus_dp_sgd_trains_with_per_sample_gradients() -> None:
    from opacus import PrivacyEngine
    from opacus.validators import ModuleValidator

    task = _task(dp=True)
    model = task.make_model()
    assert ModuleValidator.validate(model, strict=False) == []
    x = _chunks(96, 2)
    before = float(task.per_record_loss(model, x, None, device=CPU).mean())
    model.train()  # Opacus refuses a module in eval mode
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = task.loader(x, None, shuffle=True, seed=0)
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp_model, dp_opt, dp_loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=0.3,
            max_grad_norm=1.0,
            poisson_sampling=True,
        )
        # one batch by hand: every trainable parameter gets per-sample gradients, the tied
        # embedding once for the sum of its two uses
        (ids,) = next(iter(dp_loader))
        task.batch_loss(dp_model, (ids,)).backward()
        for name, p in dp_model.named_parameters():
            assert p.grad_sample is not None, name
            assert p.grad_sample.shape == (len(ids), *p.shape), name
        dp_opt.zero_grad(set_to_none=True)
        for _ in range(12):
            run_epoch(dp_model, dp_loader, dp_opt, lambda b: task.batch_loss(dp_model, b), CPU)
    after = float(task.per_record_loss(model, x, None, device=CPU).mean())
    assert after < before - 0.5
    eps = engine.get_epsilon(1e-5)
    assert 0 < eps < float("inf")
