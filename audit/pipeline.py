"""PANORAMIA end to end (Algorithm 1): :func:`run_audit`.

Phase 1 fits G on D_G, draws the non-members and the helper's data, and trains the helper h
on labeled synthetic data only. Phase 2 repeats ``config.repeats`` times: re-cut D_in and
D_out into train / validation / test, train the baseline b (x and h's loss features) and the
MIA (x and f's loss features, optionally h's as a difficulty reference), select both on the
validation split by the lower bound there, draw the game's coins, score the same audit set
with both and turn the scores into ``c_lb``, ``{c+eps}_lb`` and ``eps_tilde``. With real
non-members it also runs the RM;RN variant and the O(1) loss-threshold audit.

The game's test split only ever reaches ``score`` (never ``fit``), and only after selection.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from audit import bounds
from audit.components import (
    AuditContext,
    ClassifierData,
    Records,
    make_classifier,
    make_generator,
)
from audit.config import AuditConfig
from audit.diagnosis import diagnose
from audit.game import PrivacyGame, draw_game
from audit.result import AuditResult, BoundSummary, Interval, RepeatResult
from audit.splits import cut_at, resplit, shuffled_groups, split_members
from audit.task import AuditTask

try:  # the O(1) bound may be re-exported from audit.bounds
    from audit.bounds import o1_lower_bound  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the bounds module's layout
    from audit.o1 import o1_lower_bound

ProgressFn = Callable[[str], None]
"""Receives one human-readable line per stage."""

TRAINED_GENERATOR = {"image": "cgan", "tabular": "mst", "text": "gpt2"}
"""What ``generator.kind = "auto"`` means without a public pool, per modality."""

QUICK_GENERATOR_EPOCHS = 5
QUICK_HELPER_EPOCHS = 5

REFERENCE_POOL_DG = 0.1
"""Default D_G fraction with the reference pool: it only reads D_G's label histogram."""


def resolve_config(config: AuditConfig, *, modality: str, has_pool: bool) -> AuditConfig:
    """Fill in ``generator.kind = "auto"`` and ``splits.generator = None``; apply quick mode.

    Measured on over-fitted Fashion-MNIST targets (benchmarks/audit_overfitting.py), a cGAN
    or cVAE trained on D_G is told apart from real records perfectly (c_lb at the ceiling),
    while public records give c_lb = 0; so a public pool is used whenever one is given.
    """
    kind = config.generator.kind
    if kind == "auto":
        if has_pool:
            kind = "reference_pool"
        elif modality in TRAINED_GENERATOR:
            kind = TRAINED_GENERATOR[modality]
        else:
            raise ValueError(
                f"generator.kind='auto': no public pool given and no default generator for "
                f"modality {modality!r}; set generator.kind"
            )
    d_g = config.splits.generator
    if d_g is None:
        d_g = REFERENCE_POOL_DG if kind == "reference_pool" else 0.3
    gen_update: dict[str, object] = {"kind": kind}
    update: dict[str, object] = {"splits": config.splits.model_copy(update={"generator": d_g})}
    if config.quick:
        # Quick mode bounds the two trainings that dominate a CPU run.
        gen_update["epochs"] = min(config.generator.epochs, QUICK_GENERATOR_EPOCHS)
        update["helper_epochs"] = min(config.helper_epochs, QUICK_HELPER_EPOCHS)
    update["generator"] = config.generator.model_copy(update=gen_update)
    return config.model_copy(update=update)


RECALL_GRID = [round(0.05 * k, 2) for k in range(1, 21)]
"""Recall levels of the reported precision / bound curves."""


def auc(scores: np.ndarray, membership: np.ndarray) -> float:
    """ROC AUC of membership scores (0.5 when one class is missing)."""
    from sklearn.metrics import roc_auc_score

    s = np.asarray(membership)
    return 0.5 if s.min() == s.max() else float(roc_auc_score(s, scores))


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("audit.device='cuda' but no CUDA device is available")
    return torch.device(name)


class _Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start


@dataclass(frozen=True)
class _Side:
    """Records of one side (members, generated or real non-members) with h / f features."""

    records: Records
    f: np.ndarray
    h: np.ndarray

    def take(self, idx: np.ndarray) -> _Side:
        return _Side(self.records.take(idx), self.f[idx], self.h[idx])


def _concat(a: Records, b: Records) -> Records:
    y = None if a.y is None or b.y is None else np.concatenate([a.y, b.y])
    return Records(np.concatenate([a.x, b.x]), y)  # groups matter for splits only


def _classifier_data(
    members: _Side, others: _Side, *, view: str, reference: bool
) -> ClassifierData:
    """Members (label 1) and non-members (label 0) seen through h (baseline) or f (MIA)."""
    feats = np.concatenate([getattr(members, view), getattr(others, view)])
    ref = np.concatenate([members.h, others.h]) if reference else None
    membership = np.concatenate([np.ones(len(members.f)), np.zeros(len(others.f))])
    return ClassifierData(
        _concat(members.records, others.records), feats, membership.astype(np.int64), ref
    )


def _game_data(
    game: PrivacyGame, members: _Side, others: _Side, *, view: str, reference: bool
) -> ClassifierData:
    """The audit set X of ``game`` seen through h or f (same records for b and the MIA)."""
    records = game.records(members.records, others.records)
    feats = game.pick(getattr(members, view), getattr(others, view))
    ref = game.pick(members.h, others.h) if reference else None
    return ClassifierData(records, feats, game.membership.copy(), ref)


def _check_records(name: str, rec: Records, *, like: Records | None = None) -> None:
    if not isinstance(rec, Records):
        raise TypeError(f"{name} must be audit.Records(x, y), got {type(rec).__name__}")
    if len(rec) == 0:
        raise ValueError(f"{name} is empty")
    if rec.y is not None and len(rec.y) != len(rec.x):
        raise ValueError(f"{name}: {len(rec.x)} records but {len(rec.y)} labels")
    if rec.groups is not None and len(rec.groups) != len(rec.x):
        raise ValueError(f"{name}: {len(rec.x)} records but {len(rec.groups)} group ids")
    if like is not None and rec.x.shape[1:] != like.x.shape[1:]:
        raise ValueError(
            f"{name} records have shape {rec.x.shape[1:]} but members have {like.x.shape[1:]}"
        )
    if like is not None and (rec.y is None) != (like.y is None):
        raise ValueError(f"{name} and members must both have labels or both have none")


def _train_helper(
    task: AuditTask, train: Records, val: Records, *, epochs: int, seed: int, device: torch.device
) -> tuple[torch.nn.Module, dict[str, float]]:
    """h: the target's architecture trained on labeled synthetic data, epoch count chosen by
    the loss on a separate synthetic validation set."""
    torch.manual_seed(seed)  # the initial weights, too, come from the seed
    model = task.make_model()
    best_loss, best_epoch, best_state = math.inf, 0, None
    for epoch in range(1, epochs + 1):
        task.train_model(model, train.x, train.y, epochs=1, seed=seed + epoch, device=device)
        val_loss = float(np.mean(task.per_record_loss(model, val.x, val.y, device=device)))
        if val_loss < best_loss:
            best_loss, best_epoch = val_loss, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model, {"helper_synthetic_val_loss": best_loss, "helper_epochs": float(best_epoch)}


def _accuracy(features: np.ndarray, y: np.ndarray | None) -> float:
    if y is None or features.shape[1] < 3:
        return float("nan")
    return float(np.mean(features[:, 1:].argmax(axis=1) == y))


def _mean_loss(
    task: AuditTask, model: torch.nn.Module, records: Records, device: torch.device
) -> float:
    return float(np.mean(task.per_record_loss(model, records.x, records.y, device=device)))


def break_ties(scores: np.ndarray, *, seed: int) -> np.ndarray:
    """Scores with ties broken at random, order between distinct values kept.

    A randomised scorer is allowed by Propositions 1-2. Tied scores would shrink the union
    bound (fewer distinct thresholds) and let a two-level scorer exceed the ceiling, which is
    defined for distinct scores; breaking ties keeps ``bound <= ceiling`` on every audit set.
    """
    t = np.asarray(scores, dtype=np.float64)
    levels = np.unique(t)
    if levels.size == t.size:
        return t
    gap = float(np.diff(levels).min()) if levels.size > 1 else 1.0
    jitter = np.random.default_rng([seed, 0x7E]).random(t.size) * (gap / 2)
    out = t + jitter
    if np.unique(out).size == t.size:
        return out
    # Gaps below float resolution: fall back to ranks (bounds depend on the order only).
    order = np.lexsort((jitter, t))
    ranks = np.empty(t.size)
    ranks[order] = np.arange(t.size, dtype=np.float64)
    return ranks


def _clip(v: float) -> float:
    """c and eps are non-negative: a negative raw bound rejects nothing."""
    return max(0.0, float(v))


def run_audit(
    task: AuditTask,
    model: torch.nn.Module,
    members: Records,
    config: AuditConfig | None = None,
    *,
    nonmembers: Records | None = None,
    public_pool: Records | None = None,
    progress: ProgressFn | None = None,
) -> AuditResult:
    """Run PANORAMIA on ``model`` with its known training records ``members``.

    Parameters
    ----------
    task
        The target's task (model factory, trainer, per-record loss features).
    model
        The target model f (left unchanged).
    members
        Known members D_f: records the target trained on.
    config
        Audit settings (defaults when ``None``).
    nonmembers
        Real non-members from the same distribution (simulation only): enables the RM;RN
        and O(1) comparisons.
    public_pool
        Public records never used in training, for ``generator.kind = "reference_pool"``.
    progress
        Called with one line per stage.

    Returns
    -------
    AuditResult
        Per-repeat and aggregated bounds, the ceiling, flags, sizes, quality and timings.
        ``eps_tilde`` is a lower bound on eps only when ``c_lb`` is tight (see
        :data:`audit.result.EPS_TILDE_MEANING`).
    """
    config = config or AuditConfig()
    say = progress or (lambda _msg: None)
    timer = _Timer()
    start = time.perf_counter()
    _check_records("members", members)
    if nonmembers is not None:
        _check_records("nonmembers", nonmembers, like=members)
    if public_pool is not None:
        _check_records("public_pool", public_pool, like=members)
    config = resolve_config(config, modality=task.modality, has_pool=public_pool is not None)
    device = resolve_device(config.device)
    beta_half = config.beta / 2
    grid = config.threshold_grid
    seed = config.seed
    model.eval()

    # ---- Phase 1: splits, generator, synthetic data, helper ---------------------------
    with timer.stage("split"):
        cut = split_members(len(members), config.splits, seed=seed, groups=members.groups)
    sizes = cut.sizes
    n_tr, n_val = sizes.train, sizes.val
    d_g = members.take(cut.generator)
    in_idx = np.concatenate([cut.train, cut.val, cut.test])
    d_in = members.take(in_idx)
    n_in = len(in_idx)
    say(f"splits: {sizes.describe()}")

    context = AuditContext(task=task, device=device, public_pool=public_pool)
    generator = make_generator(config, context)
    with timer.stage("generator_fit"):
        gen_quality = generator.fit(d_g, seed=seed)
    say(f"generator {generator.kind}: fitted on {len(d_g)} records")

    n_helper = max(2, math.ceil(config.synthetic_multiplier * n_tr))
    n_helper_val = max(2, math.ceil(0.2 * n_helper))
    with timer.stage("sampling"):
        # The game's non-members first: a finite source (reference pool) serves them before
        # the helper, whose set is then capped by what is left.
        d_out = generator.sample(n_in, seed=seed + 303)
        remaining = getattr(generator, "remaining", None)
        if remaining is not None and n_helper + n_helper_val > remaining:
            n_helper_val = max(2, remaining // 6)
            n_helper = remaining - n_helper_val
            if n_helper < 2:
                raise ValueError(
                    f"generator {generator.kind!r}: only {remaining} records left for the "
                    f"helper after drawing {n_in} non-members; give a larger source"
                )
            say(f"helper set capped at {n_helper} + {n_helper_val} records by the source")
        helper_train = generator.sample(n_helper, seed=seed + 101)
        helper_val = generator.sample(n_helper_val, seed=seed + 202)
    if len(d_out) != n_in or len(helper_train) != n_helper:
        raise RuntimeError(f"generator {generator.kind!r} returned the wrong number of records")

    with timer.stage("helper"):
        helper, helper_quality = _train_helper(
            task,
            helper_train,
            helper_val,
            epochs=config.helper_epochs,
            seed=seed + 17,
            device=device,
        )
    say(
        f"helper: trained {helper_quality['helper_epochs']:.0f} epochs on {n_helper} "
        "synthetic records"
    )

    with timer.stage("features"):

        def side(rec: Records) -> _Side:
            return _Side(
                rec,
                task.loss_features(model, rec.x, rec.y, device=device),
                task.loss_features(helper, rec.x, rec.y, device=device),
            )

        s_in, s_out = side(d_in), side(d_out)
        s_non = side(nonmembers) if nonmembers is not None else None

    quality: dict[str, float] = {k: float(v) for k, v in gen_quality.items()}
    quality.update(helper_quality)
    quality["helper_accuracy_real_members"] = _accuracy(s_in.h, d_in.y)
    quality["helper_accuracy_synthetic_val"] = _accuracy(
        task.loss_features(helper, helper_val.x, helper_val.y, device=device), helper_val.y
    )
    quality["target_accuracy_members"] = _accuracy(s_in.f, d_in.y)
    # f's generalization gap on this site: leakage O(1) can see even when no member stands out
    quality["target_loss_members"] = _mean_loss(task, model, d_in, device)
    if s_non is not None:
        quality["target_accuracy_nonmembers"] = _accuracy(s_non.f, nonmembers.y)
        quality["target_loss_nonmembers"] = _mean_loss(task, model, nonmembers, device)
    if hasattr(generator, "label_shortfall"):
        quality["pool_label_shortfall"] = float(generator.label_shortfall)
    if hasattr(generator, "acceptance_rate"):
        quality["filter_acceptance_rate"] = float(generator.acceptance_rate)

    def select_by(scores: np.ndarray, membership: np.ndarray) -> float:
        return bounds.lower_bound(
            scores, membership, beta=beta_half, threshold_grid=grid
        ).lower_bound

    # ---- Phase 2: repeats -------------------------------------------------------------
    reference = config.classifier.helper_reference
    repeats: list[RepeatResult] = []
    shown: list[int] = []
    rn_sizes: dict[str, int] = {}
    for r in range(config.repeats):
        rseed = seed * 1009 + r
        ins = resplit(np.arange(n_in), n_tr, n_val, seed=rseed, groups=d_in.groups)
        outs = resplit(
            np.arange(len(d_out)), n_tr, n_val, seed=rseed + 7_000_003, groups=d_out.groups
        )
        # Group-snapped cuts can leave the two test splits a few records apart.
        m = min(len(ins.test), len(outs.test))
        game = draw_game(m, seed=rseed)
        shown.append(game.members_shown)
        mem_te, out_te = s_in.take(ins.test[:m]), s_out.take(outs.test[:m])

        scores: dict[str, np.ndarray] = {}
        selected: dict[str, object] = {}
        aucs: dict[str, float] = {}
        for name, view, ref in (("baseline", "h", False), ("mia", "f", reference)):
            with timer.stage(f"{name}"):
                clf = make_classifier(config, context)
                train = _classifier_data(
                    s_in.take(ins.train), s_out.take(outs.train), view=view, reference=ref
                )
                val = _classifier_data(
                    s_in.take(ins.val), s_out.take(outs.val), view=view, reference=ref
                )
                selected[name] = clf.fit(train, val, select_by=select_by, seed=rseed)
                test = _game_data(game, mem_te, out_te, view=view, reference=ref)
                scores[name] = break_ties(clf.score(test), seed=rseed)
                aucs[name] = auc(scores[name], game.membership)

        s = game.membership
        b_sum = bounds.lower_bound(scores["baseline"], s, beta=beta_half, threshold_grid=grid)
        a_sum = bounds.lower_bound(scores["mia"], s, beta=beta_half, threshold_grid=grid)
        c_lb, c_eps_lb = _clip(b_sum.lower_bound), _clip(a_sum.lower_bound)

        rm_rn = o1 = rm_rn_ceiling = None
        if s_non is not None:
            with timer.stage("rm_rn"):
                rm_rn, rm_rn_ceiling, rn_sizes = _rm_rn(
                    config,
                    context,
                    s_in,
                    s_non,
                    ins,
                    rseed=rseed,
                    reference=reference,
                    select_by=select_by,
                )
            with timer.stage("o1"):
                o1 = _o1(
                    s_in.take(ins.test),
                    s_non,
                    None if d_in.y is None else d_in.y[ins.test],
                    nonmembers.y,
                    beta=config.beta,
                    rseed=rseed,
                )

        kept = None
        if config.return_scores:
            kept = {k: [float(v) for v in arr] for k, arr in scores.items()}
            kept["membership"] = [float(v) for v in s]
        repeats.append(
            RepeatResult(
                seed=rseed,
                m=game.m,
                c_lb=c_lb,
                c_eps_lb=c_eps_lb,
                eps_tilde=max(0.0, c_eps_lb - c_lb),
                ceiling=bounds.ceiling(s, beta=beta_half, threshold_grid=grid),
                baseline=b_sum,
                mia=a_sum,
                baseline_curve=bounds.bound_curve(
                    scores["baseline"],
                    s,
                    beta=beta_half,
                    recall_grid=RECALL_GRID,
                    threshold_grid=grid,
                ),
                mia_curve=bounds.bound_curve(
                    scores["mia"], s, beta=beta_half, recall_grid=RECALL_GRID, threshold_grid=grid
                ),
                baseline_auc=aucs["baseline"],
                mia_auc=aucs["mia"],
                rm_rn_eps_lb=rm_rn,
                o1_eps_lb=o1,
                rm_rn_ceiling=rm_rn_ceiling,
                selected=selected,
                scores=kept,
            )
        )
        say(
            f"repeat {r + 1}/{config.repeats}: c_lb={c_lb:.3f} {{c+eps}}_lb={c_eps_lb:.3f} "
            f"eps_tilde={repeats[-1].eps_tilde:.3f}"
            + ("" if rm_rn is None else f" RM;RN={rm_rn:.3f} O(1)={o1:.3f}")
        )

    return _assemble(
        config,
        generator.kind,
        task.modality,
        repeats,
        sizes=dict(
            members=len(members),
            generator=sizes.generator,
            train=n_tr,
            val=n_val,
            m=min(x.m for x in repeats),
            members_in_game_min=min(shown),
            members_in_game_max=max(shown),
            synthetic_helper_train=n_helper,
            synthetic_helper_val=n_helper_val,
            synthetic_out=n_in,
            nonmembers=0 if nonmembers is None else len(nonmembers),
            **rn_sizes,
        ),
        quality=quality,
        timer=timer,
        start=start,
    )


def _assemble(
    config: AuditConfig,
    kind: str,
    modality: str,
    repeats: list[RepeatResult],
    *,
    sizes: dict[str, int],
    quality: dict[str, float],
    timer: _Timer,
    start: float,
) -> AuditResult:
    c_lb = Interval.of([x.c_lb for x in repeats])
    c_eps = Interval.of([x.c_eps_lb for x in repeats])
    eps = Interval.of([x.eps_tilde for x in repeats])
    rm_rn = (
        Interval.of([x.rm_rn_eps_lb for x in repeats])
        if repeats[0].rm_rn_eps_lb is not None
        else None
    )
    o1 = Interval.of([x.o1_eps_lb for x in repeats]) if repeats[0].o1_eps_lb is not None else None
    ceiling = float(np.mean([x.ceiling for x in repeats]))
    rm_rn_ceiling = (
        float(np.mean([x.rm_rn_ceiling for x in repeats])) if rm_rn is not None else None
    )
    quality = dict(quality)
    quality["baseline_auc"] = float(np.mean([x.baseline_auc for x in repeats]))
    quality["mia_auc"] = float(np.mean([x.mia_auc for x in repeats]))
    flags = diagnose(
        c_lb=c_lb,
        eps_tilde=eps,
        ceiling=ceiling,
        rm_rn=rm_rn,
        rm_rn_ceiling=rm_rn_ceiling,
        saturation_margin=config.saturation_margin,
    )
    timings = dict(timer.timings)
    timings["total"] = time.perf_counter() - start
    return AuditResult(
        modality=modality,
        generator_kind=kind,
        beta=config.beta,
        c_lb=c_lb,
        c_eps_lb=c_eps,
        eps_tilde=eps,
        ceiling=ceiling,
        flags=flags,
        repeats=repeats,
        sizes=sizes,
        quality=quality,
        timings=timings,
        rm_rn_eps_lb=rm_rn,
        o1_eps_lb=o1,
        rm_rn_ceiling=rm_rn_ceiling,
    )


def _proportional(n: int, parts: list[int]) -> list[int]:
    """Cut ``n`` records in the proportions of ``parts`` (the last part takes the rest)."""
    total = sum(parts)
    out = [int(math.floor(n * p / total)) for p in parts[:-1]]
    return out + [n - sum(out)]


def _rm_rn(
    config: AuditConfig,
    context: AuditContext,
    s_in: _Side,
    s_non: _Side,
    ins,
    *,
    rseed: int,
    reference: bool,
    select_by,
) -> tuple[float, float, dict[str, int]]:
    """The same MIA pipeline with real non-members instead of generated ones (c = 0).

    Returns the eps bound, its ceiling on this (smaller) audit set and the split sizes.

    Non-members are cut in the proportions of the member splits; each split pairs as many
    members as it has non-members, so both classes stay balanced.
    """
    n_non = len(s_non.f)
    k_tr, k_val, k_te = _proportional(n_non, [len(ins.train), len(ins.val), len(ins.test)])
    k_tr, k_val, k_te = (
        min(k_tr, len(ins.train)),
        min(k_val, len(ins.val)),
        min(k_te, len(ins.test)),
    )
    if min(k_tr, k_val) < 1 or k_te < 2:
        raise ValueError(
            f"nonmembers: {n_non} real non-members are too few for RM;RN (cut into "
            f"train={k_tr}, val={k_val}, test={k_te}; need >= 1, >= 1 and >= 2)"
        )
    order, allowed = shuffled_groups(
        n_non, s_non.records.groups, np.random.default_rng([rseed, 0x4E4E])
    )
    n_tr, n_va, n_te, _ = cut_at(order, allowed, [k_tr, k_val, k_te])
    if min(len(n_tr), len(n_va)) < 1 or len(n_te) < 2:
        raise ValueError(
            f"nonmembers: {n_non} real non-members in {len(allowed) - 1} groups are too few "
            "for RM;RN once each group (document) is kept whole"
        )
    k_tr, k_val = min(k_tr, len(n_tr)), min(k_val, len(n_va))
    k_te = min(k_te, len(n_te))
    n_tr, n_va, n_te = n_tr[:k_tr], n_va[:k_val], n_te[:k_te]
    clf = make_classifier(config, context)
    train = _classifier_data(
        s_in.take(ins.train[:k_tr]), s_non.take(n_tr), view="f", reference=reference
    )
    val = _classifier_data(
        s_in.take(ins.val[:k_val]), s_non.take(n_va), view="f", reference=reference
    )
    clf.fit(train, val, select_by=select_by, seed=rseed)
    game = draw_game(k_te, seed=rseed + 1)
    test = _game_data(
        game, s_in.take(ins.test[:k_te]), s_non.take(n_te), view="f", reference=reference
    )
    summary: BoundSummary = bounds.lower_bound(
        break_ties(clf.score(test), seed=rseed),
        game.membership,
        beta=config.beta / 2,
        threshold_grid=config.threshold_grid,
    )
    ceiling = bounds.ceiling(
        game.membership, beta=config.beta / 2, threshold_grid=config.threshold_grid
    )
    sizes = {"rm_rn_train": k_tr, "rm_rn_val": k_val, "rm_rn_m": k_te}
    return _clip(summary.lower_bound), ceiling, sizes


def _neg_loss(features: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """-loss of f per record. For classifiers (features ``[loss, logits]``) it is recomputed
    as log p_y in float64: the same order as the float32 loss without its rounding ties."""
    feats = np.asarray(features, dtype=np.float64)
    if y is None or feats.shape[1] < 3:
        return -feats[:, 0]
    z = feats[:, 1:]
    zmax = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - zmax).sum(axis=1)) + zmax[:, 0]
    return z[np.arange(len(z)), np.asarray(y, dtype=np.int64)] - lse


def _o1(
    members_te: _Side,
    s_non: _Side,
    y_mem: np.ndarray | None,
    y_non: np.ndarray | None,
    *,
    beta: float,
    rseed: int,
) -> float:
    """O(1) loss-threshold audit: equal numbers of real members and real non-members,
    score = -loss of f."""
    k = min(len(members_te.f), len(s_non.f))
    rng = np.random.default_rng([rseed, 0x01])
    pm, pn = rng.permutation(len(members_te.f))[:k], rng.permutation(len(s_non.f))[:k]
    mem = _neg_loss(members_te.f[pm], None if y_mem is None else y_mem[pm])
    non = _neg_loss(s_non.f[pn], None if y_non is None else y_non[pn])
    scores = np.concatenate([mem, non])
    membership = np.concatenate([np.ones(k), np.zeros(k)]).astype(np.int64)
    return _clip(o1_lower_bound(scores, membership, beta=beta).lower_bound)
