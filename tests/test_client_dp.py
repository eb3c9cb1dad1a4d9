"""Client-level DP through Flower's wrappers: clipping, noise, accounting, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import run_files

from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.server.client_dp import (
    ClientDPAccounting,
    ClientDPSettings,
    calibrate_noise_multiplier,
    gaussian_epsilon,
)
from panoramia_fl.simulations.apps import client_dp_settings
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task
from panoramia_fl.simulations.runner import run_experiment

pytestmark = pytest.mark.ray


def _config(dp: dict, *, rounds: int = 1, sites: int = 2, **fl) -> object:
    return validate_config(
        {
            "name": "client-dp",
            "seed": 3,
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": sites},
            "model": {"name": "small_cnn", "options": {"width": 8}},
            "fl": {"rounds": rounds, "local_epochs": 2, "batch_size": 32, **fl},
            "dp": dp,
            "audit": {"enabled": False},
        }
    )


def _update(run_dir, round_: int) -> np.ndarray:
    """The global model's change in ``round_`` as one flat vector."""
    before = (
        load_checkpoint(run_files(run_dir).round_checkpoint(round_ - 1)).state_dict
        if round_ > 1
        else None
    )
    after = load_checkpoint(run_files(run_dir).round_checkpoint(round_)).state_dict
    if before is None:
        raise ValueError("round 1 has no checkpoint before it")
    return np.concatenate([(after[k] - before[k]).numpy().ravel() for k in after])


# -- accounting ---------------------------------------------------------------------------


def test_gaussian_epsilon_composes_over_releases():
    one = gaussian_epsilon(1.0, releases=1, delta=1e-5)
    eight = gaussian_epsilon(1.0, releases=8, delta=1e-5)
    assert 0 < one < eight
    assert gaussian_epsilon(1.0, releases=0, delta=1e-5) == 0.0
    # More noise, less epsilon; the record level (z / 2) costs more than the site level.
    assert gaussian_epsilon(2.0, releases=8, delta=1e-5) < eight
    assert gaussian_epsilon(0.5, releases=8, delta=1e-5) > eight


def test_calibrated_noise_meets_the_target_and_no_less_noise_would():
    z = calibrate_noise_multiplier(8.0, rounds=10, delta=1e-5)
    assert gaussian_epsilon(z, releases=10, delta=1e-5) <= 8.0
    assert gaussian_epsilon(z * 0.99, releases=10, delta=1e-5) > 8.0


def test_ledger_counts_a_site_only_in_its_rounds_and_truncates(tmp_path):
    settings = ClientDPSettings(noise_multiplier=1.5, delta=1e-5)
    ledger = ClientDPAccounting(settings, population_size=3, sites_per_round=2)
    for round_, sites in [(1, [0, 1]), (2, [1, 2]), (3, [0, 1])]:
        ledger.record_round(round_, sites)
    assert ledger.rounds == {0: [1, 3], 1: [1, 2, 3], 2: [2]}
    assert ledger.epsilon(1) == pytest.approx(gaussian_epsilon(1.5, releases=3, delta=1e-5))
    assert ledger.epsilon(2) < ledger.epsilon(0) < ledger.epsilon(1)
    assert ledger.epsilon_record(1) == pytest.approx(gaussian_epsilon(0.75, releases=3, delta=1e-5))
    ledger.save(run_files(tmp_path))
    again = ClientDPAccounting.load_or_new(
        run_files(tmp_path), settings, population_size=3, sites_per_round=2
    )
    assert again.rounds == ledger.rounds
    again.truncate(2)
    assert again.rounds == {0: [1], 1: [1, 2], 2: [2]}
    with pytest.raises(ValueError, match="other client-level DP settings"):
        ClientDPAccounting.load_or_new(
            run_files(tmp_path),
            ClientDPSettings(noise_multiplier=3.0, delta=1e-5),
            population_size=3,
            sites_per_round=2,
        )


# -- config -------------------------------------------------------------------------------


def test_dp_level_resolution_and_errors():
    assert _config({"level": "client", "client": {"noise_multiplier": 1.0}}).dp.client_level
    both = _config({"level": "both", "target_epsilon": 4, "client": {"target_epsilon": 20}}).dp
    assert both.record_level and both.client_level
    # inf switches the record level off and keeps the client level.
    off = _config({"level": "both", "target_epsilon": "inf", "client": {"noise_multiplier": 1}})
    assert off.dp.level == "client" and not off.dp.record_level
    assert _config({"enabled": True, "target_epsilon": 2}).dp.level == "record"
    with pytest.raises(ConfigError, match="client.target_epsilon or client.noise_multiplier"):
        _config({"level": "client"})
    with pytest.raises(ConfigError, match="fl.strategy fedavg or fedprox"):
        _config({"level": "client", "client": {"noise_multiplier": 1}}, strategy="fedadam")
    with pytest.raises(ConfigError, match="dp.client.clipped_count_stddev"):
        _config({"level": "client", "client": {"noise_multiplier": 1, "clipping": "adaptive"}})


def test_client_target_epsilon_is_calibrated_over_the_rounds():
    config = _config({"level": "client", "client": {"target_epsilon": 30}}, rounds=6)
    settings = client_dp_settings(config)
    assert settings is not None
    assert gaussian_epsilon(settings.noise_multiplier, releases=6, delta=1e-5) <= 30
    assert gaussian_epsilon(settings.noise_multiplier * 0.99, releases=6, delta=1e-5) > 30


# -- Flower's wrappers in real simulations ------------------------------------------------


CLIP_NORM = 0.01


def _unclipped_step(run_dir: Path, config) -> float:
    """Round 2's global step had no update been clipped: the sites' own local training from
    round 1's global model, as the run's sites train, averaged by FedAvg's record weights
    (in-process: a run of its own costs a Ray session)."""
    layout = run_files(run_dir)
    task = make_task(config, DatasetMeta.read(layout))
    start = load_checkpoint(layout.round_checkpoint(1)).state_dict
    updates, weights = [], []
    for site in range(config.partition.num_sites):
        data = SiteData.load(layout.site_file(site))
        trained = train_locally(
            task,
            start,
            x=data.train_x,
            y=data.train_y,
            epochs=config.fl.local_epochs,
            seed=config.seed,
            device=torch.device("cpu"),
        ).state_dict
        updates.append(np.concatenate([(trained[k] - v).numpy().ravel() for k, v in start.items()]))
        weights.append(len(data.train_x))
    return float(np.linalg.norm(np.average(updates, axis=0, weights=weights)))


@pytest.mark.slow
@pytest.mark.parametrize("side", ["server", "client"])
def test_updates_are_clipped(tmp_path, side):
    """Noise negligible, clipping norm far below the plain update: the global step (the
    mean of the clipped site updates) is at most the norm, and at it when both clip."""
    norm = CLIP_NORM
    dp = {
        "level": "client",
        "client": {"noise_multiplier": 1e-6, "clipping_norm": norm, "clipping_side": side},
    }
    run_dir = tmp_path / "run"
    config = _config(dp, rounds=2)
    run_experiment(config, run_dir, write_report=False)
    step = np.linalg.norm(_update(run_dir, 2))
    assert 0.2 * norm < step <= norm * 1.001
    assert _unclipped_step(run_dir, config) > 20 * norm  # so clipping did act


@pytest.mark.slow
def test_noise_has_the_configured_std_and_accounting_resumes(tmp_path):
    """std = z * C / k per coordinate; the ledger composes one release per round and a
    resumed run continues it without counting a redone round twice."""
    z, norm, sites = 2.0, 0.05, 2
    dp = {"level": "client", "client": {"noise_multiplier": z, "clipping_norm": norm}}
    run_dir = tmp_path / "run"
    run_experiment(_config(dp, rounds=2, sites=sites), run_dir, write_report=False)
    update = _update(run_dir, 2)
    expected = z * norm / sites
    # The clipped mean adds at most `norm` in L2 over all coordinates: negligible here.
    assert np.std(update) == pytest.approx(expected, rel=0.05)

    ledger = json.loads(run_files(run_dir).client_dp_accounting.read_text())
    assert ledger["noise_multiplier"] == z and ledger["sampling"] == "no-amplification"
    assert {s: v["rounds"] for s, v in ledger["sites"].items()} == {"0": [1, 2], "1": [1, 2]}
    two = gaussian_epsilon(z, releases=2, delta=1e-5)
    assert ledger["sites"]["0"]["epsilon"] == pytest.approx(two)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["sites"]["1"]["dp_epsilon_client"] for r in lines] == pytest.approx(
        [gaussian_epsilon(z, releases=1, delta=1e-5), two]
    )
    # Central client-level DP: no site's loss or count reached the server (nor the log).
    replies = [site for r in lines for site in r["sites"].values()]
    assert not any(site.get("train_loss") is not None for site in replies)
    assert not any(site.get("num_examples") is not None for site in replies)
    assert not any({"train-loss", "num-examples"} & set(site["sent"]) for site in replies)

    # A kill after round 2's ledger and metrics but before its checkpoint: resume redoes
    # round 2 and goes on to round 3 (more rounds are allowed on resume).
    run_files(run_dir).round_checkpoint(2).unlink()
    (run_dir / "global_model.pt").unlink()
    run_experiment(_config(dp, rounds=3, sites=sites), run_dir, write_report=False)
    ledger = json.loads(run_files(run_dir).client_dp_accounting.read_text())
    assert ledger["sites"]["0"]["rounds"] == [1, 2, 3]
    assert ledger["sites"]["0"]["epsilon"] == pytest.approx(
        gaussian_epsilon(z, releases=3, delta=1e-5)
    )
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3]


@pytest.fixture(scope="module")
def both_levels_run(tmp_path_factory) -> Path:
    """Record-level DP-SGD at the sites under client-level DP with adaptive clipping by the
    sites' mod: one run for the adaptive clipping's and the two levels' checks."""
    dp = {
        "level": "both",
        "noise_multiplier": 1.0,
        "client": {
            "noise_multiplier": 0.5,
            "clipping": "adaptive",
            "clipping_side": "client",
            "clipping_norm": 0.01,
            "clipped_count_stddev": 1.0,
        },
    }
    run_dir = tmp_path_factory.mktemp("both") / "run"
    run_experiment(_config(dp, rounds=2), run_dir, write_report=True)
    return run_dir


@pytest.mark.slow
def test_adaptive_clipping_at_the_sites_runs_and_is_accounted(both_levels_run):
    run_dir = both_levels_run
    ledger = json.loads(run_files(run_dir).client_dp_accounting.read_text())
    assert ledger["clipping"] == "adaptive" and ledger["clipping_side"] == "client"
    assert ledger["sites"]["1"]["epsilon"] == pytest.approx(
        gaussian_epsilon(0.5, releases=2, delta=1e-5)
    )
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2] and not any("failures" in r for r in lines)


@pytest.mark.slow
def test_both_levels_report_each_epsilon_and_the_smaller_record_guarantee(both_levels_run):
    run_dir = both_levels_run
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = lines[-1]["sites"]["0"]
    assert last["dp_epsilon"] > 0 and last["dp_epsilon_client"] > 0
    report = json.loads((run_dir / "report.json").read_text())
    site = next(s for s in report["sites"] if s["site_id"] == 0)
    privacy = site["privacy"]
    assert privacy["dp_epsilon"] == pytest.approx(last["dp_epsilon"])  # record level alone
    assert privacy["client_epsilon"] == pytest.approx(last["dp_epsilon_client"])
    assert privacy["client_epsilon_record"] == pytest.approx(
        gaussian_epsilon(0.25, releases=2, delta=1e-5)
    )
