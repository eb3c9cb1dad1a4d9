"""Replicate runs: one config trained and audited once per seed (``seed``, ``seed + 1``, ...)
on the same consortium's data, each a normal run directory ``<set>/seed-<s>/``, then pooled
in the set's report (``reporting.sweeps.replicates``).

The partition is drawn once, by ``partition.seed`` (the config's run seed when unset), so
only training, DP noise and audit randomness vary between the runs (the public split and
the shared reference models go with the partition: one set trains them once). The runs join
one local Ray, started once for the set. Running the same set again continues each run
where it stopped (missing rounds, then missing audits).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from panoramia_fl.contracts.run_files import RunLayout, replicate_run_dir
from panoramia_fl.reporting import LostSites
from panoramia_fl.reporting.schemas.schema import ReportFiles
from panoramia_fl.simulations.config_file import dump_config, report_config
from panoramia_fl.simulations.experiment_config import (
    SEED_LIMIT,
    ExperimentConfig,
    apply_overrides,
    validate_config,
)
from panoramia_fl.simulations.runner import run_experiment
from panoramia_fl.simulations.shared_ray import SharedRay
from panoramia_fl.simulations.sizes import check_replicates

SET_SUFFIX = "-replicates"
"""A set's default folder: ``output_dir / (name + SET_SUFFIX)``."""


@dataclass
class ReplicateOutcome:
    files: ReportFiles
    runs: list[tuple[int, RunLayout]]
    report_warnings: dict[int, list[str]] = field(default_factory=dict)
    """Each run's report warnings (:attr:`~simulations.runner.RunOutcome.report_warnings`),
    by seed."""
    lost: dict[int, LostSites] = field(default_factory=dict)
    """The sites each run lost (:attr:`~simulations.runner.RunOutcome.lost`), by seed."""
    timings: dict[str, float] = field(default_factory=dict)
    """Each run's total seconds (``seed-<s>_s``)."""


def replicate_configs(
    config: ExperimentConfig, n: int, *, key: str = "--seeds"
) -> list[tuple[int, ExperimentConfig]]:
    """``(seed, config)`` of the ``n`` runs: seeds ``config.seed`` onwards, the partition
    seed fixed to the one ``config`` draws its partition with. A set the harness does not
    take (:func:`~simulations.sizes.check_replicates`) is an error naming ``key``."""
    check_replicates(n, config.seed, key=key, seed_limit=SEED_LIMIT)
    raw = yaml.safe_load(dump_config(config))
    partition_seed = config.partition.seed_for(config.seed)
    configs = []
    for seed in range(config.seed, config.seed + n):
        overrides = {
            "seed": seed,
            "partition.seed": partition_seed,
            "name": f"{config.name}-seed-{seed}",
        }
        configs.append((seed, validate_config(apply_overrides(raw, overrides))))
    return configs


def run_replicates(
    config: ExperimentConfig, set_dir: Path, n: int, *, verbose: bool = False, key: str = "--seeds"
) -> ReplicateOutcome:
    """Train and audit the ``n`` runs still missing in ``set_dir``, then write the set's
    report (and each run's own report again, quoting the set)."""
    from panoramia_fl.reporting.sweeps.replicates import write_replicate_report

    runs: list[tuple[int, RunLayout]] = []
    timings: dict[str, float] = {}
    report_warnings: dict[int, list[str]] = {}
    lost: dict[int, LostSites] = {}
    with SharedRay() as shared:  # Ray starts once for the set
        for seed, replicate in replicate_configs(config, n, key=key):
            run_dir = replicate_run_dir(set_dir, seed)
            print(f"replicate seed {seed}: {run_dir}", file=sys.stderr)
            with shared.joined(replicate):
                outcome = run_experiment(replicate, run_dir, verbose=verbose)
            timings[f"seed-{seed}_s"] = outcome.timings["total_s"]
            runs.append((seed, outcome.layout))
            report_warnings[seed] = outcome.report_warnings
            lost[seed] = outcome.lost
    files = write_replicate_report(
        set_dir,
        runs,
        report_config,
        name=config.name,
        partition_seed=config.partition.seed_for(config.seed),
    )
    return ReplicateOutcome(
        files=files, runs=runs, report_warnings=report_warnings, lost=lost, timings=timings
    )
