"""Modality-specific parts of the audit behind small interfaces, and their registries.

A modality contributes generators (registered by name) and one membership-classifier design
(registered by modality). The pipeline in :mod:`audit.pipeline` only talks to these
protocols, so tabular and text plug in without touching it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from audit.config import AuditConfig
from audit.task import AuditTask


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
    :meth:`audit.task.AuditTask.loss_features`; ``reference`` optionally holds h's features
    for the MIA's difficulty calibration. ``calibration`` optionally holds the statistics of
    the same view calibrated by reference models (:mod:`audit.calibration`), which b and
    the MIA both get. ``membership`` is 1 for members, 0 otherwise.
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

_GENERATORS: dict[str, GeneratorFactory] = {}
_CLASSIFIERS: dict[str, ClassifierFactory] = {}


def register_generator(name: str) -> Callable[[GeneratorFactory], GeneratorFactory]:
    """Register a generator factory under ``name`` (the config's ``generator.kind``)."""

    def deco(factory: GeneratorFactory) -> GeneratorFactory:
        _GENERATORS[name] = factory
        return factory

    return deco


def register_classifier(modality: str) -> Callable[[ClassifierFactory], ClassifierFactory]:
    """Register the membership-classifier design of a modality."""

    def deco(factory: ClassifierFactory) -> ClassifierFactory:
        _CLASSIFIERS[modality] = factory
        return factory

    return deco


def _load_modality(modality: str) -> None:
    """Import ``audit.<modality>`` (and the modality-free generators) so they register.

    Lazy, so that an image audit never imports transformers.
    """
    importlib.import_module("audit.reference_pool")
    importlib.import_module(f"audit.{modality}")


def make_generator(config: AuditConfig, context: AuditContext) -> Generator:
    _load_modality(context.task.modality)
    kind = config.generator.kind
    if kind not in _GENERATORS:
        raise KeyError(
            f"audit.generator.kind: unknown generator {kind!r}; known: {sorted(_GENERATORS)}"
        )
    return _GENERATORS[kind](config, context)


def make_classifier(config: AuditConfig, context: AuditContext) -> MembershipClassifier:
    modality = context.task.modality
    _load_modality(modality)
    if modality not in _CLASSIFIERS:
        raise KeyError(
            f"no membership classifier registered for modality {modality!r}; "
            f"known: {sorted(_CLASSIFIERS)}"
        )
    return _CLASSIFIERS[modality](config, context)


def known_generators() -> list[str]:
    return sorted(_GENERATORS)
