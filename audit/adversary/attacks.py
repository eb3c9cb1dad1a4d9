"""The attacks by name (``ATTACKS``): each crafts the weights a dishonest server sends.

An attack is called ``craft(model, *, public, seed, **options)`` and returns a
:class:`~audit.adversary.crafted.CraftedModel`; :func:`audit.adversary.rebuild` reads any of
them. The dead model of the inconsistency attack (:func:`audit.adversary.craft_dead`)
rebuilds nothing and is not listed: it is what the other sites receive.
"""

from __future__ import annotations

from collections.abc import Callable

from panoramia_fl.audit.adversary.crafted import CraftedModel
from panoramia_fl.contracts.registry import Registry

__all__ = ["ATTACKS", "Craft"]

Craft = Callable[..., CraftedModel]
"""``craft(model, *, public, seed, **options) -> CraftedModel``."""

ATTACKS: Registry[Craft] = Registry(
    "attack",
    config_key="fl.adversary.attack",
    builtins={
        "imprint": "panoramia_fl.audit.adversary.imprint",
        "trap": "panoramia_fl.audit.adversary.trap",
    },
)
