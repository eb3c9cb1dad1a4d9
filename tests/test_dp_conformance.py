"""The conformance checks of a site's real DP-SGD steps: faults injected where the real work
happens (Opacus's noise, sampler, clipping, calibration and accounting, patched as a plugin
module would) are each flagged by name, and honest runs raise no violation (real Opacus,
digits)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from opacus.accountants import utils as accountant_utils
from opacus.grad_sample import grad_sample_module
from opacus.optimizers import optimizer as dp_optimizer
from opacus.optimizers.optimizer import DPOptimizer
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from scipy import stats

from panoramia_fl.audit.canaries.gradient_canaries import GradientCanaryResult
from panoramia_fl.audit.conformance.checks import (
    STATISTICAL_CHECKS,
    ConformanceResult,
    conformance_audit,
)
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.real_path_canaries import GradientCanaryState
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.reporting.assembly.aggregate import site_report
from panoramia_fl.reporting.assembly.inputs import SiteAuditRead
from panoramia_fl.reporting.numbers.plain_language import conformance_sentence
from panoramia_fl.simulations.config_file import privacy_settings
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task

BETA = 0.05
DELTA = 1e-5
RECORDS = 320
ROUNDS = 2

Run = tuple[ConformanceResult, GradientCanaryResult, float]
"""A run's conformance checks, its whole white-box audit and its ledger's epsilon."""
Fault = Callable[[pytest.MonkeyPatch], None]
"""Patches one fault into Opacus (for one test or one run)."""


def _task(width: int, batch: int):
    dataset = load_dataset("digits")
    config = validate_config(
        {
            "data": {"name": "digits"},
            "model": {"name": "small_cnn", "options": {"width": width}},
            "fl": {"batch_size": batch, "optimizer": "sgd", "learning_rate": 0.05},
            "dp": {"enabled": True, "noise_multiplier": 1.0},
            "audit": {"enabled": False},
        }
    )
    task = make_task(config, DatasetMeta.of(dataset))
    torch.manual_seed(0)
    return dataset, task, task.make_model().state_dict()


@pytest.fixture(scope="module")
def digits():
    return _task(width=4, batch=32)


def _calibrated(accountant: str) -> DPSettings:
    """eps = 2 over the runs below (2 rounds of one epoch at q = 32 / 320)."""
    return DPSettings(
        target_epsilon=2.0,
        noise_multiplier=None,
        delta=DELTA,
        max_grad_norm=1.0,
        accountant=accountant,
        total_epochs=ROUNDS,
    )


@pytest.fixture(scope="module")
def sigma_for_eps2() -> float:
    """The noise multiplier of eps = 2 over the runs below (RDP: fast, and the checks read
    only the recorded sigma and q)."""
    return _calibrated("rdp").noise_for(32 / RECORDS)


def _run(digits, dp: DPSettings) -> Run:
    """Two rounds of a site's DP-SGD with its white-box audit; the conformance checks, the
    whole audit and the epsilon the ledger reports."""
    dataset, task, state = digits
    canaries = GradientCanaryState.new(200, seed=1)
    ledger = AccountantHistory(accountant=dp.accountant, history=[])
    for r in range(ROUNDS):
        out = train_locally(
            task,
            state,
            x=dataset.x[:RECORDS],
            y=dataset.y[:RECORDS],
            epochs=1,
            seed=r,
            device=torch.device("cpu"),
            dp=dp,
            accountant_history=ledger,
            gradient_canaries=canaries,
        )
        state = out.state_dict
    result = canaries.audit(beta=BETA, seed=0, dp=dp, accountant_history=ledger)
    assert result.conformance is not None
    return result.conformance, result, ledger.epsilon(DELTA)


def _fixed(sigma: float, accountant: str = "rdp") -> DPSettings:
    return DPSettings(
        target_epsilon=None,
        noise_multiplier=sigma,
        delta=DELTA,
        max_grad_norm=1.0,
        accountant=accountant,
        total_epochs=ROUNDS,
    )


def _violations(result: GradientCanaryResult, dp_epsilon: float):
    """The consortium report's violations of a site with this white-box audit."""
    audit = SiteAuditRead(
        site_id=4,
        status="ok",
        n_members=RECORDS,
        n_holdout=0,
        dp_epsilon=dp_epsilon,
        results=SiteResults(gradient_canaries=from_dict(GradientCanaryResult, json_safe(result))),
    )
    settings = privacy_settings({"dp": {"level": "record", "delta": DELTA, "accountant": "rdp"}})
    report = site_report(4, audit, rounds=[], settings=settings, client_dp=None)
    return report.checks.bound_violations


@pytest.fixture(scope="module")
def honest(digits, sigma_for_eps2) -> Run:
    """One honest run, read by every test that needs one (it is seeded: each would be the
    same run)."""
    return _run(digits, _fixed(sigma_for_eps2))


def test_honest_run_passes_every_check(honest):
    conformance, result, eps = honest
    assert eps == pytest.approx(2.0, abs=0.02)
    assert [c.name for c in conformance.failed] == []
    assert conformance.steps == result.steps > 0 and conformance.rounds == ROUNDS
    noise = next(c for c in conformance.checks if c.name == "noise_level")
    assert noise.factor == pytest.approx(1.0, abs=0.05)
    assert _violations(result, eps) == []
    written = json.loads(json.dumps(json_safe(conformance)))
    assert from_dict(ConformanceResult, written) == conformance
    # The site's page names what the checks compare: the steps in the accountant's history.
    assert "the steps in the accountant's history)" in conformance_sentence(conformance)


# Faults a plugin module could inject into Opacus: (name, patch, the check that must fail,
# the measured factor it must report).


def _half_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The noise on the model's gradients is half what the optimizer's setting says."""
    real = dp_optimizer._generate_noise
    monkeypatch.setattr(dp_optimizer, "_generate_noise", lambda *a, **k: 0.5 * real(*a, **k))


def _reused_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same noise vector on every step (one per parameter shape)."""
    real, drawn = dp_optimizer._generate_noise, {}

    def once(std, reference, generator=None, secure_mode=False):
        key = tuple(reference.shape)
        if key not in drawn:
            drawn[key] = real(std, reference, generator, secure_mode)
        return drawn[key].clone()

    monkeypatch.setattr(dp_optimizer, "_generate_noise", once)


def _sampling_at_2q(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Poisson sampler draws at twice the rate the loader (and the accountant) has."""

    def draws(self):
        for _ in range(self.steps):
            mask = torch.rand(self.num_samples, generator=self.generator) < 2 * self.sample_rate
            yield mask.nonzero(as_tuple=False).reshape(-1).tolist()

    monkeypatch.setattr(UniformWithReplacementSampler, "__iter__", draws)


def _clipping_at_2c(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-sample clipping at 2C while the noise stays at sigma C."""
    real = DPOptimizer.clip_and_accumulate

    def clip(self):
        norm = self.max_grad_norm
        self.max_grad_norm = 2 * norm
        try:
            real(self)
        finally:
            self.max_grad_norm = norm

    monkeypatch.setattr(DPOptimizer, "clip_and_accumulate", clip)


def _reseeded_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """The noise generator restarts from one seed every round."""
    real = PrivacyEngine.make_private

    def make_private(self, *args, **kwargs):
        module, optimizer, loader = real(self, *args, **kwargs)
        optimizer.generator = torch.Generator().manual_seed(7)
        return module, optimizer, loader

    monkeypatch.setattr(PrivacyEngine, "make_private", make_private)


def _uniform_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise of the right variance from a uniform law (bounded: no DP at all)."""

    def uniform(std, reference, generator=None, secure_mode=False):
        draw = torch.rand(reference.shape, generator=generator) - 0.5
        return (draw * std * math.sqrt(12)).to(reference.dtype)

    monkeypatch.setattr(dp_optimizer, "_generate_noise", uniform)


def _no_noise_every_fifth_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """``add_noise`` skips the noise on every fifth call."""
    real, calls = DPOptimizer.add_noise, [0]

    def add_noise(self):
        calls[0] += 1
        if calls[0] % 5:
            return real(self)
        for p in self.params:
            p.grad = p.summed_grad.view_as(p).clone()

    monkeypatch.setattr(DPOptimizer, "add_noise", add_noise)


def _divided_by_realised_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``scale_grad`` divides by the batch's realised size, which then leaks."""

    def scale_grad(self):
        for p in self.params:
            p.grad /= len(p.grad_sample)

    monkeypatch.setattr(DPOptimizer, "scale_grad", scale_grad)


def _grad_sample_halved(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-sample gradients computed at half their value: the clipping then lets records
    through at up to 2C."""
    real = grad_sample_module.create_or_accumulate_grad_sample

    def halved(*, param, grad_sample, max_batch_len):
        real(param=param, grad_sample=0.5 * grad_sample, max_batch_len=max_batch_len)

    monkeypatch.setattr(grad_sample_module, "create_or_accumulate_grad_sample", halved)


def _fixed_size_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler draws shuffled batches of the expected size instead of Poisson ones
    (each record still at rate q)."""

    def fixed(self):
        size = max(1, round(self.num_samples * self.sample_rate))
        for _ in range(self.steps):
            yield torch.randperm(self.num_samples, generator=self.generator)[:size].tolist()

    monkeypatch.setattr(UniformWithReplacementSampler, "__iter__", fixed)


def _one_record_in_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler draws at rate q, but one record rides along in every batch."""
    draw = UniformWithReplacementSampler.__iter__

    def favoured(self):
        for indices in draw(self):
            yield indices if 0 in indices else [0, *indices]

    monkeypatch.setattr(UniformWithReplacementSampler, "__iter__", favoured)


def _every_fifth_step_unprotected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fifth step the optimizer applies the raw mean gradient: no clipping, no noise,
    no accounting."""
    step, taken = DPOptimizer.step, [0]

    def skipping(self, closure=None):
        taken[0] += 1
        if taken[0] % 5:
            return step(self, closure)
        for p in self.params:
            if p.grad_sample is not None and len(p.grad_sample):
                p.grad = p.grad_sample.mean(0)
        return self.original_optimizer.step()

    monkeypatch.setattr(DPOptimizer, "step", skipping)


@pytest.fixture(scope="module")
def faulted(digits, sigma_for_eps2) -> Callable[[Fault], Run]:
    """``fault -> its run``, each fault's run made once (it is seeded: every test reading it
    would make the same run), with the fault patched in for that run only."""
    runs: dict[Fault, Run] = {}

    def run(fault: Fault) -> Run:
        if fault not in runs:
            with pytest.MonkeyPatch.context() as patch:
                fault(patch)
                runs[fault] = _run(digits, _fixed(sigma_for_eps2))
        return runs[fault]

    return run


FAULTS: list[tuple[Fault, str, float | None]] = [
    (_half_noise, "noise_level", 0.5),
    (_reused_noise, "noise_reuse", 1.0),
    (_sampling_at_2q, "batch_total", 2.0),
    (_clipping_at_2c, "clipping", 2.0),
    (_reseeded_every_round, "noise_reuse", 1.0),
    (_uniform_noise, "noise_shape", 0.6),
    (_no_noise_every_fifth_step, "noise_per_step", 0.0),
    (_divided_by_realised_batch, "noise_per_step", None),
    (_grad_sample_halved, "clipping", 0.5),
    (_fixed_size_batches, "batch_dispersion", 0.0),
    (_one_record_in_every_batch, "record_extremes", 10.0),
    (_every_fifth_step_unprotected, "observed", None),
]


@pytest.mark.parametrize(("fault", "check", "factor"), FAULTS, ids=[f[0].__name__ for f in FAULTS])
def test_fault_on_the_real_path_is_a_named_violation(faulted, fault, check, factor):
    conformance, result, eps = faulted(fault)
    failed = {c.name: c for c in conformance.failed}
    assert check in failed, [c.message for c in conformance.checks]
    if factor is not None:
        assert failed[check].factor == pytest.approx(factor, abs=0.1)
    violations = {v.bound: v for v in _violations(result, eps)}
    violation = violations[f"dp_conformance_{check}"]
    assert violation.message.startswith("site 4: its DP-SGD does not do what its accountant")
    assert failed[check].message in violation.message
    # Every failed check's sentence gives what an honest run gives and what it crossed: a
    # test's p-value below its level, an exact check's threshold.
    for failure in failed.values():
        assert "an honest run" in failure.message, failure.message
        if failure.name in STATISTICAL_CHECKS:
            assert f"p = {failure.p_value:.2g}, below the level" in failure.message


def test_half_noise_reads_in_the_report_as_half(honest, faulted):
    conformance, result, eps = faulted(_half_noise)
    assert eps == pytest.approx(2.0, abs=0.02)  # the accountant saw the full noise
    (noise,) = [c for c in conformance.failed if c.name == "noise_level"]
    assert noise.message.startswith("noise 0.5") and "what the accountant assumes" in noise.message
    # The canaries went through the same noise call: the mechanism estimate rises with it.
    honest_mechanism = honest[1].levels["mechanism"].eps_estimate
    assert result.levels["mechanism"].eps_estimate > 1.5 * honest_mechanism


@pytest.mark.parametrize("reset_accountant", [False, True])
def test_noise_calibrated_for_fewer_steps_than_taken(digits, monkeypatch, reset_accountant):
    """The calibration covers one round of two; with ``reset_accountant`` the history is also
    dropped each round, so the ledger reads the target while the steps taken spend more."""
    real = accountant_utils.get_noise_multiplier

    def one_round(*, epochs=None, steps=None, **kwargs):
        return real(epochs=epochs and epochs // ROUNDS, steps=steps and steps // ROUNDS, **kwargs)

    monkeypatch.setattr(accountant_utils, "get_noise_multiplier", one_round)
    if reset_accountant:
        make_private = PrivacyEngine.make_private

        def forgetting(self, *args, **kwargs):
            self.accountant.history = []
            return make_private(self, *args, **kwargs)

        monkeypatch.setattr(PrivacyEngine, "make_private", forgetting)
    conformance, result, eps = _run(digits, _calibrated("rdp"))
    failed = {c.name: c for c in conformance.failed}
    assert "epsilon" in failed and failed["epsilon"].factor > 1.2
    assert "noise was calibrated for fewer steps" in failed["epsilon"].message
    assert ("steps" in failed) == reset_accountant
    if reset_accountant:
        assert eps == pytest.approx(2.0, abs=0.05)  # the ledger claims the target
        assert failed["steps"].factor == pytest.approx(1 / ROUNDS)
    assert {f"dp_conformance_{n}" for n in failed} <= {v.bound for v in _violations(result, eps)}


def test_training_without_a_dp_optimizer_stops_the_round(digits, sigma_for_eps2, monkeypatch):
    """A make_private that hands back the plain optimizer: nothing would clip or noise."""
    real = PrivacyEngine.make_private

    def plain(self, *args, optimizer, **kwargs):
        module, _, loader = real(self, *args, optimizer=optimizer, **kwargs)
        return module, optimizer, loader

    monkeypatch.setattr(PrivacyEngine, "make_private", plain)
    with pytest.raises(RuntimeError, match="neither clips nor noises, so no update may leave"):
        _run(digits, _fixed(sigma_for_eps2))


def test_a_ledger_may_hold_more_steps_than_were_taken_never_fewer(digits, sigma_for_eps2):
    """More (a round trained again after a restart) is conservative; fewer is a violation."""
    dataset, task, start = digits
    canaries = GradientCanaryState.new(100, seed=2)
    dp = _fixed(sigma_for_eps2)
    train_locally(
        task,
        start,
        x=dataset.x[:RECORDS],
        y=dataset.y[:RECORDS],
        epochs=1,
        seed=0,
        device=torch.device("cpu"),
        dp=dp,
        accountant_history=AccountantHistory(accountant=dp.accountant, history=[]),
        gradient_canaries=canaries,
    )
    assert canaries.evidence is not None
    taken = canaries.evidence.n_steps

    def steps_check(accounted_steps: int):
        result = conformance_audit(
            canaries.evidence,
            beta=BETA,
            accounted_steps=accounted_steps,
            epsilon_taken=1.0,
            epsilon_accounted=1.0,
            epsilon_target=None,
        )
        return next(c for c in result.checks if c.name == "steps")

    assert steps_check(taken).passed and steps_check(taken + 10).passed
    fewer = steps_check(taken - 1)
    assert not fewer.passed and f"accounts for {taken - 1} of the {taken}" in fewer.message


@pytest.mark.slow
def test_null_trials_stay_within_beta():
    """150 honest one-round runs (real Opacus steps, a tiny model): each statistical check
    alarms in at most beta/2 of them, with the Clopper-Pearson upper end at most beta."""
    dataset, task, start = _task(width=2, batch=20)
    dp = DPSettings(
        target_epsilon=None,
        noise_multiplier=1.0,
        delta=DELTA,
        max_grad_norm=1.0,
        accountant="gdp",  # fast to evaluate; the checks use the recorded sigma and q only
        total_epochs=1,
    )
    # The assertion below passes a check with at most 2 alarms in 150 runs (3 in 200).
    # Binomial tails, 150 runs (200 runs): a check that alarms at rate beta is flagged with
    # probability 0.98 (0.99), one at beta/2 with 0.73 (0.74); a valid check at its own
    # level beta/9 fails with 0.05 (0.03). Measured on these seeds (p-values roughly
    # uniform, every check near its level): 0-2 alarms per check in 150 runs and in 200.
    trials = 150
    alarms = dict.fromkeys(STATISTICAL_CHECKS, 0)
    for t in range(trials):
        canaries = GradientCanaryState.new(100, seed=t)
        members = np.random.default_rng(t).choice(len(dataset.x), 200, replace=False)
        train_locally(
            task,
            start,
            x=dataset.x[members],
            y=dataset.y[members],
            epochs=1,
            seed=1_000 + t,
            device=torch.device("cpu"),
            dp=dp,
            accountant_history=AccountantHistory(accountant="gdp", history=[]),
            gradient_canaries=canaries,
        )
        assert canaries.evidence is not None
        result = conformance_audit(
            canaries.evidence,
            beta=BETA,
            accounted_steps=canaries.evidence.n_steps,
            epsilon_taken=0.0,
            epsilon_accounted=0.0,
            epsilon_target=None,
        )
        for check in result.failed:
            alarms[check.name] += 1
    for name, count in alarms.items():
        high = stats.binomtest(count, trials).proportion_ci(0.95, method="exact").high
        assert count / trials <= BETA / 2 and high <= BETA, (name, count)
