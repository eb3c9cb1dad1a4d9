"""Global-model checkpoints: ``checkpoints/round-XXXX.pt`` each round, ``global_model.pt``
(paths: :class:`contracts.run_files.RunLayout`).

A checkpoint is a ``torch.save`` of a plain dict: ``round``, ``state_dict`` (clean keys, no
Opacus prefix) and ``meta`` (:class:`contracts.run_files.CheckpointMeta` as a dict, ``{}``
when the writer gave none: what is needed to rebuild the model, see
``ml.saved_models.load_global_model``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from contracts.errors import MissingFileError
from contracts.run_files import CheckpointMeta, RunLayout


@dataclass(frozen=True)
class Checkpoint:
    round: int
    state_dict: dict[str, torch.Tensor]
    meta: CheckpointMeta | None
    """None in a checkpoint written without one."""


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write atomically, so an interrupted run never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    meta = {} if checkpoint.meta is None else checkpoint.meta.to_dict()
    torch.save({"round": checkpoint.round, "state_dict": checkpoint.state_dict, "meta": meta}, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> Checkpoint:
    if not path.exists():
        raise MissingFileError(f"checkpoint not found: {path}")
    data = torch.load(path, map_location="cpu", weights_only=True)
    meta = data.get("meta") or {}
    return Checkpoint(
        round=int(data["round"]),
        state_dict=data["state_dict"],
        meta=CheckpointMeta.from_dict(meta) if meta else None,
    )


def latest_round_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of the last finished round, if any."""
    rounds = RunLayout(run_dir).round_checkpoints()
    return rounds[max(rounds)] if rounds else None
