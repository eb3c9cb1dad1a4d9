"""Things a config selects by name: one small registry for all of them.

Datasets (``data.name``), models (``model.name``), task modalities, audit generators
(``audit.generator.kind``) and membership classifiers, strategies (``fl.strategy``) and
client-level DP clippings (``dp.client.clipping``) each live in a :class:`Registry`::

    MODELS: Registry[ModelBuilder] = Registry(
        "model", config_key="model.name", builtins={"mlp": "ml.models.tabular"}
    )

    @MODELS.register("mlp", modality="tabular")  # in ml/models/tabular.py
    def mlp(**options): ...

    MODELS.get("mlp")  # imports ml.models.tabular first when nobody has yet

``builtins`` maps each built-in name to the module that registers it, so a lookup imports
that one module only (an image run never imports the text modality's transformers) and
:meth:`Registry.names` imports nothing. An unknown name raises
:class:`~contracts.errors.UnknownNameError` naming the config key and the known names.

Imports nothing of ours but the errors, and neither Flower nor torch: the audit library
uses it without them.

A registry may check each value as it is registered (``check``), so a plugin's builder
with the wrong signature is refused when the plugin is imported, naming it, not when a
run first calls it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from panoramia_fl.contracts.errors import NameTakenError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Values of type ``T`` by name, with free-form metadata per name.

    Parameters
    ----------
    kind
        What a name denotes, in messages (``"dataset"``).
    config_key
        The config key that holds such a name, in messages (``"data.name"``).
    builtins
        Built-in name -> the module that registers it (imported on first lookup).
    check
        ``check(name, value)`` raises when ``value`` breaks the registry's contract (e.g. a
        builder's signature); called by :meth:`register`.
    """

    def __init__(
        self,
        kind: str,
        *,
        config_key: str,
        builtins: Mapping[str, str] | None = None,
        check: Callable[[str, T], None] | None = None,
    ) -> None:
        self.kind = kind
        self.config_key = config_key
        self._builtins = dict(builtins or {})
        self._check = check
        self._values: dict[str, T] = {}
        self._meta: dict[str, Mapping[str, Any]] = {}

    def register(self, name: str, **meta: Any) -> Callable[[T], T]:
        """Decorator: register the decorated value under ``name``; a name is taken once, and
        a built-in name only by the module that registers the built-in (a plugin cannot
        replace it, even before that module is imported). Either clash is a
        :class:`~contracts.errors.NameTakenError` naming both."""
        # The module whose body registers (decorators run there): who claims the name.
        registrant = sys._getframe(1).f_globals.get("__name__", "?")
        builtin = self._builtins.get(name)
        if builtin is not None and registrant != builtin:
            raise NameTakenError(
                f"{self.kind} {name!r} is a built-in name (registered by {builtin}); "
                f"{registrant} must register its own under another name"
            )

        def deco(value: T) -> T:
            if name in self._values:
                raise NameTakenError(
                    f"{self.kind} {name!r} is already registered ({self._values[name]!r}); "
                    f"{registrant} must register its own under another name"
                )
            if self._check is not None:
                self._check(name, value)
            self._values[name] = value
            self._meta[name] = MappingProxyType(dict(meta))
            return value

        return deco

    def _load(self, name: str) -> None:
        if name in self._values:
            return
        module = self._builtins.get(name)
        if module is None:
            raise UnknownNameError(
                f"{self.config_key}: unknown {self.kind} {name!r}; known: {self.names()}"
            )
        importlib.import_module(module)
        if name not in self._values:
            raise RuntimeError(f"{module} does not register the built-in {self.kind} {name!r}")

    def get(self, name: str) -> T:
        """The value registered under ``name`` (its built-in module imported first)."""
        self._load(name)
        return self._values[name]

    def meta(self, name: str) -> Mapping[str, Any]:
        """The keywords ``name`` was registered with (read-only)."""
        self._load(name)
        return self._meta[name]

    def names(self) -> list[str]:
        """Every name: the built-in ones and those registered so far (sorted)."""
        return sorted(self._builtins.keys() | self._values.keys())
