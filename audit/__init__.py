"""PANORAMIA privacy audit of a trained model with known members (usable without Flower).

Entry point: :func:`run_audit`. See docs/two_sided_game.md for the method and
:data:`EPS_TILDE_MEANING` for how to read its main number.

The names below are loaded on first use: importing a light submodule (``audit.panoramia.sides``,
``audit.config``) or the CLI's ``--help`` does not pay for torch and scipy.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names for type checkers (``X as X``: a re-export)
    from audit.config import AuditConfig as AuditConfig
    from audit.config import ClassifierConfig as ClassifierConfig
    from audit.config import GeneratorConfig as GeneratorConfig
    from audit.config import SplitConfig as SplitConfig
    from audit.panoramia.components import AuditContext as AuditContext
    from audit.panoramia.components import ClassifierData as ClassifierData
    from audit.panoramia.components import Records as Records
    from audit.panoramia.pipeline import run_audit as run_audit
    from audit.panoramia.task import AuditTask as AuditTask
    from audit.result import EPS_TILDE_MEANING as EPS_TILDE_MEANING
    from audit.result import AuditFlags as AuditFlags
    from audit.result import AuditResult as AuditResult
    from audit.result import BoundSummary as BoundSummary
    from audit.result import Curve as Curve
    from audit.result import Interval as Interval
    from audit.result import RepeatResult as RepeatResult

_HOMES = {
    "AuditContext": "audit.panoramia.components",
    "ClassifierData": "audit.panoramia.components",
    "Records": "audit.panoramia.components",
    "AuditConfig": "audit.config",
    "ClassifierConfig": "audit.config",
    "GeneratorConfig": "audit.config",
    "SplitConfig": "audit.config",
    "run_audit": "audit.panoramia.pipeline",
    "EPS_TILDE_MEANING": "audit.result",
    "AuditFlags": "audit.result",
    "AuditResult": "audit.result",
    "BoundSummary": "audit.result",
    "Curve": "audit.result",
    "Interval": "audit.result",
    "RepeatResult": "audit.result",
    "AuditTask": "audit.panoramia.task",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'audit' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
