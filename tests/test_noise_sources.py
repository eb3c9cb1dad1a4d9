"""DP noise nobody can replay on a real deployment, reproducible noise in simulation.

The deployed site is built by the Deployment Engine's own resolver and the deployed server's
settings by the ServerApp's own function, from the same run config and seed as the
simulation's; both train (DP-SGD) and draw client-level noise twice.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict

from panoramia_fl.clients.privacy import AccountantHistory
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.run_files import NOISE_NOTES
from panoramia_fl.deployment.flower_apps import (
    DeploymentResolver,
    deployed_server_settings,
    read_run,
)
from panoramia_fl.deployment.flwr_run_files import prepare_deployment, run_config_values
from panoramia_fl.server.server_app import seed_server_noise
from panoramia_fl.simulations.apps import SiteResolver, server_settings
from panoramia_fl.simulations.experiment_config import validate_config

CONFIG = {
    "name": "noise",
    "seed": 0,
    "data": {"name": "digits"},
    "partition": {"scheme": "iid", "num_sites": 2},
    "model": {"name": "small_cnn", "options": {"width": 4}},
    "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 64},
    "dp": {"level": "both", "noise_multiplier": 1.0, "client": {"noise_multiplier": 1.0}},
    "audit": {"enabled": False},
}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    config = validate_config(CONFIG)
    files = prepare_deployment(config, tmp_path_factory.mktemp("noise") / "run")
    run_config = run_config_values(config, files.layout)
    return config, files, run_config


def _context(run_config: dict, node_config: dict) -> Context:
    return Context(
        run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config=run_config
    )


def _train_twice(runtime) -> list[dict[str, torch.Tensor]]:
    """The site's DP-SGD round, twice, from the same weights, seed and ledger."""
    start = runtime.task.make_model().state_dict()
    out = []
    for _ in range(2):
        result = train_locally(
            runtime.task,
            start,
            x=runtime.data.training_x,
            y=runtime.data.training_y,
            epochs=1,
            seed=123,  # what the server would send: the same both times
            device=torch.device("cpu"),
            dp=runtime.dp,
            accountant_history=AccountantHistory(accountant=runtime.dp.accountant, history=[]),
            secure_noise=runtime.secure_noise,
        )
        out.append(result.state_dict)
    return out


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_deployed_sites_draw_noise_the_server_cannot_replay(deployment):
    config, files, run_config = deployment
    context = _context(run_config, files.node_configs[0])
    deployed = DeploymentResolver()(context)
    assert deployed.secure_noise and deployed.dp is not None
    first, second = _train_twice(deployed)
    assert not _same(first, second)  # same seed, same data, same weights: other noise

    run = read_run(run_config)
    simulated = SiteResolver(config, run.meta, run.layout)(context)
    assert not simulated.secure_noise
    first, second = _train_twice(simulated)
    assert _same(first, second)  # a simulation replays its seeded noise exactly


def _client_noise(settings) -> np.ndarray:
    """Client-level noise as Flower's wrapper draws it after the server's start-up."""
    settings.initial_state()  # seeds numpy from the run's seed, as every start does
    seed_server_noise(settings.noise_source)
    return np.random.normal(0, 1, 8)


def test_deployed_server_noise_is_not_the_seed_stream(deployment):
    config, files, run_config = deployment
    run = read_run(run_config)
    deployed = deployed_server_settings(run, ("train",))
    assert deployed.noise_source == "os-entropy"
    assert not np.array_equal(_client_noise(deployed), _client_noise(deployed))
    np.random.seed(config.seed)
    seed_stream = np.random.normal(0, 1, 8)
    assert not np.array_equal(_client_noise(deployed), seed_stream)

    simulated = server_settings(config, run.meta, run.layout, phases=("train",), progress=False)
    assert simulated.noise_source == "seeded"
    assert np.array_equal(_client_noise(simulated), _client_noise(simulated))
    assert np.array_equal(_client_noise(simulated), seed_stream)
    assert NOISE_NOTES["seeded"] == (
        "noise seeded for reproducibility: a simulation, not a guarantee against anyone "
        "who knows the seed"
    )
