"""What ``flwr run`` needs besides the code: the Flower App manifest, the run config of a
prepared run directory, and each SuperNode's node config.

A site on another machine needs only its own data file and the project installed: the
experiment config and the dataset description travel in the run config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.deployment.flower_apps import (
    DATASET_KEY,
    EXPERIMENT_KEY,
    PHASES_KEY,
    REPORT_KEY,
    RUN_CONFIG_DEFAULTS,
    RUN_DIR_KEY,
    STATE_DIR_NAME,
    refuse_simulation_settings,
)
from panoramia_fl.simulations.config_file import dump_config
from panoramia_fl.simulations.experiment_config import ExperimentConfig
from panoramia_fl.simulations.run_dir import DatasetMeta, adopt_config, prepare_run_dir

APP_PUBLISHER = "panoramia"
APP_NAME = "panoramia-fl"


def app_pyproject(*, version: str = "0.1.0") -> dict[str, Any]:
    """The smallest Flower App manifest that runs the installed project under ``flwr run``.

    The FAB then carries no code: the SuperLink and every SuperNode import
    ``deployment.flower_apps`` from the installed ``panoramia-fl`` package.
    """
    return {
        "project": {
            "name": APP_NAME,
            "version": version,
            "description": "PANORAMIA-FL: federated training and per-site privacy audits",
            "license": "Apache-2.0",
            "dependencies": ["flwr>=1.42,<1.43"],
        },
        "tool": {
            "flwr": {
                "app": {
                    "publisher": APP_PUBLISHER,
                    "components": {
                        "serverapp": "panoramia_fl.deployment.flower_apps:server_app",
                        "clientapp": "panoramia_fl.deployment.flower_apps:client_app",
                    },
                    "config": dict(RUN_CONFIG_DEFAULTS),
                }
            }
        },
    }


def write_app_dir(app_dir: Path) -> Path:
    """Write ``pyproject.toml`` of a code-less Flower App into ``app_dir``; return the dir."""
    app_dir.mkdir(parents=True, exist_ok=True)
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(app_pyproject()))
    return app_dir


def run_config_values(
    config: ExperimentConfig,
    layout: RunLayout,
    *,
    phases: tuple[str, ...] = ("train", "audit"),
    write_report: bool = True,
) -> dict[str, Any]:
    """The ``flwr run --run-config`` values of one prepared run directory.

    The experiment config and the dataset metadata travel in the run config, so a SuperNode
    on another machine needs nothing from the server's disk.
    """
    return {
        RUN_DIR_KEY: str(layout.root.resolve()),
        EXPERIMENT_KEY: dump_config(config),
        DATASET_KEY: layout.dataset.read_text(),
        PHASES_KEY: ",".join(phases),
        REPORT_KEY: write_report,
    }


def node_config_arg(values: dict[str, Any]) -> str:
    """``{"partition-id": 0, "data-path": "/x"}`` -> ``partition-id=0 data-path="/x"``."""
    parts = []
    for key, value in values.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = str(value)
        else:
            if '"' in str(value) or " " in str(value):
                raise ValueError(f"node config {key}={value!r}: no spaces or quotes allowed")
            text = f'"{value}"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


@dataclass(frozen=True)
class DeploymentFiles:
    """A run directory prepared for ``flwr run``."""

    layout: RunLayout
    app_dir: Path
    run_config: Path
    node_configs: list[dict[str, Any]]
    """One ``--node-config`` mapping per site (partition-id, num-partitions, data-path,
    state-dir)."""

    @property
    def run_dir(self) -> Path:
        return self.layout.root


def prepare_deployment(
    config: ExperimentConfig,
    run_dir: Path,
    *,
    phases: tuple[str, ...] = ("train", "audit"),
    write_report: bool = True,
    meta: DatasetMeta | None = None,
) -> DeploymentFiles:
    """Prepare ``run_dir`` for ``flwr run``.

    Without ``meta`` (loopback, demos, tests) the dataset is partitioned here exactly as for
    a simulation and each node config points at ``<run_dir>/sites/site-<id>.npz``, with
    state in ``<run_dir>/sites/panoramia-state``.

    With ``meta`` (real sites: the data never comes to the server) only ``config.yaml`` and
    ``dataset.json`` are written; the node configs carry no ``data-path``, each site sets
    its own, and the ServerApp writes ``partition.json`` from what the sites report.

    Both write ``<run_dir>/deployment/app/pyproject.toml`` (a code-less Flower App) and
    ``<run_dir>/deployment/run-config.toml`` (``flwr run --run-config`` values).
    """
    refuse_simulation_settings(config)  # before anything is written
    layout = RunLayout(run_dir.resolve())
    n = config.partition.num_sites
    nodes: list[dict[str, Any]] = [{"partition-id": i, "num-partitions": n} for i in range(n)]
    if meta is None:
        prepare_run_dir(config, layout)
        for node in nodes:
            path = layout.site_file(node["partition-id"])
            node.update({"data-path": str(path), "state-dir": str(path.parent / STATE_DIR_NAME)})
    else:
        layout.root.mkdir(parents=True, exist_ok=True)
        adopt_config(config, layout)  # an existing run of another config is refused
        if not layout.config.exists():
            atomic_write_text(layout.config, dump_config(config))
        meta.write(layout)
    dep = layout.deployment
    app_dir = write_app_dir(dep / "app")
    run_config = dep / "run-config.toml"
    values = run_config_values(config, layout, phases=phases, write_report=write_report)
    run_config.write_text(tomli_w.dumps(values))
    return DeploymentFiles(
        layout=layout, app_dir=app_dir, run_config=run_config, node_configs=nodes
    )
