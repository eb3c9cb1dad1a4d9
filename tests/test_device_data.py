"""Records go to the device once per fit, and the batches stay what they were: the same records
in the same order as torch's DataLoader over host tensors, so CPU results are bit-identical."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task
from panoramia_fl.ml.training import run_epoch

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine"))]  # fmt: skip


def _task():
    return build_task(
        "image", model_name="small_cnn", num_classes=10, input_shape=(1, 8, 8), batch_size=32
    )


def _host_loader(task, x, y, seed):
    """The loader as it was: host tensors, each batch copied to the device in the loop."""
    dataset = torch.utils.data.TensorDataset(*task.tensors(x, y))
    generator = torch.Generator().manual_seed(seed)
    return torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True, generator=generator)


@pytest.mark.parametrize("device", DEVICES)
def test_batches_are_on_the_device_in_the_host_order(device):
    data = load_dataset("digits")
    task = _task()
    x, y = data.x[:300], data.y[:300]
    ours = task.loader(x, y, shuffle=True, seed=7, device=torch.device(device))
    theirs = _host_loader(task, x, y, seed=7)
    for _ in range(2):  # two epochs: the generator advances the same way
        for (bx, by), (hx, hy) in zip(ours, theirs, strict=True):
            assert bx.device.type == device and by.device.type == device
            assert torch.equal(bx.cpu(), hx) and torch.equal(by.cpu(), hy)


def test_local_training_on_cpu_is_bit_identical_to_the_host_loop():
    data = load_dataset("digits")
    task = _task()
    x, y = data.x[:256], data.y[:256]
    torch.manual_seed(0)
    start = task.make_model().state_dict()
    result = train_locally(task, start, x=x, y=y, epochs=2, seed=5, device=torch.device("cpu"))
    # The same round with the old loop: host loader, a copy per batch.
    torch.manual_seed(5)
    model = task.make_model()
    model.load_state_dict(start)
    model.train()
    optimizer = task.optimizer.build(model.parameters())
    loader = _host_loader(task, x, y, seed=5)
    for _ in range(2):
        run_epoch(
            model, loader, optimizer, lambda b: task.batch_loss(model, b), torch.device("cpu")
        )
    for key, value in model.state_dict().items():
        assert torch.equal(result.state_dict[key].cpu(), value), key
    assert not np.isnan(result.train_loss)


def test_dp_sgd_batches_are_gathered_and_bit_identical_to_the_host_loader():
    """Opacus's Poisson loader fetches the task's batches through the same gathering: a round
    of DP-SGD gives the weights it gave with torch's record-by-record loader."""
    from dataclasses import dataclass

    from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
    from panoramia_fl.ml.tasks.image import ImageClassificationTask

    @dataclass
    class HostLoaderTask(ImageClassificationTask):
        def loader(self, x, y, *, shuffle, seed=0, batch_size=None, device=None):
            return _host_loader(self, x, y, seed)

    data = load_dataset("digits")
    x, y = data.x[:256], data.y[:256]
    options = dict(model_name="small_cnn", num_classes=10, input_shape=(1, 8, 8), batch_size=32)
    # A fixed sigma: what is compared is the batches the loaders gather, not the calibration
    # (PRV's search for a target epsilon costs seconds of CPU per run).
    dp = DPSettings(
        target_epsilon=None,
        noise_multiplier=1.0,
        delta=1e-5,
        max_grad_norm=1.0,
        accountant="prv",
        total_epochs=2,
    )
    torch.manual_seed(0)
    ours = build_task("image", dp=True, **options)
    start = ours.make_model().state_dict()
    states = [
        train_locally(
            task,
            start,
            x=x,
            y=y,
            epochs=2,
            seed=5,
            device=torch.device("cpu"),
            dp=dp,
            accountant_history=AccountantHistory(accountant="prv", history=[]),
        ).state_dict
        for task in (ours, HostLoaderTask(modality="image", dp=True, **options))
    ]
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key
