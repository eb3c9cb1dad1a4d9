"""Attribute inference: its settings and its result (summary numbers: what leaves a site).

The threat: an attacker knows every field of a record but one sensitive field, and the
record's label, and may query the final model. Does the model reveal the sensitive field
better for the records it trained on (members) than for people it never saw (real held-out
records)? The measurement and its game are in :mod:`audit.tabular.attribute_game`; the
attack in :mod:`audit.tabular.attribute_attack`; docs/attribute_inference.md explains both.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from panoramia_fl.audit.result import Interval

ATTRIBUTE_INFERENCE_KEY = "audit.attribute_inference"
"""The config key of the setting (errors name it)."""

ATTRIBUTE_INFERENCE_MEANING = (
    "The attacker knows every field of a record except the sensitive one, and its label, "
    "and queries the model: for each possible value it asks how likely the model finds the "
    "record's label, and weighs that by what public records say of the value. Its advantage "
    "is its accuracy on the model's members minus its accuracy on real held-out records "
    "(pairs of the same label); a baseline predicts the field from public records without "
    "the model. The eps lower bound comes from guessing membership by how much more the "
    "model-based guess believes the true value than the baseline does: real non-members, "
    "so c = 0 and it bounds the model's DP epsilon from below."
)


class AttributeInferenceConfig(BaseModel):
    """``audit.attribute_inference``: which field is sensitive, and how the game is drawn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str = Field(
        ...,
        description="the sensitive field: a column of the dataset's schema (for RAND HIE e.g. "
        "health, disea, mhi, income); the label is not a field",
    )
    repeats: int = Field(
        20,
        ge=1,
        description="games drawn (label pairing and coins redrawn; the attack runs once)",
    )
    bins: int = Field(
        8, ge=2, description="a numeric field with many values is guessed to one of this many bins"
    )
    reference_fraction: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="without public records: the share of the site's held-out records that "
        "trains the baseline (the rest play the game)",
    )


@dataclass(frozen=True)
class AttributeInferenceResult:
    """A site's attribute-inference audit of the final model (summary numbers only)."""

    field: str
    """The sensitive field."""
    levels: int
    """The values it is guessed among (a one-hot field's levels, or a numeric field's bins)."""
    n_members: int
    """Members the attack was run on."""
    n_nonmembers: int
    """Real held-out records the attack was run on (those not training the baseline)."""
    n_reference: int
    """Records the baseline and the attack's prior trained on (public, or held-out ones)."""
    reference: str
    """``public`` or ``holdout``: where those records came from."""
    pairs: int
    """Game slots per repeat: a member and a held-out record of the same label each."""
    beta: float
    """The level the eps lower bound holds at (each side at beta/2)."""
    eps_lb: Interval
    """Two-sided eps lower bound (the larger side's, 0 when neither rejects), over repeats."""
    eps_lb_member: Interval
    eps_lb_nonmember: Interval
    ceiling: float
    """The bound a perfect scorer reaches on the member side of one game."""
    accuracy_members: Interval
    """The model-based guess's accuracy on the paired members."""
    accuracy_nonmembers: Interval
    """Its accuracy on their paired held-out records."""
    advantage: Interval
    """``accuracy_members - accuracy_nonmembers``."""
    baseline_accuracy_members: Interval
    """The baseline's (no model) accuracy on the same members."""
    baseline_accuracy_nonmembers: Interval
    baseline_advantage: Interval
    """The baseline's accuracy gap: near 0 when members and held-out records are alike."""
    majority_share: float
    """The most frequent value's share among the reference records (guessing it always)."""
    seconds: float
