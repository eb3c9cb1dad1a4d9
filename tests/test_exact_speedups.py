"""Speed-ups that must not move a number: each is compared bit for bit with the plain
computation it replaces."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.ml import optimizers
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.models.image import MaxPool2x2
from panoramia_fl.ml.tasks import build_task
from panoramia_fl.ml.tasks.base import INFERENCE_BATCH, OptimizerSpec, inference_batch_size


@pytest.mark.parametrize("shape", [(8, 4, 12, 12), (5, 3, 7, 9)])
@pytest.mark.parametrize("activation", [torch.relu, lambda x: x])
def test_max_pool_matches_torch_values_and_gradients(shape, activation):
    torch.manual_seed(0)
    raw = torch.randn(shape)
    raw.view(-1)[::5] = 0.25  # ties inside windows, besides ReLU's zeros
    inputs = activation(raw)
    grad = torch.randn(shape[0], shape[1], shape[2] // 2, shape[3] // 2)
    results = []
    for layer in (nn.MaxPool2d(2), MaxPool2x2()):
        x = inputs.clone().requires_grad_()
        out = layer(x)
        out.backward(grad)
        with torch.no_grad():
            inference = layer(inputs)
        results.append((out.detach(), x.grad, inference))
    for ours, theirs in zip(results[1], results[0], strict=True):
        assert torch.equal(ours, theirs)


def _task(**options):
    return build_task(
        "image",
        model_name="small_cnn",
        num_classes=10,
        input_shape=(1, 8, 8),
        batch_size=32,
        **options,
    )


def _torch_max_pool(model: nn.Module) -> None:
    pools = [i for i, m in enumerate(model.features) if isinstance(m, MaxPool2x2)]
    assert len(pools) == 2
    for i in pools:
        model.features[i] = nn.MaxPool2d(2)


def _relus_keeping_their_inputs(model: nn.Module) -> None:
    relus = [m for m in model.features if isinstance(m, nn.ReLU)]
    assert len(relus) == 2 and all(m.inplace for m in relus)
    for m in relus:
        m.inplace = False


@pytest.mark.parametrize("plain", [_torch_max_pool, _relus_keeping_their_inputs])
def test_small_cnn_trains_as_its_plain_layers_would(plain):
    data = load_dataset("digits")
    x, y = data.x[:256], data.y[:256]
    task = _task()
    states = []
    for swap in (False, True):
        torch.manual_seed(0)
        model = task.make_model()
        if swap:
            plain(model)
        task.train_model(model, x, y, epochs=2, seed=3, device=torch.device("cpu"))
        states.append(model.state_dict())
    for key, value in states[0].items():
        assert torch.equal(value, states[1][key]), key


@pytest.mark.parametrize(
    ("optimizer", "dp"),
    [
        (OptimizerSpec("sgd", learning_rate=0.05, weight_decay=1e-4), False),
        (OptimizerSpec("adam", weight_decay=1e-4), False),
        (OptimizerSpec("adamw", weight_decay=1e-2), False),
        (OptimizerSpec("adam"), True),
    ],
    ids=["sgd", "adam", "adamw", "adam_dp_sgd"],
)
def test_a_site_trains_as_with_torch_optims_own_classes(monkeypatch, optimizer, dp):
    """``ml.optimizers`` calls torch's steps without their ``torch.compile`` wrappers: a
    site's local training, plain or under Opacus, is the same bits as with torch.optim's."""
    data = load_dataset("digits")
    task = _task(optimizer=optimizer, dp=dp)
    settings = None
    if dp:
        settings = DPSettings(
            target_epsilon=None,
            noise_multiplier=1.0,
            delta=1e-5,
            max_grad_norm=1.0,
            accountant="rdp",
            total_epochs=2,
        )
    torch.manual_seed(0)
    global_state = task.make_model().state_dict()
    trained, built = [], []
    for source in (optimizers, torch.optim):
        for name in ("SGD", "Adam", "AdamW"):
            monkeypatch.setattr(optimizers, name, getattr(source, name))
        built.append(type(task.optimizer.build(task.make_model().parameters())))
        result = train_locally(
            task,
            global_state,
            x=data.x[:256],
            y=data.y[:256],
            epochs=2,
            seed=3,
            device=torch.device("cpu"),
            dp=settings,
            accountant_history=AccountantHistory("rdp", []) if dp else None,
        )
        trained.append(result.state_dict)
    assert built[0].__module__ == optimizers.__name__ and built[1].__module__.startswith("torch.")
    for key, value in trained[0].items():
        assert not torch.equal(value, global_state[key]) or "num_batches" in key, key
        assert torch.equal(value, trained[1][key]), key


def test_evaluate_matches_loss_and_accuracy_of_their_own_passes():
    data = load_dataset("digits")
    x, y = data.x[:700], data.y[:700]
    task = _task()
    torch.manual_seed(0)
    model = task.make_model()
    task.train_model(model, x[:300], y[:300], epochs=1, seed=0, device=torch.device("cpu"))
    scores = task.evaluate(model, x, y, device=torch.device("cpu"))
    losses = task.per_record_loss(model, x, y, device=torch.device("cpu"))
    with torch.no_grad():
        logits = model(task.tensors(x, y)[0])
    correct = int((logits.argmax(dim=1).numpy() == y).sum())
    assert scores["loss"] == float(losses.mean())
    assert scores["accuracy"] == correct / len(x)
    assert 0 < correct < len(x) and np.isfinite(scores["loss"])


@pytest.mark.parametrize(
    ("modality", "model_name", "input_shape"),
    [("image", "small_cnn", (1, 28, 28)), ("tabular", "mlp", (23,))],
)
def test_a_records_outputs_do_not_depend_on_its_inference_batch(
    monkeypatch, modality, model_name, input_shape
):
    """The CPU's inference batch (``INFERENCE_BATCH``) is sized for the cache: the records'
    loss features are the same bits at 128 as at 512, the batch before. 677 records: the last
    batch is 165 records at 512 and 128 + 37 at 128 (a matrix product's rows past a multiple
    of 8 take other kernels: one record alone is not the same bits)."""
    rng = np.random.default_rng(0)
    x = rng.random((677, *input_shape), dtype=np.float32)
    if modality == "image":
        x = (x * 255).astype(np.uint8)
    y = rng.integers(0, 10, size=677)
    task = build_task(modality, model_name=model_name, num_classes=10, input_shape=input_shape)
    torch.manual_seed(0)
    model = task.make_model()
    cpu = torch.device("cpu")
    assert inference_batch_size(cpu) == 128
    ours = task.loss_features(model, x, y, device=cpu)
    monkeypatch.setitem(INFERENCE_BATCH, "cpu", 512)
    assert np.array_equal(ours, task.loss_features(model, x, y, device=cpu))
