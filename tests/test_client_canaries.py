"""Canary clients: the estimate on a pure Gaussian mechanism, and in real Flower runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from audit.client_canaries import (
    CanaryCosines,
    CanaryDesign,
    estimate_threat,
    gaussian_fit_epsilon,
    gaussian_pair_delta,
)
from audit.one_run import gdp_delta, gdp_eps
from contracts.run_files import RunLayout
from deployment.flower_apps import DeploymentConfigError, read_run
from server.checkpoint import load_checkpoint
from simulations.config import ConfigError, validate_config
from simulations.runner import run_experiment

# -- the math, no FL -----------------------------------------------------------------------


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
def test_gaussian_pair_delta_of_equal_variances_is_the_gdp_curve(mu):
    for eps in (0.0, 0.5, 2.0):
        assert gaussian_pair_delta((mu, 1.0), (0.0, 1.0), eps) == pytest.approx(
            gdp_delta(eps, mu), rel=1e-9, abs=1e-15
        )


def test_unequal_variances_cost_more_than_the_shift_alone():
    rng = np.random.default_rng(0)
    null = rng.normal(0, 1, 50_000)
    same = gaussian_fit_epsilon(rng.normal(1, 1, 50_000), null, delta=1e-5)
    wider = gaussian_fit_epsilon(rng.normal(1, 1.5, 50_000), null, delta=1e-5)
    assert same == pytest.approx(gdp_eps(mu=1.0, delta=1e-5), rel=0.05)
    assert wider > same


def test_design_is_seeded_unit_and_coin_split():
    a, b = CanaryDesign(count=50, dim=300, seed=4), CanaryDesign(count=50, dim=300, seed=4)
    assert np.array_equal(a.directions(), b.directions())
    assert np.array_equal(a.included(), b.included())
    assert np.allclose(np.linalg.norm(a.directions(), axis=1), 1.0, atol=1e-5)
    assert 30 < a.included().sum() < 70
    other = CanaryDesign(count=50, dim=300, seed=5)
    assert not np.array_equal(a.included(), other.included())


@pytest.mark.parametrize("seed", [0, 1])
def test_gaussian_mechanism_estimate_recovers_the_analytical_epsilon(seed):
    """1,000 canaries in one release of the sum of the inserted directions plus N(0, z^2 I):
    a mu = 1/z Gaussian mechanism for each canary; the estimate is within 10% of its eps,
    and the lower bound stays below it."""
    z, delta, dim = 0.5, 1e-5, 20_000
    design = CanaryDesign(count=1000, dim=dim, seed=seed)
    directions, included = design.directions(), design.included()
    noise = np.random.default_rng([seed, 1]).standard_normal(dim)
    release = directions[included].sum(axis=0).astype(np.float64) + z * noise
    values = CanaryCosines.from_deltas(directions, [release])
    est = estimate_threat("final", values.final, included, delta=delta, beta=0.05)
    analytical = gdp_eps(mu=1 / z, delta=delta)
    assert est.eps_estimate == pytest.approx(analytical, rel=0.10)
    assert 0 < est.eps_lb <= analytical


def test_all_iterates_takes_the_largest_cosine_of_any_round():
    design = CanaryDesign(count=10, dim=500, seed=0)
    d = design.directions()
    rounds = [d[0] * 3.0 + d[1], d[1] * 3.0 + d[0]]
    values = CanaryCosines.from_deltas(d, rounds)
    cos = lambda v, u: float(v @ u) / float(np.linalg.norm(u))  # noqa: E731
    assert values.all_iterates[0] == pytest.approx(max(cos(d[0], r) for r in rounds), rel=1e-5)
    assert values.final[0] == pytest.approx(cos(d[0], rounds[0] + rounds[1]), rel=1e-5)


# -- config ---------------------------------------------------------------------------------


def _raw(dp: dict, **audit) -> dict:
    return {
        "name": "canary-clients",
        "seed": 2,
        "data": {"name": "digits"},
        "partition": {"scheme": "iid", "num_sites": 2},
        "model": {"name": "small_cnn", "options": {"width": 8}},
        "fl": {"rounds": 3, "local_epochs": 1, "batch_size": 32},
        "dp": dp,
        "audit": {"enabled": False, "canary_clients": 20, **audit},
    }


def test_too_few_canary_clients_is_a_config_error():
    with pytest.raises(ConfigError, match="audit.canary_clients"):
        validate_config(_raw({"level": "none"}, canary_clients=3))


def test_canary_clients_are_refused_under_the_deployment_engine(tmp_path):
    text = yaml.safe_dump(_raw({"level": "none"}))
    with pytest.raises(DeploymentConfigError, match="audit.canary_clients.*simulations only"):
        read_run({"run-dir": str(tmp_path), "experiment-config": text})


# -- real Flower runs ------------------------------------------------------------------------

CLIENT_DP = {"level": "client", "client": {"noise_multiplier": 1.0, "clipping_norm": 1.0}}


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("canary-clients-dp")
    config = validate_config({**_raw(CLIENT_DP), "output_dir": str(out)})
    return config, run_experiment(config, out / "dp").run_dir


def test_dp_run_writes_the_file_the_ledger_and_the_report_line(dp_run):
    config, run_dir = dp_run
    result = json.loads(RunLayout(run_dir).client_canaries.read_text())
    assert result["canary_clients"] == 20
    assert 0 < result["inserted"] < 40
    assert result["scale"] == "clipping norm"
    assert set(result["estimates"]) == {"final", "all_iterates"}
    assert result["accountant_epsilon"] > 0
    # The twin without canaries was trained: the canaries' accuracy cost is on record.
    assert result["accuracy_without_canaries"] is not None
    assert RunLayout(RunLayout(run_dir).no_canary_twin).round_checkpoints().keys() == {1, 2, 3}
    assert result["outweighed"]  # ~20 canaries beside 2 sites
    report = json.loads((run_dir / "report.json").read_text())
    final = result["estimates"]["final"]
    for row in report["ledger"]:
        assert row["client_eps_estimate"] == pytest.approx(final["eps_estimate"])
        assert row["client_eps_lb"] == pytest.approx(final["eps_lb"])
        assert row["dp_epsilon_client"] is not None
    assert report["client_canaries"]["ledger_threat"] == "final"
    md = (run_dir / "report.md").read_text()
    assert "## Canary clients" in md and "Canary cost: global accuracy" in md
    assert "outweigh the real sites" in md
    assert "Canary clients" in (run_dir / "report.html").read_text()


def test_canaries_go_through_flowers_dp_wrapper(dp_run):
    """Flower's wrapper noises the mean with std z C / k: k counts the canaries, so the
    noise of a round's global delta (which it dominates) shrinks with their number."""
    config, run_dir = dp_run
    result = json.loads(RunLayout(run_dir).client_canaries.read_text())
    layout = RunLayout(run_dir)
    a = load_checkpoint(layout.round_checkpoint(1)).state_dict
    b = load_checkpoint(layout.round_checkpoint(2)).state_dict
    step = np.concatenate([(b[k] - a[k]).numpy().ravel() for k in b])
    clients = 2 + result["mean_canaries_per_round"]  # fraction_train 1: every canary
    expected = np.sqrt(step.size) / clients  # z = C = 1
    assert np.linalg.norm(step) == pytest.approx(expected, rel=0.2)
    # Inserted directions stand out of the noise; the estimate stays near the accountant's.
    final = result["estimates"]["final"]
    assert final["inserted_mean"] > final["null_mean"]
    assert final["eps_lb"] <= result["accountant_epsilon"]


def test_estimate_without_dp_is_far_above_the_one_with_dp(dp_run, tmp_path):
    _, dp_dir = dp_run
    config = validate_config({**_raw({"level": "none"}), "output_dir": str(tmp_path)})
    run_dir = run_experiment(config, tmp_path / "plain", write_report=False).run_dir
    plain = json.loads(RunLayout(run_dir).client_canaries.read_text())
    private = json.loads(RunLayout(dp_dir).client_canaries.read_text())
    assert plain["scale"] == "median site update norm"
    assert plain["accountant_epsilon"] is None
    est_plain = plain["estimates"]["final"]["eps_estimate"]
    est_dp = private["estimates"]["final"]["eps_estimate"]
    assert est_plain == "inf" or est_plain > 3 * est_dp
