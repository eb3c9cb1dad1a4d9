"""Real Flower simulations on Ray (sklearn digits, 3 sites): plain, DP-SGD, resume (slow);
local training with FedProx and the DP ledger (fast)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from builders import run_files

from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.contracts.reply_keys import ARRAYS, COVERED, REPLY_KEYS
from panoramia_fl.contracts.run_log import read_rounds
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.saved_models import load_global_model
from panoramia_fl.reporting.privacy.privacy_ledger import outside_guarantee
from panoramia_fl.simulations.config_file import report_config
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task
from panoramia_fl.simulations.runner import run_experiment

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
    # torch_threads auto, recorded as the count it resolved to: one CPU a site, one thread.
    platform = json.loads(run_files(plain_run).platform.read_text())
    assert platform["site_torch_threads"] == 1


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


DECLARED = 400
"""The record count every site of the DP run declares (each has about 380 members)."""


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("dp") / "run"
    dp = {"enabled": True, "target_epsilon": 2.0, "delta": 1e-5, "declared_size": DECLARED}
    run_experiment(_config(dp=dp), run_dir, write_report=False)
    return run_dir


@pytest.mark.slow
def test_dp_epsilon_accumulates_to_target(dp_run):
    run_dir = dp_run
    rounds = _rounds(run_dir)
    for site in ("0", "1", "2"):
        eps = [r["sites"][site]["dp_epsilon"] for r in rounds]
        assert all(b >= a for a, b in zip(eps, eps[1:], strict=False))
        assert eps[-1] <= 2.0 + 1e-6
        assert eps[-1] >= 1.8  # calibrated over all rounds, so close to the target
    _, checkpoint = load_global_model(run_dir / "global_model.pt")
    assert not any(k.startswith("_module.") for k in checkpoint.state_dict)


@pytest.mark.slow
def test_train_replies_carry_only_what_the_guarantee_covers(dp_run):
    """Every key of every train reply the server received (metrics.jsonl keeps them) is one
    the ledger counts as covered: with a public declared size, all of them; no record
    count, no loss."""
    layout = run_files(dp_run)
    settings = report_config(layout).privacy
    rounds = read_rounds(layout)
    covered = COVERED | {"declared"}
    for entry in rounds:
        assert sorted(entry.sites) == ["0", "1", "2"]
        for site in entry.sites.values():
            assert site.sent is not None and ARRAYS in site.sent
            assert {REPLY_KEYS[k].train for k in site.sent} <= covered, site.sent
            assert site.train_loss is None and site.num_examples is None
    assert all(outside_guarantee(s, rounds, settings) == [] for s in range(3))
    # The sites sampled at the declared size's rate, not their own count's.
    steps = -(-DECLARED // 32)
    for s in range(3):
        history = AccountantHistory.load(
            layout.site_accountant_history(s), accountant="rdp"
        ).history
        assert [(q, n) for _, q, n in history] == [(1 / steps, 2 * steps)]  # two rounds


@pytest.mark.slow
def test_partial_participation_is_seeded(tmp_path):
    config = _config(fl={"rounds": 2, "fraction_train": 0.67, "strategy": "fedadam"})
    run_experiment(config, tmp_path / "a", write_report=False)
    sites = [sorted(r["sites"]) for r in _rounds(tmp_path / "a")]
    assert all(len(s) == 2 for s in sites)
    from panoramia_fl.server.strategy import StrategySettings, make_strategy

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
    ledger = AccountantHistory(accountant="rdp", history=[])
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
            accountant_history=ledger,
        )
        state = out.state_dict
        eps.append(out.dp_epsilon)
    assert eps[1] > eps[0] > 0
    restored = AccountantHistory.from_json(ledger.to_json())
    assert restored.epsilon(1e-5) == pytest.approx(eps[1])
    assert np.isfinite(eps[1])


def test_dp_sgd_takes_its_rate_and_steps_from_the_declared_size():
    """Sites of 200 and 300 records that declare 930 at batch 10 both sample at 1/93 for 93
    steps with the same noise (Opacus's own sampler would take int(93.0000...) = 92 steps,
    and both numbers would follow each site's count)."""
    dataset = load_dataset("digits")
    config = _config(
        dp={"enabled": True, "noise_multiplier": 1.0},
        fl={"batch_size": 10},
        model={"name": "small_cnn", "options": {"width": 4}},
    )
    task = make_task(config, DatasetMeta.of(dataset))
    dp = DPSettings(
        target_epsilon=4.0,
        noise_multiplier=None,
        delta=1e-5,
        max_grad_norm=1.0,
        accountant="rdp",
        total_epochs=1,
        declared_size=930,
    )
    histories = []
    for n in (200, 300):
        ledger = AccountantHistory(accountant="rdp", history=[])
        train_locally(
            task,
            task.make_model().state_dict(),
            x=dataset.x[:n],
            y=dataset.y[:n],
            epochs=1,
            seed=0,
            device=torch.device("cpu"),
            dp=dp,
            accountant_history=ledger,
        )
        histories.append(ledger.history)
    assert histories[0] == histories[1]
    ((_, rate, steps),) = histories[0]
    assert (rate, steps) == (1 / 93, 93)
