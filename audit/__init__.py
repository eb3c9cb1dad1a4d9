"""PANORAMIA privacy audit of a trained model with known members (usable without Flower).

Entry point: :func:`run_audit`. See docs/two_sided_game.md for the method and
:data:`EPS_TILDE_MEANING` for how to read its main number.

The names below are loaded on first use: importing a light submodule (``audit.panoramia.sides``,
``audit.config``) or the CLI's ``--help`` does not pay for torch and scipy.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names for type checkers (``X as X``: a re-export)
    from panoramia_fl.audit.config import AuditConfig as AuditConfig
    from panoramia_fl.audit.config import ClassifierConfig as ClassifierConfig
    from panoramia_fl.audit.config import GeneratorConfig as GeneratorConfig
    from panoramia_fl.audit.config import SplitConfig as SplitConfig
    from panoramia_fl.audit.panoramia.components import AuditContext as AuditContext
    from panoramia_fl.audit.panoramia.components import ClassifierData as ClassifierData
    from panoramia_fl.audit.panoramia.components import Records as Records
    from panoramia_fl.audit.panoramia.pipeline import run_audit as run_audit
    from panoramia_fl.audit.panoramia.task import AuditTask as AuditTask
    from panoramia_fl.audit.result import EPS_TILDE_MEANING as EPS_TILDE_MEANING
    from panoramia_fl.audit.result import AuditFlags as AuditFlags
    from panoramia_fl.audit.result import BoundSummary as BoundSummary
    from panoramia_fl.audit.result import Curve as Curve
    from panoramia_fl.audit.result import Interval as Interval
    from panoramia_fl.audit.result import PanoramiaResult as PanoramiaResult
    from panoramia_fl.audit.result import RepeatResult as RepeatResult

_HOMES = {
    "AuditContext": "panoramia_fl.audit.panoramia.components",
    "ClassifierData": "panoramia_fl.audit.panoramia.components",
    "Records": "panoramia_fl.audit.panoramia.components",
    "AuditConfig": "panoramia_fl.audit.config",
    "ClassifierConfig": "panoramia_fl.audit.config",
    "GeneratorConfig": "panoramia_fl.audit.config",
    "SplitConfig": "panoramia_fl.audit.config",
    "run_audit": "panoramia_fl.audit.panoramia.pipeline",
    "EPS_TILDE_MEANING": "panoramia_fl.audit.result",
    "AuditFlags": "panoramia_fl.audit.result",
    "PanoramiaResult": "panoramia_fl.audit.result",
    "BoundSummary": "panoramia_fl.audit.result",
    "Curve": "panoramia_fl.audit.result",
    "Interval": "panoramia_fl.audit.result",
    "RepeatResult": "panoramia_fl.audit.result",
    "AuditTask": "panoramia_fl.audit.panoramia.task",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'audit' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
