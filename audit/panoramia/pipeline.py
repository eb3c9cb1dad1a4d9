"""PANORAMIA end to end (Algorithm 1): :func:`run_audit`.

Phases, each a function here or a module of its own:

1. :func:`audit.panoramia.sources.draw_sources`: cut the members, fit G on D_G, draw the
   game's non-members and the helper's synthetic data.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np
import torch

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.assembly import assemble
from panoramia_fl.audit.panoramia.audit_sets import FeatureSet
from panoramia_fl.audit.panoramia.calibration import (
    ReferenceStatistics,
    calibrated_statistics,
    reference_statistics,
    train_reference_models,
)
from panoramia_fl.audit.panoramia.components import AuditContext, Records
from panoramia_fl.audit.panoramia.repeat import RepeatInputs, play_repeat
from panoramia_fl.audit.panoramia.settings import resolve_config, resolve_device
from panoramia_fl.audit.panoramia.sources import ProgressFn, Sources, draw_sources
from panoramia_fl.audit.panoramia.task import AuditTask
from panoramia_fl.audit.panoramia.timing import StageTimer
from panoramia_fl.audit.result import PanoramiaResult, RepeatResult

__all__ = ["run_audit", "run_audits_of"]


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
class _Models:
    helper: torch.nn.Module
    references: list[torch.nn.Module]
    quality: dict[str, float]


def _fit_models(
    task: AuditTask,
    sources: Sources,
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
) -> PanoramiaResult:
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
    PanoramiaResult
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
) -> dict[int, PanoramiaResult]:
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

    sources = draw_sources(members, config, context, timer, say)
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
    sources: Sources
    models: _Models
    nonmembers: Records | None
    n_members: int
    fixed: tuple[_Fixed | None, ...]
    """f-independent features of the game's members, its non-members and the real
    non-members (None without them)."""


def _audit_target(
    prepared: _Prepared, model: torch.nn.Module, timer: StageTimer, say: ProgressFn
) -> PanoramiaResult:
    """Phases 3-5 for one target f."""
    config, sources = prepared.config, prepared.sources
    model.eval()
    with timer.stage("features"):
        s_in, s_out, s_non = (
            None
            if fixed is None
            else _featurize(prepared.task, model, fixed, prepared.context.device)
            for fixed in prepared.fixed
        )
        assert s_in is not None and s_out is not None  # members and generated always exist
    quality = _target_quality(prepared, s_in, s_non)
    n_train, n_val = _classifier_sizes(config, sources)
    inputs = RepeatInputs(
        config=config,
        context=prepared.context,
        members=s_in,
        generated=s_out,
        nonmembers=s_non,
        n_train=n_train,
        n_val=n_val,
        paired=sources.paired,
    )
    played = _play_repeats(inputs, timer, say)
    return assemble(
        config,
        generator_kind=sources.generator.kind,
        generated=sources.generator.remaining is None,
        modality=prepared.task.modality,
        repeats=played.results,
        sizes=dict(
            members=prepared.n_members,
            generator=sources.cut.sizes.generator,
            train=n_train,
            val=n_val,
            m=min(x.m for x in played.results),
            members_in_game_min=min(played.members_shown),
            members_in_game_max=max(played.members_shown),
            **_drawn_sizes(prepared),
            **played.comparison_sizes,
        ),
        quality=quality,
        timer=timer,
    )


def _target_quality(
    prepared: _Prepared, s_in: FeatureSet, s_non: FeatureSet | None
) -> dict[str, float]:
    """The shared phases' quality figures and the target's own on members and real
    non-members."""
    sources, nonmembers = prepared.sources, prepared.nonmembers
    quality = dict(sources.quality)
    quality.update(prepared.models.quality)
    quality.update(sources.generator.sampling_quality())
    quality["helper_accuracy_real_members"] = _accuracy(s_in.h, sources.d_in.y)
    quality["target_accuracy_members"] = _accuracy(s_in.f, sources.d_in.y)
    # f's generalization gap on this site: leakage O(1) can see even when no member stands out
    # Column 0 of the loss features is the per-record loss (AuditTask.loss_features).
    quality["target_loss_members"] = float(np.mean(s_in.f[:, 0]))
    if s_non is not None and nonmembers is not None:
        quality["target_accuracy_nonmembers"] = _accuracy(s_non.f, nonmembers.y)
        quality["target_loss_nonmembers"] = float(np.mean(s_non.f[:, 0]))
    return quality


def _classifier_sizes(config: AuditConfig, sources: Sources) -> tuple[int, int]:
    """``(train, validation)`` members of the classifiers' splits."""
    sizes = sources.cut.sizes
    if config.classifier.design == "score":
        # Nothing to train; a validation slice only where it picks the statistic and cut.
        return 0, (sizes.val if config.threshold_selection == "split" else 0)
    return sizes.train, sizes.val


@dataclass(frozen=True)
class _Played:
    """The repeats of one target's audit."""

    results: list[RepeatResult]
    members_shown: list[int]
    """Members in each repeat's game (its coins)."""
    comparison_sizes: dict[str, int]
    """Audit-set sizes of the RM;RN and O(1) comparisons (the last repeat's)."""


def _play_repeats(inputs: RepeatInputs, timer: StageTimer, say: ProgressFn) -> _Played:
    """``config.repeats`` games, each reported in one line."""
    repeats = []
    shown: list[int] = []
    comparison_sizes: dict[str, int] = {}
    n = inputs.config.repeats
    for r in range(n):
        x, comparison_sizes = play_repeat(inputs, r, timer)
        assert x.members_shown is not None  # play_repeat counts its game's coins
        repeats.append(x)
        shown.append(x.members_shown)
        one, two = x.one_sided, x.two_sided
        say(
            f"repeat {r + 1}/{n}: c_lb={one.c_lb:.3f} "
            f"{{c+eps}}_lb={one.c_eps_lb:.3f} eps_tilde={one.eps_tilde:.3f}"
            + ("" if two is None else f" two-sided={two.eps_tilde:.3f}")
            + (
                ""
                if one.rm_rn_eps_lb is None
                else f" RM;RN={one.rm_rn_eps_lb:.3f} O(1)={x.o1_eps_lb:.3f}"
                f" O(1) f-DP={x.o1_eps_lb_fdp or 0.0:.3f}"
            )
        )
    return _Played(repeats, shown, comparison_sizes)


def _drawn_sizes(prepared: _Prepared) -> dict[str, int]:
    """How many records the helper, the game's non-members and the comparisons drew on."""
    sources, nonmembers = prepared.sources, prepared.nonmembers
    return dict(
        synthetic_helper_train=len(sources.helper_train),
        synthetic_helper_val=len(sources.helper_val),
        helper_real_public=0 if sources.real is None else sources.real.public,
        helper_real_site=0 if sources.real is None else sources.real.site,
        synthetic_out=len(sources.d_out),
        nonmembers=0 if nonmembers is None else len(nonmembers),
        reference_models=len(prepared.models.references),
    )
