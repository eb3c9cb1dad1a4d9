"""Shared fixtures: quiet logs, one thread, one Ray head per session, small real configs."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from panoramia_fl.simulations import ray_start
from panoramia_fl.simulations.experiment_config import RAY_ADDRESS_ENV, validate_config
from panoramia_fl.simulations.local_ray import LocalRayHead
from panoramia_fl.simulations.weights_cache import CACHE_ENV

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a long test (marked ``ray`` or ``slow``: simulations, deployments, CLI runs,
    in-process trials of 8 s or more) run first, the short files after them, each group in
    file order. The workers take whole files (``--dist loadfile --no-loadscope-reorder``, see
    the Makefile), so the suite ends on short files that even out the workers, not on one
    long file while the other workers have finished."""
    heavy = {
        item.path
        for item in items
        if any(item.iter_markers("ray")) or any(item.iter_markers("slow"))
    }
    items.sort(key=lambda item: item.path not in heavy)


@pytest.fixture(autouse=True)
def seeded_rngs() -> None:
    """Every test starts from the same global RNG state (torch, numpy, random), whatever ran
    before it in its worker: a model made without a seed of its own starts from the same
    weights in every run, in any order the workers take the tests."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)


@pytest.fixture(scope="session", autouse=True)
def shared_ray_head(request: pytest.FixtureRequest) -> Iterator[LocalRayHead | None]:
    """One Ray head for every experiment of the session (its runs join it through
    ``RAY_ADDRESS``, as a user's runs would), started only when a collected test is marked
    ``ray``: each private Ray would cost a start and a shutdown per run. A test that names its
    own ``ray.address`` still gets its own cluster."""
    wanted = any(item.get_closest_marker("ray") for item in request.session.items)
    if not wanted or os.environ.get(RAY_ADDRESS_ENV):
        yield None
        return
    # One CPU: a simulation then starts one site actor, not two, and its sites take turns
    # in it. Each actor costs seconds of CPU to start (Python, torch, Flower), which the
    # suite's workers otherwise pay twice per run while competing for the same two cores.
    # No log monitor: no test reads worker output through a driver, and it polls the
    # workers' log files for the whole session.
    with LocalRayHead(num_cpus=1, log_monitor=False) as head:
        os.environ[RAY_ADDRESS_ENV] = head.address
        try:
            yield head
        finally:
            del os.environ[RAY_ADDRESS_ENV]


@pytest.fixture(scope="session", autouse=True)
def shared_weights_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One weights cache for the session, shared by the xdist workers (under their common
    temporary folder; its locks keep concurrent fills whole): a run whose reference models
    an earlier test trained loads them. Never the user's own cache. A test that must see
    them trained names a folder of its own (``tests/test_reference_models.py``)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "weights-cache"
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    try:
        yield folder
    finally:
        if previous is None:
            del os.environ[CACHE_ENV]
        else:
            os.environ[CACHE_ENV] = previous


@pytest.fixture(scope="session")
def ray_init_args(shared_ray_head: LocalRayHead | None) -> Iterator[dict]:
    """``ray.init`` arguments for a test that calls Flower's ``run_simulation`` itself: the
    harness's own, so such a test joins the cluster a run would join (``RAY_ADDRESS``)."""
    config = validate_config({"name": "direct", "ray": {"num_cpus": 2}})
    with ray_start.ray_temp_dir(config) as temp_dir:
        yield ray_start.ray_init_args(config, temp_dir=temp_dir, verbose=False)


@pytest.fixture
def tiny_audit() -> dict:
    """Audit settings small enough for tests on 8x8 digits."""
    return {
        "quick": True,
        "helper_epochs": 2,
        "generator": {"kind": "cgan", "epochs": 2},
        "classifier": {"epochs": [2]},
    }
