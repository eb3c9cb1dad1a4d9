"""Global-model checkpoints: ``checkpoints/round-XXXX.pt`` each round, ``global_model.pt``.

A checkpoint is a ``torch.save`` of a plain dict: ``round``, ``state_dict`` (clean keys, no
Opacus prefix) and ``meta`` (what is needed to rebuild the model: see
``ml.saved_models.load_global_model``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from contracts.errors import MissingFileError

FINAL_NAME = "global_model.pt"
_ROUND_RE = re.compile(r"round-(\d+)\.pt$")


@dataclass(frozen=True)
class Checkpoint:
    round: int
    state_dict: dict[str, torch.Tensor]
    meta: dict[str, Any]


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write atomically, so an interrupted run never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {"round": checkpoint.round, "state_dict": checkpoint.state_dict, "meta": checkpoint.meta},
        tmp,
    )
    tmp.replace(path)


def load_checkpoint(path: Path) -> Checkpoint:
    if not path.exists():
        raise MissingFileError(f"checkpoint not found: {path}")
    data = torch.load(path, map_location="cpu", weights_only=True)
    return Checkpoint(
        round=int(data["round"]), state_dict=data["state_dict"], meta=dict(data.get("meta", {}))
    )


def round_path(run_dir: Path, server_round: int) -> Path:
    return run_dir / "checkpoints" / f"round-{server_round:04d}.pt"


def latest_round_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of the last finished round, if any."""
    rounds = []
    for path in (run_dir / "checkpoints").glob("round-*.pt"):
        match = _ROUND_RE.search(path.name)
        if match:
            rounds.append((int(match.group(1)), path))
    return max(rounds)[1] if rounds else None
