"""What the real-path white-box audit costs a site's DP-SGD: time and accuracy, back to back.

One site of the default (Fashion-MNIST, the small CNN, 1,100 members, batch 64, Adam) trains
``--rounds`` rounds of ``--epochs`` local epochs under record-level DP at ``--eps``, once
without the audit and once with ``--pairs`` canary pairs (2K canaries through the real
sampler, clipping and noise call, and the conformance observations of every step),
alternating ``--repeats`` times; prints each time, the ratio, the time the audit's hooks
took inside training, the audit-phase time (bounds and conformance checks), the checks that
failed (none on an honest run) and the test accuracy of both models (the audit never touches
the model: the weights are compared bit for bit).

Run: ``.venv/bin/python benchmarks/gradient_canary_cost.py [--pairs 50000] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.real_path_canaries import GradientCanaryState
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.simulations.experiment_config import load_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--eps", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(1)
    task, (x, y), (test_x, test_y) = _default_site(args.eps)
    torch.manual_seed(0)
    start = task.make_model().state_dict()
    dp = DPSettings(
        target_epsilon=args.eps,
        noise_multiplier=None,
        delta=1e-5,
        max_grad_norm=1.0,
        accountant="prv",
        total_epochs=args.rounds * args.epochs,
    )

    audited: dict[str, float] = {}

    def train(pairs: int) -> tuple[float, dict[str, torch.Tensor]]:
        return _train(task, start, (x, y), dp=dp, args=args, pairs=pairs, audited=audited)

    print(f"DP-SGD eps={args.eps:g}, {args.rounds} rounds x {args.epochs} local epochs, 1 site")
    ratios, states = [], {}
    for repeat in range(args.repeats):
        plain, states[0] = train(0)
        audited_s, states[args.pairs] = train(args.pairs)
        ratios.append(audited_s / plain)
        print(
            f"pair {repeat + 1}: without {plain:.1f} s, with the real-path audit "
            f"({2 * args.pairs} canaries and the conformance hooks) {audited_s:.1f} s -> "
            f"{ratios[-1]:.2f}x; its hooks took {audited['hooks']:.1f} s of it"
        )
    identical = all(torch.equal(states[0][k], states[args.pairs][k]) for k in states[0])
    accuracy = {}
    for pairs, state in states.items():
        model = task.make_model()
        model.load_state_dict(state)
        accuracy[pairs] = task.evaluate(model, test_x, test_y, device=torch.device("cpu"))[
            "accuracy"
        ]
    print(f"median ratio over {args.repeats} pairs: {float(np.median(ratios)):.2f}x")
    print(
        f"audit phase (bounds and conformance checks): {audited['audit']:.1f} s; "
        f"checks failed: {audited['failed']:.0f} of {audited['checks']:.0f}"
    )
    print(f"accuracy without / with: {accuracy[0]:.4f} / {accuracy[args.pairs]:.4f}")
    print(f"weights bit-identical: {identical}")


def _train(
    task: Any,
    start: dict[str, torch.Tensor],
    xy: tuple[np.ndarray, np.ndarray],
    *,
    dp: DPSettings,
    args: argparse.Namespace,
    pairs: int,
    audited: dict[str, float],
) -> tuple[float, dict[str, torch.Tensor]]:
    """One site's rounds from ``start``, with ``pairs`` canary pairs (0: without the audit);
    its training time and weights. With the audit, its hooks' time, the audit phase's time
    and the checks' outcome go into ``audited``."""
    accountant_history = AccountantHistory(accountant="prv", history=[])
    canaries = GradientCanaryState.new(pairs, seed=1) if pairs else None
    state = start
    began = time.perf_counter()
    for r in range(args.rounds):
        out = train_locally(
            task,
            state,
            x=xy[0],
            y=xy[1],
            epochs=args.epochs,
            seed=r,
            device=torch.device("cpu"),
            dp=dp,
            accountant_history=accountant_history,
            gradient_canaries=canaries,
        )
        state = out.state_dict
    elapsed = time.perf_counter() - began
    if canaries is not None:
        began = time.perf_counter()
        result = canaries.audit(beta=0.05, seed=0, dp=dp, accountant_history=accountant_history)
        assert result.conformance is not None
        audited.update(
            hooks=canaries.seconds,
            audit=time.perf_counter() - began,
            failed=len(result.conformance.failed),
            checks=len(result.conformance.checks),
        )
    return elapsed, state


def _default_site(eps: float) -> tuple[Any, tuple[np.ndarray, np.ndarray], tuple[Any, Any]]:
    """The default's task under record-level DP at ``eps``, one site's 1,100 members and
    2,000 public test records."""
    config = load_config(
        Path("configs/default.yaml"),
        ["dp.enabled=true", f"dp.target_epsilon={eps}", "dp.accountant=prv"],
    )
    dataset = load_dataset(config.data.name)
    task = make_task(config, DatasetMeta.of(dataset))
    members = np.random.default_rng(0).choice(len(dataset.x), 1_100, replace=False)
    assert dataset.y is not None
    assert dataset.public_x is not None and dataset.public_y is not None
    members_xy = (dataset.x[members], dataset.y[members])
    return task, members_xy, (dataset.public_x[:2000], dataset.public_y[:2000])


if __name__ == "__main__":
    main()
