"""Feature matrices for the image membership classifiers and the filter.

The loss features a task hands over are ``[loss, logits]``. Float32 cross-entropy rounds to
0 for confident predictions, which hides exactly the records an over-fitted model knows best,
so the confidence is recomputed from the logits in float64 (the "logit-scaled confidence"
``log p_y - log(1 - p_y)``, the margin, and friends).
"""

from __future__ import annotations

import numpy as np
import scipy

from panoramia_fl.audit.panoramia.calibration import CALIBRATION_NAMES
from panoramia_fl.audit.panoramia.components import ClassifierData


def confidence_features(features: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """Per-record confidence statistics from ``[loss, logits...]``.

    Columns: loss, log-loss, logit-scaled confidence ``log p_y - log(1 - p_y)``, margin
    ``z_y - max_{k != y} z_k``, log-probability of the label, entropy, correctness. Without
    logits (or labels) only the loss columns are returned.
    """
    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim == 1:
        feats = feats[:, None]
    loss = feats[:, 0]
    log_loss = np.log(np.maximum(loss, 1e-30))
    z = feats[:, 1:]
    if z.shape[1] < 2 or y is None:
        return np.column_stack([loss, log_loss])
    n, k = z.shape
    yi = np.asarray(y, dtype=np.int64)
    rows = np.arange(n)
    zy = z[rows, yi]
    others = z.copy()
    others[rows, yi] = -np.inf
    lse_all = scipy.special.logsumexp(z, axis=1)
    conf_logit = zy - scipy.special.logsumexp(others, axis=1)
    margin = zy - others.max(axis=1)
    log_p = zy - lse_all
    logp_all = z - lse_all[:, None]
    entropy = -(np.exp(logp_all) * logp_all).sum(axis=1)
    correct = (z.argmax(axis=1) == yi).astype(np.float64)
    return np.column_stack([loss, log_loss, conf_logit, margin, log_p, entropy, correct])


CONFIDENCE_NAMES = ("loss", "log_loss", "conf_logit", "margin", "log_p", "entropy", "correct")


def loss_matrix_names(data: ClassifierData) -> list[str]:
    """Column names of :func:`loss_matrix` for ``data``."""
    width = confidence_features(
        data.features[:1], None if data.records.y is None else data.records.y[:1]
    ).shape[1]
    own = list(CONFIDENCE_NAMES[:width]) if width > 2 else ["loss", "log_loss"]
    calibration = list(CALIBRATION_NAMES) if data.calibration is not None else []
    if data.reference is None:
        return own + calibration
    return own + [f"ref_{n}" for n in own] + [f"diff_{n}" for n in own] + calibration


def pooled_pixels(x: np.ndarray, side: int) -> np.ndarray:
    """uint8 ``(n, C, H, W)`` images average-pooled to at most ``side`` per edge, in [0, 1]."""
    arr = np.asarray(x, dtype=np.float32) / 255.0
    if arr.ndim != 4:
        raise ValueError(f"image records must have shape (n, C, H, W), got {arr.shape}")
    n, c, h, w = arr.shape
    factor = max(1, int(np.ceil(max(h, w) / side)))
    if factor > 1:
        hh, ww = (h // factor) * factor, (w // factor) * factor
        arr = arr[:, :, :hh, :ww].reshape(n, c, hh // factor, factor, ww // factor, factor)
        arr = arr.mean(axis=(3, 5))
    return arr.reshape(n, -1)


def one_hot(y: np.ndarray | None, num_classes: int) -> np.ndarray:
    if y is None or num_classes < 2:
        return np.zeros((0, 0))
    out = np.zeros((len(y), num_classes), dtype=np.float32)
    out[np.arange(len(y)), np.asarray(y, dtype=np.int64)] = 1.0
    return out


def loss_matrix(data: ClassifierData) -> np.ndarray:
    """Confidence statistics of f (or h) and, with a reference, of h and their differences,
    then the reference models' calibrated statistics when present.

    The differences are the difficulty calibration: a record that f fits much better than the
    reference h (which never saw it) is more likely a member than one both fit well.
    """
    y = data.records.y
    own = confidence_features(data.features, y)
    if data.reference is not None:
        ref = confidence_features(data.reference, y)
        own = np.column_stack([own, ref, own - ref])
    return data.with_calibration(own)


def design_matrix(
    data: ClassifierData, *, num_classes: int, pixel_side: int, pixels: bool = True
) -> np.ndarray:
    """Loss features, the label (one-hot) and, optionally, pooled pixels."""
    parts = [loss_matrix(data)]
    hot = one_hot(data.records.y, num_classes)
    if hot.size:
        parts.append(hot)
    if pixels:
        parts.append(pooled_pixels(data.records.x, pixel_side))
    return np.column_stack(parts).astype(np.float64)
