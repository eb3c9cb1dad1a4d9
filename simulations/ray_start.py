"""Starting Ray in the harness's process: one way, for the simulation and the reference
models alike, and for a run's first simulation ahead of the run's own imports.

Torch, Flower's simulation engine and the project's site code are not imported here: a
run starts its Ray before it imports them (:func:`ray_started_ahead`)."""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.simulations.experiment_config import (
    ConfigError,
    ExperimentConfig,
    local_cpus,
    processes_that_fit,
    ray_address,
)
from panoramia_fl.simulations.library_logs import quiet_logs
from panoramia_fl.simulations.process_heap import CollectorPause
from panoramia_fl.simulations.site_modules import SIMULATION_PACKAGE, SITE_CODE_MODULE
from panoramia_fl.simulations.sizes import check_sizes
from panoramia_fl.simulations.swapped import swapped, swapped_arguments
from panoramia_fl.simulations.worker_forks import ForkServer, start_fork_server, workers_forked

SITE_PRELOAD_MODULE = "panoramia_fl.simulations.site_preload"
"""The module the workers of a Ray the run starts import as they start (Ray's
``preload_python_modules``), beside the driver's own imports, and not when the first message
arrives: it imports what a site process needs, :data:`site_preload.SITE_PROCESS_MODULES`,
without Flower's server side. Named, not imported: the driver must not import it."""


WORKERS_AHEAD: dict[str, Any] = {
    "preload_python_modules": [SITE_PRELOAD_MODULE],
    "enable_worker_prestart": True,
    "prestart_worker_first_driver": False,
}
"""Ray's settings (``_system_config``) for the workers of a Ray a run starts: they import
:data:`SITE_PRELOAD_MODULE`, and the raylet starts them as it starts, not when the driver
registers. By default Ray starts them only then, and ``ray.init`` waits until they have
imported Ray and registered: on two cores 0.5-0.7 s of every start, during which both
cores were idle for a quarter of a second. The sites' actors take them; how many start:
:func:`_workers_ahead`."""


def ray_init_args(
    config: ExperimentConfig, *, temp_dir: Path | None, verbose: bool
) -> dict[str, Any]:
    """``ray.init``'s arguments: join the cluster of :func:`ray_address`, or start a local
    Ray with ``ray.num_cpus`` (default: every CPU), its workers started with it and
    importing :data:`SITE_PRELOAD_MODULE` (:data:`WORKERS_AHEAD`), and its session files in
    ``temp_dir`` (None: Ray's default)."""
    init_args: dict[str, Any] = {"include_dashboard": False, "log_to_driver": verbose}
    address = ray_address(config)
    if address:
        # A cluster's own resources decide; num_cpus beside an address is an error in Ray.
        init_args["address"] = address
        return init_args
    init_args["num_cpus"] = local_cpus(config)
    init_args["_system_config"] = copy.deepcopy(WORKERS_AHEAD)
    if temp_dir is not None:
        init_args["_temp_dir"] = str(temp_dir)
    if not verbose:
        init_args["logging_level"] = logging.ERROR
    return init_args


@contextmanager
def ray_temp_dir(config: ExperimentConfig) -> Iterator[Path | None]:
    """Where a local Ray keeps its session files: ray.temp_dir when set, else a short private
    folder removed afterwards (Ray's socket paths must fit AF_UNIX's limit). None when the
    run joins a cluster, whose files are its own (no folder is made that a run killed with
    SIGKILL would leave behind), and when this process's Ray is up already (started ahead,
    its folder is that start's)."""
    import ray

    if ray_address(config) or ray.is_initialized():
        yield None
        return
    if config.ray.temp_dir is not None:
        yield config.ray.temp_dir
        return
    temp_dir = Path(tempfile.mkdtemp(prefix="pfl-ray-"))
    try:
        yield temp_dir
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


@contextmanager
def ray_started_ahead(
    config: ExperimentConfig,
    layout: RunLayout,
    *,
    verbose: bool,
    ahead: Callable[[], object] | None = None,
) -> Iterator[None]:
    """The local Ray of a new run (``layout`` holds none yet, so it trains) started now,
    before the run imports Flower's engine, for its first simulation to take as it is
    (:func:`start_ray`). Its workers' modules (:data:`SITE_PRELOAD_MODULE`) are imported
    meanwhile: once, by the fork server started first, before Ray's own import, while this
    process imports the site code, then Flower's engine, and then calls ``ahead`` (the
    run's next step: reading its data), on a thread of its own (``ray.fork_workers``),
    else by each worker as it starts. ``ahead`` keeps what it computes for the run to take
    (:mod:`~simulations.data_ahead`): an error it raises is dropped. A run that joins a
    cluster, or resumes, starts its Ray when it needs one. Ray is shut down on leaving, if
    the run did not."""
    if ray_address(config) or layout.config.exists():
        yield
        return
    check_local_resources(config)  # a request that cannot fit is refused before Ray starts
    quiet_logs(verbose)
    site_cpus = config.resources.train_cpus
    # Before Ray's import: the server's own imports take the core this process leaves idle.
    forks = _fork_server(site_cpus) if config.ray.fork_workers else None
    ray_imported = threading.Event()
    loading: CollectorPause | None = None
    if forks is not None:
        loading = CollectorPause()  # until the thread's imports are done
        # ray.init returns once the workers have registered, and forked workers register
        # once the server has imported their modules: meanwhile this process imports those
        # of them it needs too (not Ray's), then Flower's engine, and reads the run's data,
        # beside its own start of Ray. (Ray's start itself cannot go to another thread: a
        # driver connected there keeps a core busy polling for Ray's error messages.)
        threading.Thread(
            target=_imports_ahead, args=(ray_imported, loading, ahead), daemon=True
        ).start()
    import ray

    ray_imported.set()

    with ray_temp_dir(config) as temp_dir:
        try:
            init_args = ray_init_args(config, temp_dir=temp_dir, verbose=verbose)
            _ray_init(init_args, site_cpus=site_cpus, fork_workers=forks is not None, forks=forks)
            yield
        finally:
            if loading is not None:
                loading.end()  # the thread's end, if an error came first
            ray.shutdown()  # also after a start Ctrl-C cut short; a no-op once the run did
            if forks is not None:
                forks.close()


def _imports_ahead(
    ray_imported: threading.Event, loading: CollectorPause, ahead: Callable[[], object] | None
) -> None:
    """Import :data:`SITE_CODE_MODULE`, then, once this process has imported Ray
    (``ray_imported`` set), Flower's engine (:data:`SIMULATION_PACKAGE`, a second of
    imports the run would pay once its Ray is up), then end ``loading`` and call ``ahead``,
    each ahead of its use; an error is left to that use, which raises it. Flower's engine
    imports Ray: it waits for Ray's own import, so that no module of Ray's is imported on
    two threads at once."""
    with contextlib.suppress(Exception):
        try:
            importlib.import_module(SITE_CODE_MODULE)
            ray_imported.wait()
            importlib.import_module(SIMULATION_PACKAGE)
        finally:
            loading.end()
        if ahead is not None:
            ahead()


def start_ray(
    init_args: dict[str, Any],
    *,
    num_cpus: float,
    num_gpus: float,
    key: str,
    fork_workers: bool = True,
) -> None:
    """Start (or join) Ray as Flower's Ray backend would, here, unless this process's Ray is
    up already (:func:`ray_started_ahead`), so that (1) SIGTERM stops the run as Ctrl-C does
    and (2) a request of ``num_cpus`` / ``num_gpus`` the cluster cannot meet is an error
    naming ``key`` before anything runs (Flower would wait forever on an empty actor pool;
    Ray is shut down). A local Ray forks its workers where the platform can, unless not
    ``fork_workers`` (``ray.fork_workers``). Every ``ray.init`` of the harness goes through
    here."""
    import ray

    if not ray.is_initialized():
        _ray_init(init_args, site_cpus=num_cpus, fork_workers=fork_workers)
    have = ray.cluster_resources()
    try:
        check_fits(
            float(have.get("CPU", 0.0)), float(have.get("GPU", 0.0)), num_cpus, num_gpus, key
        )
    except ConfigError:
        ray.shutdown()
        raise


def _ray_init(
    init_args: dict[str, Any],
    *,
    site_cpus: float,
    fork_workers: bool,
    forks: ForkServer | None = None,
) -> None:
    """``ray.init(**init_args)`` with the caller's SIGTERM handler kept: Ray installs one of
    its own, ``sys.exit``, which leaves the driver waiting forever on Flower's threads.

    The workers of a Ray started here begin in :func:`worker_environment`, forked from a
    server that imported their modules in it (:mod:`~simulations.worker_forks`, where the
    platform can, unless not ``fork_workers``): ``forks``, started ahead for it, else one
    started now. As many of them start with the raylet as site processes fit on its CPUs
    (:func:`_workers_ahead`). This process keeps its own environment, ``PYTHONPATH`` aside."""
    import ray

    on_sigterm = signal.getsignal(signal.SIGTERM)
    joins = init_args.get("address") is not None
    environment = worker_environment(site_cpus=None if joins else site_cpus)
    # Ray's workers do not see this driver's sys.path changes; Flower passes them the same way.
    os.environ["PYTHONPATH"] = environment["PYTHONPATH"]
    if joins:
        # A cluster joined was started elsewhere: only a job's runtime environment reaches
        # its workers, and it costs every worker a setup process of its own, and the workers
        # Ray starts ahead of time (which have none) go unused.
        runtime_env = {"env_vars": {"PYTHONPATH": environment["PYTHONPATH"]}}
        ray.init(runtime_env=runtime_env, **init_args)
    else:
        log_monitor = bool(init_args.get("log_to_driver", True))
        cpus = init_args.get("num_cpus")
        sites = None if cpus is None else processes_that_fit(float(cpus), site_cpus)
        if forks is None and fork_workers:
            forks = _fork_server(site_cpus)
        try:
            with (
                _raylet_environment(_set_for_workers(environment)),
                _without_unused_processes(log_monitor=log_monitor),
                _workers_ahead(sites),
                workers_forked(forks),
            ):
                ray.init(**init_args)
        except BaseException:
            if forks is not None:
                forks.close()
            raise
    if threading.current_thread() is threading.main_thread() and on_sigterm is not None:
        signal.signal(signal.SIGTERM, on_sigterm)


def _fork_server(site_cpus: float) -> ForkServer | None:
    """A fork server for the workers of the next local Ray (:data:`WORKERS_AHEAD`)."""
    return start_fork_server(
        worker_environment(site_cpus=site_cpus),
        before_ray=[SITE_CODE_MODULE],
        with_ray=WORKERS_AHEAD["preload_python_modules"],
    )


def _set_for_workers(environment: dict[str, str]) -> dict[str, str]:
    """What :func:`worker_environment` sets that this process's environment does not hold."""
    return {k: v for k, v in environment.items() if os.environ.get(k) != v}


def worker_environment(*, site_cpus: float | None) -> dict[str, str]:
    """The environment the workers of a Ray this process starts import in: this process's,
    with its ``sys.path`` in ``PYTHONPATH``, and ``OMP_NUM_THREADS`` at ``site_cpus`` (whole,
    at least 1; None: unset) unless this environment sets it. Ray gives a worker that value
    when it takes a site, but these workers import torch and numpy first
    (:data:`SITE_PRELOAD_MODULE`), and torch's, OpenMP's and OpenBLAS's thread pools are
    sized from it as they load."""
    environment = dict(os.environ)
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    # Once: a second start finds this process's own sys.path in PYTHONPATH.
    environment["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys(p for p in (*sys.path, *inherited) if p)
    )
    if site_cpus is not None:
        environment.setdefault("OMP_NUM_THREADS", str(max(math.floor(site_cpus), 1)))
    return environment


@contextmanager
def _raylet_environment(values: dict[str, str]) -> Iterator[None]:
    """A raylet started meanwhile, and so its workers, start with ``values`` in their
    environment beside this process's, which keeps its own: a thread of this process may be
    importing torch meanwhile (:func:`ray_started_ahead`), whose thread pools are sized from
    it as they load. ``ray.init`` has no option for it, so this goes through the function
    that starts the raylet."""
    from ray._private import services

    def added(raylet: inspect.BoundArguments) -> None:
        raylet.arguments["env_updates"] = {**(raylet.arguments.get("env_updates") or {}), **values}

    with swapped_arguments(services, "start_raylet", added):
        yield


@contextmanager
def _without_unused_processes(*, log_monitor: bool) -> Iterator[None]:
    """A Ray head started meanwhile, for one run, starts none of Ray's processes that the
    run leaves unused (``ray.init`` has no option for them, so this goes through Ray's
    node object; Flower pins Ray's version):

    - the dashboard's process: with ``include_dashboard=False`` it only reports Ray's usage
      statistics, and ``ray.init`` waits for it to register before it starts the raylet
      (1.2-1.5 s of every start on 2 cores, 0.8 CPU s);
    - the autoscaler monitor (``ray start --no-monitor``): one machine has nothing to
      scale, and at ``ray.shutdown`` its exit handler waited a second on the GCS then gone;
    - the log monitor, unless ``log_monitor`` (``ray start --include-log-monitor=false``):
      it only forwards the workers' output to a driver that asks for it
      (``log_to_driver``), and reads their files all the run long.
    """
    from ray._private.node import Node

    unused = ["start_api_server", "start_monitor"]
    if not log_monitor:
        unused.append("start_log_monitor")

    def not_started(node: Node, *args: object, **kwargs: object) -> None:
        """A process of the head left out (the node records none for it)."""

    with swapped(Node, **{name: not_started for name in unused if hasattr(Node, name)}):
        yield


PRESTART_FLAG = "--num_prestart_python_workers="
"""The raylet's option for the workers it starts with it (Ray sets one per CPU)."""


@contextmanager
def _workers_ahead(count: int | None) -> Iterator[None]:
    """A raylet started meanwhile starts ``count`` workers with it (None: Ray's count, one per
    CPU of the Ray up to one per core of the machine). Each imports torch and the site code
    as it starts (:data:`WORKERS_AHEAD`), about 3 CPU s and 0.3 GB, and Flower's actors
    take only as many as fit on the Ray's CPUs: a one-site run on 2 cores left one unused,
    and Ray would start 16 for a two-site run on 16 cores. ``ray.init`` has no option for
    it, so this goes through the function that starts Ray's processes."""
    from ray._private import services
    from ray._private.ray_constants import PROCESS_TYPE_RAYLET

    if count is None:
        yield
        return
    start_ray_process = services.start_ray_process

    def started_with_count(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == PROCESS_TYPE_RAYLET:
            command = [
                f"{PRESTART_FLAG}{count}" if arg.startswith(PRESTART_FLAG) else arg
                for arg in command
            ]
        return start_ray_process(command, process_type, *args, **kwargs)

    with swapped(services, start_ray_process=started_with_count):
        yield


def site_gpus(value: float | str, num_sites: int) -> float:
    """GPU share per site process; ``auto`` lets every site share one GPU."""
    import torch

    if not torch.cuda.is_available():
        return 0.0
    if value == "auto":
        return round(1.0 / max(1, min(num_sites, 8)), 3)
    return float(value)


def check_local_resources(config: ExperimentConfig) -> None:
    """Before anything runs: the sizes a site must hold (:func:`~simulations.sizes.check_sizes`)
    and each phase's per-site request against the local Ray this run would start (a cluster
    it joins is checked once joined, by :func:`start_ray`). A GPU share of ``auto`` always
    fits (a share of one GPU, or none without CUDA): only a number asks torch."""
    if ray_address(config):
        return
    check_sizes(config)
    cpus = float(local_cpus(config))
    res = config.resources
    requests = [(res.train_cpus, res.num_gpus, "resources.num_cpus")]
    if config.audit.enabled:
        requests.append((res.audit_cpus, res.audit_num_gpus, "resources.audit_num_cpus"))
    sites = config.partition.num_sites
    for num_cpus, gpus_value, key in requests:
        num_gpus = 0.0 if gpus_value == "auto" else site_gpus(gpus_value, sites)
        check_fits(cpus, _cuda_devices() if num_gpus else 0.0, num_cpus, num_gpus, key)


def _cuda_devices() -> float:
    import torch

    return float(torch.cuda.device_count())


def check_fits(cpus: float, gpus: float, num_cpus: float, num_gpus: float, key: str) -> None:
    """A :class:`ConfigError` naming ``key`` when one site's ``num_cpus`` / ``num_gpus``
    exceed a cluster of ``cpus`` / ``gpus``: no site could ever start."""
    if num_cpus > cpus or num_gpus > gpus:
        gpu_key = key.replace("cpus", "gpus")
        raise ConfigError(
            f"{key}={num_cpus:g}, {gpu_key}={num_gpus:g} per site, but the Ray cluster has "
            f"{cpus:g} CPUs and {gpus:g} GPUs: no site could start; lower {key} (or "
            f"{gpu_key}), or give Ray more (ray.num_cpus, ray.address)"
        )
