"""A user's own modules (``plugins:`` in the config, ``--plugin`` on the CLI), imported
before any name is looked up.

A plugin is an importable module that registers models, datasets, audit generators or
strategies with the registries (:mod:`contracts.registry`) when it is imported. Every
process that looks a name up imports the run's plugins first: the driver, each Ray worker
and each ClientApp process (a SuperNode starts one per message). The module must be
importable there: installed, or on ``PYTHONPATH`` (a simulation's Ray workers on this
machine get the driver's ``sys.path``).

Imports nothing of ours but the errors.
"""

from __future__ import annotations

import importlib
import re
import traceback
from collections.abc import Iterable

from panoramia_fl.contracts.errors import NameTakenError, UserError

PLUGINS_KEY = "plugins"
"""The config key that lists them."""

MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class PluginError(UserError, ValueError):
    """A plugin cannot be imported, or what it registers breaks a registry's contract; the
    message names the module and shows its own error."""


def check_module_name(name: str) -> str:
    """``name`` when it is a dotted module name (``my_site.models``), else a
    :class:`PluginError`."""
    if not MODULE_NAME.match(name):
        raise PluginError(f"{PLUGINS_KEY}: {name!r} is not a module name (a.b.c, no path)")
    return name


def qualified_name(value: object) -> str:
    """``module.qualname`` of a function or class (what a plugin registered), for messages."""
    return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"


def _last_frame(err: BaseException) -> str:
    """Where in the plugin the error was raised (file:line), for the one-line message."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith("<")]
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if len(frames) > 1 else ""


def import_plugins(modules: Iterable[str]) -> None:
    """Import each module once (a repeated import is free); the first that fails raises
    :class:`PluginError` naming it, with its own error, the contract its registration
    breaks (a name already taken, a built-in's included) or the ``sys.exit`` it called."""
    for name in modules:
        check_module_name(name)
        try:
            importlib.import_module(name)
        except (PluginError, NameTakenError) as err:  # what it registers breaks a contract
            raise PluginError(f"{PLUGINS_KEY}: module {name!r}: {err}") from err
        except SystemExit as stop:  # it would end the whole run, with its own exit code
            raise PluginError(
                f"{PLUGINS_KEY}: module {name!r} called sys.exit({stop.code!r}) as it was "
                f"imported{_last_frame(stop)}; a plugin must only register names"
            ) from None
        except Exception as err:  # a plugin's own error, whatever it is, named as such
            raise PluginError(
                f"{PLUGINS_KEY}: module {name!r} cannot be imported: "
                f"{type(err).__name__}: {err}{_last_frame(err)}"
            ) from err
