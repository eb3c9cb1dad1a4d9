"""Canary clients: the estimate on a pure Gaussian mechanism, and in real Flower runs."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import yaml
from builders import load_run_of, run_files

from panoramia_fl.audit.canaries.client_canaries import (
    CanaryClientCosines,
    CanaryClientDesign,
    estimate_threat,
    gaussian_fit_epsilon,
    gaussian_pair_delta,
    pooled_gaussian_epsilon,
)
from panoramia_fl.audit.stats.one_run import gdp_delta, gdp_eps
from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.deployment.flower_apps import DeploymentConfigError, read_run
from panoramia_fl.reporting import build_report
from panoramia_fl.reporting.run.run_report import render_markdown
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.runner import run_experiment

pytestmark = pytest.mark.ray

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
    a, b = (
        CanaryClientDesign(count=50, dim=300, seed=4),
        CanaryClientDesign(count=50, dim=300, seed=4),
    )
    assert np.array_equal(a.directions(), b.directions())
    assert np.array_equal(a.included(), b.included())
    assert np.allclose(np.linalg.norm(a.directions(), axis=1), 1.0, atol=1e-5)
    assert 30 < a.included().sum() < 70
    other = CanaryClientDesign(count=50, dim=300, seed=5)
    assert not np.array_equal(a.included(), other.included())


def test_gaussian_mechanism_estimate_recovers_the_analytical_epsilon():
    """1,000 canaries in one release of the sum of the inserted directions plus N(0, z^2 I):
    a Gaussian mechanism for each canary, whose noise is z^2 plus what the other n - 1
    inserted directions add along it ((n - 1) / dim); the estimate is within 10% of its
    eps, its interval covers it, and the lower bound stays below it."""
    z, delta, dim = 0.5, 1e-5, 20_000
    seed = 0
    design = CanaryClientDesign(count=1000, dim=dim, seed=seed)
    directions, included = design.directions(), design.included()
    noise = np.random.default_rng([seed, 1]).standard_normal(dim)
    release = directions[included].sum(axis=0).astype(np.float64) + z * noise
    values = CanaryClientCosines.from_deltas(directions, [release])
    est = estimate_threat("final", values.final, included, delta=delta, beta=0.05)
    mu = 1 / math.sqrt(z * z + (included.sum() - 1) / dim)
    analytical = gdp_eps(mu=mu, delta=delta)
    assert est.eps_estimate == pytest.approx(analytical, rel=0.10)
    assert est.eps_estimate_low <= analytical <= est.eps_estimate_high
    assert 0 < est.eps_lb <= analytical


def test_two_variance_fit_drifts_upwards_with_few_canaries_the_pooled_reading_does_not():
    """An exact Gaussian mechanism (mu = sqrt 5: z = 1, 5 rounds), 50 canaries a side."""
    mu, delta = math.sqrt(5), 1e-5
    exact = gdp_eps(mu=mu, delta=delta)
    rng = np.random.default_rng(3)
    pooled, two = [], []
    for _ in range(100):
        inserted, null = rng.normal(mu, 1, 50), rng.normal(0, 1, 50)
        pooled.append(pooled_gaussian_epsilon(inserted, null, delta=delta)[0])
        two.append(gaussian_fit_epsilon(inserted, null, delta=delta))
    assert np.median(pooled) == pytest.approx(exact, rel=0.05)
    assert np.median(two) > 1.15 * exact


def test_all_iterates_takes_the_largest_cosine_of_any_round():
    design = CanaryClientDesign(count=10, dim=500, seed=0)
    d = design.directions()
    rounds = [d[0] * 3.0 + d[1], d[1] * 3.0 + d[0]]
    values = CanaryClientCosines.from_deltas(d, rounds)
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
        "model": {"name": "small_cnn", "options": {"width": 4}},
        "fl": {"rounds": 2, "local_epochs": 1, "batch_size": 32},
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


# -- real Flower runs: one tiny client-level DP run shared by the checks (no twin trained) ---

CLIENT_DP = {"level": "client", "client": {"noise_multiplier": 1.0, "clipping_norm": 1.0}}


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("canary-clients-dp")
    raw = _raw(CLIENT_DP, canary_client_twin=False)
    config = validate_config({**raw, "output_dir": str(out)})
    return config, run_experiment(config, out / "dp").run_dir


def test_dp_run_writes_the_file_the_ledger_and_the_report_section(dp_run):
    config, run_dir = dp_run
    result = json.loads(run_files(run_dir).client_canaries.read_text())
    assert result["canary_clients"] == 20
    assert 0 < result["inserted"] < 40
    assert result["scale"] == "clipping norm"
    assert set(result["estimates"]) == {"final", "all_iterates"}
    assert result["accountant_epsilon"] > 0
    assert not run_files(run_dir).canary_client_twin.exists()  # audit.canary_client_twin: false
    report = json.loads((run_dir / "report.json").read_text())
    final = result["estimates"]["final"]
    assert final["eps_estimate_low"] <= final["eps_estimate"] <= final["eps_estimate_high"]
    for site in report["sites"]:
        privacy = site["privacy"]
        assert privacy["client_eps_estimate"] == pytest.approx(final["eps_estimate"])
        assert privacy["client_eps_lb"] == pytest.approx(final["eps_lb"])
        assert privacy["client_epsilon"] is not None
        assert site["checks"]["bound_violations"] == []
    assert report["client_canaries"]["estimates"]["all_iterates"]["eps_lb"] is not None
    ledger = (run_dir / "ledger.csv").read_text().splitlines()[0].split(",")
    assert {"client_eps_estimate", "client_eps_lb"} <= set(ledger)
    md = (run_dir / "report.md").read_text()
    assert "## Canary clients" in md and "without (the run trained again)" not in md
    assert "The canaries outnumber the real sites" in md  # ~20 canaries beside 2 sites
    assert "Canary clients" in (run_dir / "report.html").read_text()


def test_canaries_go_through_flowers_dp_wrapper(dp_run):
    """Flower's wrapper noises the mean with std z C / k: k counts the canaries, so the
    noise of a round's global delta (which it dominates) shrinks with their number."""
    config, run_dir = dp_run
    result = json.loads(run_files(run_dir).client_canaries.read_text())
    layout = run_files(run_dir)
    a = load_checkpoint(layout.round_checkpoint(1)).state_dict
    b = load_checkpoint(layout.round_checkpoint(2)).state_dict
    step = np.concatenate([(b[k] - a[k]).numpy().ravel() for k in b])
    clients = 2 + result["mean_canaries_per_round"]  # fraction_train 1: every canary
    expected = np.sqrt(step.size) / clients  # z = C = 1
    assert np.linalg.norm(step) == pytest.approx(expected, rel=0.2)
    # Inserted directions stand out of the noise; the bound stays below the accountant's.
    final = result["estimates"]["final"]
    assert final["inserted_mean"] > final["null_mean"]
    assert final["eps_lb"] <= result["accountant_epsilon"]


def test_client_lower_bound_above_the_client_epsilon_is_a_violation(dp_run, tmp_path):
    """The run's file with its bound raised and both accuracies known (as a twin run
    records them): the check fires at every site and the report states the cost."""
    _, run_dir = dp_run
    copy = shutil.copytree(run_dir, tmp_path / "run")
    path = run_files(copy).client_canaries
    result = json.loads(path.read_text())
    result["estimates"]["final"]["eps_lb"] = 1e3
    result.update(accuracy_with_canaries=0.5, accuracy_without_canaries=0.75)
    path.write_text(json.dumps(result))
    report = build_report(load_run_of(copy))
    assert "cost +0.250." in render_markdown(report)
    for site in report.sites:
        (violation,) = site.checks.bound_violations
        assert violation.bound == "client_eps_lb"
        assert violation.dp_epsilon == site.privacy.client_epsilon
        assert "the whole site (client level)" in violation.message
