"""A site's membership audits of its own updates (``audit.updates``).

In each chosen round the site keeps, in its own state directory, the local model it sent the
server (:func:`keep_local_model`) and its DP-SGD epsilon after that round, which covers that
update. At audit time it plays the same games against each kept model as against the global
models (:mod:`clients.audit_handler`): only summary numbers leave it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.clients.site_training import LocalTrainResult
from panoramia_fl.contracts.files import atomic_write
from panoramia_fl.contracts.run_files import local_model_name

_STATE_VERSION = 1


@dataclass(frozen=True)
class UpdateAuditSettings:
    """Which rounds' local models a site keeps, and where (its own folder)."""

    rounds: tuple[int, ...]
    site_id: int
    state_dir: Path

    def wants(self, server_round: int) -> bool:
        return server_round in self.rounds

    def path(self, server_round: int) -> Path:
        return self.state_dir / local_model_name(self.site_id, server_round)


@dataclass(frozen=True)
class KeptModel:
    """A round's local model as the site sent it, and its epsilon then."""

    server_round: int
    state_dict: dict[str, torch.Tensor]
    dp_epsilon: float | None
    """The site's DP-SGD epsilon after this round (its accountant); None without DP."""

    def model(self, task: Any) -> torch.nn.Module:
        model = task.make_model()
        model.load_state_dict(self.state_dict)
        return model


def keep_local_model(
    settings: UpdateAuditSettings, server_round: int, result: LocalTrainResult
) -> None:
    """Keep the round's local model (0600), durable before the reply leaves."""
    kept = {
        "version": _STATE_VERSION,
        "round": server_round,
        "state_dict": result.state_dict,
        "dp_epsilon": result.dp_epsilon,
    }
    atomic_write(settings.path(server_round), lambda f: torch.save(kept, f), private=True)


def kept_models(settings: UpdateAuditSettings) -> list[KeptModel]:
    """The local models the site kept, in round order (a round it was not sampled in has
    none)."""
    out = []
    for server_round in settings.rounds:
        path = settings.path(server_round)
        if not path.exists():
            continue
        kept = torch.load(path, weights_only=True)
        eps = kept["dp_epsilon"]
        out.append(
            KeptModel(
                server_round=int(kept["round"]),
                state_dict=kept["state_dict"],
                dp_epsilon=None if eps is None else float(eps),
            )
        )
    return out


def with_epsilons(lines: list[RoundLeakage], kept: list[KeptModel]) -> list[RoundLeakage]:
    """The audits of the site's updates, each with its epsilon after that round."""
    eps = {k.server_round: k.dp_epsilon for k in kept}
    return [replace(line, dp_epsilon=eps[line.round]) for line in lines]
