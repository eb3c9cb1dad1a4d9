"""Tabular generators for the audit: ``mst`` (select-measure-generate on a tree).

A generator is fitted on D_G's encoded rows *and* labels: the label is one more discrete
attribute of the table, so ``sample`` returns rows with labels drawn jointly (no separate
labeler). With ``generator.filter`` on, a real-vs-synthetic classifier trained on D_G vs
extra synthetic rows drops the rows it flags as synthetic with high confidence
(:mod:`audit.tabular.synthetic_filter`).

The encoding is read from ``context.task.schema`` when the task carries one
(``ml.tasks.tabular.TabularClassificationTask.schema``), otherwise inferred from
the data (:func:`contracts.tabular_schema.infer_attributes`).

Quality figures returned by ``fit`` (all floats): ``mst_attributes``, ``mst_noise_sigma``,
``tv_1way_mean``/``tv_1way_max``/``tv_2way_mean``/``tv_2way_max`` (synthetic vs D_G on the
discretised attributes), ``filter_auc``/``filter_keep_rate`` (filter on), and
``rare_value_fraction``/``rare_value_rows`` (rows of D_G with a rare or extreme value, a
known cause of high variance in tabular audits, paper Appendix D.6).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import GENERATORS, AuditContext, Records
from panoramia_fl.audit.tabular.attributes import Discretizer, rare_value_mask
from panoramia_fl.audit.tabular.mst import TreeSynthesizer, marginal_tv
from panoramia_fl.audit.tabular.synthetic_filter import SyntheticFilter
from panoramia_fl.contracts.tabular_schema import Attribute, resolve_attributes

_MAX_FILTER_ROUNDS = 30


class MSTGenerator:
    """Select-measure-generate tree model on D_G (see :mod:`audit.tabular.mst`).

    Parameters
    ----------
    schema
        Optional encoding schema (``Dataset.info["schema"]``); inferred when ``None``.
    epsilon, delta
        Noise budget of the measurements (not a privacy guarantee of the generator).
    bins, max_levels, within_bin
        Discretisation of continuous columns and how bins map back (see
        :class:`audit.tabular.attributes.Discretizer`).
    filter, filter_confidence
        Real-vs-synthetic filter on the sampled rows.
    """

    kind: str = "mst"

    def __init__(
        self,
        *,
        schema: dict[str, Any] | None = None,
        epsilon: float = 1000.0,
        delta: float = 1e-9,
        bins: int = 16,
        max_levels: int = 32,
        within_bin: Literal["auto", "empirical", "smooth", "uniform"] = "auto",
        filter: bool = False,
        filter_confidence: float = 0.95,
    ) -> None:
        self.schema = schema
        self.epsilon, self.delta = epsilon, delta
        self.discretizer = Discretizer(bins=bins, max_levels=max_levels, within_bin=within_bin)
        self.filter = SyntheticFilter(confidence=filter_confidence) if filter else None
        # Reported name, as the image generators do: a filtered generator is another G.
        self.kind = "mst+filter" if filter else "mst"
        self.drawn = 0
        self.kept = 0
        self.attributes: list[Attribute] = []
        self.labels: np.ndarray = np.empty(0, dtype=np.int64)
        self.tree: TreeSynthesizer | None = None

    # -- fitting -----------------------------------------------------------------------
    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        if d_g.y is None:
            raise ValueError("the tabular generator needs labelled records (y is None)")
        x = np.asarray(d_g.x, dtype=np.float32)
        if x.ndim != 2 or len(x) < 2:
            raise ValueError(f"D_G must be a table (n >= 2, d), got shape {x.shape}")
        rng = np.random.default_rng(seed)
        self.attributes = resolve_attributes(x, self.schema)
        self.discretizer.fit(x, self.attributes)
        self.labels, label_codes = np.unique(np.asarray(d_g.y), return_inverse=True)
        codes = np.column_stack([label_codes, self.discretizer.encode(x)])
        sizes = [len(self.labels), *self.discretizer.sizes]
        self.tree = TreeSynthesizer(epsilon=self.epsilon, delta=self.delta, root=0)
        self.tree.fit(codes, sizes, rng=rng)

        check = self.tree.sample(max(len(x), 2000), rng=rng)
        tv1, tv2 = marginal_tv(codes, check, sizes)
        rare = rare_value_mask(x, self.attributes).any(axis=1)
        quality = {
            "mst_attributes": float(len(sizes)),
            "mst_noise_sigma": float(self.tree.sigma),
            "tv_1way_mean": float(tv1.mean()),
            "tv_1way_max": float(tv1.max()),
            "tv_2way_mean": float(tv2.mean()) if len(tv2) else 0.0,
            "tv_2way_max": float(tv2.max()) if len(tv2) else 0.0,
            "rare_value_fraction": float(rare.mean()),
            "rare_value_rows": float(rare.sum()),
        }
        if self.filter is not None:
            extra = self._draw(len(x), rng)
            quality |= self.filter.fit(x, d_g.y, extra.x, extra.y, seed=seed)
        return quality

    # -- sampling ----------------------------------------------------------------------
    @property
    def acceptance_rate(self) -> float:
        """Share of drawn rows the filter kept so far (1.0 without a filter)."""
        return self.kept / self.drawn if self.drawn else 1.0

    @property
    def remaining(self) -> int | None:
        return None

    def sampling_quality(self) -> dict[str, float]:
        return {"filter_acceptance_rate": self.acceptance_rate}

    def _draw(self, n: int, rng: np.random.Generator) -> Records:
        if self.tree is None:
            raise RuntimeError("fit() the generator before sampling")
        codes = self.tree.sample(n, rng=rng)
        x = self.discretizer.decode(codes[:, 1:], rng=rng)
        return Records(x, self.labels[codes[:, 0]].astype(np.int64))

    def sample(self, n: int, *, seed: int) -> Records:
        rng = np.random.default_rng(seed)
        if self.filter is None:
            return self._draw(n, rng)
        kept: list[Records] = []
        total, keep_rate = 0, 0.5
        for _ in range(_MAX_FILTER_ROUNDS):
            need = n - total
            if need <= 0:
                break
            batch = self._draw(int(math.ceil(1.2 * need / max(keep_rate, 0.02))) + 16, rng)
            mask = self.filter.keep(batch.x, batch.y)
            keep_rate = max(float(mask.mean()), 1e-3)
            self.drawn += len(mask)
            self.kept += int(mask.sum())
            kept.append(batch.take(np.flatnonzero(mask)))
            total += int(mask.sum())
        if total < n:
            raise RuntimeError(
                f"generator.filter: only {total} of {n} synthetic rows passed the filter; "
                "raise generator.filter_confidence or turn the filter off"
            )
        x = np.concatenate([r.x for r in kept])[:n]
        y = np.concatenate([r.y for r in kept])[:n]
        return Records(x, y)


@GENERATORS.register("mst", modality="tabular")
def make_mst(config: AuditConfig, context: AuditContext) -> MSTGenerator:
    """``generator.kind: mst`` (epsilon 1000 as in the paper; ``generator.epochs`` unused)."""
    return MSTGenerator(
        schema=getattr(context.task, "schema", None),
        filter=config.generator.filter,
        filter_confidence=config.generator.filter_confidence,
    )
