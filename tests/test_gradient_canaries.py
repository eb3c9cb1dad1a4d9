"""White-box gradient canaries in a site's DP-SGD: the statistics, their null, a faulty DP
setup, the canaries' cost, FedProx under DP, and the config rules (real Opacus, digits)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from opacus.optimizers import optimizer as dp_optimizer
from scipy import stats

from panoramia_fl.audit.canaries.gradient_canaries import (
    GradientCanaryResult,
    gradient_canary_audit,
)
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.real_path_canaries import GradientCanarySettings, GradientCanaryState
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.reporting.assembly.aggregate import site_report
from panoramia_fl.reporting.assembly.inputs import SiteAuditRead
from panoramia_fl.simulations.config_file import privacy_settings
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task

BETA = 0.05
DELTA = 1e-5


@pytest.fixture(scope="module")
def digits():
    dataset = load_dataset("digits")
    config = validate_config(
        {
            "data": {"name": "digits"},
            # A narrow CNN: the canaries own a phantom block no record's loss touches, so
            # what they read does not depend on the model's size, only the steps' cost does.
            "model": {"name": "small_cnn", "options": {"width": 4}},
            "fl": {"batch_size": 32, "optimizer": "sgd", "learning_rate": 0.05},
            "dp": {"enabled": True, "target_epsilon": 2.0, "accountant": "prv"},
            "audit": {"enabled": False},
        }
    )
    task = make_task(config, DatasetMeta.of(dataset))
    torch.manual_seed(0)
    return dataset, task, task.make_model().state_dict()


def _dp(epochs: int, **kw) -> DPSettings:
    settings = {
        "target_epsilon": 2.0,
        "noise_multiplier": None,
        "delta": DELTA,
        "max_grad_norm": 1.0,
        "accountant": "prv",
        "total_epochs": epochs,
    }
    return DPSettings(**(settings | kw))


def _train(digits, *, epochs, canaries=None, seed=0, dp=None, **kw):
    dataset, task, start = digits
    dp = dp or _dp(epochs)
    ledger = AccountantHistory(accountant=dp.accountant, history=[])
    out = train_locally(
        task,
        start,
        x=dataset.x[:320],
        y=dataset.y[:320],
        epochs=epochs,
        seed=seed,
        device=torch.device("cpu"),
        dp=dp,
        accountant_history=ledger,
        gradient_canaries=canaries,
        **kw,
    )
    return out, ledger


SIGMA = 1.0
"""A fixed noise multiplier for the tests that need DP-SGD but not its calibration (a PRV
search costs seconds of CPU), with the RDP accountant: its epsilon at the end of each round
takes a quarter second at sigma 1 (PRV's, at sigma 0.68, six seconds)."""


def _fixed(epochs: int) -> DPSettings:
    return _dp(epochs, target_epsilon=None, noise_multiplier=SIGMA, accountant="rdp")


@pytest.fixture(scope="module")
def plain(digits):
    """Two epochs of DP-SGD without canaries or a proximal term: the reference of the
    canaries' cost and of FedProx's pull."""
    out, _ = _train(digits, epochs=2, dp=_fixed(2))
    return out


def test_canaries_cost_no_accuracy_weights_are_bit_identical(digits, plain):
    state = GradientCanaryState.new(200, seed=1)
    with_gradient_canaries, _ = _train(digits, epochs=2, dp=_fixed(2), canaries=state)
    for key, value in plain.state_dict.items():
        assert torch.equal(value, with_gradient_canaries.state_dict[key]), key
    assert state.steps > 0 and state.rounds == 1
    assert np.isfinite(state.mechanism).all() and state.mechanism.std() > 0


@pytest.mark.slow
def test_null_directions_never_inserted_stay_within_beta():
    # 200 audits on canaries that never entered the mechanism: pure noise in, any coins out.
    rng = np.random.default_rng(5)
    q, sigma, steps = 0.1, 1.0, 100
    # 1,000 trials: at 200 a valid test at beta/4 still passes CP's upper end only with luck.
    trials, m = 1000, 400
    x = rng.standard_normal((steps, trials * m))
    llr = np.log1p(q * np.expm1(x / sigma - 1 / (2 * sigma**2))).sum(axis=0)
    positive = {"fdp": 0, "steinke": 0, "either": 0}
    for t in range(trials):
        coins = rng.integers(0, 2, m).astype(bool)
        result = gradient_canary_audit(
            {"mechanism": llr[t * m : (t + 1) * m]},
            coins,
            steps=steps,
            rounds=1,
            overhead_s=0.0,
            sample_rate=q,
            noise_multiplier=sigma,
            max_grad_norm=1.0,
            beta=BETA,
            delta=DELTA,
            seed=t,
        )
        level = result.levels["mechanism"]
        positive["fdp"] += level.eps_lb_fdp > 0
        positive["steinke"] += level.eps_lb_steinke > 0
        positive["either"] += max(level.eps_lb_fdp, level.eps_lb_steinke) > 0
    for count in positive.values():
        assert count / trials <= BETA / 2
        assert stats.binomtest(count, trials).proportion_ci(0.95, method="exact").high <= BETA


def _audit(
    state: GradientCanaryState, ledger: AccountantHistory, epochs: int
) -> GradientCanaryResult:
    return state.audit(beta=BETA, seed=0, dp=_dp(epochs), accountant_history=ledger)


@pytest.fixture(scope="module")
def honest(digits) -> tuple[GradientCanaryResult, float, float]:
    """An honest site's 10 epochs of DP-SGD calibrated to eps = 2, its white-box audit, its
    ledger's epsilon and the calibrated sigma: read by every test of an honest site (the run
    is seeded)."""
    state = GradientCanaryState.new(10_000, seed=2)
    _, ledger = _train(digits, epochs=10, canaries=state)
    (sigma,) = {float(h[0]) for h in ledger.history}
    return _audit(state, ledger, 10), ledger.epsilon(DELTA), sigma


def test_honest_dp_sgd_reads_below_and_near_its_accountant(honest):
    result, eps, _ = honest
    assert result.conformance is not None and result.conformance.failed == ()
    mech = result.levels["mechanism"]
    assert 0 < mech.eps_lb_fdp <= eps
    assert mech.eps_lb_steinke <= eps
    assert mech.eps_estimate_low <= eps * 1.2 and mech.eps_estimate_high >= eps * 0.8
    server = result.levels["server"]
    assert server.eps_lb_fdp <= eps
    assert from_dict(GradientCanaryResult, json.loads(json.dumps(json_safe(result)))) == result


def _ledger_checks(result: GradientCanaryResult, dp_epsilon: float):
    """The consortium report's ordering check of a site with this white-box audit."""
    audit = SiteAuditRead(
        site_id=4,
        status="ok",
        n_members=320,
        n_holdout=0,
        dp_epsilon=dp_epsilon,
        results=SiteResults(gradient_canaries=result),
    )
    settings = privacy_settings({"dp": {"level": "record", "delta": DELTA, "accountant": "prv"}})
    return site_report(4, audit, rounds=[], settings=settings, client_dp=None).checks


def test_half_the_noise_is_caught_at_the_mechanism_level(digits, honest, monkeypatch):
    # The fault where the real work happens: Opacus's noise draw, as a plugin could patch it.
    real = dp_optimizer._generate_noise
    monkeypatch.setattr(dp_optimizer, "_generate_noise", lambda *a, **k: 0.5 * real(*a, **k))
    state = GradientCanaryState.new(10_000, seed=3)
    # The honest run's calibrated sigma (the same calibration, not searched for again).
    sigma = honest[2]
    dp = _dp(10, target_epsilon=None, noise_multiplier=sigma)
    _, ledger = _train(digits, epochs=10, canaries=state, dp=dp)
    claimed = ledger.epsilon(DELTA)
    assert claimed == pytest.approx(2.0, rel=0.05)  # the accountant saw the full noise
    result = _audit(state, ledger, 10)
    assert result.levels["mechanism"].eps_lb_fdp > claimed
    violations = _ledger_checks(result, claimed).bound_violations
    assert "mechanism_eps_lb_fdp" in [v.bound for v in violations]
    message = next(v.message for v in violations if v.bound == "mechanism_eps_lb_fdp")
    assert message.startswith("site 4: white-box mechanism-level")
    assert "a DP bug or a wrong accountant" in message


def test_honest_site_passes_the_ordering_check(honest):
    result, eps, _ = honest
    assert _ledger_checks(result, eps).bound_violations == []


def test_fedprox_pulls_towards_the_anchor_under_dp(digits, plain):
    _, task, start = digits
    names = [n for n, _ in task.make_model().named_parameters()]

    def drift(state_dict) -> float:
        return sum(float((state_dict[k] - start[k]).norm()) for k in names)

    prox, _ = _train(digits, epochs=2, dp=_fixed(2), proximal_mu=5.0)
    assert drift(prox.state_dict) < 0.5 * drift(plain.state_dict)


@pytest.mark.parametrize(
    ("dp", "gradient_canaries", "match"),
    [
        ({"enabled": False}, 1000, "audit.gradient_canaries: .*record-level DP"),
        ({"level": "client", "client": {"noise_multiplier": 0.1}}, 1000, "record-level DP"),
        ({"enabled": True, "target_epsilon": 2}, 50, "audit.gradient_canaries.*at least 100"),
    ],
)
def test_config_rules_name_the_key(dp, gradient_canaries, match):
    with pytest.raises(ConfigError, match=match):
        validate_config({"dp": dp, "audit": {"gradient_canaries": gradient_canaries}})


def test_deployed_sites_draw_coins_the_server_cannot_replay(tmp_path):
    def settings(seed):
        return GradientCanarySettings(
            pairs=100, state_path=tmp_path / "none.npz", beta=BETA, seed=seed
        )

    seeded = [settings(7).load_or_new().coins for _ in range(2)]
    assert np.array_equal(*seeded)  # a simulation replays
    deployed = [settings(None).load_or_new().coins for _ in range(2)]
    assert not np.array_equal(*deployed)  # a deployment's coins come from the OS's entropy
