"""A site's local audit: PANORAMIA on its own members, comparisons on its own holdout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from audit.config import AuditConfig
from clients.site_data import SiteData


@dataclass(frozen=True)
class SiteAuditPolicy:
    settings: AuditConfig
    use_holdout: bool = True
    use_public_pool: bool = False
    reference_states: tuple[dict[str, torch.Tensor], ...] | None = None
    """Weights of the run's shared reference models (public records only); ``None``: the
    audit trains its own on the helper's records."""


def make_audit_runner(
    policy: SiteAuditPolicy,
) -> Callable[[Any, torch.nn.Module, SiteData, int], dict]:
    """``runner(task, model, data, seed) -> AuditResult.to_dict()`` for this site."""

    def runner(task: Any, model: torch.nn.Module, data: SiteData, seed: int) -> dict:
        from audit import run_audit  # heavy: only in processes that audit

        settings = policy.settings.model_copy(
            update={"seed": policy.settings.seed * 1_000 + seed * 7 + data.site_id}
        )
        holdout = None
        if policy.use_holdout and len(data.holdout_x) > 0:
            holdout = data.records("holdout")
        public = None
        if policy.use_public_pool and data.public_x is not None:
            public = data.records("public")
        references = None
        if policy.reference_states is not None:
            references = []
            for state in policy.reference_states:
                ref = task.make_model()
                ref.load_state_dict(state)
                references.append(ref)
        result = run_audit(
            task,
            model,
            data.records("train"),
            settings,
            nonmembers=holdout,
            public_pool=public,
            reference_models=references,
        )
        return result.to_dict()

    return runner
