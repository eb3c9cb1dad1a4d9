"""A site's gradient-inversion audit of its own updates (``audit.inversion``).

In each chosen round the site keeps, in its own state directory, what the server then
holds of it: the global weights it received, the update it sent, and what the run's config
tells the server of its local training (:func:`keep_round`); with ``fl.local_steps`` also
the records its steps used (only the site knows which). At audit time it runs the attack a
curious server would (:mod:`audit.inversion.attack`) from the first three alone, compares the
reconstruction with its true records, and replies with summary numbers only
(:func:`inversion_audit`). A gallery of its own records beside their reconstructions
(images) stays in its state directory, for its own page to link.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from panoramia_fl.audit.inversion.attack import (
    Fields,
    InversionConfig,
    LocalTraining,
    Reconstruction,
    RecordSpec,
    invert,
    simulate_update,
)
from panoramia_fl.audit.inversion.scores import (
    InversionResult,
    RecordScores,
    image_scores,
    summarise,
    tabular_scores,
)
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.clients.site_training import LocalTrainResult
from panoramia_fl.contracts.files import atomic_write
from panoramia_fl.contracts.run_files import inversion_gallery_name, inversion_state_name
from panoramia_fl.contracts.tabular_schema import resolve_attributes

_STATE_VERSION = 1
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InversionSettings:
    """A site's inversion audit: what to attack and what the server knows of training."""

    config: InversionConfig
    site_id: int
    state_dir: Path
    """The site's own folder (never sent)."""
    device: torch.device = torch.device("cpu")
    """Where the attacks run: the site's audit device."""

    def wants(self, server_round: int) -> bool:
        return server_round in self.config.rounds

    def state_path(self, server_round: int) -> Path:
        return self.state_dir / inversion_state_name(self.site_id, server_round)

    @property
    def gallery_path(self) -> Path:
        return self.state_dir / inversion_gallery_name(self.site_id)


def _training(task: Any, kept: dict[str, Any]) -> LocalTraining:
    """A kept round's local training as the server knows it: the record count the site
    reported, the epochs or steps it asked for, the run's batch size and optimizer."""
    spec = task.optimizer
    return LocalTraining(
        num_examples=int(kept["num_examples"]),
        batch_size=int(task.batch_size),
        epochs=int(kept["epochs"]),
        steps=None if kept["steps"] is None else int(kept["steps"]),
        optimizer=str(spec.name),
        learning_rate=float(spec.learning_rate),
        momentum=float(spec.momentum),
        weight_decay=float(spec.weight_decay),
    )


def keep_round(
    settings: InversionSettings,
    server_round: int,
    global_state: dict[str, torch.Tensor],
    result: LocalTrainResult,
    *,
    epochs: int,
    steps: int | None,
) -> None:
    """Keep what the server holds of this round (and the records the steps used)."""
    kept = {
        "version": _STATE_VERSION,
        "global": {k: v.detach().cpu() for k, v in global_state.items()},
        "update": _update(global_state, result.state_dict),
        "num_examples": result.num_examples,
        "epochs": epochs,
        "steps": steps,
        "used": result.used,
        "dp_epsilon": result.dp_epsilon,
    }
    # Site-local: the records the steps used, durable before the reply leaves.
    atomic_write(settings.state_path(server_round), lambda f: torch.save(kept, f), private=True)


def _update(
    received: dict[str, torch.Tensor], after: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``after - received`` over the floating-point arrays (float32): the site's own update
    (:func:`keep_round`) or, under secure aggregation, the round's aggregate one."""
    return {k: after[k].float() - v.float() for k, v in received.items() if v.is_floating_point()}


def _fields(x: np.ndarray, schema: dict[str, Any] | None) -> list[Fields]:
    return [Fields(a.start, a.width, a.kind == "onehot") for a in resolve_attributes(x, schema)]


def inversion_audit(
    settings: InversionSettings,
    task: Any,
    data: SiteData,
    *,
    seed: int,
    sums: dict[int, dict[str, torch.Tensor]] | None = None,
) -> list[InversionResult]:
    """Attack every kept round's update and its public-record baseline: one
    :class:`~audit.inversion.inversion_result.InversionResult` per kept round, in round order
    (none when the site kept no such round). Writes the gallery of the first attacked round
    (images) to the site's own folder.

    ``sums`` (secure aggregation): the global weights after each round; the attack then
    targets the round's aggregate update (those weights minus the ones the site received),
    all the server held of it, still scored against the site's own records."""
    out: list[InversionResult] = []
    for server_round in settings.config.rounds:
        path = settings.state_path(server_round)
        if not path.exists() or (sums is not None and server_round not in sums):
            continue  # the site was not sampled in that round
        kept = torch.load(path, weights_only=True)
        if sums is not None:
            kept["update"] = _update(kept["global"], sums[server_round])
        result, gallery = _attack_round(settings, task, data, kept, server_round, seed)
        out.append(result)
        if gallery is not None and len(out) == 1:
            write_gallery(settings.gallery_path, gallery)
    if not out:
        # Not sampled in those rounds (fraction_train < 1), or a resumed run that trained them
        # before audit.inversion was set: nothing to attack, and the rest of the audit stands.
        log.warning(
            "site %d: audit.inversion: no update kept for rounds %s (the site trained in none "
            "of them here)",
            settings.site_id,
            settings.config.rounds,
        )
    return out


def _attack_round(
    settings: InversionSettings,
    task: Any,
    data: SiteData,
    kept: dict[str, Any],
    server_round: int,
    seed: int,
) -> tuple[InversionResult, list[torch.Tensor] | None]:
    began = time.perf_counter()
    config = settings.config
    training = _training(task, kept)
    model = task.make_model()
    modality = str(task.modality)
    truth_x, fields, spec = _round_records(task, data, kept)
    rng = np.random.default_rng([seed, settings.site_id, server_round])
    device = settings.device
    start = {k: v.to(device) for k, v in kept["global"].items()}

    def attack(update: dict[str, torch.Tensor], attack_seed: int) -> Reconstruction:
        return invert(
            model, start, update, training, spec=spec, config=config, seed=attack_seed,
            device=device,
        )  # fmt: skip

    recon = attack(kept["update"], seed)
    # The baseline: the same attack on an update of the same shape from public records.
    base = attack(_public_update(task, model, start, training, data, rng), seed + 1)
    scored = np.sort(
        rng.choice(len(truth_x), size=min(config.max_records, len(truth_x)), replace=False)
    )
    truth = truth_x[torch.as_tensor(scored)]
    scores, base_scores = (
        _score(truth, recon.x, fields, config),
        _score(truth, base.x, fields, config),
    )
    result = summarise(
        scores,
        base_scores,
        round=server_round,
        training=training,
        modality=modality,
        threshold=config.ssim_threshold if modality == "image" else config.field_threshold,
        reconstruction=recon,
        baseline_reconstruction=base,
        seconds=time.perf_counter() - began,
        dp_epsilon=kept["dp_epsilon"],
    )
    gallery = None
    if modality == "image":
        gallery = _gallery_rows(truth, recon.x, base.x, scores, base_scores)
    return result, gallery


def _round_records(
    task: Any, data: SiteData, kept: dict[str, Any]
) -> tuple[torch.Tensor, list[Fields] | None, RecordSpec]:
    """The records the round's steps used (with fl.local_steps), else all the site trained
    on; their tabular fields (None for other modalities) and what the attack is told of
    them."""
    if kept["used"] is not None:
        truth_x = kept["used"][0]
    else:
        truth_x = task.tensors(data.training_x, data.training_y)[0]
    fields = None
    if str(task.modality) == "tabular":
        fields = _fields(truth_x.numpy(), getattr(task, "schema", None))
    spec = RecordSpec(
        modality=str(task.modality),
        shape=tuple(truth_x.shape[1:]),
        num_classes=int(task.num_classes),
        fields=None if fields is None else tuple(fields),
    )
    return truth_x, fields, spec


def _public_update(
    task: Any,
    model: torch.nn.Module,
    start: dict[str, torch.Tensor],
    training: LocalTraining,
    data: SiteData,
    rng: np.random.Generator,
) -> dict[str, torch.Tensor]:
    """The round's local training simulated on as many public records (never trained on),
    on the device of ``start``."""
    public_x, public_y = _public(data)
    n = training.records
    pick = rng.choice(len(public_x), size=n, replace=n > len(public_x))
    device = next(iter(start.values())).device
    px, py = (t.to(device) for t in task.tensors(public_x[pick], public_y[pick])[:2])
    return simulate_update(model, start, px, py, training, differentiable=False)


def _public(data: SiteData) -> tuple[np.ndarray, np.ndarray]:
    """Records the model never trained on: the public pool, else the site's holdout."""
    if data.public_x is not None and data.public_y is not None and len(data.public_x):
        return data.public_x, data.public_y
    if data.holdout_y is None:
        raise ValueError("audit.inversion: the baseline needs labelled non-member records")
    return data.holdout_x, data.holdout_y


def _score(
    truth: torch.Tensor,
    recon: torch.Tensor,
    fields: list[Fields] | None,
    config: InversionConfig,
) -> RecordScores:
    if fields is None:
        return image_scores(truth, recon)
    return tabular_scores(truth, recon, fields, tolerance=config.numeric_tolerance)


def _gallery_rows(
    truth: torch.Tensor,
    recon: torch.Tensor,
    base: torch.Tensor,
    scores: RecordScores,
    base_scores: RecordScores,
) -> list[torch.Tensor]:
    """The best and the typical (median) record: original, reconstruction, baseline's,
    a white line between them."""
    order = np.argsort(scores.quality)
    picks = [int(order[-1]), int(order[len(order) // 2])]
    gap = torch.ones((*truth.shape[1:-1], 1))
    return [
        torch.cat([truth[i], gap, recon[scores.match[i]], gap, base[base_scores.match[i]]], -1)
        for i in picks
    ]


def write_gallery(path: Path, rows: list[torch.Tensor]) -> None:
    """Images side by side, one row of ``rows`` (each ``(C, H, W)`` in [-1, 1]) under the
    other, as a PNG only the site can read (0600), enlarged to be seen."""
    from PIL import Image

    gap = torch.ones((*rows[0].shape[:-2], 1, rows[0].shape[-1]))
    grid = torch.cat([rows[0], gap, *rows[1:]], dim=-2)  # (C, H, W): rows stacked
    pixels = ((grid.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    array = pixels.permute(1, 2, 0).numpy()
    image = Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)
    scale = max(4, 96 // rows[0].shape[-2])  # a record at least ~48 pixels high
    size = (image.width * scale, image.height * scale)
    image = image.resize(size, Image.Resampling.NEAREST)
    atomic_write(path, lambda f: image.save(f, format="PNG"), private=True)
