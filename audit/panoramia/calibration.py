"""Calibrated membership statistics from reference models (offline LiRA / RMIA).

A record that f fits well may simply be easy. Reference models of f's architecture, trained
on records that are never game records, say how well such a model fits the record without
having seen it; the target's statistic relative to theirs is the calibrated score (Carlini
et al. 2022, offline LiRA with a global variance; Zarifzadeh et al. 2024, offline RMIA
without the population comparison). The reference models depend on no game record, so
their statistics do not depend on the coins, and b gets exactly the same reference
features as the MIA (docs/two_sided_game.md, section 6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy
import torch

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.panoramia.task import AuditTask

CALIBRATION_NAMES = ("lira_offline", "rmia_offline", "ref_conf_mean", "ref_conf_std")
"""Columns of :func:`calibrated_statistics`."""


def log_likelihood(features: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """log p(record) under a model, from its loss features.

    For classifiers (features ``[loss, logits]``) it is ``log p_y`` recomputed in float64 from
    the logits: float32 cross-entropy rounds to 0 for confident predictions, hiding exactly
    the records an over-fitted model knows best. Otherwise ``-loss``.
    """
    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim == 1:
        feats = feats[:, None]
    if y is None or feats.shape[1] < 3:
        return -feats[:, 0]
    z = feats[:, 1:]
    return z[np.arange(len(z)), np.asarray(y, dtype=np.int64)] - scipy.special.logsumexp(z, axis=1)


def logit_confidence(log_p: np.ndarray) -> np.ndarray:
    """``log p - log(1 - p)``: LiRA's statistic, close to Gaussian across models."""
    lp = np.minimum(np.asarray(log_p, dtype=np.float64), -1e-300)
    return lp - np.log(-np.expm1(lp))


@dataclass(frozen=True)
class ReferenceStatistics:
    """``log p`` of every record under each of the K reference models, shape ``(n, K)``."""

    log_p: np.ndarray

    def take(self, idx: np.ndarray) -> ReferenceStatistics:
        return ReferenceStatistics(self.log_p[idx])


def reference_statistics(
    task: AuditTask,
    models: Sequence[torch.nn.Module],
    records: Records,
    *,
    device: torch.device,
) -> ReferenceStatistics:
    """Each reference model's ``log p`` of each record."""
    cols = [
        log_likelihood(task.loss_features(m, records.x, records.y, device=device), records.y)
        for m in models
    ]
    return ReferenceStatistics(np.column_stack(cols))


def calibrated_statistics(
    view_features: np.ndarray, y: np.ndarray | None, ref: ReferenceStatistics
) -> np.ndarray:
    """``(n, 4)``: the view's (h's or f's) statistics calibrated by the reference models.

    Columns (:data:`CALIBRATION_NAMES`): the view's logit confidence minus the references'
    mean (offline LiRA; with a global variance the likelihood ratio is monotone in it), the
    view's ``log p`` minus the log of the references' mean ``p`` (offline RMIA), and the
    references' mean and spread of the logit confidence (the record's difficulty, the same
    for b and the MIA).
    """
    own = log_likelihood(view_features, y)
    ref_conf = logit_confidence(ref.log_p)
    k = ref.log_p.shape[1]
    mean = ref_conf.mean(axis=1)
    std = ref_conf.std(axis=1, ddof=1) if k > 1 else np.zeros_like(mean)
    lira = logit_confidence(own) - mean
    rmia = own - (scipy.special.logsumexp(ref.log_p, axis=1) - math.log(k))
    return np.column_stack([lira, rmia, mean, std])


def train_reference_model(
    task: AuditTask,
    records: Records,
    *,
    index: int,
    epochs: int,
    fraction: float,
    seed: int,
    device: torch.device,
) -> torch.nn.Module:
    """Reference model ``index``: the task's architecture trained on its own random subset of
    ``records`` (``fraction`` of them), as LiRA trains its shadow models."""
    n = len(records)
    size = max(2, int(round(fraction * n)))
    if size > n:
        raise ValueError(f"reference models: {n} records are too few to train on")
    idx = np.sort(np.random.default_rng([seed, 0x2EF, index]).choice(n, size, replace=False))
    part = records.take(idx)
    torch.manual_seed(seed * 31 + index)
    model = task.make_model()
    task.train_model(model, part.x, part.y, epochs=epochs, seed=seed * 31 + index, device=device)
    return model.eval()


def train_reference_models(
    task: AuditTask,
    records: Records,
    *,
    count: int,
    epochs: int,
    fraction: float,
    seed: int,
    device: torch.device,
) -> list[torch.nn.Module]:
    """``count`` reference models (see :func:`train_reference_model`)."""
    return [
        train_reference_model(
            task, records, index=k, epochs=epochs, fraction=fraction, seed=seed, device=device
        )
        for k in range(count)
    ]
