"""Attribute inference on RAND HIE: its null control and its over-fit (positive) control.

A *null target* is the site's MLP trained on other people of the table: it never saw the
members, so any attribute-inference eps lower bound above 0 against it is a false
positive. Each game draws fresh disjoint record sets from every row of the table (members,
real held-out non-members, public records for the guesses, and the null target's own
records; a null target serves ``--games-per-target`` games on disjoint members), runs
:func:`audit.tabular.attribute_game.attribute_inference_audit` with one repeat (a fresh game
each), and counts the games whose bound reads above 0, per side and two-sided, with a
two-sided 95% Clopper-Pearson interval. The *positive control* trains the target on the
members themselves for more and more epochs: the bound and the advantage must rise.

Run::

    nice -n 10 python benchmarks/attribute_inference.py                  # 120 null games
    nice -n 10 python benchmarks/attribute_inference.py --targets 10 --overfit-targets 1
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from null_validity import clopper_pearson  # noqa: E402

from panoramia_fl.audit.panoramia.components import Records  # noqa: E402
from panoramia_fl.audit.tabular.attribute_game import attribute_inference_audit  # noqa: E402
from panoramia_fl.audit.tabular.attribute_result import (  # noqa: E402
    AttributeInferenceConfig,
    AttributeInferenceResult,
)
from panoramia_fl.ml.datasets import Dataset, load_dataset  # noqa: E402
from panoramia_fl.ml.tasks import TorchTask, build_task  # noqa: E402

BETA = 0.05
CPU = torch.device("cpu")
READINGS = ("two-sided", "member side", "non-member side")


@dataclass(frozen=True)
class Sizes:
    """Records per game (disjoint): members, held-out non-members, public records."""

    members: int = 500
    nonmembers: int = 300
    public: int = 700
    other: int = 600
    """The null target's own training records (one set per target)."""


@dataclass(frozen=True)
class Bench:
    data: Dataset
    task: TorchTask
    x: np.ndarray
    y: np.ndarray

    @property
    def schema(self) -> dict:
        return dict(self.data.info["schema"])


def load(*, max_rows: int | None = None) -> Bench:
    """RAND HIE, one row per person (as configs/tabular.yaml), all rows pooled."""
    options: dict[str, object] = {"unit": "person"}
    if max_rows is not None:
        options["max_rows"] = max_rows
    data = load_dataset("randhie", options=options)
    assert data.public_x is not None and data.public_y is not None
    task = build_task(
        "tabular",
        model_name="mlp",
        num_classes=data.num_classes,
        input_shape=data.input_shape,
        schema=data.info["schema"],
    )
    return Bench(
        data, task, np.concatenate([data.x, data.public_x]), np.concatenate([data.y, data.public_y])
    )


def _records(bench: Bench, idx: np.ndarray) -> Records:
    return Records(bench.x[idx], bench.y[idx])


def train(bench: Bench, records: Records, *, epochs: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = bench.task.make_model()
    bench.task.train_model(model, records.x, records.y, epochs=epochs, seed=seed, device=CPU)
    return model.eval()


def audit(
    bench: Bench,
    model: torch.nn.Module,
    parts: dict[str, Records],
    *,
    field_name: str,
    seed: int,
    repeats: int = 1,
) -> AttributeInferenceResult:
    return attribute_inference_audit(
        bench.task,
        model,
        parts["members"],
        parts["nonmembers"],
        config=AttributeInferenceConfig(field=field_name, repeats=repeats),
        schema=bench.schema,
        public=parts["public"],
        beta=BETA,
        seed=seed,
        device=CPU,
    )


def draw(bench: Bench, sizes: Sizes, *, games: int, seed: int) -> tuple[Records, list[dict]]:
    """The null target's records and ``games`` disjoint (members, non-members, public)."""
    per_game = (sizes.members, sizes.nonmembers, sizes.public)
    need = sizes.other + games * sum(per_game)
    if need > len(bench.x):
        raise ValueError(f"{need} records per target but the table has {len(bench.x)}")
    idx = np.random.default_rng([seed, 0xA1]).permutation(len(bench.x))
    other, rest = idx[: sizes.other], idx[sizes.other :]
    out = []
    for g in range(games):
        block = rest[g * sum(per_game) : (g + 1) * sum(per_game)]
        parts = np.split(block, np.cumsum(per_game)[:-1])
        names = ("members", "nonmembers", "public")
        out.append({n: _records(bench, p) for n, p in zip(names, parts, strict=True)})
    return _records(bench, other), out


@dataclass
class Tally:
    """Null games and how many read above 0, per reading; the advantages seen."""

    games: int = 0
    positive: dict[str, int] = field(default_factory=lambda: dict.fromkeys(READINGS, 0))
    advantage: list[float] = field(default_factory=list)
    baseline_advantage: list[float] = field(default_factory=list)

    def add(self, result: AttributeInferenceResult) -> None:
        self.games += 1
        readings = (result.eps_lb, result.eps_lb_member, result.eps_lb_nonmember)
        for name, value in zip(READINGS, readings, strict=True):
            self.positive[name] += int(value.mean > 0)
        self.advantage.append(result.advantage.mean)
        self.baseline_advantage.append(result.baseline_advantage.mean)


def null_tally(
    bench: Bench,
    *,
    targets: int,
    games_per_target: int,
    epochs: int,
    field_name: str,
    seed: int,
    sizes: Sizes = Sizes(),
) -> Tally:
    """Every game against a target that never saw its members (one repeat: one game)."""
    tally = Tally()
    for t in range(targets):
        other, games = draw(bench, sizes, games=games_per_target, seed=seed + t)
        model = train(bench, other, epochs=epochs, seed=seed + t)
        for g, parts in enumerate(games):
            game_seed = seed * 1000 + 7 * t + g
            tally.add(audit(bench, model, parts, field_name=field_name, seed=game_seed))
    return tally


@dataclass(frozen=True)
class Control:
    epochs: int
    eps_lb: list[float]
    advantage: list[float]
    baseline_advantage: list[float]


def positive_control(
    bench: Bench,
    *,
    epochs: tuple[int, ...],
    targets: int,
    field_name: str,
    seed: int,
    repeats: int = 5,
    sizes: Sizes = Sizes(),
) -> list[Control]:
    """Targets trained on the members themselves, for each number of epochs."""
    out = []
    for e in epochs:
        eps, adv, base = [], [], []
        for t in range(targets):
            _, (parts,) = draw(bench, sizes, games=1, seed=seed + 500 + t)
            model = train(bench, parts["members"], epochs=e, seed=seed + t)
            r = audit(bench, model, parts, field_name=field_name, seed=seed + t, repeats=repeats)
            eps.append(r.eps_lb.mean)
            adv.append(r.advantage.mean)
            base.append(r.baseline_advantage.mean)
        out.append(Control(e, eps, adv, base))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--field", default="health", help="the sensitive field (a schema column)")
    parser.add_argument("--targets", type=int, default=60, help="null targets")
    parser.add_argument("--games-per-target", type=int, default=2)
    parser.add_argument("--null-epochs", type=int, default=20)
    parser.add_argument("--overfit-epochs", default="5,20,80,200")
    parser.add_argument("--overfit-targets", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    began = time.perf_counter()
    bench = load()
    tally = null_tally(
        bench,
        targets=args.targets,
        games_per_target=args.games_per_target,
        epochs=args.null_epochs,
        field_name=args.field,
        seed=args.seed,
    )
    print(
        f"field {args.field!r}; {tally.games} null games ({args.targets} targets x "
        f"{args.games_per_target}, {args.null_epochs} epochs on other people); beta = {BETA}"
    )
    print(f"{'reading':<16} {'level':>6} {'> 0':>5} {'rate':>7}  95% CP interval")
    for name in READINGS:
        k = tally.positive[name]
        lo, hi = clopper_pearson(k, tally.games)
        level = BETA if name == "two-sided" else BETA / 2
        print(f"{name:<16} {level:>6.3f} {k:>5} {k / tally.games:>7.3f}  [{lo:.3f}, {hi:.3f}]")
    adv, base = np.array(tally.advantage), np.array(tally.baseline_advantage)
    print(
        f"null advantage: mean {adv.mean():+.4f} (sd {adv.std(ddof=1):.4f}); baseline's "
        f"{base.mean():+.4f} (sd {base.std(ddof=1):.4f})"
    )
    epochs = tuple(int(e) for e in args.overfit_epochs.split(","))
    controls = positive_control(
        bench, epochs=epochs, targets=args.overfit_targets, field_name=args.field, seed=args.seed
    )
    print(f"positive control: the target trained on the members ({args.overfit_targets} targets)")
    print(f"{'epochs':>6} {'eps_lb mean':>12} {'> 0':>5} {'advantage':>10} {'baseline adv':>13}")
    for c in controls:
        print(
            f"{c.epochs:>6} {np.mean(c.eps_lb):>12.3f} {sum(v > 0 for v in c.eps_lb):>5} "
            f"{np.mean(c.advantage):>+10.3f} {np.mean(c.baseline_advantage):>+13.3f}"
        )
    print(f"{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
