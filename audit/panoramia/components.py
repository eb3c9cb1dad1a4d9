"""Modality-specific parts of the audit behind small interfaces, and their registries.

A modality contributes generators (registered by name in :data:`GENERATORS`) and one
membership-classifier design (registered by modality in :data:`CLASSIFIERS`); a lookup
imports only the module that registers the name, so an image audit never imports
transformers. The pipeline in :mod:`audit.panoramia.pipeline` only talks to these protocols, so
tabular and text plug in without touching it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.task import AuditTask
from panoramia_fl.contracts.errors import UnknownNameError
from panoramia_fl.contracts.registry import Registry


@dataclass(frozen=True)
class Records:
    """Records and, where the task has them, their labels.

    ``groups`` (optional) names the unit each record belongs to, e.g. the document of a text
    chunk or the person of a person-year: the audit keeps a group on one side of every cut.
    """

    x: np.ndarray
    y: np.ndarray | None
    groups: np.ndarray | None = None

    def __len__(self) -> int:
        return int(len(self.x))

    def take(self, idx: np.ndarray) -> Records:
        return Records(
            self.x[idx],
            None if self.y is None else self.y[idx],
            None if self.groups is None else self.groups[idx],
        )

    @staticmethod
    def concat(parts: Sequence[Records]) -> Records:
        """The parts one after another; labels when every part has them. Groups are left
        out: they matter only to the cuts, made before records are pooled."""
        ys = [p.y for p in parts if p.y is not None]
        return Records(
            np.concatenate([p.x for p in parts]),
            np.concatenate(ys) if len(ys) == len(parts) else None,
        )


@dataclass(frozen=True)
class AuditContext:
    """What a component factory may use besides the config."""

    task: AuditTask
    device: torch.device
    public_pool: Records | None = None
    """Public records of the same kind never used in training (reference-pool G)."""


@dataclass(frozen=True)
class ClassifierData:
    """Input of the baseline or the MIA for a set of records.

    ``features`` are the loss features of h (baseline) or of f (MIA), see
    :meth:`audit.panoramia.task.AuditTask.loss_features`; ``reference`` optionally holds h's
    features for the MIA's difficulty calibration. ``calibration`` optionally holds the
    statistics of the same view calibrated by reference models
    (:mod:`audit.panoramia.calibration`), which b and the MIA both get. ``membership`` is 1 for
    members, 0 otherwise.
    """

    records: Records
    features: np.ndarray
    membership: np.ndarray
    reference: np.ndarray | None = None
    calibration: np.ndarray | None = None

    def with_calibration(self, matrix: np.ndarray) -> np.ndarray:
        """``matrix`` with the calibration columns appended (unchanged without them)."""
        if self.calibration is None:
            return matrix
        return np.column_stack([matrix, np.asarray(self.calibration, dtype=matrix.dtype)])


SelectionScore = Callable[[np.ndarray, np.ndarray], float]
"""(scores, membership) -> value to maximise on validation (the lower bound there)."""


class Generator(Protocol):
    """Source of non-member records: trained on D_G, or a public reference pool."""

    kind: str
    """Reported name, e.g. ``"cgan"`` or ``"reference_pool"``."""

    @property
    def remaining(self) -> int | None:
        """Records a finite source can still hand out; ``None`` for a generator."""
        ...

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        """Fit on D_G only; return quality figures (e.g. training loss, labeler accuracy)."""
        ...

    def sample(self, n: int, *, seed: int) -> Records:
        """Draw ``n`` labeled records (labels from class-conditioning or a labeler)."""
        ...

    def sampling_quality(self) -> dict[str, float]:
        """Figures about the draws so far (filter acceptance rate, label shortfall, ...)."""
        ...


class TrainedGenerator:
    """What every trained generator shares: it samples without end and, unless it filters its
    draws, has nothing to report about them."""

    @property
    def remaining(self) -> int | None:
        return None

    def sampling_quality(self) -> dict[str, float]:
        return {}


class MembershipClassifier(Protocol):
    """Baseline b or MIA: one design, the two differ only in h vs f features."""

    def fit(
        self, train: ClassifierData, val: ClassifierData, *, select_by: SelectionScore, seed: int
    ) -> dict[str, object]:
        """Train, choosing hyper-parameters by ``select_by`` on ``val``; return the choice."""
        ...

    def score(self, data: ClassifierData) -> np.ndarray:
        """Membership score per record, higher = more likely a member."""
        ...


GeneratorFactory = Callable[[AuditConfig, AuditContext], Generator]
ClassifierFactory = Callable[[AuditConfig, AuditContext], MembershipClassifier]

GENERATORS: Registry[GeneratorFactory] = Registry(
    "generator",
    config_key="audit.generator.kind",
    builtins={
        "reference_pool": "panoramia_fl.audit.panoramia.reference_pool",
        "cgan": "panoramia_fl.audit.image.generators",
        "vae": "panoramia_fl.audit.image.generators",
        "mst": "panoramia_fl.audit.tabular.generators",
        "gpt2": "panoramia_fl.audit.text.generator",
    },
)
"""Generator factories by ``generator.kind``; ``modality=`` at registration restricts one to
the records of that modality (none: any)."""

CLASSIFIERS: Registry[ClassifierFactory] = Registry(
    "membership classifier",
    config_key="task.modality",
    builtins={m: f"panoramia_fl.audit.{m}.classifier" for m in ("image", "tabular", "text")},
)
"""The membership-classifier design of each modality."""


def make_generator(config: AuditConfig, context: AuditContext) -> Generator:
    kind, modality = config.generator.kind, context.task.modality
    made_for = GENERATORS.meta(kind).get("modality")
    if made_for not in (None, modality):
        raise UnknownNameError(
            f"audit.generator.kind: generator {kind!r} makes {made_for} records, not {modality}"
        )
    return GENERATORS.get(kind)(config, context)


def make_classifier(config: AuditConfig, context: AuditContext) -> MembershipClassifier:
    return CLASSIFIERS.get(context.task.modality)(config, context)
