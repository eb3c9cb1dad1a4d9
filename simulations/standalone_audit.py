"""Audit a saved global model without Flower: ``panoramia-fl audit``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.audit.result import PanoramiaResult
from panoramia_fl.clients.audit_handler import SiteAuditPolicy, make_audit_runner
from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.run_files import CheckpointMeta, RunLayout
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.partition import partition
from panoramia_fl.ml.saved_models import load_global_model
from panoramia_fl.simulations.experiment_config import ExperimentConfig, load_config
from panoramia_fl.simulations.reference_models import load_reference_states, site_pool
from panoramia_fl.simulations.run_dir import DatasetMeta, site_data
from panoramia_fl.simulations.run_task import make_task


def audit_saved_model(
    checkpoint: Path,
    config_path: Path,
    *,
    site: int,
    run: RunLayout,
    overrides: list[str] | None = None,
    warn: Callable[[str], None] | None = None,
) -> PanoramiaResult:
    """Run the configured audit of ``site``'s members (and holdout) against the model;
    ``run``: the run directory the checkpoint sits in (its reference models, if any);
    ``warn``: told each way the checkpoint's own metadata differs from the config
    (:func:`checkpoint_mismatches`)."""
    config = load_config(config_path, overrides)
    meta = load_checkpoint(checkpoint).meta
    if meta is not None and warn is not None:
        for line in checkpoint_mismatches(checkpoint, meta, config):
            warn(line)
    dataset = load_dataset(config.data.name, root=config.data.root, options=config.data.options)
    sites = partition(dataset, config.partition, seed=config.partition.seed_for(config.seed))
    if not 0 <= site < len(sites):
        raise UserError(f"--site: {site} is not one of the run's sites 0..{len(sites) - 1}")
    split = sites[site]

    data = site_data(dataset, split)
    if dataset.public_x is not None:
        public = Records(dataset.public_x, dataset.public_y, dataset.public_groups)
        data = data.with_public(site_pool(config, public))
    model, _ = load_global_model(checkpoint)
    # The run's shared reference models, when the checkpoint sits in its run directory.
    states = load_reference_states(run)
    runner = make_audit_runner(
        SiteAuditPolicy(
            settings=config.audit.settings,
            use_holdout=config.audit.use_holdout,
            use_public_pool=config.audit.reference_pool,
            reference_states=None if states is None else tuple(states),
            seeding=config.audit.seeding,
        )
    )
    results = runner(make_task(config, DatasetMeta.of(dataset)), model, data, config.seed, {}, {})
    assert results.panoramia is not None  # the final model was given
    return results.panoramia


def checkpoint_mismatches(
    checkpoint: Path, meta: CheckpointMeta, config: ExperimentConfig
) -> list[str]:
    """A line per setting the checkpoint's metadata records otherwise than ``config`` (the
    model, its options, the DP level; a checkpoint older than a field says nothing of it)."""
    recorded = (
        ("model.name", meta.model, config.model.name),
        ("model.options", dict(meta.model_options), dict(config.model.options)),
        ("dp.level", meta.dp_level, config.dp.level),
    )
    return [
        f"warning: {checkpoint} was trained with {key} {saved!r}, the config says {given!r}: "
        "the audit reads the checkpoint's model, everything else (data, sites, the audit's "
        "own models) as the config says; is it the run's config?"
        for key, saved, given in recorded
        if saved is not None and saved != given
    ]
