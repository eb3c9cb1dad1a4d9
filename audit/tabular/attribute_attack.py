"""The attribute-inference attack on encoded tabular records, and its no-model baseline.

The sensitive field is one attribute of the encoding (:mod:`contracts.tabular_schema`): a
one-hot field is guessed among its levels, a numeric one among the levels or bins
:class:`~audit.tabular.attributes.Discretizer` gives it on the reference records (each bin
queried at the median of the reference values in it).

Both guesses are trained on reference records only (public, or held-out records that never
play the game), so neither depends on who is a member:

- the baseline predicts the field from the other fields and the label (a multinomial
  logistic regression): what the population reveals, without the model;
- the model-based guess (Fredrikson et al., 2014) weighs each value ``v`` by a prior from the
  other fields alone and by the model's likelihood of the record's label with ``v`` filled
  in, ``P(v | rest, y) ∝ P(v | rest) f(y | rest, v)``. A model that fits its members' labels
  closely makes the true value stand out for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.panoramia.task import AuditTask
from panoramia_fl.audit.tabular.attribute_result import ATTRIBUTE_INFERENCE_KEY
from panoramia_fl.audit.tabular.attributes import Discretizer
from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.tabular_schema import Attribute, resolve_attributes

_FLOOR = 1e-9
"""The smallest probability a guess gives a value (a log of 0 would be -inf)."""


class UnknownFieldError(UserError, ValueError):
    """``audit.attribute_inference.field`` names no field of the records."""


def sensitive_attribute(
    name: str, schema: dict[str, Any] | None, x: np.ndarray, *, modality: str = "tabular"
) -> Attribute:
    """The attribute called ``name`` in the encoding of the records ``x`` (the schema's, else
    the one :func:`~contracts.tabular_schema.infer_attributes` reads from them); an
    :class:`UnknownFieldError` naming the key and listing the fields otherwise (also for
    records that are not rows)."""
    if modality != "tabular":
        raise UnknownFieldError(
            f"{ATTRIBUTE_INFERENCE_KEY}.field: {modality} records have no fields; attribute "
            "inference reads tabular records (set it to null)"
        )
    by_name = {a.name: a for a in resolve_attributes(x, schema)}
    if name not in by_name:
        raise UnknownFieldError(
            f"{ATTRIBUTE_INFERENCE_KEY}.field: {name!r} is not a field of the records; "
            f"fields: {', '.join(by_name)}"
        )
    return by_name[name]


@dataclass(frozen=True)
class SensitiveField:
    """The sensitive attribute, its coding into levels and the value queried for each."""

    attribute: Attribute
    coding: Discretizer
    values: np.ndarray
    """``(K, width)``: the encoded value filled in for level k."""

    @classmethod
    def fit(cls, attribute: Attribute, reference: np.ndarray, *, bins: int) -> SensitiveField:
        coding = Discretizer(bins=bins, max_levels=2 * bins).fit(reference, [attribute])
        k = coding.sizes[0]
        if attribute.kind == "onehot":
            return cls(attribute, coding, np.eye(k, dtype=np.float32))
        codes = coding.encode(reference)[:, 0]
        column = reference[:, attribute.start]
        # A level no reference record takes is queried at the column's median: the prior,
        # trained on those records, gives it no weight, so it never becomes a guess.
        values = np.array(
            [np.median(column[codes == c]) if (codes == c).any() else np.nan for c in range(k)]
        )
        values = np.where(np.isnan(values), np.nanmedian(column), values)
        return cls(attribute, coding, values.astype(np.float32)[:, None])

    @property
    def levels(self) -> int:
        return int(len(self.values))

    def codes(self, x: np.ndarray) -> np.ndarray:
        """Each record's level of the field."""
        return self.coding.encode(x)[:, 0]

    def rest(self, x: np.ndarray) -> np.ndarray:
        """The other fields: what the attacker knows of each record."""
        return np.delete(x, np.arange(self.attribute.start, self.attribute.columns.stop), axis=1)

    def filled(self, x: np.ndarray, level: int) -> np.ndarray:
        """``x`` with the field set to ``level``'s value."""
        out = np.array(x, dtype=np.float32, copy=True)
        out[:, self.attribute.columns] = self.values[level]
        return out


@dataclass(frozen=True)
class Guesses:
    """Each record's true level and the two guesses' log-probabilities of every level."""

    truth: np.ndarray
    attack: np.ndarray
    """``(n, K)`` log P(v | rest, y) of the model-based guess."""
    baseline: np.ndarray
    """``(n, K)`` log P(v | rest, y) of the baseline (no model)."""

    def correct(self, which: np.ndarray) -> np.ndarray:
        """Whether ``which`` (a guess's log-probabilities) names the true level."""
        return which.argmax(axis=1) == self.truth

    @property
    def lift(self) -> np.ndarray:
        """How much more the model-based guess believes the true level than the baseline
        (log ratio): the membership score of the game."""
        rows = np.arange(len(self.truth))
        return self.attack[rows, self.truth] - self.baseline[rows, self.truth]


def _one_hot(y: np.ndarray, num_classes: int) -> np.ndarray:
    return np.eye(num_classes, dtype=np.float32)[y.astype(np.int64)]


def _log_proba(fitted: Any, features: np.ndarray, levels: int) -> np.ndarray:
    """``(n, K)`` log-probabilities of every level (0 for levels the predictor never saw)."""
    p = np.zeros((len(features), levels))
    p[:, fitted.classes_] = fitted.predict_proba(features)
    return np.log(np.maximum(p, _FLOOR))


def _fit(features: np.ndarray, codes: np.ndarray, *, seed: int) -> Any:
    from sklearn.linear_model import LogisticRegression  # only in processes that audit

    # Newton-CG: the one-hot blocks make the problem ill-conditioned; L-BFGS needs some
    # hundred iterations on RAND HIE where Newton needs under ten.
    return LogisticRegression(solver="newton-cg", max_iter=500, random_state=seed).fit(
        features, codes
    )


@dataclass(frozen=True)
class Guessers:
    """The two guesses of one field, trained on reference records (never the game's)."""

    field: SensitiveField
    num_classes: int
    prior: Any
    """P(v | rest): the model-based guess's prior."""
    baseline: Any
    """P(v | rest, y): the baseline."""

    @classmethod
    def fit(
        cls, field: SensitiveField, reference: Records, *, num_classes: int, seed: int
    ) -> Guessers:
        if reference.y is None:
            raise ValueError(f"{ATTRIBUTE_INFERENCE_KEY}: the attack needs labelled records")
        codes, rest = field.codes(reference.x), field.rest(reference.x)
        labelled = np.hstack([rest, _one_hot(reference.y, num_classes)])
        return cls(
            field,
            num_classes,
            prior=_fit(rest, codes, seed=seed),
            baseline=_fit(labelled, codes, seed=seed),
        )

    def guess(
        self, task: AuditTask, model: torch.nn.Module, records: Records, *, device: torch.device
    ) -> Guesses:
        """Both guesses of the field of every record in ``records``."""
        if records.y is None:
            raise ValueError(f"{ATTRIBUTE_INFERENCE_KEY}: the attack needs labelled records")
        field, k = self.field, self.field.levels
        rest = field.rest(records.x)
        # log f(y | rest, v) for every level v: the model queried once per level.
        likelihood = np.stack(
            [
                -task.per_record_loss(model, field.filled(records.x, v), records.y, device=device)
                for v in range(k)
            ],
            axis=1,
        )
        joint = _log_proba(self.prior, rest, k) + likelihood
        attack = joint - np.logaddexp.reduce(joint, axis=1, keepdims=True)
        labelled = np.hstack([rest, _one_hot(records.y, self.num_classes)])
        base = _log_proba(self.baseline, labelled, k)
        return Guesses(truth=field.codes(records.x), attack=attack, baseline=base)
