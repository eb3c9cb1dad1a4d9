"""The checkpoint format: ``checkpoints/round-XXXX.pt`` each round, ``global_model.pt``
(paths: :class:`contracts.run_files.RunLayout`). The server writes them; resume, the
standalone audit and :mod:`ml.saved_models` read them.

A checkpoint is a ``torch.save`` of a plain dict: ``round``, ``state_dict`` (clean keys, no
Opacus prefix) and ``meta`` (:class:`contracts.run_files.CheckpointMeta` as a dict, ``{}``
when the writer gave none: what is needed to rebuild the model, see
``ml.saved_models.load_global_model``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from panoramia_fl.contracts.errors import MissingFileError, RunFileError
from panoramia_fl.contracts.files import atomic_write
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.contracts.run_files import CheckpointMeta, RunLayout

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

StateDict = dict[str, "torch.Tensor"]
"""A model's weights by name, as checkpoints hold them."""


@dataclass(frozen=True)
class Checkpoint:
    round: int
    state_dict: StateDict
    meta: CheckpointMeta | None
    """None in a checkpoint written without one."""


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write atomically, so an interrupted run never leaves a half-written file."""
    import torch  # here, not at the top: ``contracts`` stays light for every process

    meta = {} if checkpoint.meta is None else json_safe(checkpoint.meta)
    data = {"round": checkpoint.round, "state_dict": checkpoint.state_dict, "meta": meta}
    atomic_write(path, lambda fh: torch.save(data, fh))


def load_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at ``path``: a :class:`MissingFileError` without one, a
    :class:`RunFileError` naming it when it is damaged (truncated, not a checkpoint)."""
    if not path.exists():
        raise MissingFileError(f"checkpoint not found: {path}")
    import torch

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
        meta = data.get("meta") or {}
        return Checkpoint(
            round=int(data["round"]),
            state_dict=dict(data["state_dict"]),
            meta=from_dict(CheckpointMeta, meta, "meta") if meta else None,
        )
    except Exception as err:  # torch raises many kinds on a damaged file
        raise RunFileError(
            f"{path} is not a readable checkpoint ({type(err).__name__}: {err})"
        ) from None


def readable_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint at ``path``; None when it is missing or cannot be read (a torn or
    emptied file: writes are atomic and fsynced, but a disk may still lose a file's tail)."""
    try:
        return load_checkpoint(path)
    except MissingFileError:
        return None
    except RunFileError as err:
        log.warning("%s; skipped", err)
        return None


def latest_round_checkpoint(layout: RunLayout) -> Checkpoint | None:
    """The last round's checkpoint that can be read, if any: an unreadable latest one falls
    back to the one before (its round is redone), so ``--resume`` is never blocked."""
    rounds = layout.round_checkpoints()
    for server_round in sorted(rounds, reverse=True):
        checkpoint = readable_checkpoint(rounds[server_round])
        if checkpoint is not None:
            return checkpoint
    return None
