"""Shared fixtures: quiet logs, one thread, and small real configs."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
torch.set_num_threads(1)


@pytest.fixture
def tiny_audit() -> dict:
    """Audit settings small enough for tests on 8x8 digits."""
    return {
        "quick": True,
        "helper_epochs": 2,
        "generator": {"kind": "cgan", "epochs": 2},
        "classifier": {"epochs": [2]},
    }
