"""Validity of the whole audit pipeline under the null, with a positive control.

A *null target* has the members' architecture but trains on other records of the same
distribution: it never saw the members, so every bound that claims leakage about them is a
false positive. For each modality the script draws fresh disjoint record sets per target
(members, real non-members, a public pool, the null target's own training records), runs
``run_audit`` with both sides of the game and calibration on (reference models), and counts,
over every game (each repeat is a fresh game), how often each number reads above 0:
PANORAMIA's one-sided eps_tilde, each side's eps_tilde and the two-sided one, RM;RN per
side, and O(1). Each fraction comes with a two-sided 95% Clopper-Pearson interval; it must
stay at or below beta. A *positive control* (a target over-fitted on the members, same
pipeline) must read above 0, and it is audited with both threshold selections ("union" and
"split") so their power can be compared on benchmark data, never on a run's game.

Run::

    python benchmarks/null_validity.py                      # 20 targets x 10 games, both modalities
    python benchmarks/null_validity.py --targets 2 --repeats 10 --image-data digits   # quick
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from panoramia_fl.audit import AuditConfig, PanoramiaResult, Records, run_audit  # noqa: E402
from panoramia_fl.ml.datasets import Dataset, load_dataset  # noqa: E402
from panoramia_fl.ml.tasks import TorchTask, build_task  # noqa: E402

METRICS = (
    "eps_tilde (one-sided, paper)",
    "eps_tilde member side",
    "eps_tilde non-member side",
    "eps_tilde two-sided",
    "RM;RN member side",
    "RM;RN non-member side",
    "O(1)",
)


@dataclass(frozen=True)
class Sizes:
    """Records drawn per target (disjoint)."""

    members: int
    nonmembers: int
    pool: int
    other: int


@dataclass(frozen=True)
class Modality:
    name: str
    dataset: Dataset
    task: TorchTask
    sizes: Sizes
    null_epochs: int
    overfit_epochs: int


@dataclass
class Tally:
    """Games with a positive value, per metric."""

    games: int = 0
    positive: dict[str, int] = field(default_factory=lambda: dict.fromkeys(METRICS, 0))

    def add(self, result: PanoramiaResult) -> None:
        for rep in result.repeats:
            two = rep.two_sided
            assert two is not None
            values = {
                METRICS[0]: rep.one_sided.eps_tilde,
                METRICS[1]: two.member.eps_tilde,
                METRICS[2]: two.nonmember.eps_tilde,
                METRICS[3]: two.eps_tilde,
                METRICS[4]: two.member.rm_rn_eps_lb,
                METRICS[5]: two.nonmember.rm_rn_eps_lb,
                METRICS[6]: rep.o1_eps_lb,
            }
            self.games += 1
            for name, value in values.items():
                self.positive[name] += int(value is not None and value > 0)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval of a binomial proportion."""
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def load_modality(name: str, image_data: str) -> Modality:
    if name == "image":
        data = load_dataset(image_data)
        small = image_data == "digits"
        sizes = Sizes(400, 300, 550, 500) if small else Sizes(600, 400, 900, 600)
        return Modality(name, data, _task(data), sizes, null_epochs=15, overfit_epochs=60)
    if name == "tabular":
        data = load_dataset("randhie", options={"unit": "person"})
        return Modality(
            name, data, _task(data), Sizes(600, 400, 900, 600), null_epochs=30, overfit_epochs=150
        )
    raise ValueError(f"unknown modality {name!r}: use image or tabular")


def _task(data: Dataset) -> TorchTask:
    extra = {"schema": data.info["schema"]} if "schema" in data.info else {}
    return build_task(
        data.modality,
        model_name="small_cnn" if data.modality == "image" else "mlp",
        num_classes=data.num_classes,
        input_shape=data.input_shape,
        **extra,
    )


def _draw(mod: Modality, seed: int) -> dict[str, Records]:
    """Disjoint members, real non-members, public pool and the null target's records, drawn
    from every record of the dataset (its public split included: all are one distribution)."""
    ds = mod.dataset
    x, y = ds.x, ds.y
    if ds.public_x is not None:
        x = np.concatenate([x, ds.public_x])
        y = None if y is None or ds.public_y is None else np.concatenate([y, ds.public_y])
    s = mod.sizes
    need = s.members + s.nonmembers + s.pool + s.other
    if need > len(x):
        raise ValueError(f"{mod.name}: {need} records per target but the data has {len(x)}")
    idx = np.random.default_rng([seed, 0x0DD]).permutation(len(x))
    cuts = np.cumsum([s.members, s.nonmembers, s.pool, s.other])
    parts = np.split(idx[: cuts[-1]], cuts[:-1])
    names = ("members", "nonmembers", "pool", "other")
    return {
        n: Records(x[p], None if y is None else y[p]) for n, p in zip(names, parts, strict=True)
    }


def _target(mod: Modality, records: Records, *, epochs: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = mod.task.make_model()
    mod.task.train_model(
        model, records.x, records.y, epochs=epochs, seed=seed, device=torch.device("cpu")
    )
    return model.eval()


@dataclass(frozen=True)
class Protocol:
    """How the game draws non-members and how b and the MIA score records."""

    pairing: str
    classifier: dict[str, object]
    image: dict[str, object]
    """Further settings of image audits."""


PROTOCOLS = {
    "paired-score": Protocol("label", {}, {"threshold_grid": 30, "threshold_spacing": "geometric"}),
    "unpaired-trained": Protocol("none", {"design": "gbm"}, {}),
}
"""``paired-score``: today's defaults (label pairing; images: score-only attacks and the 30
geometric cuts of configs/default.yaml). ``unpaired-trained``: the protocol before them
(unpaired draw, trained classifiers, every score level a threshold)."""


def audit_config(
    *,
    repeats: int,
    seed: int,
    modality: str = "image",
    protocol: str = "paired-score",
    classifier: dict[str, object] | None = None,
    **overrides: object,
) -> AuditConfig:
    """Quick audits in the default's setting: the reference pool, both sides, calibration
    (2 reference models) and, for images, loss features only; ``protocol`` picks the pairing
    and the attack design (:data:`PROTOCOLS`); ``classifier`` and ``overrides`` replace
    settings."""
    chosen = PROTOCOLS[protocol]
    settings: dict[str, object] = {
        **(chosen.image if modality == "image" else {}),
        "quick": True,
        "repeats": repeats,
        "seed": seed,
        "device": "cpu",
        "pairing": chosen.pairing,
        "generator": {"kind": "reference_pool"},
        "splits": {"generator": 0.05, "train": 0.3, "val": 0.15},
        "calibration": {"reference_models": 2, "epochs": 10},
        "classifier": {
            **({"feature_sets": ["loss"]} if modality == "image" else {}),
            **chosen.classifier,
            **(classifier or {}),
        },
    }
    return AuditConfig(**{**settings, **overrides})


def null_tally(
    mod: Modality,
    *,
    targets: int,
    repeats: int,
    seed: int = 0,
    protocol: str = "paired-score",
    generator: str = "reference_pool",
    classifier: dict[str, object] | None = None,
) -> Tally:
    """Audit ``targets`` null targets, ``repeats`` games each, non-members from
    ``generator`` (``generator.kind``); ``classifier`` replaces classifier settings."""
    tally = Tally()
    for t in range(targets):
        data = _draw(mod, seed * 1000 + t)
        target = _target(mod, data["other"], epochs=mod.null_epochs, seed=t)
        result = run_audit(
            mod.task,
            target,
            data["members"],
            audit_config(
                repeats=repeats,
                seed=seed * 1000 + t,
                modality=mod.name,
                protocol=protocol,
                generator={"kind": generator},
                classifier=classifier,
            ),
            nonmembers=data["nonmembers"],
            public_pool=data["pool"],
        )
        tally.add(result)
    return tally


def positive_control(
    mod: Modality,
    *,
    repeats: int,
    seed: int = 0,
    protocol: str = "paired-score",
    **overrides: object,
) -> PanoramiaResult:
    """A target over-fitted on the members, audited by the same pipeline."""
    data = _draw(mod, 10_000 + seed)
    target = _target(mod, data["members"], epochs=mod.overfit_epochs, seed=seed)
    return run_audit(
        mod.task,
        target,
        data["members"],
        audit_config(
            repeats=repeats,
            seed=seed,
            modality=mod.name,
            protocol=protocol,
            **overrides,  # type: ignore[arg-type]  # settings by name, never `classifier`
        ),
        nonmembers=data["nonmembers"],
        public_pool=data["pool"],
    )


def print_tally(name: str, tally: Tally, beta: float) -> bool:
    """One line per metric; True when every fraction is at most its level and its CP high
    end at most twice that: beta/2 for each eps_tilde (against a null target c = 0, so only
    the MIA's bounds, at beta/4 per side, can err) and for RM;RN's sides, beta for O(1)."""
    ok = True
    print(f"\n{name}: {tally.games} null games (targets that never saw the members), beta={beta}")
    print(f"{'metric':30s} {'positive':>8s} {'fraction':>9s}  {'95% CP interval':>17s}  verdict")
    for metric in METRICS:
        k = tally.positive[metric]
        lo, hi = clopper_pearson(k, tally.games)
        frac = k / tally.games
        level = beta if metric == "O(1)" else beta / 2  # O(1) claims level beta
        good = frac <= level and hi <= 2 * level
        ok &= good
        print(
            f"{metric:30s} {k:8d} {frac:9.3f}  [{lo:.3f}, {hi:.3f}]    "
            + ("ok" if good else "FAIL")
        )
    return ok


def _fmt(iv) -> str:
    return "n/a" if iv is None else f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def print_control(name: str, selection: str, result: PanoramiaResult) -> bool:
    two = result.two_sided
    assert two is not None
    print(
        f"{name} positive control ({selection}): two-sided eps_tilde {_fmt(two.eps_tilde)} "
        f"(member {_fmt(two.member.eps_tilde)}, non-member {_fmt(two.nonmember.eps_tilde)}); "
        f"one-sided {_fmt(result.one_sided.eps_tilde)}; RM;RN two-sided {_fmt(two.rm_rn_eps_lb)}; "
        f"O(1) {_fmt(result.o1_eps_lb)}; f loss members/non-members "
        f"{result.quality['target_loss_members']:.3f}/"
        f"{result.quality.get('target_loss_nonmembers', float('nan')):.3f}"
    )
    return two.eps_tilde.mean > 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modalities", nargs="+", default=["image", "tabular"])
    parser.add_argument("--targets", type=int, default=20, help="null targets per modality")
    parser.add_argument("--repeats", type=int, default=10, help="games per target")
    parser.add_argument(
        "--image-data", default="fashion_mnist", choices=["fashion_mnist", "digits"]
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--protocol",
        default="paired-score",
        choices=sorted(PROTOCOLS),
        help="paired-score: label pairing and score-only image attacks (the defaults); "
        "unpaired-trained: the protocol before them",
    )
    parser.add_argument(
        "--controls", default="union,split", help="threshold selections of the over-fit control"
    )
    parser.add_argument(
        "--generator",
        default="reference_pool",
        help="the non-members' source (generator.kind), e.g. mst for tabular: generated "
        "non-members, and a helper that also learns the public pool and D_G",
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    beta = audit_config(repeats=1, seed=0).beta
    all_ok = True
    for name in args.modalities:
        mod = load_modality(name, args.image_data)
        start = time.perf_counter()
        tally = null_tally(
            mod,
            targets=args.targets,
            repeats=args.repeats,
            seed=args.seed,
            protocol=args.protocol,
            generator=args.generator,
        )
        all_ok &= print_tally(f"{name} ({args.protocol}, {args.generator})", tally, beta)
        for selection in args.controls.split(","):
            result = positive_control(
                mod,
                repeats=3,
                seed=args.seed,
                protocol=args.protocol,
                threshold_selection=selection,
                generator={"kind": args.generator},
            )
            all_ok &= print_control(name, selection, result)
        print(f"{name}: {time.perf_counter() - start:.0f} s")
    print("\nall checks passed" if all_ok else "\nSOME CHECKS FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
