"""What a site observed of its own real DP-SGD steps, over every round (numpy only).

The site's hooks on its Opacus optimizer (:mod:`clients.dp_observer`) read, at every step,
the clean clipped sum ``S`` right after the real clipping, the gradient ``u`` the inner
optimizer consumes (after the real noise and scaling), the rows that were clipped, the
records each batch of the real loader loaded, and the accountant's recorded noise multiplier
and sampling rate. They keep, per step, a few numbers of ``S`` and ``u`` (inner products
and moments of the noise residual) and the residual on a fixed random subset of the model's
coordinates; per loader draw its size; per record its inclusion count. Nothing here leaves
the site: :func:`audit.conformance.checks.conformance_audit` reads it into pass/fail checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "NO_ACCOUNTANT_STEP",
    "NO_CLEAN_SUM",
    "NO_NOISE_CALL",
    "STEP_FIELDS",
    "ConformanceEvidence",
]

NO_CLEAN_SUM = 1
"""Step flag: the inner optimizer consumed a gradient that no real clipping call produced."""
NO_NOISE_CALL = 2
"""Step flag: the step's gradient was consumed without a call of the optimizer's noise."""
NO_ACCOUNTANT_STEP = 4
"""Step flag: the accountant recorded nothing for the step."""

STEP_FIELDS = (
    "round",
    "batch",
    "flags",
    "sigma",
    "rate",
    "uu",
    "us",
    "ss",
    "rss",
    "r4",
    "lag1",
    "clip_err",
    "sample_err",
    "sample_ratio",
)
"""Per consumed step: the round (0-based over the site's rounds); the rows clipped; the
flags above; the accountant's recorded noise multiplier and sampling rate; ``|u|^2``,
``<u, S>``, ``|S|^2``; the residual ``r = u - (<u, S> / |S|^2) S`` (the noise, in the
consumed gradient's units) through ``|r|^2``, ``sum r^4`` and its correlation with the
previous step's residual of the round (``lag1``, NaN at a round's first step); the relative
distance of ``S`` from the per-sample gradients clipped at the configured ``C``
(``clip_err``) and of the per-sample gradients' sum from the batch gradient
(``sample_err``), and that sum's size along the batch gradient (``sample_ratio``, 1 when
they agree). Unobserved values are NaN."""

_PREFIX = "conformance_"


@dataclass
class ConformanceEvidence:
    """A site's observations of its real DP-SGD steps (site-local, kept across rounds)."""

    clip_norm: float
    """The configured clipping norm ``C`` (``dp.max_grad_norm``): the reference value."""
    records: int
    """N: the records the site's loader samples from."""
    subset_index: np.ndarray
    """The model coordinates whose noise every step keeps (fixed for the site's run)."""
    coordinates: int = 0
    """d: the model's trainable coordinates (0 before the first step)."""
    steps: dict[str, np.ndarray] = field(default_factory=dict)
    """One array per :data:`STEP_FIELDS` entry, one value per consumed step."""
    subset: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    """Per consumed step, the noise residual on :attr:`subset_index` (NaN: unobserved)."""
    draw_round: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    draw_size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per draw of the real loader (every batch it loaded, empty ones included): its round
    and its size."""
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per record, the draws that loaded it."""
    accounted_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Per round, the steps the accountant added to the site's history."""
    clip_ratio: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Per round, the clipping norm the real clipping used over ``C`` where the clean sum
    differed from the reference (NaN: it did not)."""

    def __post_init__(self) -> None:
        for name in STEP_FIELDS:
            self.steps.setdefault(name, np.zeros(0))
        if self.counts.size == 0:
            self.counts = np.zeros(self.records, np.int64)
        if self.subset.shape[1] != self.subset_index.size:
            self.subset = np.zeros((0, self.subset_index.size), np.float32)

    @property
    def rounds(self) -> int:
        return int(self.accounted_steps.size)

    @property
    def n_steps(self) -> int:
        return int(self.steps["round"].size)

    def add_round(
        self,
        steps: dict[str, np.ndarray],
        subset: np.ndarray,
        *,
        coordinates: int,
        draws: list[list[int]],
        accounted_steps: int,
        clip_ratio: float,
    ) -> None:
        """Append one round: its steps (``round`` is filled in here), its loader draws
        (each the record indices it loaded) and the accountant's steps for it."""
        if self.coordinates and coordinates != self.coordinates:
            raise ValueError(
                f"the model has {coordinates} coordinates, earlier rounds had {self.coordinates}"
            )
        self.coordinates = coordinates
        n = len(steps["flags"])
        steps = {**steps, "round": np.full(n, self.rounds, dtype=float)}
        for name in STEP_FIELDS:
            self.steps[name] = np.concatenate([self.steps[name], np.asarray(steps[name], float)])
        self.subset = np.concatenate([self.subset, np.asarray(subset, np.float32)])
        self.draw_round = np.concatenate(
            [self.draw_round, np.full(len(draws), self.rounds, np.int64)]
        )
        self.draw_size = np.concatenate(
            [self.draw_size, np.array([len(d) for d in draws], np.int64)]
        )
        for drawn in draws:
            np.add.at(self.counts, np.asarray(drawn, np.int64), 1)
        self.accounted_steps = np.append(self.accounted_steps, int(accounted_steps))
        self.clip_ratio = np.append(self.clip_ratio, float(clip_ratio))

    def history(self) -> list[tuple[float, float, int]]:
        """The accountant history the observed steps make, at the noise multiplier and
        sampling rate the accountant recorded for each (in Opacus's ``(sigma, q, steps)``
        form; steps it recorded nothing for are left out)."""
        out: list[tuple[float, float, int]] = []
        sigma, rate = self.steps["sigma"], self.steps["rate"]
        for s, q in zip(sigma, rate, strict=True):
            if not (np.isfinite(s) and np.isfinite(q)):
                continue
            if out and out[-1][:2] == (float(s), float(q)):
                out[-1] = (float(s), float(q), out[-1][2] + 1)
            else:
                out.append((float(s), float(q), 1))
        return out

    def to_arrays(self) -> dict[str, Any]:
        """Plain arrays for an ``.npz`` beside other state (keys prefixed)."""
        arrays: dict[str, Any] = {
            "settings": np.array([self.clip_norm, self.records, self.coordinates], float),
            "subset_index": self.subset_index,
            "subset": self.subset,
            "draw_round": self.draw_round,
            "draw_size": self.draw_size,
            "counts": self.counts,
            "accounted_steps": self.accounted_steps,
            "clip_ratio": self.clip_ratio,
            **{f"step_{name}": self.steps[name] for name in STEP_FIELDS},
        }
        return {_PREFIX + k: v for k, v in arrays.items()}

    @classmethod
    def from_arrays(cls, data: Any) -> ConformanceEvidence:
        """Read what :meth:`to_arrays` wrote (``data``: a mapping, e.g. an open ``.npz``)."""

        def get(key: str) -> np.ndarray:
            return np.asarray(data[_PREFIX + key])

        clip_norm, records, coordinates = (float(v) for v in get("settings"))
        return cls(
            clip_norm=clip_norm,
            records=int(records),
            subset_index=get("subset_index").astype(np.int64),
            coordinates=int(coordinates),
            steps={name: get(f"step_{name}").astype(float) for name in STEP_FIELDS},
            subset=get("subset").astype(np.float32),
            draw_round=get("draw_round").astype(np.int64),
            draw_size=get("draw_size").astype(np.int64),
            counts=get("counts").astype(np.int64),
            accounted_steps=get(
                "accounted_steps" if _PREFIX + "accounted_steps" in data else "ledger_steps"
            ).astype(np.int64),  # ledger_steps: state files written before the rename
            clip_ratio=get("clip_ratio").astype(float),
        )

    @staticmethod
    def stored_in(data: Any) -> bool:
        """Whether ``data`` (an open ``.npz``) holds evidence."""
        return _PREFIX + "settings" in data
