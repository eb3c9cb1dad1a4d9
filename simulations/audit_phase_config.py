"""The ``audit`` section of an experiment's config: which audits each site runs and on
which rounds (validated alone; :mod:`simulations.experiment_config` checks it against the rest)."""

from __future__ import annotations

import types
from typing import Any

from pydantic import Field, field_validator, model_validator

from panoramia_fl.audit.canaries.gradient_canaries import MIN_GRADIENT_CANARIES
from panoramia_fl.audit.config import AuditConfig, AuditSeeding, StrictModel
from panoramia_fl.audit.inversion.inversion_config import InversionConfig
from panoramia_fl.audit.tabular.attribute_result import AttributeInferenceConfig

MIN_INPUT_CANARIES = 20
MIN_CANARY_CLIENTS = 10


def chosen_rounds(rounds: list[int] | None, every: int | None, num_rounds: int) -> set[int]:
    """The rounds ``rounds`` lists, or every ``every``-th one (k, 2k, ...); none of either."""
    if rounds is not None:
        return set(rounds)
    return set() if every is None else set(range(every, num_rounds + 1, every))


def check_round_choice(
    prefix: str, rounds: list[int] | None, every: int | None, num_rounds: int
) -> None:
    """``<prefix>rounds`` or ``<prefix>every``, each inside 1..fl.rounds (a ValueError
    naming the key)."""
    if rounds is not None and every is not None:
        raise ValueError(f"{prefix}rounds and {prefix}every: give one of them, not both")
    if rounds is not None:
        if not rounds:
            raise ValueError(f"{prefix}rounds: an empty list audits nothing; leave it unset")
        outside = sorted(r for r in set(rounds) if not 1 <= r <= num_rounds)
        if outside:
            raise ValueError(f"{prefix}rounds: {outside} outside 1..fl.rounds ({num_rounds})")
    if every is not None and every > num_rounds:
        raise ValueError(f"{prefix}every: {every} is more than fl.rounds ({num_rounds})")


class UpdateAuditConfig(StrictModel):
    """``audit.updates``: each site also audits its own local model of these rounds (the
    weights it sent the server), with the same games as the global models."""

    rounds: list[int] | None = Field(None, description="these rounds (1..fl.rounds)")
    every: int | None = Field(None, ge=1, description="every k-th round (k, 2k, ...)")

    @model_validator(mode="after")
    def _one_of(self) -> UpdateAuditConfig:
        if self.rounds is None and self.every is None:
            raise ValueError("give rounds: [...] or every: k")
        return self


RENAMED_AUDIT_KEYS = types.MappingProxyType(
    {"canaries": "input_canaries", "canary_twin": "canary_client_twin"}
)
"""``audit`` keys renamed to say which canaries they mean: older configs and older runs'
``config.yaml`` (which resume and re-render read) give them under the old name."""


def audit_value(audit: dict[str, Any], key: str) -> Any:
    """``audit[key]`` of a config read as plain data, or under the key's older name."""
    older = [old for old, new in RENAMED_AUDIT_KEYS.items() if new == key]
    return audit.get(key, audit.get(older[0]) if older else None)


class AuditPhaseConfig(StrictModel):
    enabled: bool = True
    seeding: AuditSeeding = Field(
        "sequence",
        description="how each site's audit is seeded (a run's config.yaml "
        "without it: legacy, as it was written)",
    )
    use_holdout: bool = Field(True, description="RM;RN and O(1) with the site's holdout")
    reference_pool: bool = Field(
        False,
        description="give sites the public split as a "
        "reference pool (needed by generator.kind=reference_pool)",
    )
    reference_records: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="share of the public split kept for the calibrated MIA's reference "
        "models (trained once per run, shared by the sites) and never put in a site's "
        "reference pool; used when the dataset has a public split and "
        "settings.calibration.reference_models > 0",
    )
    exposed_records: int = Field(
        0,
        ge=0,
        description="K > 0: each site writes the indices and scores of its K members with the "
        "highest calibrated MIA score into its own state directory (never into its reply)",
    )
    input_canaries: int = Field(
        0,
        ge=0,
        description="simulation only: N input canaries per site, records each trained on by an "
        "independent fair coin and audited one-run (Steinke et al. 2023) after training; never "
        "part of PANORAMIA's members, RM;RN or O(1). The trained model is not the plain one.",
    )
    canary_clients: int = Field(
        0,
        ge=0,
        description="simulation only: K > 0 draws 2K random unit directions over the model's "
        "trainable parameters and inserts each by a fair coin as a virtual client whose update "
        "is that direction (times the clipping norm, or the median site update norm without "
        "DP); the cosines of the final model delta give a client-level epsilon estimate and a "
        "lower bound (client_canaries.json).",
    )
    gradient_canaries: int = Field(
        0,
        ge=0,
        description="record-level DP only: K > 0 gives each site 2K gradient canaries, each "
        "inserted by a fair coin into its DP-SGD as a phantom record (its own coordinate, "
        "never touching the model); the site audits its own DP-SGD white-box from every noisy "
        "step (mechanism level) and from its round updates (server level): one-run lower "
        "bounds and an estimate of eps beside the accountant's (docs/white_box_audit.md)",
    )
    inversion: InversionConfig | None = Field(
        None,
        description="each site attacks its own update of these rounds as a curious server "
        "would (gradient inversion: FedSGD or FedAvg, images or tabular rows) and compares "
        "the reconstruction with its records; only summary numbers leave it "
        "(docs/inversion.md). Off (null) by default; {} takes the defaults (round 1)",
    )
    attribute_inference: AttributeInferenceConfig | None = Field(
        None,
        description="each site measures whether the final model reveals this sensitive field "
        "({field: name}, a column of the tabular schema) better for its members than for its "
        "held-out records, beside a baseline without the model (docs/attribute_inference.md). "
        "Off (null) by default",
    )
    canary_client_twin: bool = Field(
        True,
        description="with canary_clients: train the run again without them (no-canary-twin/) "
        "for the accuracy they cost; false skips that second training.",
    )
    rounds: list[int] | None = Field(
        None,
        description="also audit these rounds' global checkpoints (1..fl.rounds), each with "
        "the same settings; the final round is always audited (the main audit)",
    )
    every: int | None = Field(
        None, ge=1, description="also audit every k-th round's checkpoint (k, 2k, ...)"
    )
    updates: UpdateAuditConfig | None = Field(
        None,
        description="each site also audits its own local model of these rounds, the update "
        "it sent ({rounds: [...]} or {every: k}), beside that round's global model, which is "
        "audited too (docs/over_rounds.md)",
    )
    settings: AuditConfig = Field(default_factory=AuditConfig)

    @field_validator("canary_clients")
    @classmethod
    def _enough_canary_clients(cls, n: int) -> int:
        # A Gaussian fit needs a few cosines on each side of the coins.
        if 0 < n < MIN_CANARY_CLIENTS:
            raise ValueError(f"0 (off) or at least {MIN_CANARY_CLIENTS}, not {n}")
        return n

    def audited_rounds(self, num_rounds: int) -> tuple[int, ...]:
        """The rounds whose global model each site audits (the final one included): those
        of ``rounds`` / ``every`` and of ``updates``; () when only the final model is."""
        asked = chosen_rounds(self.rounds, self.every, num_rounds) | set(
            self.update_rounds(num_rounds)
        )
        return tuple(sorted(asked | {num_rounds})) if asked else ()

    def update_rounds(self, num_rounds: int) -> tuple[int, ...]:
        """The rounds whose local model each site keeps and audits (``updates``)."""
        updates = self.updates
        if updates is None:
            return ()
        return tuple(sorted(chosen_rounds(updates.rounds, updates.every, num_rounds)))

    @field_validator("gradient_canaries")
    @classmethod
    def _enough_gradient_canaries(cls, n: int) -> int:
        if 0 < n < MIN_GRADIENT_CANARIES:
            raise ValueError(f"0 (off) or at least {MIN_GRADIENT_CANARIES}, not {n}")
        return n

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for old, new in RENAMED_AUDIT_KEYS.items():
            if old in data and new in data:
                raise ValueError(f"{old} is the older name of {new}: give {new} only")
        return {RENAMED_AUDIT_KEYS.get(key, key): value for key, value in data.items()}

    @field_validator("input_canaries")
    @classmethod
    def _enough_input_canaries(cls, n: int) -> int:
        # Fewer coins than this give a one-run audit no power (and may all land one way).
        if 0 < n < MIN_INPUT_CANARIES:
            raise ValueError(f"0 (off) or at least {MIN_INPUT_CANARIES}, not {n}")
        return n
