"""``fl.adversary``: a server that does not play fair, in simulations (off by default; a
deployment refuses it). Each entry is one named attack at chosen rounds on chosen target
sites (docs/threat_models.md); :mod:`server.adversary` carries them out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from panoramia_fl.audit.config import StrictModel
from panoramia_fl.contracts.held_rounds import AttackName, CraftName

ADVERSARY_KEY = "fl.adversary"


class AdversaryAttack(StrictModel):
    """One attack: the model the server sends its target sites in its rounds."""

    attack: AttackName = Field(
        description="imprint: first fully connected layer turned into bins of one "
        "measurement of the input; trap: random rows scaled to fire for few records; "
        "inconsistent: the target gets `craft` (or the real model), every other site a model "
        "whose update is zero, so that a secure sum is the target's update"
    )
    rounds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    sites: list[int] = Field(default_factory=lambda: [0], min_length=1, description="targets")
    craft: CraftName | Literal["none"] | None = Field(
        None,
        description="inconsistent: the target's model, crafted (imprint, trap) or the real "
        "one (none); None: imprint",
    )
    bins: int | None = Field(None, ge=2, description="imprint: bins (None: the attack's own)")
    units: int | None = Field(None, ge=1, description="trap: trap units (None: the attack's own)")

    @model_validator(mode="after")
    def _options_of_its_attack(self) -> AdversaryAttack:
        if self.attack != "inconsistent" and self.craft is not None:
            raise ValueError(
                f"craft: only inconsistent sends a crafted model of another kind ({self.attack})"
            )
        if self.bins is not None and self.crafted != "imprint":
            raise ValueError("bins: an option of imprint")
        if self.units is not None and self.crafted != "trap":
            raise ValueError("units: an option of trap")
        return self

    @property
    def crafted(self) -> CraftName | None:
        """The crafted model the targets get (None: the real one)."""
        if self.attack == "inconsistent":
            return None if self.craft == "none" else self.craft or "imprint"
        return self.attack

    @property
    def options(self) -> dict[str, Any]:
        """The crafting function's keyword options that are set."""
        chosen = {"bins": self.bins, "units": self.units}
        return {k: v for k, v in chosen.items() if v is not None}


def check_adversary(
    attacks: list[AdversaryAttack], *, num_rounds: int, num_sites: int, audit_enabled: bool
) -> None:
    """Rounds and sites inside the run, one attack per round and site, and ``inconsistent``
    alone in its rounds with one target (a ``ValueError`` naming the key)."""
    if not attacks:
        return
    if not audit_enabled:
        raise ValueError(
            f"{ADVERSARY_KEY}: the sites score what it rebuilt in the audit phase (audit.enabled)"
        )
    taken: dict[tuple[int, int], int] = {}
    for i, a in enumerate(attacks):
        key = f"{ADVERSARY_KEY}.{i}"
        late = sorted(r for r in set(a.rounds) if not 1 <= r <= num_rounds)
        if late:
            raise ValueError(f"{key}.rounds: {late} outside 1..fl.rounds ({num_rounds})")
        absent = sorted(s for s in set(a.sites) if not 0 <= s < num_sites)
        if absent:
            raise ValueError(
                f"{key}.sites: {absent} outside 0..partition.num_sites - 1 ({num_sites - 1})"
            )
        if a.attack == "inconsistent" and (len(set(a.sites)) != 1 or num_sites < 2):
            raise ValueError(
                f"{key}.sites: inconsistent has one target and sends every other site (at "
                f"least one) a model whose update is zero; got {a.sites} of {num_sites} sites"
            )
        # inconsistent sends every site of its rounds a model: it takes them all.
        hit = range(num_sites) if a.attack == "inconsistent" else sorted(set(a.sites))
        for r in sorted(set(a.rounds)):
            for s in hit:
                if (r, s) in taken:
                    raise ValueError(
                        f"{key}: round {r}, site {s} is attacked by {ADVERSARY_KEY}"
                        f".{taken[r, s]} already (one model per site and round)"
                    )
                taken[r, s] = i
