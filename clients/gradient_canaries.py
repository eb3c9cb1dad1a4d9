"""Gradient canaries inside a site's DP-SGD: a phantom block beside the model's parameters.

The site's canaries (:mod:`audit.canaries.gradient_canaries`) each own one coordinate of a phantom
block that no record's loss touches. At every noisy step of the site's Opacus optimizer,
after the model's own noise (:func:`attach`):

1. each inserted canary joins the batch by its own Poisson draw at the site's sampling rate;
   its per-sample gradient, ``C e_j`` at the clipping norm the accountant assumes, is clipped
   at the norm the optimizer actually uses;
2. the block's sum is noised with Opacus's own noise function at the optimizer's *current*
   noise multiplier and clipping norm (what the step really adds, not what the accountant
   assumes), so a site that adds less noise than it accounts for shows it;
3. the mechanism-level statistic adds this step's log-likelihood ratio per canary;
4. the block is stepped by the site's own optimizer kind (its round update is the
   server-level view, added up at the end of the round by :meth:`RoundCanaries.finish`).

The block's noise and sampling come from a generator of their own, never from the model's:
the trained weights are bit for bit those of the same run without canaries (the canaries
cost no accuracy), and the phantom coordinates never leave the site.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from audit.canaries.gradient_canaries import (
    GradientCanaryResult,
    ThreatLevel,
    gradient_canary_audit,
    llr_increment,
)
from contracts.files import atomic_write

_STATE_VERSION = 1
_STREAM = 0x6CA7
"""Names the canaries' random stream, so a simulated round's seed never gives the block
the same numbers as the model's own draws."""


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

    def load_or_new(self) -> CanaryState:
        if self.state_path.exists():
            return CanaryState.load(self.state_path)
        return CanaryState.new(self.pairs, seed=self.seed)


@dataclass
class CanaryState:
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
    max_grad_norm: float = 0.0

    @classmethod
    def new(cls, pairs: int, *, seed: int | None) -> CanaryState:
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
        }
        # Site-local: the coins identify the inserted canaries; durable before the reply.
        atomic_write(path, lambda f: np.savez(f, **arrays), private=True)

    @classmethod
    def load(cls, path: Path) -> CanaryState:
        with np.load(path, allow_pickle=False) as data:
            if int(data["version"]) != _STATE_VERSION:
                raise ValueError(f"{path}: gradient-canary state version {int(data['version'])}")
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
            )

    def audit(self, *, beta: float, delta: float, seed: int) -> GradientCanaryResult:
        """Both threat levels' bounds and estimates (:mod:`audit.canaries.gradient_canaries`)."""
        if self.steps == 0:
            raise ValueError("no DP-SGD step observed the gradient canaries (nothing trained)")
        stats: dict[ThreatLevel, np.ndarray] = {"mechanism": self.mechanism}
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
            delta=delta,
            seed=seed,
        )


class RoundCanaries:
    """The canaries of one round of local DP-SGD, attached to its Opacus optimizer."""

    def __init__(
        self,
        state: CanaryState,
        *,
        sample_rate: float,
        noise_multiplier: float,
        max_grad_norm: float,
        block_optimizer: Any,
        block: torch.Tensor,
        generator: torch.Generator,
    ) -> None:
        self.state = state
        self.q, self.sigma, self.clip = sample_rate, noise_multiplier, max_grad_norm
        self.block, self.block_optimizer, self.generator = block, block_optimizer, generator
        self.coins = torch.from_numpy(state.coins)
        state.sample_rate, state.noise_multiplier, state.max_grad_norm = (
            sample_rate,
            noise_multiplier,
            max_grad_norm,
        )

    def observe(self, optimizer: Any) -> None:
        """One noisy step of ``optimizer`` (a ``DPOptimizer``), after the model's noise."""
        from opacus.optimizers.optimizer import _generate_noise

        began = time.perf_counter()
        sampled = self.coins & (torch.rand(self.coins.shape, generator=self.generator) < self.q)
        # A canary's per-sample gradient has norm C (the accountant's); clipped as Opacus does.
        factor = min(1.0, float(optimizer.max_grad_norm) / (self.clip + 1e-6))
        noise = _generate_noise(
            std=float(optimizer.noise_multiplier) * float(optimizer.max_grad_norm),
            reference=self.block,
            generator=self.generator,
            secure_mode=bool(optimizer.secure_mode),
        )
        noisy = sampled.to(self.block.dtype) * (self.clip * factor) + noise
        x = noisy.double().numpy() / (self.sigma * self.clip)
        self.state.mechanism += llr_increment(x, sample_rate=self.q, noise_multiplier=self.sigma)
        self.state.steps += 1
        # The block's own step, scaled like the model's (Opacus's scale_grad).
        self.block.grad = noisy / float(optimizer.expected_batch_size)
        self.block_optimizer.step()
        self.state.seconds += time.perf_counter() - began

    def finish(self) -> None:
        """Add this round's update (what the server would receive) to the server statistic."""
        update = -self.block.detach().double().numpy()
        spread = float(update.std())
        if spread > 0:
            self.state.server += update / spread
            self.state.rounds += 1


def attach(
    optimizer: Any,
    state: CanaryState,
    *,
    make_block_optimizer: Any,
    sample_rate: float,
    noise_multiplier: float,
    max_grad_norm: float,
    seed: int | None,
    noise_scale: float = 1.0,
) -> RoundCanaries:
    """Attach the canaries to a ``DPOptimizer`` for one round.

    ``make_block_optimizer(params)`` builds the site's optimizer kind for the block.
    ``seed``: the block's generator seed (a simulation), or None for the OS's entropy.
    ``noise_scale`` below 1 is a *fault* for tests: every step then adds that fraction of
    the noise the accountant records (the model's and the block's), as a broken DP setup
    would.
    """
    block = torch.zeros(state.coins.size, dtype=torch.float32, requires_grad=True)
    generator = torch.Generator()
    if seed is None:
        generator.manual_seed(secrets.randbits(63))
    else:
        generator.manual_seed(int(np.random.SeedSequence([seed, _STREAM]).generate_state(1)[0]))
    canaries = RoundCanaries(
        state,
        sample_rate=sample_rate,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        block_optimizer=make_block_optimizer([block]),
        block=block,
        generator=generator,
    )
    model_noise = optimizer.add_noise

    def add_noise() -> None:
        accounted = optimizer.noise_multiplier
        optimizer.noise_multiplier = accounted * noise_scale
        try:
            model_noise()
            canaries.observe(optimizer)
        finally:
            # The accountant's step hook runs after add_noise and records this value.
            optimizer.noise_multiplier = accounted

    optimizer.add_noise = add_noise
    return canaries
