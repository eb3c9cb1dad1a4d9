"""Shared fixtures: quiet logs, one thread, one Ray head per session, small real configs."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from deployment.local_ray import LocalRayHead
from simulations.runner import RAY_ADDRESS_ENV

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
torch.set_num_threads(1)


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
    with LocalRayHead(num_cpus=2) as head:
        os.environ[RAY_ADDRESS_ENV] = head.address
        try:
            yield head
        finally:
            del os.environ[RAY_ADDRESS_ENV]


@pytest.fixture(scope="session")
def ray_init_args(shared_ray_head: LocalRayHead | None) -> dict:
    """``ray.init`` arguments for a test that calls Flower's ``run_simulation`` itself."""
    common = {"include_dashboard": False, "log_to_driver": False}
    if shared_ray_head is None:
        return {**common, "num_cpus": 2}
    return {**common, "address": shared_ray_head.address}


@pytest.fixture
def tiny_audit() -> dict:
    """Audit settings small enough for tests on 8x8 digits."""
    return {
        "quick": True,
        "helper_epochs": 2,
        "generator": {"kind": "cgan", "epochs": 2},
        "classifier": {"epochs": [2]},
    }
