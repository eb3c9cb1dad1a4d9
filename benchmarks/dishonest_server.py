"""What a server that does not play fair rebuilds of one site's records, in process (no
Flower): crafted weights (``audit.adversary``) trained by the site's own local training
(``clients.site_training.train_locally``: the config's optimizer, batch size and local epochs;
real Opacus DP-SGD with ``--dp-epsilon``), the records rebuilt from the update, scored at
the site against its own records, beside the baseline (the same attack on an update of as
many public records, scored against the same site records).

For each attack (imprint, trap) and each kind of round:

* ``FedSGD``: one local step of one batch (``fl.local_steps: 1``) of a site holding
  ``--members`` records, ``--repeats`` times (other seeds: other batches; under DP-SGD a
  Poisson batch at the site's sampling rate); scored against that batch's records;
* ``FedAvg, 1 batch``: the config's local epochs on a site holding one batch of records
  (``--repeats`` sites of different members);
* ``FedAvg, site``: the config's local epochs on ``--members`` records (a site of the
  config's size); scored against all of them.

Tabular records count as rebuilt with every field (numeric within 1% of the column's
range, one-hot exact); images at SSIM >= 0.9 (loose: 0.6) against the original and
against what the architecture lets through (``passthrough``).

Run: ``nice -n 10 .venv/bin/python benchmarks/dishonest_server.py --config
configs/tabular.yaml [--set key=value ...] [--dp-epsilon 1 8] [--members N]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from panoramia_fl.audit.adversary import (
    ATTACKS,
    CraftedModel,
    RebuiltShare,
    SiteOptimizer,
    craft_dead,
    rebuild,
    rebuilt_share,
    update_of,
)
from panoramia_fl.clients.privacy import AccountantHistory
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.ml.datasets import Dataset, load_dataset
from panoramia_fl.ml.tasks import TorchTask
from panoramia_fl.simulations.apps import dp_settings
from panoramia_fl.simulations.experiment_config import ExperimentConfig, load_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task

CPU = torch.device("cpu")
CRAFT_RECORDS = 1024
"""Public records the server crafts from (bin thresholds, scales), at most half of them;
the baseline's public sites are drawn from the rest (with replacement when a site needs
more records than the rest holds)."""
SIGMAS: set[float] = set()
"""DP-SGD noise multipliers the sites' training used (printed)."""


@dataclass(frozen=True)
class Round:
    """One kind of round the site trains the crafted model for."""

    name: str
    records: int
    epochs: int
    steps: int | None
    repeats: int
    """Sites (disjoint sets of members) the round is measured on."""


def _site_update(
    task: TorchTask,
    config: ExperimentConfig,
    crafted: CraftedModel,
    x: np.ndarray,
    y: np.ndarray,
    kind: Round,
    *,
    seed: int,
) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """The update a site holding ``(x, y)`` sends, and the records it trained on (the steps'
    records with ``local_steps``)."""
    dp = dp_settings(config, members=len(x))
    out = train_locally(
        task,
        crafted.state_dict,
        x=x,
        y=y,
        epochs=kind.epochs,
        seed=seed,
        device=CPU,
        dp=dp,
        accountant_history=None if dp is None else AccountantHistory(dp.accountant, []),
        local_steps=kind.steps,
    )
    used = x if out.used is None else _rows_of(x, out.used[0], task)
    if out.noise_multiplier is not None:
        SIGMAS.add(round(out.noise_multiplier, 3))
    return update_of(crafted, out.state_dict), used


def _rows_of(x: np.ndarray, used: torch.Tensor, task: TorchTask) -> np.ndarray:
    """The rows of ``x`` a local step used (matched on their tensors)."""
    tensors = task.tensors(x, np.zeros(len(x), dtype=np.int64))[0].flatten(1)
    index = torch.cdist(used.flatten(1).float(), tensors.float()).argmin(dim=1)
    return x[np.unique(index.numpy())]


def _score(
    task: TorchTask, dataset: Dataset, crafted: CraftedModel, rebuilt: torch.Tensor, x: np.ndarray
) -> dict[str, RebuiltShare]:
    records = task.tensors(x, np.zeros(len(x), dtype=np.int64))[0]
    if task.modality == "tabular":
        return {"": rebuilt_share(rebuilt, records, schema=dataset.info.get("schema"))}
    return {
        reference: rebuilt_share(
            rebuilt, records, reference=reference, passthrough=crafted.passthrough
        )
        for reference in ("original", "passthrough")
    }


def _mean(shares: list[RebuiltShare]) -> tuple[float, float, float, float, float]:
    """Over sites: the share rebuilt (pooled), its least and most, the loose share, quality."""
    n = sum(s.n_records for s in shares)
    return (
        sum(s.share * s.n_records for s in shares) / n,
        min(s.share for s in shares),
        max(s.share for s in shares),
        sum(s.share_loose * s.n_records for s in shares) / n,
        sum(s.quality_mean * s.n_records for s in shares) / n,
    )


def _line(
    attack: str, kind: Round, site: list[RebuiltShare], chance: list[RebuiltShare], ref: str
) -> str:
    against = f"vs {ref}" if ref else ""
    share, low, high, loose, quality = _mean(site)
    c_share, _, c_high, c_loose, c_quality = _mean(chance)
    return (
        f"{attack:8s} {kind.name:26s} x{kind.repeats:<3d}{against:15s} rebuilt {share:6.1%} "
        f"[{low:.0%}-{high:.0%}] (loose {loose:6.1%}, quality {quality:.3f})  "
        f"baseline {c_share:6.1%} [max {c_high:.0%}] (loose {c_loose:6.1%}, "
        f"quality {c_quality:.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("configs/tabular.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--members", type=int, default=1_100, help="records of a whole site")
    parser.add_argument("--repeats", type=int, default=8, help="sites per one-batch round")
    parser.add_argument("--attacks", nargs="+", default=["imprint", "trap"])
    parser.add_argument("--rounds", nargs="+", default=["fedsgd", "fedavg-batch", "fedavg-site"])
    parser.add_argument(
        "--dp-epsilon", nargs="*", type=float, default=[], help="also under DP-SGD at each eps"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = [list(args.overrides)] + [
        [*args.overrides, "dp.enabled=true", f"dp.target_epsilon={eps:g}"]
        for eps in args.dp_epsilon
    ]
    for overrides in settings:
        run(args, load_config(args.config, overrides), overrides)


def run(args: argparse.Namespace, config: ExperimentConfig, overrides: list[str]) -> None:
    dataset = load_dataset(config.data.name, root=config.data.root, options=config.data.options)
    assert dataset.y is not None and dataset.public_x is not None and dataset.public_y is not None
    task = make_task(config, DatasetMeta.of(dataset))
    batch, epochs = config.fl.batch_size, config.fl.local_epochs
    r = args.repeats
    kinds = {
        "fedsgd": Round(f"FedSGD (1 step of {batch})", args.members, 1, 1, r),
        "fedavg-batch": Round(f"FedAvg ({epochs} ep, {batch} rec)", batch, epochs, None, r),
        "fedavg-site": Round(
            f"FedAvg ({epochs} ep, {args.members} rec)", args.members, epochs, None, 1
        ),
    }
    optimizer = SiteOptimizer(config.fl.optimizer, config.fl.learning_rate)
    rng = np.random.default_rng(config.seed)
    members = rng.choice(len(dataset.x), args.members, replace=False)
    crafting = min(CRAFT_RECORDS, len(dataset.public_x) // 2)
    public = task.tensors(dataset.public_x[:crafting], dataset.public_y[:crafting])[0]
    others = np.arange(crafting, len(dataset.public_x))
    print(
        f"{config.name}: {config.model.name} on {config.data.name}, {config.fl.optimizer} "
        f"lr {config.fl.learning_rate:g}, batch {batch}; overrides: {' '.join(overrides) or '-'}"
    )
    torch.manual_seed(config.seed)
    model = task.make_model()
    for attack in args.attacks:
        began = time.perf_counter()
        crafted = ATTACKS.get(attack)(
            model, public=public, seed=config.seed, optimizer=optimizer, batch_size=batch
        )
        for name in args.rounds:
            kind = kinds[name]
            scores: dict[str, list[RebuiltShare]] = {}
            chances: dict[str, list[RebuiltShare]] = {}
            SIGMAS.clear()
            for repeat in range(kind.repeats):
                # Disjoint sites while members last (a whole site: the same, seeded anew).
                begin = (repeat * kind.records) % len(members)
                site = members[begin : begin + kind.records]
                decoy = rng.choice(others, kind.records, replace=kind.records > len(others))
                update, used = _site_update(
                    task, config, crafted, dataset.x[site], dataset.y[site], kind, seed=repeat
                )
                chance_update, _ = _site_update(
                    task,
                    config,
                    crafted,
                    dataset.public_x[decoy],
                    dataset.public_y[decoy],
                    kind,
                    seed=10_000 + repeat,
                )
                found = _score(task, dataset, crafted, rebuild(crafted, update), used)
                chance = _score(task, dataset, crafted, rebuild(crafted, chance_update), used)
                for ref in found:
                    scores.setdefault(ref, []).append(found[ref])
                    chances.setdefault(ref, []).append(chance[ref])
            sigma = f"  DP-SGD sigma {'/'.join(f'{z:g}' for z in sorted(SIGMAS))}" if SIGMAS else ""
            for ref in scores:
                print(_line(attack, kind, scores[ref], chances[ref], ref) + sigma, flush=True)
        print(f"{attack}: {time.perf_counter() - began:.0f} s", flush=True)
    dead = craft_dead(model, public=public, seed=config.seed)
    kind = kinds["fedavg-site"]
    site = members[: kind.records]
    update, _ = _site_update(task, config, dead, dataset.x[site], dataset.y[site], kind, seed=0)
    moved = sorted(key for key, delta in update.items() if bool(delta.any()))
    print(f"dead model, {kind.name}: parameters with a non-zero update: {moved}", flush=True)


if __name__ == "__main__":
    main()
