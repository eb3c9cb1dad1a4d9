"""Task definitions (model + loss per modality) shared by training, evaluation and the audit.

A task satisfies :class:`audit.AuditTask` (its protocol), so the audit library can train the
helper model and compute per-record losses without importing the harness.
"""

from panoramia_fl.ml.tasks.base import TorchTask, build_task

__all__ = ["TorchTask", "build_task"]
