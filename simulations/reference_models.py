"""The calibrated MIA's reference models: trained once, shared by every site and every run
that can share them.

They see no site data. They train on a share of the public split (``audit.reference_records``)
that no site's reference pool contains, so none of their records is ever a game record; they
run as Ray tasks with the audit resources, in the Ray session of the simulation that runs
the audits, and are written to ``RUN_DIR/reference_models/`` (the manifest last, so an
interrupted run fetches them again). Since they depend only on public records and settings,
each is also kept in the weights cache (:mod:`simulations.weights_cache`) under a key of
everything that decides its weights (:func:`reference_keys`): another run, sweep point or
replicate with the same public records and settings loads them instead of training them.
Sites get their weights with the rest of their audit settings; a run without a public split
leaves calibration to each site's ``run_audit``, which trains its own on the helper's records.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

import panoramia_fl.audit.panoramia.calibration
from panoramia_fl import ml
from panoramia_fl.audit.panoramia.calibration import train_reference_model
from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.panoramia.splits import cut_at, shuffled_groups
from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.files import atomic_write, atomic_write_text
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.run_log import read_json
from panoramia_fl.ml.models import MODELS
from panoramia_fl.simulations.experiment_config import ExperimentConfig
from panoramia_fl.simulations.run_dir import DatasetMeta, load_public
from panoramia_fl.simulations.run_task import make_task, pick_device
from panoramia_fl.simulations.weights_cache import (
    WeightsCache,
    device_fingerprint,
    digest_arrays,
    digest_paths,
    fingerprint,
)

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


def public_seed(config: ExperimentConfig) -> int:
    """The seed of the public split's cut and of the reference models' training: the
    partition's (``partition.seed``, else the run's ``seed``). Like the sites' data they
    are the consortium's layout, not the training run's: a replicate set, which keeps its
    partition, shares them (and the weights cache serves them to every run of the set)."""
    return config.partition.seed_for(config.seed)


def site_pool(config: ExperimentConfig, public: Records) -> Records:
    """The public records a site may draw non-members from."""
    if reference_count(config) == 0:
        return public
    return split_public(public, share=config.audit.reference_records, seed=public_seed(config))[1]


CACHE_KIND = "reference-models"
"""The reference models' folder in the weights cache."""


def _manifest(config: ExperimentConfig, n_records: int, keys: list[str]) -> dict[str, Any]:
    cal = config.audit.settings.calibration
    return {
        "count": cal.reference_models,
        "epochs": cal.epochs,
        "fraction": cal.fraction,
        "seed": public_seed(config),
        "records": n_records,
        "model": config.model.name,
        "model_options": dict(config.model.options),
        "cache_keys": keys,
    }


def _code_files(config: ExperimentConfig, meta: DatasetMeta) -> list[Path]:
    """The source that decides a reference model's weights: the ``ml`` package (models,
    tasks, the training loop), the calibration module, and the files defining the run's
    model and task wherever they live (a plugin's included); a model option naming a
    file or folder (a pretrained model) counts by its content."""
    task = make_task(config, meta)
    files = [
        *Path(ml.__file__).parent.rglob("*.py"),
        Path(panoramia_fl.audit.panoramia.calibration.__file__),
    ]
    for obj in (MODELS.get(config.model.name), type(task)):
        source = inspect.getsourcefile(obj)
        if source is not None:
            files.append(Path(source))
    for value in config.model.options.values():
        if isinstance(value, str) and value and Path(value).exists():
            files.append(Path(value))
    return files


def reference_keys(config: ExperimentConfig, meta: DatasetMeta, records: Records) -> list[str]:
    """The weights-cache key of each reference model: a digest of the public records it
    draws from, the task (model, its options, optimizer, batch size, the dataset's shape
    and encoding), the calibration settings and seed, the source that trains it, and the
    machine's torch, numpy and device kind (:func:`~simulations.weights_cache.fingerprint`)."""
    cal = config.audit.settings.calibration
    device = pick_device(config.resources.audit_num_gpus)
    shared = {
        "what": "reference model",
        "records": digest_arrays([records.x, records.y, records.groups]),
        "task": dataclasses.asdict(make_task(config, meta)),
        "epochs": cal.epochs,
        "fraction": cal.fraction,
        "seed": public_seed(config),
        "torch_threads": config.resources.audit_threads,
        "code": digest_paths(_code_files(config, meta)),
        "machine": device_fingerprint(device),
    }
    return [fingerprint({**shared, "index": k}) for k in range(cal.reference_models)]


def _train_state(
    config: ExperimentConfig, meta: DatasetMeta, records: Records, index: int
) -> dict[str, torch.Tensor]:
    """One reference model's weights (runs in a Ray worker)."""
    torch.set_num_threads(config.resources.audit_threads)
    cal = config.audit.settings.calibration
    model = train_reference_model(
        make_task(config, meta),
        records,
        index=index,
        epochs=cal.epochs,
        fraction=cal.fraction,
        seed=public_seed(config),
        device=pick_device(config.resources.audit_num_gpus),
    )
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


@dataclass(frozen=True)
class ReferenceModelsDone:
    """What :func:`ensure_reference_models` did: models trained, and loaded from the cache."""

    trained: int = 0
    cached: int = 0


def ensure_reference_models(
    config: ExperimentConfig,
    meta: DatasetMeta,
    layout: RunLayout,
    *,
    num_cpus: float,
    num_gpus: float,
) -> ReferenceModelsDone | None:
    """Write the run's reference models unless its folder already holds these: from the
    weights cache where it has them, else trained as Ray tasks (Ray must be running; the
    caller's session) and added to the cache. None: nothing to do."""
    count = reference_count(config)
    public = load_public(layout) if count else None
    if public is None:
        return None
    records, _ = split_public(
        public, share=config.audit.reference_records, seed=public_seed(config)
    )
    keys = reference_keys(config, meta, records)
    manifest = _manifest(config, len(records), keys)
    written = layout.reference_manifest
    if written.exists():
        try:
            if _read_manifest(written) == manifest:
                return None
        except RunFileError as err:
            log.warning("%s; the reference models are fetched again", err)
    cache = WeightsCache.from_env(CACHE_KIND)
    if cache is None:
        states = _train_states(config, meta, records, range(count), num_cpus, num_gpus)
        done = ReferenceModelsDone(trained=count)
    else:
        with cache.locked(keys):
            loaded = {k: cache.load(key) for k, key in enumerate(keys)}
            missing = [k for k, state in loaded.items() if state is None]
            trained = _train_states(config, meta, records, missing, num_cpus, num_gpus)
            about = {k: v for k, v in manifest.items() if k != "cache_keys"}
            for k, state in trained.items():
                cache.store(keys[k], state, about={**about, "index": k})
        states = {k: v for k, v in loaded.items() if v is not None} | trained
        done = ReferenceModelsDone(trained=len(missing), cached=count - len(missing))
    # The models first, the manifest last: a run stopped in between fetches them again.
    written.unlink(missing_ok=True)
    for k in range(count):
        atomic_write(layout.reference_model(k), partial(_save_state, states[k]))
    atomic_write_text(written, json.dumps(manifest, indent=1))
    log.info(
        "reference models on %d public records: %d trained, %d from the cache",
        len(records),
        done.trained,
        done.cached,
    )
    return done


def _train_states(
    config: ExperimentConfig,
    meta: DatasetMeta,
    records: Records,
    indices: Iterable[int],
    num_cpus: float,
    num_gpus: float,
) -> dict[int, dict[str, torch.Tensor]]:
    """Reference models ``indices``, trained in parallel as tasks of the running Ray."""
    indices = list(indices)
    if not indices:
        return {}
    import ray

    train = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(_train_state)
    records_ref = ray.put(records)
    states = ray.get([train.remote(config, meta, records_ref, k) for k in indices])
    return dict(zip(indices, states, strict=True))


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
