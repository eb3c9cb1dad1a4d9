"""Real-vs-synthetic filter: drop generated images that are obviously generated.

A classifier is trained on D_G (real) against extra samples of the trained generator (data
outside every audit set); afterwards every draw keeps only the samples it calls synthetic
with probability below ``generator.filter_confidence``. The kept samples are still i.i.d.
draws of a (filtered) generator, so the game stays valid; the baseline then measures how
close that filtered generator is.
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from threadpoolctl import threadpool_limits

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.image.classifier import _threads
from panoramia_fl.audit.image.features import one_hot, pooled_pixels
from panoramia_fl.audit.panoramia.components import AuditContext, Records
from panoramia_fl.audit.stats.roc import auc


class RealSyntheticFilter:
    """Gradient boosting on pooled pixels and the label: P(synthetic | x, y)."""

    def __init__(self, *, num_classes: int, pixel_side: int) -> None:
        self.num_classes = num_classes
        self.pixel_side = pixel_side
        self.model: HistGradientBoostingClassifier | None = None

    def _x(self, records: Records) -> np.ndarray:
        hot = one_hot(records.y, self.num_classes)
        pix = pooled_pixels(records.x, self.pixel_side)
        return np.column_stack([pix, hot]) if hot.size else pix

    def fit(self, real: Records, synthetic: Records, *, seed: int) -> dict[str, float]:
        """Fit on 80% of each side; report the AUC on the other 20%."""
        rng = np.random.default_rng([seed, 0xF117])
        x = np.concatenate([self._x(real), self._x(synthetic)])
        t = np.concatenate([np.zeros(len(real)), np.ones(len(synthetic))])
        perm = rng.permutation(len(x))
        cut = int(0.8 * len(x))
        tr, ho = perm[:cut], perm[cut:]
        with threadpool_limits(limits=_threads()):
            self.model = HistGradientBoostingClassifier(
                max_iter=200,
                learning_rate=0.1,
                max_leaf_nodes=15,
                random_state=seed,
                early_stopping=False,
            ).fit(x[tr], t[tr])
            held_auc = auc(self.model.predict_proba(x[ho])[:, 1], t[ho])
            # Refit on everything for the filtering itself.
            self.model.fit(x, t)
        return {"filter_holdout_auc": held_auc}

    def synthetic_probability(self, records: Records) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("filter used before fit")
        with threadpool_limits(limits=_threads()):
            return self.model.predict_proba(self._x(records))[:, 1]


class FilteredGenerator:
    """Wraps a trained image generator with a :class:`RealSyntheticFilter`."""

    def __init__(
        self, base, config: AuditConfig, context: AuditContext, max_draw_factor: int = 50
    ) -> None:
        self.base = base
        self.kind = f"{base.kind}+filter"
        self.confidence = config.generator.filter_confidence
        self.filter = RealSyntheticFilter(
            num_classes=context.task.num_classes, pixel_side=config.classifier.pixel_side
        )
        self.max_draw_factor = max_draw_factor
        self.drawn = 0
        self.dropped = 0

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        quality = dict(self.base.fit(d_g, seed=seed))
        extra = self.base.sample(len(d_g), seed=seed + 7919)
        quality.update(self.filter.fit(d_g, extra, seed=seed))
        return quality

    @property
    def acceptance_rate(self) -> float:
        return 1.0 - self.dropped / self.drawn if self.drawn else float("nan")

    @property
    def remaining(self) -> int | None:
        return None

    def sampling_quality(self) -> dict[str, float]:
        return {"filter_acceptance_rate": self.acceptance_rate}

    def sample(self, n: int, *, seed: int) -> Records:
        """``n`` samples that pass the filter (rejection sampling, deterministic in seed)."""
        kept_x, kept_y, have, drawn, round_ = [], [], 0, 0, 0
        budget = self.max_draw_factor * max(n, 64)
        while have < n:
            if drawn >= budget:
                raise RuntimeError(
                    f"generator.filter: only {have} of {n} samples passed the filter after "
                    f"{drawn} draws (acceptance {have / drawn:.3f} at filter_confidence="
                    f"{self.confidence}); raise filter_confidence or train the generator longer"
                )
            batch = self.base.sample(max(2 * (n - have), 64), seed=seed * 1000 + round_)
            keep = self.filter.synthetic_probability(batch) < self.confidence
            drawn += len(batch)
            self.drawn += len(batch)
            self.dropped += int((~keep).sum())
            kept_x.append(batch.x[keep])
            kept_y.append(batch.y[keep])
            have += int(keep.sum())
            round_ += 1
        return Records(np.concatenate(kept_x)[:n], np.concatenate(kept_y)[:n])
