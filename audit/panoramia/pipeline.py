"""PANORAMIA end to end (Algorithm 1): :func:`run_audit`.

Phases, each a function here or a module of its own:

1. :func:`_draw_sources`: cut the members, fit G on D_G, draw the game's non-members and
   the helper's synthetic data.
2. :func:`_fit_models`: the helper h (labeled synthetic data only) and the reference models
   of the calibrated MIA (records that are never game records).
3. :func:`_fixed_features` once, :func:`_featurize` per target: h / f features and
   calibrated statistics of every record.
4. :func:`audit.panoramia.repeat.play_repeat`, ``config.repeats`` times: fresh b / MIA splits, a
   fresh game, both sides, the RM;RN and O(1) comparisons (:mod:`audit.panoramia.comparisons`).
5. :func:`audit.panoramia.assembly.assemble`: intervals, ceilings, flags, ROC.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np
import torch

from audit.config import AuditConfig
from audit.panoramia.assembly import assemble
from audit.panoramia.audit_sets import FeatureSet
from audit.panoramia.calibration import (
    ReferenceStatistics,
    calibrated_statistics,
    reference_statistics,
    train_reference_models,
)
from audit.panoramia.components import AuditContext, Generator, Records, make_generator
from audit.panoramia.pairing import pair_members
from audit.panoramia.repeat import RepeatInputs, play_repeat
from audit.panoramia.settings import resolve_config, resolve_device
from audit.panoramia.splits import MemberSplits, split_members
from audit.panoramia.task import AuditTask
from audit.panoramia.timing import StageTimer
from audit.result import AuditResult

__all__ = ["run_audit", "run_audits_of"]

ProgressFn = Callable[[str], None]
"""Receives one human-readable line per stage."""


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


@dataclass(frozen=True)
class _Sources:
    """Phase 1's output: the member cut, the generator and everything drawn from it."""

    cut: MemberSplits
    generator: Generator
    d_in: Records
    d_out: Records
    helper_train: Records
    helper_val: Records
    quality: dict[str, float]
    paired: bool
    """Row ``i`` of ``d_out`` is the same-label alternative of row ``i`` of ``d_in``."""
    real: HelperReal | None = None
    """Real records the helper also trains on (trained generators only)."""


@dataclass(frozen=True)
class HelperReal:
    """Real records beside the helper's synthetic ones, cut as the helper's own sets are.

    With a trained generator f has learnt what real records look like from every site's
    records and b's synthetic-only helper has not, so f's "not a member" guesses on
    unrealistic generated records would pass for leakage (docs/reading_the_numbers.md).
    """

    train: Records
    val: Records
    public: int
    """How many of them are public records (the pool); the rest are D_G's."""

    @property
    def total(self) -> int:
        return len(self.train) + len(self.val)

    @property
    def site(self) -> int:
        """How many are the site's own D_G records."""
        return self.total - self.public


def _helper_real(
    config: AuditConfig, generator: Generator, d_g: Records, public_pool: Records | None
) -> HelperReal | None:
    """The public pool and D_G, neither ever a game record, for a trained generator's helper;
    ``None`` for a finite source (a reference pool: its records are real already) or when
    ``helper_real_records`` is off."""
    if not config.helper_real_records or generator.remaining is not None:
        return None
    parts = [r for r in (public_pool, d_g) if r is not None and len(r) > 0]
    if not parts:
        return None
    real = Records.concat(parts)
    order = np.random.default_rng([config.seed, 0x4EA1]).permutation(len(real))
    n_train, _ = _helper_split(len(real))
    return HelperReal(
        real.take(order[:n_train]),
        real.take(order[n_train:]),
        public=0 if public_pool is None else len(public_pool),
    )


def _helper_split(total: int) -> tuple[int, int]:
    """``(train, validation)`` records of a helper set of ``total`` records."""
    val = max(2, total // 6)
    return total - val, val


def _draw_helper(
    generator: Generator, n_train: int, n_val: int, *, seed: int
) -> tuple[Records, Records]:
    return generator.sample(n_train, seed=seed + 101), generator.sample(n_val, seed=seed + 202)


def _draw_sources(
    task: AuditTask,
    members: Records,
    config: AuditConfig,
    context: AuditContext,
    timer: StageTimer,
    say: ProgressFn,
) -> _Sources:
    with timer.stage("split"):
        cut = split_members(len(members), config.splits, seed=config.seed, groups=members.groups)
    say(f"splits: {cut.sizes.describe()}")
    d_g = members.take(cut.generator)
    d_in = members.take(np.concatenate([cut.train, cut.val, cut.test]))
    generator = make_generator(config, context)
    with timer.stage("generator_fit"):
        quality = generator.fit(d_g, seed=config.seed)
    say(f"generator {generator.kind}: fitted on {len(d_g)} records")

    n_in = len(d_in)
    n_helper = max(2, math.ceil(config.synthetic_multiplier * len(cut.train)))
    n_helper_val = max(2, math.ceil(0.2 * n_helper))
    with timer.stage("sampling"):
        helper: tuple[Records, Records] | None = None
        source = generator.remaining
        if (
            config.pairing == "label"
            and source is not None
            and source < n_in + n_helper + n_helper_val
        ):
            # A finite source too small for both: pairing can leave out members it cannot
            # serve, the helper cannot shrink to nothing, so its share (at most a quarter of
            # the source) is drawn first.
            n_helper, n_helper_val = _helper_split(
                min(n_helper + n_helper_val, max(12, source // 4))
            )
            helper = _draw_helper(generator, n_helper, n_helper_val, seed=config.seed)
            say(f"helper set capped at {n_helper} + {n_helper_val} records by the source")
        if config.pairing == "label":
            d_in, d_out, dropped = pair_members(generator, d_in, seed=config.seed + 303)
            quality["pairing_dropped"] = dropped
            if dropped:
                say(f"pairing: {dropped} members without a same-label alternative left out")
            n_in = len(d_in)
        else:
            # The game's non-members first: a finite source (reference pool) serves them
            # before the helper, whose set is then capped by what is left.
            d_out = generator.sample(n_in, seed=config.seed + 303)
        remaining = generator.remaining
        if helper is None and remaining is not None and n_helper + n_helper_val > remaining:
            n_helper, n_helper_val = _helper_split(remaining)
            if n_helper < 2:
                raise ValueError(
                    f"generator {generator.kind!r}: only {remaining} records left for the "
                    f"helper after drawing {n_in} non-members; give a larger source"
                )
            say(f"helper set capped at {n_helper} + {n_helper_val} records by the source")
        if helper is None:
            helper = _draw_helper(generator, n_helper, n_helper_val, seed=config.seed)
        helper_train, helper_val = helper
    if len(d_out) != n_in or len(helper_train) != n_helper:
        raise RuntimeError(f"generator {generator.kind!r} returned the wrong number of records")
    real = _helper_real(config, generator, d_g, context.public_pool)
    if real is not None:
        say(
            f"helper: also trains on {real.total} real records ({real.public} public, "
            f"{real.site} of D_G)"
        )
    return _Sources(
        cut,
        generator,
        d_in,
        d_out,
        helper_train,
        helper_val,
        {k: float(v) for k, v in quality.items()},
        paired=config.pairing == "label",
        real=real,
    )


@dataclass(frozen=True)
class _Models:
    helper: torch.nn.Module
    references: list[torch.nn.Module]
    quality: dict[str, float]


def _fit_models(
    task: AuditTask,
    sources: _Sources,
    config: AuditConfig,
    device: torch.device,
    reference_models: Sequence[torch.nn.Module] | None,
    timer: StageTimer,
    say: ProgressFn,
) -> _Models:
    train, val, real = sources.helper_train, sources.helper_val, sources.real
    if real is not None:
        train, val = Records.concat([train, real.train]), Records.concat([val, real.val])
    with timer.stage("helper"):
        helper, quality = _train_helper(
            task,
            train,
            val,
            epochs=config.helper_epochs,
            seed=config.seed + 17,
            device=device,
        )
    say(
        f"helper: trained {quality['helper_epochs']:.0f} epochs on "
        f"{len(sources.helper_train)} synthetic"
        + ("" if real is None else f" and {len(real.train)} real")
        + " records"
    )
    quality["helper_accuracy_synthetic_val"] = _accuracy(
        task.loss_features(helper, sources.helper_val.x, sources.helper_val.y, device=device),
        sources.helper_val.y,
    )
    cal = config.calibration
    if reference_models is not None:
        references = list(reference_models)
    else:
        # The helper's records are never game records: the reference models train on them.
        pool = Records.concat([train, val])
        with timer.stage("reference_models"):
            references = train_reference_models(
                task,
                pool,
                count=cal.reference_models,
                epochs=cal.epochs,
                fraction=cal.fraction,
                seed=config.seed + 29,
                device=device,
            )
        if references:
            say(f"reference models: trained {len(references)} on the helper's records")
    for ref in references:
        ref.eval()
    return _Models(helper, references, quality)


@dataclass(frozen=True)
class _Fixed:
    """What the features of a record set owe nothing to f: h's features and, with
    reference models, their statistics and h's calibrated ones (computed once per audit)."""

    records: Records
    h: np.ndarray
    ref: ReferenceStatistics | None = None
    calibrated_h: np.ndarray | None = None


def _fixed_features(
    task: AuditTask, models: _Models, records: Records, device: torch.device
) -> _Fixed:
    h = task.loss_features(models.helper, records.x, records.y, device=device)
    if not models.references:
        return _Fixed(records, h)
    ref = reference_statistics(task, models.references, records, device=device)
    return _Fixed(records, h, ref, calibrated_statistics(h, records.y, ref))


def _featurize(
    task: AuditTask, model: torch.nn.Module, fixed: _Fixed, device: torch.device
) -> FeatureSet:
    """``fixed`` with the target f's features (and f's calibrated statistics)."""
    records = fixed.records
    f = task.loss_features(model, records.x, records.y, device=device)
    if fixed.ref is None:
        return FeatureSet(records, f, fixed.h)
    return FeatureSet(
        records, f, fixed.h, calibrated_statistics(f, records.y, fixed.ref), fixed.calibrated_h
    )


def run_audit(
    task: AuditTask,
    model: torch.nn.Module,
    members: Records,
    config: AuditConfig | None = None,
    *,
    nonmembers: Records | None = None,
    public_pool: Records | None = None,
    reference_models: Sequence[torch.nn.Module] | None = None,
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
    reference_models
        Models of f's architecture trained on records that are never game records (e.g.
        public records outside the pool); ``None`` trains ``calibration.reference_models``
        of them on the helper's records. An empty list turns calibration off.
    progress
        Called with one line per stage.

    Returns
    -------
    AuditResult
        Per-repeat and aggregated bounds of the paper's one-sided game and of the two-sided
        game, the ceilings, flags, ROC summaries, sizes, quality and timings. ``eps_tilde``
        is a lower bound on eps only when ``c_lb`` is tight (see
        :data:`audit.result.EPS_TILDE_MEANING`).
    """
    results = run_audits_of(
        task,
        {0: model},
        members,
        config,
        nonmembers=nonmembers,
        public_pool=public_pool,
        reference_models=reference_models,
        progress=progress,
    )
    return results[0]


class AuditOptions(TypedDict, total=False):
    """:func:`run_audit`'s keyword options (see its parameters)."""

    nonmembers: Records | None
    public_pool: Records | None
    reference_models: Sequence[torch.nn.Module] | None
    progress: ProgressFn | None


def run_audits_of(
    task: AuditTask,
    models: Mapping[int, torch.nn.Module],
    members: Records,
    config: AuditConfig | None = None,
    **options: Unpack[AuditOptions],
) -> dict[int, AuditResult]:
    """:func:`run_audit` of several targets trained on the same ``members`` (e.g. one
    global model per round), keyed as ``models`` is; ``options`` as :func:`run_audit`'s.

    Every target plays against the same generated non-members, helper, reference models and
    games (the same settings and seeds); only f's features change, so each result equals
    what :func:`run_audit` returns for that model alone, and the shared phases run once.
    """
    nonmembers = options.get("nonmembers")
    public_pool = options.get("public_pool")
    reference_models = options.get("reference_models")
    progress = options.get("progress")
    if not models:
        raise ValueError("run_audits_of needs at least one model")
    config = config or AuditConfig()
    say = progress or (lambda _msg: None)
    timer = StageTimer()
    _check_records("members", members)
    if nonmembers is not None:
        _check_records("nonmembers", nonmembers, like=members)
    if public_pool is not None:
        _check_records("public_pool", public_pool, like=members)
    config = resolve_config(
        config,
        modality=task.modality,
        has_pool=public_pool is not None,
        has_labels=members.y is not None,
    )
    device = resolve_device(config.device)
    context = AuditContext(task=task, device=device, public_pool=public_pool)

    sources = _draw_sources(task, members, config, context, timer, say)
    fitted = _fit_models(task, sources, config, device, reference_models, timer, say)
    with timer.stage("features"):
        fixed = tuple(
            None if records is None else _fixed_features(task, fitted, records, device)
            for records in (sources.d_in, sources.d_out, nonmembers)
        )
    prepared = _Prepared(task, config, context, sources, fitted, nonmembers, len(members), fixed)
    shared = timer.total()["total"]
    results = {}
    for key, model in models.items():
        if len(models) > 1:
            say(f"target {key}")
        results[key] = _audit_target(prepared, model, timer.branch(shared), say)
    return results


@dataclass(frozen=True)
class _Prepared:
    """What every target of :func:`run_audits_of` shares."""

    task: AuditTask
    config: AuditConfig
    context: AuditContext
    sources: _Sources
    models: _Models
    nonmembers: Records | None
    n_members: int
    fixed: tuple[_Fixed | None, ...]
    """f-independent features of the game's members, its non-members and the real
    non-members (None without them)."""


def _audit_target(
    prepared: _Prepared, model: torch.nn.Module, timer: StageTimer, say: ProgressFn
) -> AuditResult:
    """Phases 3-5 for one target f."""
    task, config, sources, models = (
        prepared.task,
        prepared.config,
        prepared.sources,
        prepared.models,
    )
    nonmembers, context = prepared.nonmembers, prepared.context
    device = context.device
    model.eval()
    with timer.stage("features"):
        s_in, s_out, s_non = (
            None if fixed is None else _featurize(task, model, fixed, device)
            for fixed in prepared.fixed
        )
        assert s_in is not None and s_out is not None  # members and generated always exist

    quality = dict(sources.quality)
    quality.update(models.quality)
    quality.update(sources.generator.sampling_quality())
    quality["helper_accuracy_real_members"] = _accuracy(s_in.h, sources.d_in.y)
    quality["target_accuracy_members"] = _accuracy(s_in.f, sources.d_in.y)
    # f's generalization gap on this site: leakage O(1) can see even when no member stands out
    # Column 0 of the loss features is the per-record loss (AuditTask.loss_features).
    quality["target_loss_members"] = float(np.mean(s_in.f[:, 0]))
    if s_non is not None and nonmembers is not None:
        quality["target_accuracy_nonmembers"] = _accuracy(s_non.f, nonmembers.y)
        quality["target_loss_nonmembers"] = float(np.mean(s_non.f[:, 0]))

    sizes = sources.cut.sizes
    n_train, n_val = sizes.train, sizes.val
    if config.classifier.design == "score":
        # Nothing to train; a validation slice only where it picks the statistic and cut.
        n_train, n_val = 0, (n_val if config.threshold_selection == "split" else 0)
    inputs = RepeatInputs(
        config=config,
        context=context,
        members=s_in,
        generated=s_out,
        nonmembers=s_non,
        n_train=n_train,
        n_val=n_val,
        paired=sources.paired,
    )
    repeats = []
    shown: list[int] = []
    comparison_sizes: dict[str, int] = {}
    for r in range(config.repeats):
        x, comparison_sizes = play_repeat(inputs, r, timer)
        assert x.members_shown is not None  # play_repeat counts its game's coins
        repeats.append(x)
        shown.append(x.members_shown)
        one, two = x.one_sided, x.two_sided
        say(
            f"repeat {r + 1}/{config.repeats}: c_lb={one.c_lb:.3f} "
            f"{{c+eps}}_lb={one.c_eps_lb:.3f} eps_tilde={one.eps_tilde:.3f}"
            + ("" if two is None else f" two-sided={two.eps_tilde:.3f}")
            + (
                ""
                if one.rm_rn_eps_lb is None
                else f" RM;RN={one.rm_rn_eps_lb:.3f} O(1)={x.o1_eps_lb:.3f}"
                f" O(1) f-DP={x.o1_eps_lb_fdp or 0.0:.3f}"
            )
        )
    return assemble(
        config,
        generator_kind=sources.generator.kind,
        generated=sources.generator.remaining is None,
        modality=task.modality,
        repeats=repeats,
        sizes=dict(
            members=prepared.n_members,
            generator=sizes.generator,
            train=n_train,
            val=n_val,
            m=min(x.m for x in repeats),
            members_in_game_min=min(shown),
            members_in_game_max=max(shown),
            synthetic_helper_train=len(sources.helper_train),
            synthetic_helper_val=len(sources.helper_val),
            helper_real_public=0 if sources.real is None else sources.real.public,
            helper_real_site=0 if sources.real is None else sources.real.site,
            synthetic_out=len(sources.d_out),
            nonmembers=0 if nonmembers is None else len(nonmembers),
            reference_models=len(models.references),
            **comparison_sizes,
        ),
        quality=quality,
        timer=timer,
    )
