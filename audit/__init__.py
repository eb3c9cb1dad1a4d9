"""PANORAMIA privacy audit of a trained model with known members (usable without Flower).

Entry point: :func:`run_audit`. See docs/two_sided_game.md for the method and
:data:`EPS_TILDE_MEANING` for how to read its main number.
"""

from audit.components import AuditContext, ClassifierData, Records
from audit.config import AuditConfig, ClassifierConfig, GeneratorConfig, SplitConfig
from audit.pipeline import run_audit
from audit.result import (
    EPS_TILDE_MEANING,
    AuditFlags,
    AuditResult,
    BoundSummary,
    Curve,
    Interval,
    RepeatResult,
)
from audit.task import AuditTask

__all__ = [
    "EPS_TILDE_MEANING",
    "AuditConfig",
    "AuditContext",
    "AuditFlags",
    "AuditResult",
    "AuditTask",
    "BoundSummary",
    "ClassifierConfig",
    "ClassifierData",
    "Curve",
    "GeneratorConfig",
    "Interval",
    "Records",
    "RepeatResult",
    "SplitConfig",
    "run_audit",
]
