"""The calibrated MIA's reference models: trained once per run, shared by every site.

They see no site data. They train on a share of the public split (``audit.reference_records``)
that no site's reference pool contains, so none of their records is ever a game record; they
run as Ray tasks with the audit resources and are cached in ``RUN_DIR/reference_models/``
(the manifest is written last, so an interrupted run retrains them). Sites get their weights
with the rest of their audit settings; a run without a public split leaves calibration to
each site's ``run_audit``, which trains its own on the helper's records.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from audit.panoramia.calibration import train_reference_model
from audit.panoramia.components import Records
from audit.panoramia.splits import cut_at, shuffled_groups
from contracts.errors import RunFileError
from contracts.files import atomic_write, atomic_write_text
from contracts.run_files import RunLayout
from contracts.run_log import read_json
from simulations.config import ExperimentConfig
from simulations.ray_start import start_ray
from simulations.run_dir import DatasetMeta, load_public
from simulations.run_task import make_task, pick_device

log = logging.getLogger("panoramia_fl")


def reference_count(config: ExperimentConfig) -> int:
    """How many shared reference models the run trains (0: none; also when the dataset has
    no public split, see :func:`ensure_reference_models`).

    They are trained with or without a reference pool: models of real public records give b
    the same sense of what real records look like as f has, so a trained generator's
    unrealistic samples do not pass for leakage on the non-member side."""
    audit = config.audit
    return audit.settings.calibration.reference_models if audit.enabled else 0


def split_public(public: Records, *, share: float, seed: int) -> tuple[Records, Records]:
    """``(reference records, pool records)``: a seeded cut of the public split that keeps
    groups (documents) whole."""
    n = len(public)
    order, bounds = shuffled_groups(n, public.groups, np.random.default_rng([seed, 0x2EF0]))
    ref_idx, pool_idx = cut_at(order, bounds, [int(round(share * n))])
    if len(ref_idx) < 2 or len(pool_idx) < 2:
        raise ValueError(
            f"audit.reference_records={share}: the public split ({n} records) cannot be cut "
            "into reference-model records and a reference pool"
        )
    return public.take(np.sort(ref_idx)), public.take(np.sort(pool_idx))


def site_pool(config: ExperimentConfig, public: Records) -> Records:
    """The public records a site may draw non-members from."""
    if reference_count(config) == 0:
        return public
    return split_public(public, share=config.audit.reference_records, seed=config.seed)[1]


def _manifest(config: ExperimentConfig, n_records: int) -> dict[str, Any]:
    cal = config.audit.settings.calibration
    return {
        "count": cal.reference_models,
        "epochs": cal.epochs,
        "fraction": cal.fraction,
        "seed": config.seed,
        "records": n_records,
        "model": config.model.name,
        "model_options": dict(config.model.options),
    }


def _train_state(
    config: ExperimentConfig, meta: DatasetMeta, records: Records, index: int
) -> dict[str, torch.Tensor]:
    """One reference model's weights (runs in a Ray worker)."""
    torch.set_num_threads(config.resources.torch_threads)
    cal = config.audit.settings.calibration
    model = train_reference_model(
        make_task(config, meta),
        records,
        index=index,
        epochs=cal.epochs,
        fraction=cal.fraction,
        seed=config.seed,
        device=pick_device(config.resources.audit_num_gpus),
    )
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def ensure_reference_models(
    config: ExperimentConfig,
    meta: DatasetMeta,
    layout: RunLayout,
    *,
    num_cpus: float,
    num_gpus: float,
    ray_init_args: dict[str, Any],
) -> bool:
    """Train and cache the run's reference models unless the cache matches; True if trained."""
    count = reference_count(config)
    public = load_public(layout) if count else None
    if public is None:
        return False
    records, _ = split_public(public, share=config.audit.reference_records, seed=config.seed)
    manifest = _manifest(config, len(records))
    cached = layout.reference_manifest
    if cached.exists():
        try:
            if _read_manifest(cached) == manifest:
                return False
        except RunFileError as err:
            log.warning("%s; the reference models are trained again", err)
    import ray

    started = not ray.is_initialized()
    if started:
        start_ray(ray_init_args, num_cpus=num_cpus, num_gpus=num_gpus, key="resources.num_cpus")
    try:
        train = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(_train_state)
        records_ref = ray.put(records)
        states = ray.get([train.remote(config, meta, records_ref, k) for k in range(count)])
    finally:
        if started:
            ray.shutdown()
    # The models first, the manifest last: a run stopped in between trains them again.
    cached.unlink(missing_ok=True)
    for k, state in enumerate(states):
        atomic_write(layout.reference_model(k), partial(_save_state, state))
    atomic_write_text(cached, json.dumps(manifest, indent=1))
    log.info("reference models: trained %d on %d public records", count, len(records))
    return True


def _save_state(state: dict[str, torch.Tensor], fh: BinaryIO) -> None:
    torch.save(state, fh)


def _read_manifest(path: Path) -> dict[str, Any]:
    """The reference models' manifest; a torn or foreign one is a :class:`RunFileError`."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise RunFileError(f"{path}: must hold a JSON object (the reference models' manifest)")
    return data


def load_reference_states(layout: RunLayout) -> list[dict[str, torch.Tensor]] | None:
    """The cached reference models' weights, or ``None`` when the run has none."""
    if not layout.reference_manifest.exists():
        return None
    count = _read_manifest(layout.reference_manifest).get("count")
    if not isinstance(count, int) or count < 0:
        raise RunFileError(f"{layout.reference_manifest}: key 'count' must be a whole number")
    return [torch.load(layout.reference_model(k), weights_only=True) for k in range(count)]
