"""Run one experiment: prepare the run directory, train on Ray, audit, write the report."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from panoramia_fl.contracts.checkpoint import latest_round_checkpoint, readable_checkpoint
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.ml.datasets import Dataset
from panoramia_fl.reporting import LostSites
from panoramia_fl.server.round_audits import plan_audits
from panoramia_fl.server.stop import StopSwitch, stop_on_signals
from panoramia_fl.simulations.apps import build_apps
from panoramia_fl.simulations.canary_client_twin import train_twin_and_record
from panoramia_fl.simulations.config_file import report_config
from panoramia_fl.simulations.engine_waits import prompt_engine
from panoramia_fl.simulations.experiment_config import (
    ExperimentConfig,
    ResourcesConfig,
    evaluation_threads_beside_training,
)
from panoramia_fl.simulations.library_logs import quiet_logs
from panoramia_fl.simulations.platform_info import collect_platform, write_platform
from panoramia_fl.simulations.process_heap import freeze_loaded_modules
from panoramia_fl.simulations.ray_start import (
    check_local_resources,
    ray_init_args,
    ray_temp_dir,
    site_gpus,
    start_ray,
)
from panoramia_fl.simulations.reference_models import (
    ReferenceModelsDone,
    ensure_reference_models,
    reference_count,
)
from panoramia_fl.simulations.run_dir import DatasetMeta, hold_run_dir, prepare_run_dir
from panoramia_fl.simulations.run_task import check_run_task

log = logging.getLogger("panoramia_fl")


@dataclass
class RunOutcome:
    layout: RunLayout
    timings: dict[str, float] = field(default_factory=dict)
    reference_models: ReferenceModelsDone | None = None
    """The shared reference models trained and loaded from the cache (None: none fetched)."""
    report_warnings: list[str] = field(default_factory=list)
    """The written report's lines for stderr (``reporting.ReportFiles.warnings``); none when
    the run wrote no report."""
    lost: LostSites = field(default_factory=LostSites)
    """The sites the run lost, as its written report says (``reporting.RunReportFiles.lost``);
    none when the run wrote no report."""

    @property
    def run_dir(self) -> Path:
        return self.layout.root


def _backend_config(
    config: ExperimentConfig,
    *,
    num_cpus: float,
    num_gpus: float,
    temp_dir: Path | None,
    verbose: bool,
) -> dict:
    return {
        "client_resources": {"num_cpus": num_cpus, "num_gpus": num_gpus},
        "init_args": ray_init_args(config, temp_dir=temp_dir, verbose=verbose),
    }


STOP_WAIT_S = 20.0
"""How long an interrupted run waits for the round in progress to be abandoned."""


def _reference_models_step(
    config: ExperimentConfig,
    meta: DatasetMeta,
    layout: RunLayout,
    outcome: RunOutcome,
    *,
    num_cpus: float,
    num_gpus: float,
) -> Callable[[], None]:
    """The calibrated MIA's shared reference models, fetched or trained as Ray tasks with
    the audit resources in the session of the simulation that audits (Ray starts once)."""

    def step() -> None:
        t = time.time()
        done = ensure_reference_models(config, meta, layout, num_cpus=num_cpus, num_gpus=num_gpus)
        if done is not None:
            outcome.timings["reference_models_s"] = time.time() - t
            outcome.reference_models = done

    return step


def _simulate(
    config: ExperimentConfig,
    meta: DatasetMeta,
    layout: RunLayout,
    *,
    phases: tuple[str, ...],
    num_cpus: float,
    num_gpus: float,
    verbose: bool,
    before: Callable[[], None] | None = None,
) -> None:
    """One Flower simulation of ``phases``; ``before`` runs first, once Ray is up."""
    from flwr.simulation import run_simulation

    from panoramia_fl.simulations.engine_end import site_calls_ended_first

    switch = StopSwitch()
    server_app, client_app = build_apps(config, meta, layout, phases=phases, stop=switch)
    key = "resources.num_cpus" if "train" in phases else "resources.audit_num_cpus"
    with ray_temp_dir(config) as temp_dir, stop_on_signals(switch):
        try:
            start_ray(
                ray_init_args(config, temp_dir=temp_dir, verbose=verbose),
                num_cpus=num_cpus,
                num_gpus=num_gpus,
                key=key,
                fork_workers=config.ray.fork_workers,
            )
            # Torch, Ray and Flower are loaded: the driver's collections skip them from here.
            freeze_loaded_modules()
            if before is not None:
                before()
            with prompt_engine(), site_calls_ended_first():
                run_simulation(
                    server_app=server_app,
                    client_app=client_app,
                    num_supernodes=config.partition.num_sites,
                    backend_config=_backend_config(
                        config,
                        num_cpus=num_cpus,
                        num_gpus=num_gpus,
                        temp_dir=temp_dir,
                        verbose=verbose,
                    ),
                    verbose_logging=verbose,
                )
        except BaseException:
            # Flower leaves its ServerApp thread waiting for replies (Ctrl-C, a failed
            # Simulation Engine): end it, the round in progress abandoned, before going on.
            if not switch.stop(timeout=STOP_WAIT_S):
                log.warning("the server thread did not stop within %.0f s", STOP_WAIT_S)
            raise
        finally:
            import ray

            if ray.is_initialized():
                ray.shutdown()


def training_done(config: ExperimentConfig, layout: RunLayout) -> bool:
    final = readable_checkpoint(layout.final_model)
    return final is not None and final.round >= config.fl.rounds


def nothing_to_run(config: ExperimentConfig, layout: RunLayout) -> bool:
    """``layout`` already holds ``config``'s run with its training and every audit done (a
    point of a sweep run again): running it only writes its report, no simulation, so no
    Ray is needed. Conservative: a canary-client twin always counts as work."""
    if not layout.config.exists() or not training_done(config, layout):
        return False
    twin = config.audit.canary_clients > 0 and config.audit.canary_client_twin
    return not twin and not _plan_phases(config, layout)


def run_experiment(
    config: ExperimentConfig,
    run_dir: Path,
    *,
    verbose: bool = False,
    write_report: bool = True,
    read_dataset: Callable[[], Dataset] | None = None,
) -> RunOutcome:
    """Train (the rounds still missing), audit (the sites still missing), report; the run
    directory is this process's alone meanwhile (:func:`~simulations.run_dir.hold_run_dir`).
    ``read_dataset``: the config's dataset, when the caller reads it ahead
    (:func:`~simulations.run_dir.prepare_run_dir`)."""
    quiet_logs(verbose)
    check_local_resources(config)
    layout = RunLayout(run_dir)
    with hold_run_dir(layout):
        return _run(
            config,
            layout,
            verbose=verbose,
            write_report=write_report,
            read_dataset=read_dataset,
        )


Phases = list[tuple[tuple[str, ...], tuple[float, float]]]
"""The simulations still to run: their phases and per-site (CPUs, GPUs)."""


def _run(
    config: ExperimentConfig,
    layout: RunLayout,
    *,
    verbose: bool,
    write_report: bool,
    read_dataset: Callable[[], Dataset] | None,
) -> RunOutcome:
    outcome = RunOutcome(layout)
    t0 = time.time()
    meta = prepare_run_dir(
        config, layout, check=lambda m: check_run_task(config, m), read_dataset=read_dataset
    )
    outcome.timings["data_s"] = time.time() - t0
    _run_phases(config, meta, layout, outcome, verbose=verbose)
    if config.audit.canary_clients > 0 and config.audit.canary_client_twin:
        _train_twin(config, layout, outcome, verbose=verbose)
    if write_report:
        t = time.time()
        from panoramia_fl.reporting import write_report as write

        files = write(layout, report_config(layout))
        outcome.report_warnings, outcome.lost = files.warnings, files.lost
        outcome.timings["report_s"] = time.time() - t
    outcome.timings["total_s"] = time.time() - t0
    return outcome


def _site_resources(config: ExperimentConfig) -> tuple[tuple[float, float], tuple[float, float]]:
    """Per-site (CPUs, GPUs) of training and of the audits."""
    res: ResourcesConfig = config.resources
    sites = config.partition.num_sites
    return (res.train_cpus, site_gpus(res.num_gpus, sites)), (
        res.audit_cpus,
        site_gpus(res.audit_num_gpus, sites),
    )


def _plan_phases(config: ExperimentConfig, layout: RunLayout) -> Phases:
    """Training when rounds are missing (the platform recorded first), the audits when a
    site's are; one simulation when both fit the same resources (Ray starts once)."""
    train, audit = _site_resources(config)
    phases: Phases = []
    if not training_done(config, layout):
        res = config.resources
        info = collect_platform(
            site_torch_threads=res.train_threads,
            evaluation_threads_beside_training=(
                evaluation_threads_beside_training(config) if config.fl.central_evaluation else None
            ),
            cuda_used=train[1] > 0,
        )
        write_platform(layout, info)
        last = latest_round_checkpoint(layout)
        if last is not None:
            log.info("resuming after round %d", last.round)
        phases.append((("train",), train))
    sites = list(range(config.partition.num_sites))
    rounds = config.audit.audited_rounds(config.fl.rounds)
    if config.audit.enabled and plan_audits(layout, sites, config.fl.rounds, rounds):
        phases.append((("audit",), audit))
    if len(phases) == 2 and phases[0][1] == phases[1][1]:
        phases = [(("train", "audit"), train)]
    return phases


def _run_phases(
    config: ExperimentConfig,
    meta: DatasetMeta,
    layout: RunLayout,
    outcome: RunOutcome,
    *,
    verbose: bool,
) -> None:
    """One simulation per planned phase, timed; the audits' reference models first."""
    _, audit = _site_resources(config)
    for names, (cpus, gpus) in _plan_phases(config, layout):
        before = None
        if "audit" in names and reference_count(config) > 0:
            before = _reference_models_step(
                config, meta, layout, outcome, num_cpus=audit[0], num_gpus=audit[1]
            )
        t = time.time()
        _simulate(
            config,
            meta,
            layout,
            phases=names,
            num_cpus=cpus,
            num_gpus=gpus,
            verbose=verbose,
            before=before,
        )
        spent = time.time() - t - outcome.timings.get("reference_models_s", 0.0)
        outcome.timings["+".join(names) + "_s"] = spent


def _train_twin(
    config: ExperimentConfig, layout: RunLayout, outcome: RunOutcome, *, verbose: bool
) -> None:
    """The run trained again without its canary clients, with training's resources."""
    t = time.time()
    (twin_cpus, twin_gpus), _ = _site_resources(config)
    train_twin_and_record(
        config,
        layout,
        train=lambda c, m, d: _simulate(
            c, m, d, phases=("train",), num_cpus=twin_cpus, num_gpus=twin_gpus, verbose=verbose
        ),
    )
    outcome.timings["no_canary_twin_s"] = time.time() - t
