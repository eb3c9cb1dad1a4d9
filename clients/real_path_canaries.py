"""Gradient canaries inside a site's DP-SGD, driven through the real path, and the
observations behind the conformance checks (:mod:`audit.conformance.checks`).

The site's canaries (:mod:`audit.canaries.gradient_canaries`) each own one coordinate of a phantom
block that no record's loss touches. At every real step of the site's Opacus optimizer
(:func:`attach`, hooks on the optimizer *instance*, :mod:`clients.dp_observer`):

1. right after the model's own noise call, the inserted canaries are drawn by a copy of the
   site's real batch sampler (same class and rate, its own population and generator), their
   per-sample gradient ``GRADIENT_CANARY_NORM x C e_j`` goes through the optimizer's own clipping
   code, and the block is noised by the optimizer's own ``add_noise`` (its current noise
   multiplier, clipping norm and noise function): a fault in the sampler, the clipping or
   the noise reaches the canaries as it reaches the model;
2. where the step's gradient is consumed (after the accountant recorded the step), the
   mechanism-level statistic adds this step's log-likelihood ratio per canary at the noise
   multiplier and sampling rate the accountant *recorded*;
3. the block is stepped by the site's own optimizer kind (its round update is the
   server-level view, added up at the end of the round by :meth:`RoundGradientCanaries.finish`).

The canaries draw from a generator of their own, never the model's, and the conformance
hooks only read: the trained weights are bit for bit those of the same run without them.
The coins, statistics and observations stay in the site's state folder (0600).
"""

from __future__ import annotations

import copy
import math
import secrets
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from panoramia_fl.audit.canaries.gradient_canaries import (
    GradientCanaryResult,
    ThreatLevel,
    gradient_canary_audit,
    llr_increment,
)
from panoramia_fl.audit.conformance.checks import conformance_audit
from panoramia_fl.audit.conformance.observed_steps import ConformanceEvidence
from panoramia_fl.clients.dp_observer import IndexLog, StepObserver, require_dp_optimizer
from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.contracts.files import atomic_write

_STATE_VERSION = 2
_STREAM = 0x6CA7
"""Names the canaries' random stream, so a simulated round's seed never gives the block
the same numbers as the model's own draws."""
SUBSET = 256
"""Model coordinates whose noise every step keeps, for the reuse check across all steps."""


@dataclass(frozen=True)
class GradientCanarySettings:
    """A site's gradient canaries (``audit.gradient_canaries``)."""

    pairs: int
    """K: 2K canaries, each inserted by a fair coin."""
    state_path: Path
    """Site-local file of the coins and statistics (never sent)."""
    beta: float
    seed: int | None
    """Coins from this seed (a simulation), or None: from the OS's entropy (a deployment)."""

    def load_or_new(self) -> GradientCanaryState:
        if self.state_path.exists():
            return GradientCanaryState.load(self.state_path)
        return GradientCanaryState.new(self.pairs, seed=self.seed)


@dataclass
class GradientCanaryState:
    """A site's canaries and the statistics accumulated over its rounds (site-local)."""

    coins: np.ndarray
    """One fair coin per canary (True: inserted)."""
    mechanism: np.ndarray
    """Per canary, the log-likelihood ratio summed over every noisy step."""
    server: np.ndarray
    """Per canary, the scaled round updates along ``-e_j`` summed over rounds."""
    steps: int = 0
    rounds: int = 0
    seconds: float = 0.0
    """Time the canaries added to the site's training (all rounds)."""
    sample_rate: float = 0.0
    noise_multiplier: float = 0.0
    """The last step's sampling rate and noise multiplier, as the accountant recorded them."""
    max_grad_norm: float = 0.0
    """The configured clipping norm C."""
    evidence: ConformanceEvidence | None = None
    """What the site observed of its real DP-SGD steps (None before the first round)."""

    @classmethod
    def new(cls, pairs: int, *, seed: int | None) -> GradientCanaryState:
        """``2 * pairs`` canaries with their coins: from ``seed`` (a simulation) or, with
        ``seed=None``, from the OS's entropy (a deployment: the server cannot know them)."""
        entropy = secrets.randbits(128) if seed is None else seed
        coins = np.random.default_rng(entropy).integers(0, 2, size=2 * pairs).astype(bool)
        zeros = np.zeros(coins.size, dtype=np.float64)
        return cls(coins=coins, mechanism=zeros, server=zeros.copy())

    def save(self, path: Path) -> None:
        arrays: dict[str, Any] = {
            "version": np.array(_STATE_VERSION),
            "coins": self.coins,
            "mechanism": self.mechanism,
            "server": self.server,
            "counters": np.array([self.steps, self.rounds]),
            "seconds": np.array(self.seconds),
            "settings": np.array([self.sample_rate, self.noise_multiplier, self.max_grad_norm]),
            **({} if self.evidence is None else self.evidence.to_arrays()),
        }
        # Site-local: the coins identify the inserted canaries; durable before the reply.
        atomic_write(path, lambda f: np.savez(f, **arrays), private=True)

    @classmethod
    def load(cls, path: Path) -> GradientCanaryState:
        with np.load(path, allow_pickle=False) as data:
            if int(data["version"]) != _STATE_VERSION:
                raise ValueError(
                    f"{path}: gradient-canary state version {int(data['version'])}, this "
                    f"version reads {_STATE_VERSION}: start the run afresh"
                )
            steps, rounds = (int(v) for v in data["counters"])
            q, sigma, clip = (float(v) for v in data["settings"])
            return cls(
                coins=data["coins"].astype(bool),
                mechanism=data["mechanism"].astype(np.float64),
                server=data["server"].astype(np.float64),
                steps=steps,
                rounds=rounds,
                seconds=float(data["seconds"]),
                sample_rate=q,
                noise_multiplier=sigma,
                max_grad_norm=clip,
                evidence=(
                    ConformanceEvidence.from_arrays(data)
                    if ConformanceEvidence.stored_in(data)
                    else None
                ),
            )

    def audit(
        self, *, beta: float, seed: int, dp: DPSettings, accountant_history: AccountantHistory
    ) -> GradientCanaryResult:
        """Both threat levels' bounds and estimates (:mod:`audit.canaries.gradient_canaries`)
        and the conformance checks of the real steps against ``accountant_history`` and ``dp``
        (:mod:`audit.conformance.checks`)."""
        if self.evidence is None or self.evidence.n_steps == 0:
            raise ValueError("no DP-SGD step was observed (nothing trained)")
        conformance = conformance_audit(
            self.evidence,
            beta=beta,
            accounted_steps=sum(int(h[2]) for h in accountant_history.history),
            epsilon_taken=AccountantHistory(dp.accountant, self.evidence.history()).epsilon(
                dp.delta
            ),
            epsilon_accounted=accountant_history.epsilon(dp.delta),
            epsilon_target=dp.target_epsilon if dp.noise_multiplier is None else None,
        )
        stats: dict[ThreatLevel, np.ndarray] = {}
        if self.steps > 0:  # none when the accountant recorded no step: the checks say so
            stats["mechanism"] = self.mechanism
            if self.rounds > 0:
                stats["server"] = self.server
        return gradient_canary_audit(
            stats,
            self.coins,
            steps=self.steps,
            rounds=self.rounds,
            overhead_s=self.seconds,
            sample_rate=self.sample_rate,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            beta=beta,
            delta=dp.delta,
            seed=seed,
            conformance=conformance,
        )


GRADIENT_CANARY_NORM = 10.0
"""A canary's per-sample gradient norm, in units of the configured clipping norm C: above C,
as real records' gradients often are, so the real clipping has work to do (a clipping at 2C
makes every canary twice as loud)."""

_HOOKS = ("clip_and_accumulate", "add_noise")
"""The instance attributes :mod:`clients.dp_observer` installs on the optimizer."""


class _Only:
    """A view's stand-in for the inner optimizer: the given parameters and nothing else."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.param_groups = [{"params": params}]
        self.state: dict[Any, Any] = defaultdict(dict)
        self.defaults: dict[str, Any] = {}


def _view(optimizer: Any, params: list[torch.Tensor], generator: torch.Generator) -> Any:
    """The optimizer as its own methods see it, but over ``params`` and with ``generator``:
    its current settings (noise multiplier, clipping norm, secure mode) are the real
    ones."""
    view = object.__new__(type(optimizer))
    view.__dict__.update({k: v for k, v in vars(optimizer).items() if k not in _HOOKS})
    view.__dict__.update(original_optimizer=_Only(params), generator=generator)
    return view


def _call(method: Any, optimizer: Any, name: str, view: Any) -> None:
    """Run the optimizer's real ``name`` (as captured in ``method``) on ``view``."""
    func = getattr(method, "__func__", None) or getattr(type(optimizer), name)
    func(view)


def _sampler_twin(batch_sampler: Any, population: int, generator: torch.Generator) -> Any:
    """A copy of the site's real batch sampler over the canaries, with its own generator
    (None when the sampler is not of the population-and-generator kind Opacus builds)."""
    twin = copy.copy(batch_sampler)
    if not (hasattr(twin, "num_samples") and hasattr(twin, "generator")):
        return None
    twin.num_samples, twin.generator = population, generator
    if hasattr(twin, "steps"):
        twin.steps = sys.maxsize
    return twin


class RoundGradientCanaries:
    """The canaries of one round of local DP-SGD, driven by the real optimizer's calls."""

    def __init__(
        self,
        state: GradientCanaryState,
        optimizer: Any,
        *,
        batch_sampler: Any,
        sample_rate: float,
        max_grad_norm: float,
        block_optimizer: Any,
        generator: torch.Generator,
    ) -> None:
        self.state, self.optimizer = state, optimizer
        self.real_clip, self.real_noise = optimizer.clip_and_accumulate, optimizer.add_noise
        self.q, self.clip = sample_rate, max_grad_norm
        # Any: Opacus's methods read and set attributes of their own on the parameter.
        self.block: Any = torch.zeros(state.coins.size, dtype=torch.float32, requires_grad=True)
        self.block_optimizer = block_optimizer([self.block])
        self.generator = generator
        self.coins = torch.from_numpy(state.coins)
        twin = _sampler_twin(batch_sampler, state.coins.size, generator)
        self.draws = None if twin is None else iter(twin)
        self._noisy: torch.Tensor | None = None
        state.max_grad_norm = max_grad_norm

    def _drawn(self) -> torch.Tensor:
        """The canaries the site's sampler draws for this step (a copy of the real one)."""
        if self.draws is None:
            return torch.rand(self.coins.shape, generator=self.generator) < self.q
        drawn = torch.zeros(self.coins.shape, dtype=torch.bool)
        drawn[torch.as_tensor(next(self.draws), dtype=torch.long)] = True
        return drawn

    def _clipped(self) -> float:
        """A canary's gradient after the real clipping: one row of norm GRADIENT_CANARY_NORM x C
        through the optimizer's own clipping code and settings."""
        # Opacus keeps per-sample and clipped gradients as attributes of the parameter.
        probe: Any = torch.zeros(1, requires_grad=True)
        probe.grad_sample = torch.full((1, 1), GRADIENT_CANARY_NORM * self.clip)
        probe.summed_grad = None
        view = _view(self.optimizer, [probe], self.generator)
        _call(self.real_clip, self.optimizer, "clip_and_accumulate", view)
        return float(probe.summed_grad)

    @torch.no_grad()
    def noise_block(self) -> None:
        """Right after the model's real noise call: the drawn inserted canaries' clipped
        gradients, noised by the optimizer's own noise call on the block."""
        began = time.perf_counter()
        sampled = (self.coins & self._drawn()).to(self.block.dtype)
        self.block.summed_grad = sampled * self._clipped()
        view = _view(self.optimizer, [self.block], self.generator)
        _call(self.real_noise, self.optimizer, "add_noise", view)
        assert self.block.grad is not None
        self._noisy = self.block.grad.detach().clone()
        self.state.seconds += time.perf_counter() - began

    @torch.no_grad()
    def observe(self, sigma: float, rate: float) -> None:
        """Where the step's gradient is consumed (after the accountant recorded the step):
        the step's log-likelihood ratios at the recorded ``sigma`` and ``rate``, and the
        block's own step."""
        noisy, self._noisy = self._noisy, None
        if noisy is None or not (math.isfinite(sigma) and math.isfinite(rate)):
            return  # no noise call, or nothing recorded: the conformance checks say so
        began = time.perf_counter()
        x = noisy.double().numpy() / (sigma * self.clip)
        self.state.mechanism += llr_increment(x, sample_rate=rate, noise_multiplier=sigma)
        self.state.steps += 1
        self.state.sample_rate, self.state.noise_multiplier = rate, sigma
        # The block's own step, scaled like the model's (Opacus's scale_grad).
        self.block.grad = noisy / float(self.optimizer.expected_batch_size)
        with torch.enable_grad():
            self.block_optimizer.step()
        self.state.seconds += time.perf_counter() - began

    def finish(self) -> None:
        """Add this round's update (what the server would receive) to the server statistic."""
        update = -self.block.detach().double().numpy()
        spread = float(update.std())
        if spread > 0:
            self.state.server += update / spread
            self.state.rounds += 1


def _generator(seed: int | None) -> torch.Generator:
    generator = torch.Generator()
    if seed is None:
        generator.manual_seed(secrets.randbits(63))
    else:
        generator.manual_seed(int(np.random.SeedSequence([seed, _STREAM]).generate_state(1)[0]))
    return generator


class RealPathAudit:
    """A round's gradient canaries and conformance observations, on the real optimizer."""

    def __init__(
        self, gradient_canaries: RoundGradientCanaries, observer: StepObserver, log: IndexLog
    ) -> None:
        self.gradient_canaries, self.observer, self.log = gradient_canaries, observer, log

    def finish(self) -> None:
        self.gradient_canaries.finish()
        self.observer.finish(self.log.draws)
        self.gradient_canaries.state.seconds += self.observer.seconds


def attach(
    optimizer: Any,
    state: GradientCanaryState,
    *,
    accountant: Any,
    batch_sampler: Any,
    index_log: IndexLog,
    make_block_optimizer: Any,
    sample_rate: float,
    max_grad_norm: float,
    records: int,
    seed: int | None,
) -> RealPathAudit:
    """Attach the canaries and the conformance observer to a ``DPOptimizer`` for one round.

    ``batch_sampler``: the real loader's (copied for the canaries); ``index_log``: the
    real loader's dataset wrapper; ``make_block_optimizer(params)`` builds the site's
    optimizer kind for the block; ``sample_rate``: the canaries' rate only when the sampler
    cannot be copied; ``max_grad_norm``: the configured C; ``seed``: the canaries' generator
    seed (a simulation), or None for the OS's entropy.
    """
    require_dp_optimizer(optimizer)
    generator = _generator(seed)
    round_canaries = RoundGradientCanaries(
        state,
        optimizer,
        batch_sampler=batch_sampler,
        sample_rate=sample_rate,
        max_grad_norm=max_grad_norm,
        block_optimizer=make_block_optimizer,
        generator=generator,
    )
    if state.evidence is None:
        coordinates = sum(p.numel() for p in optimizer.params)
        pick = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
        state.evidence = ConformanceEvidence(
            clip_norm=max_grad_norm,
            records=records,
            subset_index=np.sort(pick.choice(coordinates, min(SUBSET, coordinates), False)),
        )
    observer = StepObserver(
        optimizer,
        accountant=accountant,
        evidence=state.evidence,
        on_noise=round_canaries.noise_block,
        on_step=round_canaries.observe,
    )
    observer.install()
    return RealPathAudit(round_canaries, observer, index_log)


MEMORY_PER_GRADIENT_CANARY = 110
"""Bytes a site's process holds per gradient canary at its peak: the coin, both statistics,
the phantom block with its gradient and optimizer state, and one step's draws (104-108
bytes measured at 8 million canaries, training and audit); what ``simulations.sizes``
checks a run's ``audit.gradient_canaries`` against."""
