"""Local training of one site for one round, plain or with Opacus DP-SGD."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from panoramia_fl.clients import real_path_canaries
from panoramia_fl.clients.dp_observer import logged_loader
from panoramia_fl.clients.noise import draw_noise_securely, entropy_generator
from panoramia_fl.clients.privacy import AccountantHistory, DPSettings, Sampling
from panoramia_fl.clients.real_path_canaries import GradientCanaryState
from panoramia_fl.ml.training import run_epoch


class TrainableTask(Protocol):
    """The parts of a task that local training uses (see ``ml.tasks``)."""

    optimizer: Any

    def make_model(self) -> nn.Module: ...

    def loader(
        self,
        x: np.ndarray,
        y: np.ndarray | None,
        *,
        shuffle: bool,
        seed: int = 0,
        batch_size: int | None = None,
        device: torch.device | None = None,
    ) -> torch.utils.data.DataLoader: ...

    def batch_loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor: ...

    def tensors(self, x: np.ndarray, y: np.ndarray | None) -> tuple[torch.Tensor, ...]: ...


@dataclass(frozen=True)
class LocalTrainResult:
    state_dict: dict[str, torch.Tensor]
    train_loss: float
    num_examples: int
    dp_epsilon: float | None
    noise_multiplier: float | None
    used: tuple[torch.Tensor, ...] | None = None
    """With ``local_steps``: the records (inputs, targets) of the steps taken, in order."""


def _proximal(
    model: nn.Module, anchor: list[torch.Tensor], mu: float
) -> Callable[[], torch.Tensor]:
    params = [p for p in model.parameters() if p.requires_grad]

    def term() -> torch.Tensor:
        squares = [((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True)]
        return 0.5 * mu * torch.stack(squares).sum()

    return term


def _pull_after_noise(
    optimizer: Any, params: Sequence[torch.Tensor], anchor: Sequence[torch.Tensor], mu: float
) -> None:
    """FedProx under DP-SGD: add the proximal gradient ``mu (w - anchor)`` after the noise
    and scaling, just before the inner optimizer's step.

    Opacus rebuilds each gradient from the clipped per-sample ones, so a proximal term in the
    loss would never reach the step. The anchor is the global model the server sent (public
    to the server already), so adding its gradient after the noise costs no privacy.
    """
    inner = optimizer.original_optimizer
    step = inner.step

    def pull_then_step(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            for p, a in zip(params, anchor, strict=True):
                if p.grad is not None:
                    p.grad.add_(p - a, alpha=mu)
        return step(*args, **kwargs)

    inner.step = pull_then_step


def train_locally(
    task: TrainableTask,
    global_state: dict[str, torch.Tensor],
    *,
    x: np.ndarray,
    y: np.ndarray | None,
    epochs: int,
    seed: int,
    device: torch.device,
    proximal_mu: float = 0.0,
    dp: DPSettings | None = None,
    accountant_history: AccountantHistory | None = None,
    secure_noise: bool = False,
    gradient_canaries: GradientCanaryState | None = None,
    local_steps: int | None = None,
    keep_used: bool = True,
) -> LocalTrainResult:
    """Train a fresh copy of the global model on the site's members.

    ``dp``: wrapped anew each round, the accountant going on from ``accountant_history``
    (updated in place); noise and sampling from the OS with ``secure_noise`` (a deployment,
    :mod:`clients.noise`), else from ``seed``; ``gradient_canaries``: canaries and conformance
    hooks. ``local_steps``: that many batches, their records kept unless ``keep_used`` is off."""
    setup = _fresh_training(task, global_state, x=x, y=y, seed=seed, device=device)
    model, anchor = setup.module, setup.anchor
    # Under DP the proximal gradient joins after the noise (_pull_after_noise), not the loss.
    prox = _proximal(model, anchor, proximal_mu) if proximal_mu > 0 and dp is None else None
    if dp is not None:
        assert accountant_history is not None
        setup = _made_private(
            setup,
            task,
            _PrivateSite(
                dp, accountant_history, gradient_canaries, secure_noise=secure_noise, seed=seed
            ),
            records=len(x),
            proximal_mu=proximal_mu,
            device=device,
        )

    def loss_fn(batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        loss = task.batch_loss(setup.module, batch)
        return loss + prox() if prox is not None else loss

    used: list[tuple[torch.Tensor, ...]] | None = [] if keep_used else None
    losses = _train_steps(
        setup, loss_fn, device=device, epochs=epochs, steps=local_steps, used=used
    )
    epsilon = None
    if dp is not None and accountant_history is not None:
        epsilon = _round_closed(setup, accountant_history, dp)
    result = LocalTrainResult(
        # The original module holds the trained weights (Opacus wraps it): clean keys.
        state_dict={k: v.detach().cpu() for k, v in model.state_dict().items()},
        train_loss=float(np.mean(losses)),
        num_examples=int(len(x)),
        dp_epsilon=epsilon,
        noise_multiplier=setup.sigma,
        used=None if local_steps is None or used is None else _concat(used),
    )
    # The last batch's gradients (under DP-SGD its per-sample gradients: batch x weights,
    # about 100 MB for the small CNN at batch 64) go now: the training's objects form
    # reference cycles (hooks, wrapped steps) that only Python's next full collection
    # frees, and a process training site after site would hold one set per site till then.
    setup.optimizer.zero_grad(set_to_none=True)
    return result


def _round_closed(setup: _Training, accountant_history: AccountantHistory, dp: DPSettings) -> float:
    """The site's epsilon after the round: the real-path audit's hooks finished and the
    accountant's history written back to ``accountant_history``."""
    if setup.real_path is not None:
        setup.real_path.finish()
    accountant_history.history = [tuple(h) for h in setup.engine.accountant.history]
    return accountant_history.epsilon(dp.delta)


def _fresh_training(
    task: TrainableTask,
    global_state: dict[str, torch.Tensor],
    *,
    x: np.ndarray,
    y: np.ndarray | None,
    seed: int,
    device: torch.device,
) -> _Training:
    """A fresh copy of the global model on ``device`` with its optimizer and shuffled
    loader (seeded), and a copy of its trainable weights (the proximal anchor)."""
    torch.manual_seed(seed)
    model = task.make_model()
    model.load_state_dict(global_state)
    model.to(device).train()
    optimizer = task.optimizer.build(model.parameters())
    loader = task.loader(x, y, shuffle=True, seed=seed, device=device)
    anchor = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    return _Training(module=model, optimizer=optimizer, loader=loader, anchor=anchor)


@dataclass(frozen=True)
class _PrivateSite:
    """A site's DP-SGD settings for one round: its accountant history, its gradient canaries,
    and where its noise and sampling come from (the OS's entropy on a deployment, else
    ``seed``)."""

    dp: DPSettings
    accountant_history: AccountantHistory
    gradient_canaries: GradientCanaryState | None
    secure_noise: bool
    seed: int


@dataclass
class _Training:
    """What the training loop steps: the model (Opacus's wrapper under DP), its optimizer
    and loader, and under DP the privacy engine, the noise multiplier and the real-path
    audit's hooks."""

    module: nn.Module
    optimizer: Any
    loader: Any
    anchor: list[torch.Tensor]
    engine: Any = None
    sigma: float | None = None
    real_path: real_path_canaries.RealPathAudit | None = None


def _made_private(
    plain: _Training,
    task: TrainableTask,
    site: _PrivateSite,
    *,
    records: int,
    proximal_mu: float,
    device: torch.device,
) -> _Training:
    """``plain`` wrapped for DP-SGD: the accountant continued from the site's accountant
    history, Poisson sampling at the declared rate, the divisor fixed, the proximal pull after
    the noise, and the real-path audit's hooks when the site has gradient canaries."""
    from opacus import PrivacyEngine

    dp, gradient_canary_state = site.dp, site.gradient_canaries
    engine = PrivacyEngine(accountant=dp.accountant)
    engine.accountant.history = list(site.accountant_history.history)
    generator = entropy_generator(device) if site.secure_noise else None
    sampling = dp.sampling(records=records, batch_size=int(plain.loader.batch_size or 1))
    sigma = dp.noise_for(sampling.sample_rate)
    loader, index_log = plain.loader, None
    if (
        gradient_canary_state is not None
    ):  # the records each real batch loads, for the sampling checks
        loader, index_log = logged_loader(loader)
    with warnings.catch_warnings():
        # Opacus's notices on wrapping (e.g. the RDP orders it tries): expected here.
        # Deprecations are not silenced.
        warnings.simplefilter("ignore", UserWarning)
        module, optimizer, loader = engine.make_private(
            module=plain.module,
            optimizer=plain.optimizer,
            data_loader=poisson_loader(loader, sampling, generator),
            noise_multiplier=sigma,
            max_grad_norm=dp.max_grad_norm,
            poisson_sampling=False,  # the loader above samples already
        )
    # Opacus divides by int(len(dataset) * rate): a function of the records' count.
    optimizer.expected_batch_size = sampling.expected_batch_size
    if generator is not None:
        draw_noise_securely(optimizer, generator)
    if proximal_mu > 0:
        params = [p for p in plain.module.parameters() if p.requires_grad]
        _pull_after_noise(optimizer, params, plain.anchor, proximal_mu)
    real_path = None
    if gradient_canary_state is not None and index_log is not None:
        real_path = real_path_canaries.attach(
            optimizer,
            gradient_canary_state,
            accountant=engine.accountant,
            batch_sampler=loader.batch_sampler,
            index_log=index_log,
            make_block_optimizer=task.optimizer.build,
            sample_rate=sampling.sample_rate,
            max_grad_norm=dp.max_grad_norm,
            records=records,
            seed=None if site.secure_noise else site.seed,
        )
    return _Training(module, optimizer, loader, plain.anchor, engine, sigma, real_path)


def _train_steps(
    setup: _Training,
    loss_fn: Callable[[tuple[torch.Tensor, ...]], torch.Tensor],
    *,
    device: torch.device,
    epochs: int,
    steps: int | None,
    used: list[tuple[torch.Tensor, ...]] | None,
) -> list[float]:
    """The round's training: ``epochs`` epochs, or ``steps`` batches (their records
    appended to ``used`` when given); each epoch's mean loss. Under DP-SGD an empty Poisson
    batch still takes its noise-only step."""
    optimizer = setup.optimizer
    empty = None if setup.engine is None else lambda: noise_only_step(optimizer)
    losses = []
    with warnings.catch_warnings():
        # torch's backward-hook notices, raised on every batch of Opacus's per-sample
        # gradients. Deprecations are not silenced.
        warnings.simplefilter("ignore", UserWarning)
        if steps is None:
            for _ in range(epochs):
                losses.append(
                    run_epoch(setup.module, setup.loader, optimizer, loss_fn, device, empty)
                )
        else:
            batches = _first_batches(setup.loader, steps, used)
            losses.append(run_epoch(setup.module, batches, optimizer, loss_fn, device, empty))
    return losses


def poisson_loader(
    loader: torch.utils.data.DataLoader, sampling: Sampling, generator: torch.Generator | None
) -> torch.utils.data.DataLoader:
    """Opacus's Poisson loader over ``loader``'s records at ``sampling``'s rate, taking its
    steps per epoch; its draws come from ``generator`` (the OS's entropy), else from
    ``loader``'s (the seed)."""
    from opacus.data_loader import DPDataLoader

    poisson = DPDataLoader(
        loader.dataset,
        sample_rate=sampling.sample_rate,
        collate_fn=loader.collate_fn,  # a task's gathered batches are whole already
        generator=generator or loader.generator,
    )
    # Opacus's sampler takes int(1 / rate) steps, which floating point makes one short for
    # some counts (1 / (1 / 93) < 93): the accountant would then charge a rate of 1/92.
    poisson.batch_sampler.steps = sampling.steps_per_epoch
    return poisson


def noise_only_step(optimizer: Any) -> None:
    """The DP-SGD step of an empty Poisson batch: no record's gradient, the noise alone.

    The accountant counts every step of the sampler; skipping an empty batch would make the
    number of noisy steps depend on the records (a small site draws more empty batches).
    Opacus clips and noises ``grad_sample``; a batch of none is per-sample gradients of
    length 0 (some models cannot run a forward pass on it)."""
    optimizer.zero_grad(set_to_none=True)
    for p in optimizer.params:
        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
    optimizer.step()


def _first_batches(
    loader: Iterable[tuple[torch.Tensor, ...]],
    steps: int,
    used: list[tuple[torch.Tensor, ...]] | None,
) -> Iterator[tuple[torch.Tensor, ...]]:
    """The loader's first ``steps`` batches (epoch after epoch), each kept in ``used`` (when
    given)."""
    taken, before = 0, -1
    while before < taken < steps:  # an empty loader ends it
        before = taken
        for batch in loader:
            if taken == steps:
                return
            if used is not None:
                used.append(tuple(t.detach().cpu() for t in batch))
            taken += 1
            yield batch


def _concat(batches: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.cat(parts) for parts in zip(*batches, strict=True))
