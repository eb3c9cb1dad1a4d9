"""``audit.inversion``'s settings: what the gradient-inversion audit attacks and with what
budget. Kept apart from :mod:`audit.inversion.attack` so that reading a config does not
import torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

AttackKind = Literal["fedsgd", "fedavg"]
"""One local step of one batch (FedSGD) or a whole local training (FedAvg)."""
MODALITIES = ("image", "tabular")
"""The record kinds the attacks rebuild."""

ITERATIONS = 25
"""Default optimisation steps of one restart (docs/inversion.md: SSIM against steps)."""
TIME_GUARD_S = 1_800.0
"""Default wall-clock guard of one attack: far above what the default's budget takes on one
CPU thread, so that the step budget, not the machine, decides how far an attack gets."""


class InversionConfig(BaseModel):
    """``audit.inversion``: the gradient-inversion audit each site runs on its own updates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: list[int] = Field(
        default_factory=lambda: [1],
        description="the rounds whose update each site attacks (default: the first, where "
        "the model is least trained and attacks do best)",
    )
    sites: list[int] | None = Field(
        None,
        description="the sites that run the attack (default: every site); on a large "
        "consortium a few sites bound what the server could rebuild at a fraction of the cost",
    )
    iterations: int = Field(
        ITERATIONS,
        ge=1,
        description="optimisation steps of one restart: an attack's budget is restarts x "
        "iterations steps, the same on every machine",
    )
    restarts: int = Field(2, ge=1, description="restarts from fresh random dummy records")
    learning_rate: float = Field(
        0.1, gt=0, allow_inf_nan=False, description="Adam's step on the dummy records"
    )
    tv_weight: float = Field(
        1e-2, ge=0, allow_inf_nan=False, description="total-variation prior (images)"
    )
    max_records: int = Field(
        64, ge=1, description="attacked records scored (a random sample when more were used)"
    )
    max_dummies: int = Field(
        64,
        ge=1,
        description="the attack rebuilds at most this many records; an update of more "
        "stands in for them with its batches shrunk in proportion (its cost budget)",
    )
    max_steps: int = Field(
        8,
        ge=1,
        description="the attack simulates at most this many local steps; more are merged, "
        "consecutive ones into one (batches joined, step size multiplied)",
    )
    time_limit_s: float = Field(
        TIME_GUARD_S,
        gt=0,
        description="a guard, not the budget: wall-clock limit of one attack (the baseline "
        "gets the same); the result records whether it stopped an attack short of its steps",
    )
    ssim_threshold: float = Field(
        0.6, gt=0, le=1, description="an image counts as rebuilt at this SSIM or above"
    )
    field_threshold: float = Field(
        0.8, gt=0, le=1, description="a row counts as rebuilt with this share of fields right"
    )
    numeric_tolerance: float = Field(
        0.25,
        gt=0,
        allow_inf_nan=False,
        description="a numeric field is right within this (standardised units)",
    )

    @field_validator("rounds")
    @classmethod
    def _some_rounds(cls, rounds: list[int]) -> list[int]:
        if not rounds or any(r < 1 for r in rounds):
            raise ValueError(f"a non-empty list of rounds >= 1, not {rounds}")
        return sorted(set(rounds))

    @field_validator("sites")
    @classmethod
    def _some_sites(cls, sites: list[int] | None) -> list[int] | None:
        if sites is not None and (not sites or any(s < 0 for s in sites)):
            raise ValueError(f"a non-empty list of site ids >= 0, not {sites}")
        return None if sites is None else sorted(set(sites))

    def attacks(self, site_id: int) -> bool:
        """Whether site ``site_id`` runs the attack."""
        return self.sites is None or site_id in self.sites
