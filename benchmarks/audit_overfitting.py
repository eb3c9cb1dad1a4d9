"""Validation of the PANORAMIA audit on over-fitted Fashion-MNIST targets (no FL).

A target (``small_cnn`` by default) trains on a few Fashion-MNIST records for increasing
numbers of epochs; after each level the audit runs with each requested non-member source
(``--variants``) and the script prints, per level and variant: c_lb, the ceiling,
{c+eps}_lb, eps_tilde, RM;RN, O(1), train / test accuracy, the validation bounds the
classifiers were selected on and the time per stage. It then checks what must hold:

* eps_tilde does not decrease with over-fitting (no significant drop: the next level's
  interval high end is at or above the previous level's low end, and the means are printed),
* eps_tilde stays at or below RM;RN's interval high end,
* c_lb stays below the ceiling.

Real non-members (for RM;RN and O(1)) come from the Fashion-MNIST training split outside the
members; the reference pool is the official test split, which the target never sees.

Run::

    python benchmarks/audit_overfitting.py            # full (~10 min on a free 2-core CPU)
    python benchmarks/audit_overfitting.py --quick    # a couple of minutes
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from panoramia_fl.audit import AuditConfig, PanoramiaResult, Records, run_audit
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task

# Preset audit settings per non-member source. The reference pool needs no D_G beyond a
# label histogram, so more of the member set goes to the classifiers and the game.
VARIANTS: dict[str, dict[str, Any]] = {
    "pool": {
        "generator": {"kind": "reference_pool"},
        "splits": {"generator": 0.05, "train": 0.3, "val": 0.15},
    },
    "pool-noref": {
        "generator": {"kind": "reference_pool"},
        "splits": {"generator": 0.05, "train": 0.3, "val": 0.15},
        "classifier": {"helper_reference": False},
    },
    "pool-stacked": {
        "generator": {"kind": "reference_pool"},
        "splits": {"generator": 0.05, "train": 0.3, "val": 0.15},
        "classifier": {"design": "stacked"},
    },
    "cgan": {"generator": {"kind": "cgan"}},
    "cgan-filter": {"generator": {"kind": "cgan", "filter": True, "filter_confidence": 0.99}},
    "vae": {"generator": {"kind": "vae"}},
}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small target, few epochs, 1 repeat")
    p.add_argument("--model", default="small_cnn", choices=["small_cnn", "resnet18"])
    p.add_argument("--width", type=int, default=None, help="small_cnn width")
    p.add_argument("--members", type=int, default=None, help="target training records")
    p.add_argument("--nonmembers", type=int, default=None, help="real non-members (RM;RN)")
    p.add_argument("--levels", default=None, help="comma-separated epoch counts")
    p.add_argument("--variants", default="pool,cgan", help=f"any of {sorted(VARIANTS)}")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--generator-epochs", type=int, default=None)
    p.add_argument("--helper-epochs", type=int, default=None)
    p.add_argument("--target-lr", type=float, default=1e-3)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="folder with the Fashion-MNIST IDX files (default: Debian package)",
    )
    p.add_argument(
        "--time-quick-m",
        type=int,
        default=None,
        metavar="M",
        help="instead: time one quick-mode audit whose game has M slots "
        "(default generator, i.e. the reference pool) and exit",
    )
    p.add_argument("--time-kind", default="auto", help="generator kind for --time-quick-m")
    p.add_argument("--out", type=Path, default=None, help="write all results as JSON")
    args = p.parse_args(argv)
    quick = args.quick
    args.width = args.width or (32 if quick else 64)
    args.members = args.members or (500 if quick else 1000)
    args.nonmembers = args.nonmembers or args.members
    args.levels = [int(v) for v in (args.levels or ("3,10,30" if quick else "5,20,60")).split(",")]
    args.repeats = args.repeats or (1 if quick else 3)
    args.generator_epochs = args.generator_epochs or (10 if quick else 40)
    args.helper_epochs = args.helper_epochs or (5 if quick else 15)
    args.variants = args.variants.split(",")
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        p.error(f"--variants: unknown {unknown}; known: {sorted(VARIANTS)}")
    return args


def audit_config(args: argparse.Namespace, variant: str) -> AuditConfig:
    base = {
        "repeats": args.repeats,
        "quick": args.quick,
        "helper_epochs": args.helper_epochs,
        "device": args.device,
        "seed": args.seed,
        "generator": {"epochs": args.generator_epochs},
    }
    return AuditConfig(**_merge(base, VARIANTS[variant]))


def row(level: int, variant: str, res: PanoramiaResult, acc: dict[str, float]) -> dict[str, Any]:
    sel = [r.selected for r in res.repeats]
    one = res.one_sided  # the paper's game
    return {
        "epochs": level,
        "variant": variant,
        "generator": res.generator_kind,
        "train_acc": acc["train"],
        "test_acc": acc["test"],
        "c_lb": one.c_lb.mean,
        "c_lb_sd": one.c_lb.std,
        "ceiling": one.ceiling,
        "c_eps_lb": one.c_eps_lb.mean,
        "eps_tilde": one.eps_tilde.mean,
        "eps_tilde_low": one.eps_tilde.low,
        "eps_tilde_high": one.eps_tilde.high,
        "rm_rn": one.rm_rn_eps_lb.mean if one.rm_rn_eps_lb else float("nan"),
        "rm_rn_high": one.rm_rn_eps_lb.high if one.rm_rn_eps_lb else float("nan"),
        "o1": res.o1_eps_lb.mean if res.o1_eps_lb else float("nan"),
        "b_auc": res.quality["baseline_auc"],
        "mia_auc": res.quality["mia_auc"],
        "val_c_lb": float(np.mean([s["baseline"]["val_bound"] for s in sel])),
        "val_c_eps_lb": float(np.mean([s["mia"]["val_bound"] for s in sel])),
        "m": res.sizes["m"],
        "flags": ",".join(k for k in ("saturated", "c_lb_not_tight") if getattr(one.flags, k)),
        "timings": {k: round(v, 1) for k, v in res.timings.items()},
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        "| epochs | variant | train/test acc | m | c_lb | ceiling | {c+eps}_lb | eps_tilde "
        "[95% CI] | RM;RN | O(1) | AUC b/MIA | val c_lb / {c+eps}_lb | flags | time s |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        print(
            f"| {r['epochs']} | {r['variant']} | {r['train_acc']:.3f}/{r['test_acc']:.3f} "
            f"| {r['m']} | {r['c_lb']:.2f} | {r['ceiling']:.2f} | {r['c_eps_lb']:.2f} | "
            f"{r['eps_tilde']:.2f} [{r['eps_tilde_low']:.2f}, {r['eps_tilde_high']:.2f}] | "
            f"{r['rm_rn']:.2f} (<= {r['rm_rn_high']:.2f}) | {r['o1']:.2f} | "
            f"{r['b_auc']:.3f}/{r['mia_auc']:.3f} | {r['val_c_lb']:.2f} / "
            f"{r['val_c_eps_lb']:.2f} | {r['flags'] or '-'} | {r['timings']['total']:.0f} |"
        )


def checks(rows: list[dict[str, Any]]) -> list[str]:
    """The properties the audit must have; one line each, PASS or FAIL."""
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == variant]
        for a, b in zip(rs, rs[1:]):
            ok = b["eps_tilde_high"] >= a["eps_tilde_low"]
            out.append(
                f"{'PASS' if ok else 'FAIL'} {variant}: eps_tilde E{a['epochs']} "
                f"{a['eps_tilde']:.2f} -> E{b['epochs']} {b['eps_tilde']:.2f} "
                "(no significant decrease)"
            )
        for r in rs:
            ok = math.isnan(r["rm_rn_high"]) or r["eps_tilde"] <= r["rm_rn_high"]
            out.append(
                f"{'PASS' if ok else 'FAIL'} {variant} E{r['epochs']}: eps_tilde "
                f"{r['eps_tilde']:.2f} <= RM;RN high {r['rm_rn_high']:.2f}"
            )
            ok = r["c_lb"] < r["ceiling"]
            out.append(
                f"{'PASS' if ok else 'FAIL'} {variant} E{r['epochs']}: c_lb "
                f"{r['c_lb']:.2f} < ceiling {r['ceiling']:.2f}"
                + ("" if ok else " (saturated: the baseline separates G's records perfectly)")
            )
    return out


def time_quick(args: argparse.Namespace, ds, task, device: torch.device) -> int:
    """One quick-mode audit with the default settings and a game of ``--time-quick-m`` slots."""
    from panoramia_fl.audit.panoramia.settings import resolve_config

    given = AuditConfig(
        quick=True,
        device=args.device,
        seed=args.seed,
        generator={"kind": args.time_kind, "epochs": args.generator_epochs},
    )
    cfg = resolve_config(given, modality="image", has_pool=True)
    assert cfg.splits.generator is not None  # resolve_config fills it in
    test_fraction = 1 - cfg.splits.generator - cfg.splits.train - cfg.splits.val
    n = int(np.ceil(args.time_quick_m / test_fraction)) + 2
    idx = np.random.default_rng(args.seed).permutation(len(ds.x))[:n]
    members = Records(ds.x[idx], ds.y[idx])
    torch.manual_seed(args.seed)
    model = task.make_model()
    task.train_model(model, members.x, members.y, epochs=2, seed=args.seed, device=device)
    t0 = time.perf_counter()
    res = run_audit(
        task, model, members, given, public_pool=Records(ds.public_x, ds.public_y), progress=print
    )
    total = time.perf_counter() - t0
    print(
        f"quick audit, generator {res.generator_kind}: m={res.sizes['m']} "
        f"(members {res.sizes['members']}, train {res.sizes['train']}, val "
        f"{res.sizes['val']}), wall {total:.1f}s"
    )
    print("timings:", {k: round(v, 1) for k, v in res.timings.items()})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    ds = load_dataset("fashion_mnist", root=args.data_root)
    assert ds.y is not None and ds.public_x is not None  # Fashion-MNIST: labels, a test split
    options = {"width": args.width} if args.model == "small_cnn" else {}
    task = build_task(
        "image",
        model_name=args.model,
        num_classes=10,
        input_shape=(1, 28, 28),
        model_options=options,
    )
    task.optimizer = type(task.optimizer)(name="adam", learning_rate=args.target_lr)
    if args.time_quick_m:
        return time_quick(args, ds, task, device)
    perm = np.random.default_rng(args.seed).permutation(len(ds.x))
    mem_idx = perm[: args.members]
    non_idx = perm[args.members : args.members + args.nonmembers]
    members = Records(ds.x[mem_idx], ds.y[mem_idx])
    nonmembers = Records(ds.x[non_idx], ds.y[non_idx])
    pool = Records(ds.public_x, ds.public_y)
    print(
        f"target {args.model} (width {args.width}) on {args.members} Fashion-MNIST records, "
        f"levels {args.levels}, variants {args.variants}, repeats {args.repeats}, "
        f"device {device}",
        flush=True,
    )

    torch.manual_seed(args.seed)
    model = task.make_model()
    rows: list[dict[str, Any]] = []
    trained = 0
    for level in args.levels:
        t0 = time.perf_counter()
        task.train_model(
            model,
            members.x,
            members.y,
            epochs=level - trained,
            seed=args.seed + level,
            device=device,
        )
        trained = level
        acc = {
            "train": task.evaluate(model, members.x, members.y, device=device)["accuracy"],
            "test": task.evaluate(model, ds.public_x, ds.public_y, device=device)["accuracy"],
        }
        print(
            f"E{level}: trained in {time.perf_counter() - t0:.0f}s, train acc "
            f"{acc['train']:.3f}, test acc {acc['test']:.3f}",
            flush=True,
        )
        for variant in args.variants:
            res = run_audit(
                task,
                model,
                members,
                audit_config(args, variant),
                nonmembers=nonmembers,
                public_pool=pool,
            )
            rows.append(row(level, variant, res, acc))
            r = rows[-1]
            print(
                f"  {variant}: c_lb {r['c_lb']:.2f} ceiling {r['ceiling']:.2f} "
                f"{{c+eps}}_lb {r['c_eps_lb']:.2f} eps_tilde {r['eps_tilde']:.2f} "
                f"RM;RN {r['rm_rn']:.2f} O(1) {r['o1']:.2f} timings {r['timings']}",
                flush=True,
            )
    print()
    print_table(rows)
    print()
    lines = checks(rows)
    print("\n".join(lines))
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "args": {
                        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    },
                    "rows": rows,
                    "checks": lines,
                },
                indent=1,
            )
        )
    return 0 if all(line.startswith("PASS") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
