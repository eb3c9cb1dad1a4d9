"""Starting Ray in the harness's process: one way, for the simulation and the reference
models alike."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from panoramia_fl.simulations.experiment_config import ConfigError


def start_ray(init_args: dict[str, Any], *, num_cpus: float, num_gpus: float, key: str) -> None:
    """Start (or join) Ray as Flower's Ray backend would, here, so that (1) SIGTERM stops the
    run as Ctrl-C does (``ray.init`` installs a SIGTERM handler of its own, ``sys.exit``,
    which leaves the driver waiting forever on Flower's threads: the caller's is put back)
    and (2) a request of ``num_cpus`` / ``num_gpus`` the cluster cannot meet is an error
    naming ``key`` before anything runs (Flower would wait forever on an empty actor pool).
    Every ``ray.init`` of the harness goes through here."""
    import ray

    if ray.is_initialized():
        return
    on_sigterm = signal.getsignal(signal.SIGTERM)
    # Ray's workers do not see this driver's sys.path changes; Flower passes them the same way.
    pythonpath = os.pathsep.join(p for p in (*sys.path, os.environ.get("PYTHONPATH")) if p)
    os.environ["PYTHONPATH"] = pythonpath
    # A Ray started here inherits this environment, and its workers with it. A cluster
    # joined was started elsewhere: only a job's runtime environment reaches its workers,
    # and it costs every worker a setup process of its own, and the workers Ray starts
    # ahead of time (which have none) go unused.
    joins = init_args.get("address") is not None
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}} if joins else None
    ray.init(runtime_env=runtime_env, **init_args)
    if not joins:
        _without_autoscaler_monitor()
    if threading.current_thread() is threading.main_thread() and on_sigterm is not None:
        signal.signal(signal.SIGTERM, on_sigterm)
    have = ray.cluster_resources()
    try:
        check_fits(
            float(have.get("CPU", 0.0)), float(have.get("GPU", 0.0)), num_cpus, num_gpus, key
        )
    except ConfigError:
        ray.shutdown()
        raise


def _without_autoscaler_monitor() -> None:
    """Stop the autoscaler monitor of the Ray this process just started.

    A single-machine Ray has nothing to scale, and the monitor cost every run a second at
    its end: Ray stops it after the GCS (on Flower's ``ray.shutdown``), its exit handler
    then waits on the GCS that is gone, and Ray kills it after a second's grace. A head
    without it is what ``ray start --head --no-monitor`` makes; ``ray.init`` has no such
    option, so this goes through Ray's node object (Flower pins Ray's version)."""
    import ray

    node = ray._private.worker._global_node
    if node is not None and node.head:
        node.kill_monitor(check_alive=False)


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
