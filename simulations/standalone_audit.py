"""Audit a saved global model without Flower: ``panoramia-fl audit``."""

from __future__ import annotations

from pathlib import Path

from audit.panoramia.components import Records
from audit.result import AuditResult
from clients.audit_handler import SiteAuditPolicy, make_audit_runner
from contracts.errors import UserError
from contracts.run_files import RunLayout
from ml.datasets import load_dataset
from ml.partition import partition
from ml.saved_models import load_global_model
from simulations.config import load_config
from simulations.reference_models import load_reference_states, site_pool
from simulations.run_dir import DatasetMeta, site_data
from simulations.run_task import make_task


def audit_saved_model(
    checkpoint: Path,
    config_path: Path,
    *,
    site: int,
    run: RunLayout,
    overrides: list[str] | None = None,
) -> AuditResult:
    """Run the configured audit of ``site``'s members (and holdout) against the model;
    ``run``: the run directory the checkpoint sits in (its reference models, if any)."""
    config = load_config(config_path, overrides)
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
        )
    )
    results = runner(make_task(config, DatasetMeta.of(dataset)), model, data, config.seed, {}, {})
    assert results.result is not None  # the final model was given
    return results.result
