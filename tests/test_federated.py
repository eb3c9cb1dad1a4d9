"""Real Flower simulations on Ray (sklearn digits, 3 sites): plain, DP-SGD, resume (slow);
local training with FedProx and the DP ledger (fast)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from builders import run_files

from clients.privacy import DPSettings, PrivacyLedger
from clients.training import train_locally
from contracts.checkpoint import load_checkpoint
from ml.datasets import load_dataset
from ml.saved_models import load_global_model
from simulations.config import validate_config
from simulations.run_dir import DatasetMeta
from simulations.run_task import make_task
from simulations.runner import run_experiment

pytestmark = pytest.mark.ray


def _config(**sections):
    raw = {
        "name": "fl",
        "seed": 7,
        "data": {"name": "digits"},
        "partition": {"scheme": "iid", "num_sites": 3},
        "fl": {"rounds": 2, "local_epochs": 1, "batch_size": 32},
        "audit": {"enabled": False},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return validate_config(raw)


def _rounds(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("plain") / "run"
    run_experiment(_config(), run_dir, write_report=False)
    return run_dir


@pytest.mark.slow
def test_rounds_metrics_and_checkpoints(plain_run):
    rounds = _rounds(plain_run)
    assert [r["round"] for r in rounds] == [1, 2]
    for r in rounds:
        assert set(r["sites"]) == {"0", "1", "2"}
        assert all(s["dp_epsilon"] is None and s["train_loss"] > 0 for s in r["sites"].values())
    assert rounds[1]["global_loss"] < rounds[0]["global_loss"]
    assert rounds[1]["global_accuracy"] > 0.5
    assert (
        run_files(plain_run).round_checkpoint(1).exists()
        and run_files(plain_run).round_checkpoint(2).exists()
    )
    summary = json.loads((plain_run / "partition.json").read_text())
    assert [s["site_id"] for s in summary["sites"]] == [0, 1, 2]
    assert (plain_run / "config.yaml").exists()


@pytest.mark.slow
def test_global_model_loader_round_trip(plain_run):
    model, checkpoint = load_global_model(plain_run / "global_model.pt")
    assert checkpoint.round == 2
    assert not any(k.startswith("_module.") for k in checkpoint.state_dict)
    config = _config()
    dataset = load_dataset("digits")
    task = make_task(config, DatasetMeta.of(dataset))
    scores = task.evaluate(model, dataset.public_x, dataset.public_y, device=torch.device("cpu"))
    assert scores["accuracy"] == pytest.approx(_rounds(plain_run)[-1]["global_accuracy"])


@pytest.mark.slow
def test_resume_reruns_only_missing_rounds(plain_run):
    first = run_files(plain_run).round_checkpoint(1)
    before = first.stat().st_mtime_ns
    run_files(plain_run).round_checkpoint(2).unlink()
    (plain_run / "global_model.pt").unlink()
    lines = (plain_run / "metrics.jsonl").read_text().splitlines()
    (plain_run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    run_experiment(_config(), plain_run, write_report=False)
    assert first.stat().st_mtime_ns == before
    assert [r["round"] for r in _rounds(plain_run)] == [1, 2]
    assert load_checkpoint(plain_run / "global_model.pt").round == 2


@pytest.mark.slow
def test_dp_epsilon_accumulates_to_target(tmp_path):
    run_dir = tmp_path / "dp"
    config = _config(dp={"enabled": True, "target_epsilon": 2.0, "delta": 1e-5})
    run_experiment(config, run_dir, write_report=False)
    rounds = _rounds(run_dir)
    for site in ("0", "1", "2"):
        eps = [r["sites"][site]["dp_epsilon"] for r in rounds]
        assert all(b >= a for a, b in zip(eps, eps[1:], strict=False))
        assert eps[-1] <= 2.0 + 1e-6
        assert eps[-1] >= 1.8  # calibrated over all rounds, so close to the target
    _, checkpoint = load_global_model(run_dir / "global_model.pt")
    assert not any(k.startswith("_module.") for k in checkpoint.state_dict)


@pytest.mark.slow
def test_partial_participation_is_seeded(tmp_path):
    config = _config(fl={"rounds": 2, "fraction_train": 0.67, "strategy": "fedadam"})
    run_experiment(config, tmp_path / "a", write_report=False)
    sites = [sorted(r["sites"]) for r in _rounds(tmp_path / "a")]
    assert all(len(s) == 2 for s in sites)
    from server.strategy import StrategySettings, make_strategy

    strategy = make_strategy(
        StrategySettings(fraction_train=0.67, seed=7),
        num_sites=3,
        site_of_node={10: 0, 11: 1, 12: 2},
    )
    assert [[str(s) for s in strategy.sites_for_round(r)] for r in (1, 2)] == sites


def test_fedprox_term_pulls_towards_global():
    dataset = load_dataset("digits")
    config = _config(fl={"optimizer": "sgd", "learning_rate": 0.05})
    task = make_task(config, DatasetMeta.of(dataset))
    model = task.make_model()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    weights = [name for name, _ in model.named_parameters()]

    def drift(mu):
        out = train_locally(
            task,
            start,
            x=dataset.x[:300],
            y=dataset.y[:300],
            epochs=2,
            seed=0,
            device=torch.device("cpu"),
            proximal_mu=mu,
        )
        return sum(float((out.state_dict[k] - start[k]).norm()) for k in weights)

    assert drift(1.0) < 0.5 * drift(0.0)


def test_dp_ledger_continues_across_rounds():
    dataset = load_dataset("digits")
    task = make_task(
        _config(dp={"enabled": True, "noise_multiplier": 1.0}), DatasetMeta.of(dataset)
    )
    dp = DPSettings(
        target_epsilon=None,
        noise_multiplier=1.0,
        delta=1e-5,
        max_grad_norm=1.0,
        accountant="rdp",
        total_epochs=2,
    )
    ledger = PrivacyLedger(accountant="rdp", history=[])
    state = task.make_model().state_dict()
    eps = []
    for r in range(2):
        out = train_locally(
            task,
            state,
            x=dataset.x[:200],
            y=dataset.y[:200],
            epochs=1,
            seed=r,
            device=torch.device("cpu"),
            dp=dp,
            ledger=ledger,
        )
        state = out.state_dict
        eps.append(out.dp_epsilon)
    assert eps[1] > eps[0] > 0
    restored = PrivacyLedger.from_json(ledger.to_json())
    assert restored.epsilon(1e-5) == pytest.approx(eps[1])
    assert np.isfinite(eps[1])
