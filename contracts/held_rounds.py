"""What a dishonest server (``fl.adversary``, simulations only) hands a site it attacked,
with that site's audit query, so that the site can score it against its own records.

The server chose the weights it sent the site in some rounds (:mod:`server.adversary`) and
keeps what it then held of the site's update. With the audit query it sends, per attacked
round: the site's local model as the server holds it (:func:`held_model_name`: what the
site received plus the update the server read; under secure aggregation the round's sum
over the site's weight), the records its attack rebuilt and the same attack's rebuild of an
update from public records (:func:`rebuilt_name`, under :data:`REBUILT` and
:data:`BASELINE`), and one :class:`HeldRound` per round (:data:`HELD_ROUNDS`, JSON). The
site replies with summary numbers only, one :class:`DishonestServerResult` per round
(:mod:`clients.dishonest_server`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from panoramia_fl.contracts.json_values import from_dict, json_safe

AttackName = Literal["imprint", "trap", "inconsistent"]
"""``fl.adversary[].attack``."""
CraftName = Literal["imprint", "trap"]
"""The crafted models the server decodes records from (``inconsistent`` sends one of them,
or the real model, to its target)."""
ServerHeld = Literal["update", "sum"]
"""What the server held of the site's round: its update, or (secure aggregation) the sum."""

HELD_ROUNDS = "adversary"
"""The audit query's record (a ``ConfigRecord``) listing the attacked rounds (``json``)."""
REBUILT = "rebuilt"
"""The records the server's attack rebuilt from what it held (an array of rows)."""
BASELINE = "baseline"
"""The same attack's rebuild of an update computed on public records."""
HELD_ROUNDS_KEY = "json"


def held_model_name(server_round: int) -> str:
    """The record name of the site's local model of a round as the server holds it."""
    return f"adversary.held.round-{server_round}"


def rebuilt_name(server_round: int) -> str:
    """The record name of a round's rebuilt records and their baseline."""
    return f"adversary.rebuilt.round-{server_round}"


@dataclass(frozen=True)
class HeldRound:
    """One round in which the server attacked the site, as the server tells the site."""

    round: int
    attack: AttackName
    decoded: CraftName | None
    """The crafted model whose records the server decoded; None: the site got the real
    model (``inconsistent`` alone), and the server's attacks are the audits of its update."""
    server_held: ServerHeld

    @property
    def inconsistent(self) -> bool:
        return self.attack == "inconsistent"


def held_rounds_json(rounds: list[HeldRound]) -> str:
    return json.dumps(json_safe(rounds))


def read_held_rounds(text: str) -> list[HeldRound]:
    """The rounds of :data:`HELD_ROUNDS` (a ``ValueError`` naming the key on a bad one)."""
    return [
        from_dict(HeldRound, item, f"{HELD_ROUNDS}[{i}]") for i, item in enumerate(json.loads(text))
    ]


CHECKS_NOT_RUN = "checks not run"
""":attr:`DishonestServerResult.site_checks` when the site checked nothing of the model it
received before training."""


@dataclass(frozen=True)
class DishonestServerResult:
    """One round in which the run's dishonest server (``fl.adversary``) attacked the site."""

    round: int
    attack: AttackName
    decoded: CraftName | None
    """The crafted model the server decoded records from; None: the site received the real
    model (``inconsistent`` alone: the server's attacks are then the audits of the update it
    held, ``updates`` and ``inversion``)."""
    server_held: ServerHeld
    """``update``: the site's own update; ``sum``: the round's sum (secure aggregation),
    which ``inconsistent`` makes the site's update."""
    measure: str
    """``fields`` (tabular: every field within the tolerance) or ``ssim`` (images)."""
    n_records: int
    """The site's records the round's update came from (the batch under FedSGD)."""
    n_returned: int
    """Rows the server's attack returned."""
    records_rebuilt: int | None
    """Of the ``n_records``, those some returned row rebuilds; None when nothing was decoded."""
    share_rebuilt: float | None
    baseline_share_rebuilt: float | None
    """The same attack's share on an update from public records, scored against the same
    records of the site (chance)."""
    share_rebuilt_loose: float | None = None
    """The looser reading (images: SSIM at least 0.6; rows: every one-hot field exact,
    numeric ones free); None when nothing was decoded."""
    site_checks: str = CHECKS_NOT_RUN
    """What the site's checks of the model it received, before training, said of this
    round (:data:`CHECKS_NOT_RUN` without them)."""

    @property
    def gap(self) -> float | None:
        """The share rebuilt above its baseline."""
        if self.share_rebuilt is None or self.baseline_share_rebuilt is None:
            return None
        return self.share_rebuilt - self.baseline_share_rebuilt
