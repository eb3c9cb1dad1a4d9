"""Reference pool as the non-member source G (modality free).

Definition 3 only asks G to be c-close to the member distribution, and the baseline measures
how far it is. Public records of the same kind that the target never trained on (in a
simulation: the official test split no site trains on) are often far closer than anything a
generator trained on a few thousand records produces.

Every draw is without replacement and no record is handed out twice, so D_out^tr, D_out^val,
D_out^te and the helper's training data are disjoint. With ``resample_labels`` the draws
follow the label distribution of D_G (the site's own data, add-one smoothed), so a
label-skewed site is not compared with a balanced pool. With ``groups`` on the pool (e.g.
public documents) a draw takes whole groups, and a group one draw touches is never handed out
again, so no document is split between the game's non-members and the helper's data.
"""

from __future__ import annotations

import numpy as np

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import GENERATORS, AuditContext, Records
from panoramia_fl.audit.panoramia.pairing import PairedDraw
from panoramia_fl.audit.panoramia.splits import shuffled_groups


class ReferencePoolGenerator:
    """Hands out distinct public records; see the module docstring."""

    kind = "reference_pool"

    def __init__(self, pool: Records | None, *, resample_labels: bool, num_classes: int) -> None:
        if pool is None or len(pool) == 0:
            raise ValueError(
                "generator.kind='reference_pool' needs public records: pass "
                "public_pool=Records(x, y) to run_audit (records of the same kind that the "
                "target model never trained on)"
            )
        self.pool = pool
        self.resample_labels = bool(resample_labels and pool.y is not None)
        self.num_classes = num_classes
        self._used = np.zeros(len(pool), dtype=bool)
        self._label_p: np.ndarray | None = None
        self._fitted = False
        self.label_shortfall = 0

    @property
    def used(self) -> np.ndarray:
        """Indices into the pool handed out so far (in order of the draws)."""
        return np.flatnonzero(self._used)

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        """Estimate the site's label distribution on D_G (no training: the pool is data)."""
        self._fitted = True
        quality: dict[str, float] = {"pool_size": float(len(self.pool))}
        if self.resample_labels and self.pool.y is not None and d_g.y is not None and len(d_g) > 0:
            counts = np.bincount(d_g.y.astype(np.int64), minlength=self.num_classes)
            # Add-one smoothing: a label D_G happens to miss still occurs among the
            # non-members, so the baseline cannot flag its members by the label alone.
            self._label_p = (counts + 1.0) / (counts.sum() + counts.size)
            pool_counts = np.bincount(self.pool.y.astype(np.int64), minlength=self.num_classes)
            pool_p = pool_counts / pool_counts.sum()
            quality["label_tv_distance_before_resampling"] = float(
                0.5 * np.abs(pool_p[: len(self._label_p)] - self._label_p).sum()
            )
        return quality

    def sample(self, n: int, *, seed: int) -> Records:
        """``n`` pool records never handed out before."""
        if not self._fitted:
            raise RuntimeError("ReferencePoolGenerator.sample called before fit")
        rng = np.random.default_rng([seed, 0x9001])
        free = np.flatnonzero(~self._used)
        if n > free.size:
            raise ValueError(
                f"reference pool exhausted: {n} records requested but only {free.size} of "
                f"{len(self.pool)} are unused (pool records are never reused); pass a larger "
                "public_pool or lower synthetic_multiplier / the member splits"
            )
        if self._label_p is not None:
            chosen = self._draw_by_label(free, n, rng)
        elif self.pool.groups is not None:
            chosen = self._draw_groups(free, n, rng)
        else:
            chosen = rng.choice(free, size=n, replace=False)
        self._used[chosen] = True
        if self.pool.groups is not None:
            # The rest of a group a draw touched is retired, not handed out later.
            self._used |= np.isin(self.pool.groups, self.pool.groups[chosen])
        return self.pool.take(chosen)

    def sample_labels(self, labels: np.ndarray, *, seed: int) -> PairedDraw:
        """One unused record of label ``labels[i]`` per slot ``i``, without replacement.

        When the pool has fewer unused records of a label than slots ask for it, a random
        subset of those slots gets one and the rest are dropped (``label_shortfall``).
        """
        if not self._fitted:
            raise RuntimeError("ReferencePoolGenerator.sample_labels called before fit")
        if self.pool.y is None:
            raise ValueError("audit.settings.pairing='label': the reference pool has no labels")
        rng = np.random.default_rng([seed, 0x9002])
        free = np.flatnonzero(~self._used)
        slots, chosen = [], []
        for c in np.unique(labels):
            want = rng.permutation(np.flatnonzero(labels == c))
            have = rng.permutation(free[self.pool.y[free] == c])
            k = min(want.size, have.size)
            slots.append(want[:k])
            chosen.append(have[:k])
            self.label_shortfall += int(want.size - k)
        slot = np.concatenate(slots).astype(np.int64)
        pick = np.concatenate(chosen).astype(np.int64)
        order = np.argsort(slot)
        self._used[pick] = True
        return PairedDraw(self.pool.take(pick[order]), slot[order])

    def _draw_groups(self, free: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` unused records taken group by group in random order (the last group cut)."""
        assert self.pool.groups is not None
        order, _ = shuffled_groups(len(free), self.pool.groups[free], rng)
        return free[order[:n]]

    @property
    def remaining(self) -> int:
        """Pool records not handed out yet."""
        return int((~self._used).sum())

    def sampling_quality(self) -> dict[str, float]:
        return {"pool_label_shortfall": float(self.label_shortfall)}

    def _draw_by_label(self, free: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """Labels i.i.d. from the site's distribution, one unused record per label.

        A label whose unused records run out is dropped and the others renormalised; the
        number of such re-draws is kept in ``label_shortfall``.
        """
        assert self._label_p is not None and self.pool.y is not None
        free_y = self.pool.y[free]
        by_label = {c: rng.permutation(free[free_y == c]) for c in range(len(self._label_p))}
        left = {c: v.size for c, v in by_label.items()}
        p = self._label_p.copy()
        taken = {c: 0 for c in by_label}
        need = n
        while need > 0:
            p = np.where(np.array([left[c] > 0 for c in range(len(p))]), p, 0.0)
            if p.sum() <= 0:
                p = np.array([float(left[c] > 0) for c in range(len(p))])
            want = rng.multinomial(need, p / p.sum())
            for c, k in enumerate(want):
                k_ok = min(int(k), left[c])
                taken[c] += k_ok
                left[c] -= k_ok
                need -= k_ok
                self.label_shortfall += int(k) - k_ok
        chosen = np.concatenate([by_label[c][: taken[c]] for c in by_label])
        return chosen[rng.permutation(chosen.size)]


@GENERATORS.register("reference_pool")
def make_reference_pool(config: AuditConfig, context: AuditContext) -> ReferencePoolGenerator:
    return ReferencePoolGenerator(
        context.public_pool,
        resample_labels=config.generator.resample_labels,
        num_classes=context.task.num_classes,
    )
