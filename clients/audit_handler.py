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
        result = run_audit(
            task,
            model,
            data.records("train"),
            settings,
            nonmembers=holdout,
            public_pool=public,
        )
        return result.to_dict()

    return runner
