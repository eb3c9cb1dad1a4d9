"""A site's real DP-SGD step, observed where the work happens (torch side of
:mod:`audit.conformance.checks`).

Hooks on the site's Opacus ``DPOptimizer`` *instance* and a thin wrapper of its dataset read
the real work, never a replay of it:

* the records each batch of the real loader loaded (:class:`IndexLog`, under Opacus's
  Poisson sampler);
* around the real ``clip_and_accumulate``: the per-sample gradients as the backward pass left
  them (their sum against the batch gradient, their clipping at the *configured* ``C`` as a
  reference) and the clean clipped sum ``S`` the real clipping produced;
* that the real ``add_noise`` was called (and, with gradient canaries, the canary block's
  noise through the same call, :mod:`clients.real_path_canaries`);
* at the inner optimizer's ``step``, where the gradient ``u`` is consumed after the real
  noise and scaling: the noise residual ``u - (<u, S> / |S|^2) S`` (inner products, moments,
  the correlation with the previous step's, a fixed coordinate subset), and the noise
  multiplier and sampling rate the accountant recorded for the step.

A fault anywhere between the backward pass and the consumed gradient (a patched
``_generate_noise``, ``add_noise``, ``scale_grad``, clipping, sampler or ``step``) therefore
reaches what is read. The hooks draw no random numbers and change no tensor the training
uses: the weights are bit for bit those of the same run without them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from panoramia_fl.audit.conformance.checks import CLIP_TOLERANCE
from panoramia_fl.audit.conformance.observed_steps import (
    NO_ACCOUNTANT_STEP,
    NO_CLEAN_SUM,
    NO_NOISE_CALL,
    STEP_FIELDS,
    ConformanceEvidence,
)

__all__ = ["IndexLog", "StepObserver", "logged_loader", "recorded_steps", "require_dp_optimizer"]


class IndexLog(torch.utils.data.Dataset):
    """A dataset that records the indices of every batch a loader fetches from it."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.draws: list[list[int]] = []

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> Any:
        self.draws.append([int(i) for i in indices])
        # The wrapped dataset's own batch fetch where it has one (the task's records are
        # gathered by one index): the batches are those of the loader without the log.
        if (fetch := getattr(self.dataset, "__getitems__", None)) is not None:
            return fetch(indices)
        return [self.dataset[i] for i in indices]


def logged_loader(
    loader: torch.utils.data.DataLoader,
) -> tuple[torch.utils.data.DataLoader, IndexLog]:
    """``loader`` over an :class:`IndexLog` of its dataset (same batch size, sampler,
    collate and generator, so Opacus builds the same Poisson loader from it)."""
    log = IndexLog(loader.dataset)
    logged = torch.utils.data.DataLoader(
        log,
        batch_size=loader.batch_size,
        sampler=loader.sampler,
        collate_fn=loader.collate_fn,
        generator=loader.generator,
        drop_last=loader.drop_last,
    )
    return logged, log


_DP_CALLS = ("clip_and_accumulate", "add_noise", "original_optimizer")
"""What an Opacus ``DPOptimizer`` has that a plain optimizer does not."""


def require_dp_optimizer(optimizer: Any) -> None:
    """Stop the round when the optimizer DP-SGD runs with cannot clip and noise."""
    if missing := [n for n in _DP_CALLS if not hasattr(optimizer, n)]:
        raise RuntimeError(
            f"the optimizer DP-SGD runs with ({type(optimizer).__name__}) has no "
            f"{', '.join(missing)}: it neither clips nor noises, so no update may leave"
        )


def recorded_steps(history: list[tuple[float, float, int]]) -> int:
    """Steps in an Opacus accountant history."""
    return int(sum(h[2] for h in history))


def _flat(tensors: list[torch.Tensor | None], like: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(
        [
            (t if t is not None else torch.zeros_like(p)).detach().reshape(-1)
            for t, p in zip(tensors, like, strict=True)
        ]
    )


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.dot(a, b))


def implied_clip_ratio(
    rows: torch.Tensor, norms: torch.Tensor, clean: torch.Tensor, clip: float
) -> float:
    """The clipping norm the real clipping used, over ``clip``: each row's factor solved by
    least squares from ``clean = sum_i f_i rows_i``, then the median clipped norm
    ``f_i |rows_i|`` over the rows it clipped (NaN: it clipped none)."""
    gram = (rows @ rows.T).double()
    factors = torch.linalg.lstsq(gram, (rows @ clean).double().unsqueeze(1)).solution[:, 0]
    clipped = factors < 1 - 1e-3
    if not bool(clipped.any()):
        return math.nan
    return float((factors[clipped] * norms[clipped].double()).median()) / clip


@dataclass(frozen=True)
class _BeforeClip:
    reference: torch.Tensor
    """The per-sample gradients clipped at the configured C and summed (flat)."""
    norms: torch.Tensor
    batch: int
    sample_err: float
    sample_ratio: float


class StepObserver:
    """Reads every step of one round of a ``DPOptimizer`` (see the module's docstring)."""

    def __init__(
        self,
        optimizer: Any,
        *,
        accountant: Any,
        evidence: ConformanceEvidence,
        on_noise: Callable[[], None] | None = None,
        on_step: Callable[[float, float], None] | None = None,
    ) -> None:
        self.optimizer, self.accountant, self.evidence = optimizer, accountant, evidence
        self.params = list(optimizer.params)
        self.clip = evidence.clip_norm
        self.subset_index = torch.as_tensor(evidence.subset_index, dtype=torch.long)
        self.on_noise, self.on_step = on_noise, on_step
        self.rows: dict[str, list[float]] = {k: [] for k in STEP_FIELDS if k != "round"}
        self.subset: list[np.ndarray] = []
        self.clip_ratio = math.nan
        self._clean: torch.Tensor | None = None
        self._clip_stats: dict[str, float] = {}
        self._noised = False
        self._previous: torch.Tensor | None = None
        self._accounted = recorded_steps(accountant.history)
        self.started_at = self._accounted
        self.seconds = 0.0
        """Time the observations took (all hooks of the round)."""

    @property
    def coordinates(self) -> int:
        return int(sum(p.numel() for p in self.params))

    def install(self) -> None:
        """Wrap the instance's clipping, noise and inner step (the class is untouched)."""
        opt = self.optimizer
        require_dp_optimizer(opt)
        real_clip, real_noise = opt.clip_and_accumulate, opt.add_noise
        inner = opt.original_optimizer
        real_step = inner.step

        def clip_and_accumulate() -> None:
            began = time.perf_counter()
            before = self._before_clip()
            self.seconds += time.perf_counter() - began
            real_clip()
            began = time.perf_counter()
            self._after_clip(before)
            self.seconds += time.perf_counter() - began

        def add_noise() -> None:
            real_noise()
            self._noised = True
            if self.on_noise is not None:
                self.on_noise()

        def step(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            sigma, rate = self._consume()
            self.seconds += time.perf_counter() - began
            if self.on_step is not None:
                self.on_step(sigma, rate)
            return real_step(*args, **kwargs)

        opt.clip_and_accumulate = clip_and_accumulate
        opt.add_noise = add_noise
        inner.step = step

    @torch.no_grad()
    def _before_clip(self) -> _BeforeClip:
        """Per-sample gradients as the backward pass left them: their norms, the reference
        clipped sum at the configured C, and their sum against the batch gradient."""
        samples = [self.optimizer._get_flat_grad_sample(p).to(p.dtype) for p in self.params]
        batch = int(samples[0].shape[0])
        rows = [g.reshape(batch, -1) for g in samples]
        norms = torch.stack([r.norm(2, dim=1) for r in rows], dim=1).norm(2, dim=1)
        factors = (self.clip / (norms + 1e-6)).clamp(max=1.0)
        both = [torch.stack([factors, torch.ones_like(norms)]) @ r for r in rows]
        summed = torch.cat([b[1] for b in both])
        batch_grad = _flat([p.grad for p in self.params], self.params) * batch
        size = _dot(batch_grad, batch_grad)
        diff = summed - batch_grad
        return _BeforeClip(
            reference=torch.cat([b[0] for b in both]),
            norms=norms,
            batch=batch,
            sample_err=math.sqrt(_dot(diff, diff) / size) if size > 0 else math.nan,
            sample_ratio=_dot(summed, batch_grad) / size if size > 0 else math.nan,
        )

    @torch.no_grad()
    def _after_clip(self, before: _BeforeClip) -> None:
        clean = _flat([getattr(p, "summed_grad", None) for p in self.params], self.params)
        diff = clean - before.reference
        scale = math.sqrt(_dot(before.reference, before.reference)) or 1.0
        clip_err = math.sqrt(_dot(diff, diff)) / scale
        if clip_err > CLIP_TOLERANCE and math.isnan(self.clip_ratio):
            rows = [self.optimizer._get_flat_grad_sample(p).to(p.dtype) for p in self.params]
            stacked = torch.cat([r.reshape(before.batch, -1) for r in rows], dim=1)
            self.clip_ratio = implied_clip_ratio(stacked, before.norms, clean, self.clip)
        self._clip_stats = {
            "batch": float(before.batch),
            "clip_err": clip_err,
            "sample_err": before.sample_err,
            "sample_ratio": before.sample_ratio,
        }
        self._clean = clean

    def _accountant_step(self) -> tuple[float, float]:
        """The noise multiplier and sampling rate the accountant recorded for this step."""
        history = self.accountant.history
        now = recorded_steps(history)
        if now <= self._accounted or not history:
            return math.nan, math.nan
        self._accounted = now
        sigma, rate, _ = history[-1]
        return float(sigma), float(rate)

    @torch.no_grad()
    def _consume(self) -> tuple[float, float]:
        sigma, rate = self._accountant_step()
        flags = (0 if self._noised else NO_NOISE_CALL) | (
            NO_ACCOUNTANT_STEP if math.isnan(sigma) else 0
        )
        values = dict.fromkeys(self.rows, math.nan)
        values.update(sigma=sigma, rate=rate)
        if self._clean is None:
            flags |= NO_CLEAN_SUM
            self.subset.append(np.full(self.subset_index.numel(), np.nan, np.float32))
            self._previous = None
        else:
            values.update(self._noise_stats(self._clean), **self._clip_stats)
        values["flags"] = float(flags)
        for key, value in values.items():
            self.rows[key].append(value)
        self._clean, self._noised = None, False
        return sigma, rate

    def _noise_stats(self, clean: torch.Tensor) -> dict[str, float]:
        """The residual of the consumed gradient after its part along the clean sum."""
        u = _flat([p.grad for p in self.params], self.params)
        uu, us, ss = _dot(u, u), _dot(u, clean), _dot(clean, clean)
        residual = u - (us / ss) * clean if ss > 0 else u
        squares = residual * residual
        rss = float(squares.sum())
        lag1 = math.nan
        if self._previous is not None and rss * (before := _dot(self._previous, self._previous)):
            lag1 = _dot(residual, self._previous) / math.sqrt(rss * before)
        self._previous = residual
        self.subset.append(residual[self.subset_index].cpu().numpy().astype(np.float32))
        return {
            "uu": uu,
            "us": us,
            "ss": ss,
            "rss": rss,
            "r4": _dot(squares, squares),
            "lag1": lag1,
        }

    def finish(self, draws: list[list[int]]) -> None:
        """Add the round to the evidence: its steps, the loader's ``draws`` and the steps the
        accountant recorded since :meth:`install`."""
        k = self.subset_index.numel()
        self.evidence.add_round(
            {key: np.asarray(v, float) for key, v in self.rows.items()},
            np.stack(self.subset) if self.subset else np.zeros((0, k), np.float32),
            coordinates=self.coordinates,
            draws=draws,
            accounted_steps=recorded_steps(self.accountant.history) - self.started_at,
            clip_ratio=self.clip_ratio,
        )
