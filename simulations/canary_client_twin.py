"""What the canary clients cost the model: the same run trained again without them.

With ``audit.canary_clients`` > 0 the run's folder gets a twin (``no-canary-twin/``): the
same config, seed, data and rounds, no canary clients, training only. Its final global
accuracy beside the run's goes into ``client_canaries.json``; the difference is the accuracy
the canaries cost (negative: they helped, e.g. by shrinking the client-level noise that is
divided by the number of clients averaged).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.run_log import read_rounds
from panoramia_fl.reporting.assembly.inputs import load_client_canaries
from panoramia_fl.server.canary_clients import write_result
from panoramia_fl.simulations.experiment_config import (
    ExperimentConfig,
    apply_overrides,
    validate_config,
)
from panoramia_fl.simulations.run_dir import DatasetMeta, prepare_run_dir

Train = Callable[[ExperimentConfig, DatasetMeta, RunLayout], None]
"""``train(config, meta, layout)``: the training phase of a run directory."""


def twin_config(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` without canary clients."""
    raw = apply_overrides(config.model_dump(mode="json"), {"audit.canary_clients": 0})
    return validate_config(raw)


def final_accuracy(layout: RunLayout) -> float | None:
    """The last round's global accuracy in ``metrics.jsonl`` (None without one)."""
    for entry in reversed(read_rounds(layout)):
        if entry.global_accuracy is not None:
            return float(entry.global_accuracy)
    return None


def train_twin_and_record(config: ExperimentConfig, layout: RunLayout, *, train: Train) -> None:
    """Train the twin (unless done) and put both accuracies into ``client_canaries.json``."""
    if not layout.client_canaries.exists():
        return  # the canaries were not measured (training did not finish)
    twin_layout = layout.twin
    twin = twin_config(config)
    meta = prepare_run_dir(twin, twin_layout)
    if len(read_rounds(twin_layout)) < config.fl.rounds:
        train(twin, meta, twin_layout)
    result = load_client_canaries(layout.client_canaries)
    assert result is not None  # the file is there
    write_result(
        layout,
        dataclasses.replace(
            result,
            accuracy_with_canaries=final_accuracy(layout),
            accuracy_without_canaries=final_accuracy(twin_layout),
        ),
    )
