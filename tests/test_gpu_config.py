"""configs/gpu.yaml: the GPU-sized config builds its ResNet-18 with GroupNorm and runs, shortened,
on a CPU through the CLI (real Flower simulation on files in Fashion-MNIST's IDX format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import run_files
from idx_files import make_idx_folder
from torch import nn

from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.ml.models import MODELS
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.experiment_config import load_config

pytestmark = pytest.mark.ray

GPU_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "gpu.yaml"

SHORT = [
    "partition.scheme=iid",
    "partition.num_sites=2",
    "partition.records_per_site=60",
    "fl.rounds=1",
    "fl.local_epochs=1",
    "fl.batch_size=32",
    "audit.enabled=false",
]


def test_gpu_config_is_a_groupnorm_resnet_at_full_size():
    config = load_config(GPU_CONFIG)
    assert config.model.name == "resnet18" and config.data.name == "fashion_mnist"
    assert config.partition.records_per_site > 2000  # the default's is 2,000
    model = MODELS.get("resnet18")(
        num_classes=10, dp=config.dp.enabled, input_shape=(1, 28, 28), **config.model.options
    )
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm | nn.BatchNorm2d)]
    assert norms and all(isinstance(m, nn.GroupNorm) for m in norms)
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


@pytest.mark.slow
def test_gpu_config_runs_shortened_on_cpu(tmp_path):
    make_idx_folder(tmp_path / "fmnist", n=200, n_test=40)
    sets = [*SHORT, f"data.root={tmp_path / 'fmnist'}", f"output_dir={tmp_path / 'runs'}"]
    argv = ["run", str(GPU_CONFIG)]
    for kv in sets:
        argv += ["--set", kv]
    assert cli_main(argv) == 0
    run_dir = tmp_path / "runs" / "gpu"
    layout = run_files(run_dir)
    rounds = [json.loads(line) for line in layout.metrics.read_text().splitlines()]
    assert rounds, "no round was recorded"
    checkpoint = load_checkpoint(layout.final_model)
    assert checkpoint.round == 1
    # GroupNorm layers have weights and biases but no running statistics.
    assert "bn1.weight" in checkpoint.state_dict
    assert not any("running_mean" in k for k in checkpoint.state_dict)
