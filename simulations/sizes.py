"""Sizes a run must hold, checked on its config before any work: a setting that cannot fit
this machine is refused with its estimate, instead of exhausting the memory hours later
(Ray's memory killer then ends the sites)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from panoramia_fl.simulations.experiment_config import (
    ConfigError,
    ExperimentConfig,
    local_cpus,
    sites_at_once,
)

GRADIENT_CANARY_SHARE = 0.5
"""The part of a site's share of the memory its gradient canaries may take; the rest holds
torch, the model, the site's data and the audit (about 1 GB a site on the default)."""

MAX_STEPS_PER_ROUND = 1_000_000
"""The most noisy steps a site's round may take: ceil(declared size / batch size) a local
epoch (:class:`clients.privacy.Sampling`), each a forward and backward pass, so more never
finish."""

MAX_REPLICATES = 1000
"""The most runs a replicate set takes (``--seeds``, a sweep's ``replicates``): each is a
whole training and audit run, a minute or more; more is a typo, not a plan."""

_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its control group's limit
    when lower (a container)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def check_sizes(
    config: ExperimentConfig, *, memory: int | None = None, cpus: float | None = None
) -> None:
    """Refuse a ``dp.declared_size`` whose rounds never finish (over
    :data:`MAX_STEPS_PER_ROUND` noisy steps) and ``audit.gradient_canaries`` that cannot
    fit: ``2 K`` canaries of
    :data:`~clients.real_path_canaries.MEMORY_PER_GRADIENT_CANARY` bytes in each training site's
    process, against :data:`GRADIENT_CANARY_SHARE` of the site's share of ``memory`` (default: this
    machine's) among the sites that train at once on ``cpus`` (default: the local Ray's)."""
    _check_declared_size(config)
    pairs = config.audit.gradient_canaries
    if not pairs:
        return
    # Here, not above: the site code that owns the figure imports torch, which a run without
    # gradient canaries imports after its Ray has started (simulations.ray_start).
    from panoramia_fl.clients.real_path_canaries import MEMORY_PER_GRADIENT_CANARY

    memory = machine_memory() if memory is None else memory
    cpus = float(local_cpus(config)) if cpus is None else cpus
    at_once = sites_at_once(config, cpus, sites=config.partition.num_sites)
    room = GRADIENT_CANARY_SHARE * memory / at_once
    need = 2 * pairs * MEMORY_PER_GRADIENT_CANARY
    if need <= room:
        return
    most = int(room // (2 * MEMORY_PER_GRADIENT_CANARY))
    raise ConfigError(
        f"audit.gradient_canaries: {pairs} pairs need about {_gb(need)} in each site's process "
        f"(2 x {pairs} canaries x {MEMORY_PER_GRADIENT_CANARY} bytes), but {_gb(memory)} of memory "
        f"for {at_once} site{'s' * (at_once != 1)} training at once leave the canaries about "
        f"{_gb(room)} each: at most about {most:,} pairs here; lower it, or run fewer sites "
        "at once (raise resources.num_cpus)"
    )


def _check_declared_size(config: ExperimentConfig) -> None:
    """A ``dp.declared_size`` whose DP-SGD rounds could not finish, refused before any
    work (with ``fl.local_steps`` the steps are those, whatever the size)."""
    fl, size = config.fl, config.dp.declared_size
    if size is None or not config.dp.record_level or fl.local_steps is not None:
        return
    steps = math.ceil(size / fl.batch_size) * fl.local_epochs
    if steps > MAX_STEPS_PER_ROUND:
        raise ConfigError(
            f"dp.declared_size: {size} records at fl.batch_size {fl.batch_size} make {steps} "
            f"noisy steps a round ({fl.local_epochs} local epochs), more than "
            f"{MAX_STEPS_PER_ROUND} ever finish: declare a size near the sites' record "
            "counts, or set fl.local_steps"
        )


def check_replicates(n: int, first_seed: int, *, key: str, seed_limit: int) -> None:
    """``n`` runs from ``first_seed`` are a set this harness takes: at least 1, at most
    :data:`MAX_REPLICATES`, and every seed below ``seed_limit``; a :class:`ConfigError`
    naming ``key`` (``--seeds``, ``replicates``) otherwise, before any run starts."""
    if n < 1:
        raise ConfigError(f"{key}: at least 1 run, not {n}")
    if n > MAX_REPLICATES:
        raise ConfigError(
            f"{key}: {n} runs is more than {MAX_REPLICATES}; each is a whole training and audit run"
        )
    last = first_seed + n - 1
    if last >= seed_limit:
        raise ConfigError(
            f"{key}: {n} runs from seed {first_seed} reach seed {last}, past the largest "
            f"seed {seed_limit - 1}; run fewer, or start from a lower seed"
        )
