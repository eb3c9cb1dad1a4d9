"""PANORAMIA on an MLP trained on one site-sized subset of the RAND HIE table.

Trains the paper's MLP (150-100-50-10) on ``--members`` person-years of one RAND site for
each ``--epochs`` value, then audits it with the MST generator and reports c_lb,
{c+eps}_lb, eps_tilde, the RM;RN bound and O(1) (real non-members of the same site), next
to the paper's Adult finding (Appendix D.6: eps_tilde ~ 0 while O(1) finds ~0.65).

Example (about 5-10 minutes on 2 CPU cores)::

    .venv/bin/python benchmarks/tabular_audit.py --epochs 10 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from panoramia_fl.audit import run_audit
from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import GENERATORS, AuditContext, Records
from panoramia_fl.audit.tabular.generators import MSTGenerator
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task
from panoramia_fl.ml.tasks.base import OptimizerSpec


def _generator_kind(args: argparse.Namespace) -> str:
    """The generator name; a non-default ``--bins`` registers an MST variant for this run."""
    if args.generator != "mst" or args.bins == 16:
        return args.generator
    name = f"mst_b{args.bins}"

    @GENERATORS.register(name, modality="tabular")
    def _variant(config: AuditConfig, context: AuditContext) -> MSTGenerator:
        return MSTGenerator(
            schema=getattr(context.task, "schema", None),
            bins=args.bins,
            filter=config.generator.filter,
            filter_confidence=config.generator.filter_confidence,
        )

    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--site",
        type=int,
        default=1,
        help="RAND HIE site (1-6); 0: a random subset of the whole pool",
    )
    parser.add_argument("--unit", choices=["person_year", "person"], default="person_year")
    parser.add_argument("--members", type=int, default=2500)
    parser.add_argument("--nonmembers", type=int, default=800)
    parser.add_argument("--epochs", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--learning-rate", type=float, default=5e-4, help="paper: 5e-4")
    parser.add_argument("--target", default="high_spending")
    parser.add_argument("--generator", default="mst")
    parser.add_argument("--filter", action="store_true")
    parser.add_argument("--filter-confidence", type=float, default=0.95)
    parser.add_argument(
        "--bins",
        type=int,
        default=16,
        help="MST quantile bins per continuous column (registers mst_b<N>)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--helper-epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)

    ds = load_dataset("randhie", options={"target": args.target, "unit": args.unit})
    if ds.groups is None or ds.y is None:
        raise SystemExit("randhie gives each row's person and label")
    rows = np.flatnonzero(ds.sites == args.site) if args.site else np.arange(len(ds))
    rng = np.random.default_rng(args.seed)
    if len(rows) < args.members + args.nonmembers:
        raise SystemExit(f"site {args.site} has {len(rows)} rows < members + nonmembers")
    # Non-members are other persons (groups), so a person never sits on both sides.
    persons = rng.permutation(np.unique(ds.groups[rows]))
    rank = {p: i for i, p in enumerate(persons)}
    rows = rows[np.argsort([rank[g] for g in ds.groups[rows]], kind="stable")]
    mem, tail = rows[: args.members], rows[args.members :]
    non = tail[~np.isin(ds.groups[tail], ds.groups[mem])][: args.nonmembers]
    members = Records(ds.x[mem], ds.y[mem], ds.groups[mem])
    nonmembers = Records(ds.x[non], ds.y[non], ds.groups[non])
    task = build_task(
        "tabular",
        model_name="mlp",
        num_classes=ds.num_classes,
        input_shape=ds.input_shape,
        schema=ds.info["schema"],
        optimizer=OptimizerSpec(name="adam", learning_rate=args.learning_rate),
    )
    config = AuditConfig(
        repeats=args.repeats,
        helper_epochs=args.helper_epochs,
        seed=args.seed,
        device="cpu",
        generator={
            "kind": _generator_kind(args),
            "filter": args.filter,
            "filter_confidence": args.filter_confidence,
        },
    )
    results = []
    for epochs in args.epochs:
        start = time.perf_counter()
        torch.manual_seed(args.seed)  # same initial weights for every epoch budget
        model = task.make_model()
        task.train_model(
            model, members.x, members.y, epochs=epochs, seed=args.seed, device=torch.device("cpu")
        )
        train_acc = task.evaluate(model, members.x, members.y, device=torch.device("cpu"))
        test_acc = task.evaluate(model, nonmembers.x, nonmembers.y, device=torch.device("cpu"))
        result = run_audit(task, model, members, config, nonmembers=nonmembers)
        one = result.one_sided  # the paper's game
        row = {
            "epochs": epochs,
            "train_accuracy": train_acc["accuracy"],
            "nonmember_accuracy": test_acc["accuracy"],
            "c_lb": one.c_lb.mean,
            "c_lb_std": one.c_lb.std,
            "c_eps_lb": one.c_eps_lb.mean,
            "c_eps_lb_std": one.c_eps_lb.std,
            "eps_tilde": one.eps_tilde.mean,
            "eps_tilde_ci": [one.eps_tilde.low, one.eps_tilde.high],
            "ceiling": one.ceiling,
            "rm_rn": one.rm_rn_eps_lb.mean if one.rm_rn_eps_lb else None,
            "o1": result.o1_eps_lb.mean if result.o1_eps_lb else None,
            "baseline_auc": result.quality["baseline_auc"],
            "mia_auc": result.quality["mia_auc"],
            "rare_value_fraction": result.quality.get("rare_value_fraction"),
            "tv_2way_mean": result.quality.get("tv_2way_mean"),
            "flags": one.flags.reasons,
            "seconds": round(time.perf_counter() - start, 1),
        }
        results.append(row)
        print(json.dumps(row))
    print(
        "paper (Adult, Table 6): MLP_E10 eps_tilde 0 +- 0.142, O(1) 0.655; "
        "MLP_E100 eps_tilde 0.062 +- 0.156, O(1) 0.648"
    )
    if args.out is not None:
        args.out.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2
            )
        )


if __name__ == "__main__":
    main()
