"""Measure the text audit at one site's size: generator choices x lightly / heavily trained target.

One "site" is a seeded set of Bible chapters (members: the chunks the target trains on;
holdout: chunks of other chapters, real non-members for RM;RN and O(1)); the public part of
the dataset is the generator's pre-training text and the reference pool. The target is
trained once, with snapshots at each ``--target-epochs`` value (the paper's E37 vs E150
contrast; ``0`` = the epoch with the lowest holdout loss), and every snapshot is audited
with every ``--variants`` generator. The measurement in the text helper's report (about
45 minutes on 2 busy CPU cores)::

    .venv/bin/python benchmarks/text_generator.py --members 1200 --holdout 300 \
        --vocab-size 2048 --target-epochs 0 30 --target-width 64 --generator-width 64 \
        --variants scratch pretrain pool --generator-epochs 20 --pretrain-epochs 3 \
        --helper-epochs 8 --repeats 2 --splits 0.3 0.2 0.1 \
        --target-cache runs/bench-text-target.pt --out runs/bench-text.json

Variants: ``scratch`` (gpt2 generator trained on D_G only), ``pretrain`` (pre-trained on
the public chapters first), ``unprompted`` (pretrain, whole-chunk sampling without
prompts), ``pool`` (reference pool: public chunks as non-members). ``--save-npz`` /
``--data-npz`` store / reuse the tokenized site, so a machine without the tokenizer's
packages can run it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# Run as a script: make the repository importable (an editable install made before audit/
# had an __init__.py maps it as a namespace package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from panoramia_fl.audit import AuditConfig, GeneratorConfig, Records, run_audit  # noqa: E402
from panoramia_fl.audit.config import ClassifierConfig, SplitConfig  # noqa: E402
from panoramia_fl.audit.panoramia.settings import resolve_device  # noqa: E402
from panoramia_fl.ml.tasks import build_task  # noqa: E402
from panoramia_fl.ml.tasks.base import OptimizerSpec
from panoramia_fl.ml.training import run_epoch  # noqa: E402

VARIANTS: dict[str, dict] = {
    "scratch": {"pretrain_epochs": 0},
    "pretrain": {"pretrain_epochs": -1},  # -1: --pretrain-epochs
    "unprompted": {"pretrain_epochs": -1, "prompt_tokens": 0},
    "pool": {},
}


def load_site(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """Members, holdout and public chunks (from ``--data-npz`` or the bible loader)."""
    if args.data_npz:
        with np.load(args.data_npz) as z:
            return {k: z[k] for k in z.files}
    from panoramia_fl.ml.datasets import load_dataset

    data = load_dataset("bible", options={"vocab_size": args.vocab_size})
    if data.groups is None or data.public_x is None or data.public_groups is None:
        raise SystemExit("the bible loader gives chapter ids and a public part")
    rng = np.random.default_rng(args.seed)
    docs = rng.permutation(np.unique(data.groups))
    counts = {d: int(c) for d, c in zip(*np.unique(data.groups, return_counts=True), strict=True)}
    member_docs, holdout_docs, n_m, n_h = [], [], 0, 0
    for d in docs:
        if n_m < args.members:
            member_docs.append(d)
            n_m += counts[d]
        elif n_h < args.holdout:
            holdout_docs.append(d)
            n_h += counts[d]
    mem = np.flatnonzero(np.isin(data.groups, member_docs))[: args.members]
    hold = np.flatnonzero(np.isin(data.groups, holdout_docs))[: args.holdout]
    # *_groups: chapter ids, so the audit keeps each chapter on one side of its cuts
    site = {
        "members": data.x[mem],
        "members_groups": data.groups[mem],
        "holdout": data.x[hold],
        "holdout_groups": data.groups[hold],
        "public": data.public_x,
        "public_groups": data.public_groups,
        "vocab_size": np.array(data.num_classes),
    }
    if args.save_npz:
        np.savez_compressed(args.save_npz, **site)  # type: ignore[arg-type]  # array names only
    return site


def train_target(
    task,
    x: np.ndarray,
    holdout: np.ndarray,
    epochs: list[int],
    *,
    device: torch.device,
    seed: int,
    curve: list[dict],
) -> dict[int, dict]:
    """Train once; snapshot weights and losses at each requested epoch (0: the epoch with the
    lowest holdout loss, the paper's best-generalising E37); append every epoch's train /
    holdout loss to ``curve``."""
    torch.manual_seed(seed)
    model = task.make_model().to(device)
    optimizer = task.optimizer.build(model.parameters())
    loader = task.loader(x, None, shuffle=True, seed=seed)
    snaps: dict[int, dict] = {}
    start = time.perf_counter()
    best = np.inf
    for epoch in range(1, max(epochs) + 1):
        model.train()
        loss = run_epoch(model, loader, optimizer, lambda b: task.batch_loss(model, b), device)
        ev = task.evaluate(model, holdout, None, device=device)
        curve.append({"epoch": epoch, "train_loss": loss, "holdout_loss": ev["loss"]})
        snap = {
            "state": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
            "epoch": epoch,
            "train_loss": loss,
            "holdout_loss": ev["loss"],
            "elapsed_s": time.perf_counter() - start,
        }
        if 0 in epochs and ev["loss"] < best:
            best, snaps[0] = ev["loss"], snap
        if epoch in epochs:
            snaps[epoch] = snap
        print(
            f"target epoch {epoch}: train loss {loss:.3f} holdout {ev['loss']:.3f} "
            f"({time.perf_counter() - start:.0f}s)",
            flush=True,
        )
    return snaps


def cached_target(
    task, site: dict, args: argparse.Namespace, device: torch.device
) -> tuple[dict[int, dict], list[dict]]:
    """Snapshots from ``--target-cache`` when it exists, else trained (and saved there)."""
    if args.target_cache and Path(args.target_cache).exists():
        saved = torch.load(args.target_cache, weights_only=False)
        return saved["snaps"], saved["curve"]
    curve: list[dict] = []
    snaps = train_target(
        task,
        site["members"],
        site["holdout"],
        args.target_epochs,
        device=device,
        seed=args.seed,
        curve=curve,
    )
    if args.target_cache:
        torch.save({"snaps": snaps, "curve": curve}, args.target_cache)
    return snaps, curve


def save(args: argparse.Namespace, device: str, curve: list[dict], results: list[dict]) -> None:
    """Rewrite the output JSON (after every audit, so a cut-off run keeps what it did)."""
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps(
                {"args": vars(args), "device": device, "target_curve": curve, "results": results},
                indent=1,
            )
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=1500)
    p.add_argument("--holdout", type=int, default=400)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--target-epochs", type=int, nargs="+", default=[5, 40])
    p.add_argument("--target-layers", type=int, default=2)
    p.add_argument("--target-width", type=int, default=128)
    p.add_argument("--target-dropout", type=float, default=0.0)
    p.add_argument("--variants", nargs="+", default=["scratch", "pretrain", "pool"])
    p.add_argument("--designs", nargs="+", default=["gbm"])
    p.add_argument("--generator-epochs", type=int, default=20)
    p.add_argument("--pretrain-epochs", type=int, default=5)
    p.add_argument("--generator-layers", type=int, default=2)
    p.add_argument("--generator-width", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--helper-epochs", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--splits",
        type=float,
        nargs=3,
        default=[0.3, 0.3, 0.1],
        metavar=("GENERATOR", "TRAIN", "VAL"),
    )
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-npz", default=None)
    p.add_argument("--save-npz", default=None)
    p.add_argument("--target-batch", type=int, default=32)
    p.add_argument("--target-cache", default=None, help="load / save the target snapshots")
    p.add_argument("--train-only", action="store_true", help="only train (and cache) f")
    p.add_argument("--tag", default="", help="label of this run in the output")
    p.add_argument("--out", default=None, help="JSON file, rewritten after every audit")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    t0 = time.perf_counter()
    site = load_site(args)
    print(
        f"site: {len(site['members'])} members, {len(site['holdout'])} holdout, "
        f"{len(site['public'])} public chunks; load {time.perf_counter() - t0:.0f}s",
        flush=True,
    )
    vocab = int(site["vocab_size"])
    task = build_task(
        "text",
        model_name="gpt2_small",
        num_classes=vocab,
        input_shape=(site["members"].shape[1],),
        batch_size=args.target_batch,
        optimizer=OptimizerSpec(name="adam", learning_rate=1e-3),
        model_options={
            "n_layer": args.target_layers,
            "n_embd": args.target_width,
            "dropout": args.target_dropout,
        },
    )
    snaps, curve = cached_target(task, site, args, device)
    if args.train_only:
        return

    def recs(part: str) -> Records:
        return Records(site[part], None, site.get(f"{part}_groups"))

    results = []
    for variant in args.variants:
        kind, options = "reference_pool", {}
        if variant != "pool":
            # a variant is the gpt2 generator with its options (audit.settings.generator.options)
            kind = "gpt2"
            options = {
                k: (args.pretrain_epochs if v == -1 else v) for k, v in VARIANTS[variant].items()
            }
            options.setdefault("prompt_tokens", args.prompt_tokens)
            options.update(n_layer=args.generator_layers, n_embd=args.generator_width)
        for design in args.designs:
            config = AuditConfig(
                repeats=args.repeats,
                device=args.device,
                seed=args.seed,
                splits=SplitConfig(
                    generator=args.splits[0], train=args.splits[1], val=args.splits[2]
                ),
                generator=GeneratorConfig(
                    kind=kind, epochs=args.generator_epochs, batch_size=32, options=options
                ),
                helper_epochs=args.helper_epochs,
                classifier=ClassifierConfig(design=design),
            )
            for key, snap in sorted(snaps.items()):
                model = task.make_model()
                model.load_state_dict(snap["state"])
                start = time.perf_counter()
                res = run_audit(
                    task,
                    model.to(device),
                    recs("members"),
                    config,
                    nonmembers=recs("holdout"),
                    public_pool=recs("public"),
                    progress=lambda m: print("  " + m, flush=True),
                )
                one = res.one_sided  # the paper's game
                row = {
                    "tag": args.tag,
                    "variant": variant,
                    "design": design,
                    "snapshot": "best" if key == 0 else key,
                    "target_epochs": snap["epoch"],
                    "target_train_loss": snap["train_loss"],
                    "target_holdout_loss": snap["holdout_loss"],
                    "c_lb": one.c_lb.mean,
                    "c_lb_std": one.c_lb.std,
                    "ceiling": one.ceiling,
                    "c_eps_lb": one.c_eps_lb.mean,
                    "c_eps_lb_std": one.c_eps_lb.std,
                    "eps_tilde": one.eps_tilde.mean,
                    "eps_tilde_std": one.eps_tilde.std,
                    "rm_rn": None if one.rm_rn_eps_lb is None else one.rm_rn_eps_lb.mean,
                    "o1": None if res.o1_eps_lb is None else res.o1_eps_lb.mean,
                    "saturated": one.flags.saturated,
                    "quality": res.quality,
                    "sizes": res.sizes,
                    "timings": res.timings,
                    "audit_s": time.perf_counter() - start,
                }
                results.append(row)
                print(
                    json.dumps(
                        {
                            k: (round(v, 3) if isinstance(v, float) else v)
                            for k, v in row.items()
                            if k not in ("quality", "sizes", "timings")
                        }
                    ),
                    flush=True,
                )
                print(
                    "  quality "
                    + json.dumps(
                        {k: round(v, 3) for k, v in res.quality.items() if "accuracy" not in k}
                    ),
                    flush=True,
                )
                print(
                    "  timings " + json.dumps({k: round(v, 1) for k, v in res.timings.items()}),
                    flush=True,
                )
                save(args, str(device), curve, results)
    print(f"total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
