"""Hand-made features of token chunks and of their per-token loss sequences.

Loss features (from :meth:`audit.panoramia.task.AuditTask.loss_features` of a language model):
column 0 is the chunk's mean token loss, columns 1.. the per-token losses. A classifier
gets their summary statistics and the sorted losses (order-free, so it does not have to
learn where in the chunk the surprising tokens are).

Text features: a naive-Bayes log-likelihood ratio of the chunk's unigrams and bigrams between
the two classes of the training split (computed out-of-fold on the training split itself,
so the downstream model does not learn to trust an overfitted feature), and repetition
statistics (generated text from small models tends to loop or to never repeat).
"""

from __future__ import annotations

import numpy as np

_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
_CODE = np.int64(1 << 21)  # token ids are below 2**21: bigram code = a * _CODE + b


def loss_stats(features: np.ndarray) -> np.ndarray:
    """``[mean, std, min, max, quantiles..., first-half mean, second-half mean]`` + sorted."""
    f = np.asarray(features, dtype=np.float64)
    tok = f[:, 1:] if f.shape[1] > 1 else f
    half = max(1, tok.shape[1] // 2)
    stats = [
        f[:, :1],
        tok.std(axis=1, keepdims=True),
        tok.min(axis=1, keepdims=True),
        tok.max(axis=1, keepdims=True),
        np.quantile(tok, _QUANTILES, axis=1).T,
        tok[:, :half].mean(axis=1, keepdims=True),
        tok[:, half:].mean(axis=1, keepdims=True),
        np.sort(tok, axis=1),
    ]
    return np.hstack(stats)


def calibrated_stats(features: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Statistics of the per-token loss difference (target - reference), sorted too."""
    f = np.asarray(features, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    d = f[:, 1:] - r[:, 1:] if f.shape[1] > 1 else f - r
    return np.hstack(
        [
            (f[:, :1] - r[:, :1]),
            d.std(axis=1, keepdims=True),
            np.quantile(d, _QUANTILES, axis=1).T,
            np.sort(d, axis=1),
        ]
    )


def repetition_stats(x: np.ndarray) -> np.ndarray:
    """Distinct-token ratio, largest token count, distinct-bigram ratio, repeated 4-grams."""
    x = np.asarray(x, dtype=np.int64)
    n, t = x.shape
    out = np.zeros((n, 4))
    for i, row in enumerate(x):
        _, counts = np.unique(row, return_counts=True)
        bigrams = row[:-1] * _CODE + row[1:]
        grams4 = np.lib.stride_tricks.sliding_window_view(row, 4) if t >= 4 else row[None]
        out[i] = (
            len(counts) / t,
            counts.max() / t,
            len(np.unique(bigrams)) / max(t - 1, 1),
            len(grams4) - len(np.unique(grams4, axis=0)),
        )
    return out


def _grams(x: np.ndarray) -> list[np.ndarray]:
    x = np.asarray(x, dtype=np.int64)
    bigrams = x[:, :-1] * _CODE + x[:, 1:] + (_CODE * _CODE)  # disjoint from unigram codes
    return [np.concatenate([row_u, row_b]) for row_u, row_b in zip(x, bigrams, strict=True)]


class NaiveBayesRatio:
    """Mean log-likelihood ratio (class 1 vs class 0) of a chunk's unigrams and bigrams,
    with add-``alpha`` smoothing."""

    def __init__(self, alpha: float = 0.5) -> None:
        self.alpha = alpha
        self.codes = np.zeros(0, np.int64)
        self.ratio = np.zeros(0)
        self.default = 0.0

    def fit(self, x: np.ndarray, membership: np.ndarray) -> NaiveBayesRatio:
        grams = _grams(x)
        s = np.asarray(membership).astype(bool)
        pos = np.concatenate([g for g, m in zip(grams, s, strict=True) if m] or [np.zeros(0)])
        neg = np.concatenate([g for g, m in zip(grams, s, strict=True) if not m] or [np.zeros(0)])
        codes = np.unique(np.concatenate([pos, neg])).astype(np.int64)
        c1 = np.bincount(np.searchsorted(codes, pos.astype(np.int64)), minlength=len(codes))
        c0 = np.bincount(np.searchsorted(codes, neg.astype(np.int64)), minlength=len(codes))
        k = len(codes) + 1
        n1, n0 = c1.sum() + self.alpha * k, c0.sum() + self.alpha * k
        self.codes = codes
        self.ratio = np.log((c1 + self.alpha) / n1) - np.log((c0 + self.alpha) / n0)
        self.default = float(np.log(self.alpha / n1) - np.log(self.alpha / n0))
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        """``(n, 2)``: mean ratio of unigrams, of bigrams."""
        x = np.asarray(x, dtype=np.int64)
        t = x.shape[1]
        out = np.zeros((len(x), 2))
        for i, g in enumerate(_grams(x)):
            pos = np.searchsorted(self.codes, g)
            pos = np.minimum(pos, max(len(self.codes) - 1, 0))
            hit = self.codes[pos] == g if len(self.codes) else np.zeros(len(g), bool)
            r = np.where(hit, self.ratio[pos] if len(self.codes) else 0.0, self.default)
            out[i] = (r[:t].mean(), r[t:].mean())
        return out


def out_of_fold_ratios(
    x: np.ndarray, membership: np.ndarray, *, folds: int, seed: int
) -> np.ndarray:
    """Naive-Bayes ratios of each training chunk from a model fitted without its fold."""
    s = np.asarray(membership)
    out = np.zeros((len(x), 2))
    order = np.random.default_rng([seed, 0xBA7E5]).permutation(len(x))
    for k in range(folds):
        held = order[k::folds]
        rest = np.setdiff1d(order, held)
        if len(held) and len(np.unique(s[rest])) == 2:
            out[held] = NaiveBayesRatio().fit(x[rest], s[rest]).transform(x[held])
    return out
