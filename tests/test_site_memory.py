"""What a round's training leaves behind in the site's process.

A Ray actor trains site after site. The objects of one training (the model, Opacus's
wrappers, the optimizer, our hooks) form reference cycles, so Python frees them only at its
next full collection. Until then they must not hold the last batch's gradients: under
DP-SGD those are per-sample (batch x weights, about 100 MB for the small CNN at batch 64),
and a process held one set per site it trained.
"""

from __future__ import annotations

import gc

import pytest
import torch

from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task

GRADIENTS = ("grad", "grad_sample", "summed_grad")


def _gradients_left(before: set[int]) -> list[str]:
    """The gradients still attached to parameters made since ``before`` (ids)."""
    left = []
    for obj in gc.get_objects():
        if isinstance(obj, torch.nn.Parameter) and id(obj) not in before:
            held = [a for a in GRADIENTS if getattr(obj, a, None) is not None]
            left += [f"{tuple(obj.shape)}.{a}" for a in held]
    return left


@pytest.mark.parametrize("dp", [False, True], ids=["plain", "dp-sgd"])
def test_a_trained_round_leaves_no_gradients_for_the_collector(dp):
    data = load_dataset("digits")
    x, y = data.x[:256], data.y[:256]
    task = build_task(
        "image",
        model_name="small_cnn",
        num_classes=10,
        input_shape=(1, 8, 8),
        batch_size=32,
        dp=dp,
    )
    private = {}
    if dp:
        settings = DPSettings(
            target_epsilon=None,
            noise_multiplier=1.0,
            delta=1e-5,
            max_grad_norm=1.0,
            accountant="rdp",
            total_epochs=1,
        )
        private = {"dp": settings, "accountant_history": AccountantHistory("rdp", [])}
    torch.manual_seed(0)
    start = task.make_model().state_dict()
    gc.collect()
    gc.disable()  # what a collection would free is exactly what is checked
    try:
        before = {id(o) for o in gc.get_objects() if isinstance(o, torch.nn.Parameter)}
        result = train_locally(
            task, start, x=x, y=y, epochs=1, seed=3, device=torch.device("cpu"), **private
        )
        assert _gradients_left(before) == []
    finally:
        gc.enable()
    assert result.state_dict.keys() == start.keys()
