"""How close an attack came: each of the site's attacked records against its best-matching
reconstruction (SSIM and PSNR for images, the share of fields recovered for rows), and the
summary numbers the site sends (:class:`InversionResult`); the records never leave it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy
import torch

from panoramia_fl.audit.inversion.attack import Fields, LocalTraining, Reconstruction
from panoramia_fl.audit.inversion.inversion_result import InversionResult

__all__ = ["InversionResult", "RecordScores", "image_scores", "summarise", "tabular_scores"]


@dataclass(frozen=True)
class RecordScores:
    """Per attacked record, the quality of its best-matching reconstruction."""

    quality: np.ndarray
    """SSIM (images) or the share of fields recovered (tabular), per attacked record."""
    psnr: np.ndarray | None
    """PSNR in dB (images), per attacked record."""
    match: np.ndarray
    """Index of each attacked record's reconstruction (one-to-one where counts allow)."""


def _to_unit(x: torch.Tensor) -> torch.Tensor:
    return ((x.float().clamp(-1, 1) + 1) / 2).reshape(x.shape[0], -1, *x.shape[-2:])


def _pairwise(truth: torch.Tensor, recon: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """SSIM and PSNR of every (true, reconstructed) pair of images in [0, 1]."""
    from pytorch_msssim import ssim

    side = min(truth.shape[-2:])
    win = min(11, side if side % 2 else side - 1)
    ssims = np.zeros((len(truth), len(recon)))
    psnrs = np.zeros_like(ssims)
    for i, t in enumerate(truth):
        rep = t.expand_as(recon)
        ssims[i] = ssim(rep, recon, data_range=1.0, size_average=False, win_size=win).numpy()
        mse = (rep - recon).pow(2).flatten(1).mean(dim=1).clamp_min(1e-10)
        psnrs[i] = (10 * torch.log10(1.0 / mse)).numpy()
    return ssims, psnrs


def _assign(score: np.ndarray) -> np.ndarray:
    """Each true record's reconstruction: one-to-one (highest total) when there are at least
    as many reconstructions as records, else each record's best."""
    if score.shape[1] >= score.shape[0]:
        rows, cols = scipy.optimize.linear_sum_assignment(-score)
        match = np.empty(score.shape[0], dtype=int)
        match[rows] = cols
        return match
    return score.argmax(axis=1)


def image_scores(truth: torch.Tensor, recon: torch.Tensor) -> RecordScores:
    """SSIM and PSNR of each true image against its reconstruction (both in [-1, 1])."""
    ssims, psnrs = _pairwise(_to_unit(truth), _to_unit(recon))
    match = _assign(ssims)
    rows = np.arange(len(match))
    return RecordScores(quality=ssims[rows, match], psnr=psnrs[rows, match], match=match)


def _field_hits(
    truth: torch.Tensor, recon: torch.Tensor, fields: Sequence[Fields], tolerance: float
) -> torch.Tensor:
    """(n_true, n_recon, fields): whether each field of each pair agrees."""
    hits = []
    for f in fields:
        t = truth[:, f.start : f.start + f.width]
        r = recon[:, f.start : f.start + f.width]
        if f.categorical:
            hits.append(t.argmax(dim=1)[:, None] == r.argmax(dim=1)[None, :])
        else:
            hits.append((t[:, None, 0] - r[None, :, 0]).abs() <= tolerance)
    return torch.stack(hits, dim=2)


def tabular_scores(
    truth: torch.Tensor, recon: torch.Tensor, fields: Sequence[Fields], *, tolerance: float
) -> RecordScores:
    """The share of each true row's fields its reconstruction recovers (categorical: the
    same level; numeric: within ``tolerance``)."""
    share = _field_hits(truth.float(), recon.float(), fields, tolerance).float().mean(dim=2)
    match = _assign(share.numpy())
    rows = np.arange(len(match))
    return RecordScores(quality=share.numpy()[rows, match], psnr=None, match=match)


def summarise(
    scores: RecordScores,
    baseline: RecordScores,
    *,
    round: int,
    training: LocalTraining,
    modality: str,
    threshold: float,
    reconstruction: Reconstruction,
    baseline_reconstruction: Reconstruction,
    seconds: float,
    dp_epsilon: float | None = None,
) -> InversionResult:
    """The summary numbers of an attack and its baseline."""
    q, b = scores.quality, baseline.quality
    return InversionResult(
        round=round,
        attack=training.attack,
        modality=modality,
        measure="ssim" if modality == "image" else "fields",
        threshold=threshold,
        n_records=training.records,
        n_dummies=reconstruction.x.shape[0],
        n_scored=int(q.size),
        quality_mean=float(q.mean()),
        quality_median=float(np.median(q)),
        quality_max=float(q.max()),
        share_rebuilt=float((q >= threshold).mean()),
        psnr_mean=None if scores.psnr is None else float(scores.psnr.mean()),
        baseline_quality_mean=float(b.mean()),
        baseline_quality_max=float(b.max()),
        baseline_share_rebuilt=float((b >= threshold).mean()),
        baseline_psnr_mean=None if baseline.psnr is None else float(baseline.psnr.mean()),
        match_loss=reconstruction.loss,
        iterations=reconstruction.iterations,
        seconds=seconds,
        dp_epsilon=dp_epsilon,
        agreement=(
            None if reconstruction.confidence is None else float(reconstruction.confidence.mean())
        ),
        step_budget=reconstruction.budget,
        baseline_iterations=baseline_reconstruction.iterations,
        cut_short=reconstruction.cut_short or baseline_reconstruction.cut_short,
    )
