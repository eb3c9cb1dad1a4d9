"""A site's most exposed members: the records the target model gives away most clearly.

For each member the score is the calibrated MIA statistic of :mod:`audit.panoramia.calibration`:
offline LiRA, f's logit confidence in the record's label minus the reference models' mean
(a record f fits far better than models that never saw it). Without reference models it is
f's own log-likelihood of the record, which also ranks records that are merely easy.

The indices point into the caller's ``members`` array. They identify patients' records, so
callers keep them where the records are (the site) and never put them in a reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch

from panoramia_fl.audit.panoramia.calibration import (
    CALIBRATION_NAMES,
    calibrated_statistics,
    log_likelihood,
    reference_statistics,
)
from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.panoramia.task import AuditTask

ExposureScore = Literal["lira_offline", "log_likelihood"]

SCORE_MEANINGS: dict[str, str] = {
    "lira_offline": (
        "offline LiRA: the target model's logit confidence in the record's label minus the "
        "mean of reference models that never saw it; high = the model fits this record far "
        "better than a model trained without it would."
    ),
    "log_likelihood": (
        "the target model's log-likelihood of the record (no reference models were "
        "available): high = the model fits this record closely, which also holds for records "
        "that are merely easy, so this ranking overstates their exposure."
    ),
}


@dataclass(frozen=True)
class ExposedRecords:
    """The ``k`` members with the highest score, highest first."""

    score: ExposureScore
    """Which statistic ranks the records (see :data:`SCORE_MEANINGS`)."""
    indices: list[int]
    """Positions in the ``members`` array that was scored."""
    scores: list[float | None]
    """Each record's score; ``None`` where it is not finite."""
    labels: list[int] | None
    """Each record's label (which of the site's groups it exposes); None for unlabelled
    records (text)."""
    n_members: int
    reference_models: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"score_meaning": SCORE_MEANINGS[self.score]}


def exposure_scores(
    task: AuditTask,
    model: torch.nn.Module,
    members: Records,
    reference_models: Sequence[torch.nn.Module] | None,
    *,
    device: torch.device,
) -> tuple[ExposureScore, np.ndarray]:
    """Each member's score and the statistic's name (higher = more exposed)."""
    model.eval()
    f = task.loss_features(model, members.x, members.y, device=device)
    if not reference_models:
        return "log_likelihood", log_likelihood(f, members.y)
    for ref in reference_models:
        ref.eval()
    ref_stats = reference_statistics(task, reference_models, members, device=device)
    calibrated = calibrated_statistics(f, members.y, ref_stats)
    return "lira_offline", calibrated[:, CALIBRATION_NAMES.index("lira_offline")]


def most_exposed(
    task: AuditTask,
    model: torch.nn.Module,
    members: Records,
    reference_models: Sequence[torch.nn.Module] | None,
    *,
    k: int,
    device: torch.device,
) -> ExposedRecords:
    """The ``k`` members of ``members`` the target ``model`` exposes most.

    Parameters
    ----------
    task
        The target's task (per-record loss features).
    model
        The target model f (left unchanged).
    members
        The site's training records.
    reference_models
        Models of f's architecture trained on records that are never the site's (e.g. the
        run's shared reference models); ``None`` or empty falls back to f's log-likelihood.
    k
        How many records to return (all of them when ``k`` exceeds their number).
    device
        Where to evaluate the models.

    Returns
    -------
    ExposedRecords
        Indices into ``members`` and their scores, highest score first; ties keep the
        records' order. Non-finite scores rank last.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    name, scores = exposure_scores(task, model, members, reference_models, device=device)
    ranked = np.where(np.isfinite(scores), scores, -np.inf)
    order = np.argsort(-ranked, kind="stable")[: min(k, len(members))]
    return ExposedRecords(
        score=name,
        indices=[int(i) for i in order],
        scores=[float(scores[i]) if np.isfinite(scores[i]) else None for i in order],
        labels=None if members.y is None else [int(members.y[i]) for i in order],
        n_members=len(members),
        reference_models=len(reference_models or ()),
    )
