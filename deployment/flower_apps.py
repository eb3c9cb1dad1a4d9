"""The project's ServerApp and ClientApp for Flower's Deployment Engine (``flwr run``).

``flwr run`` imports two module-level objects, :data:`server_app` and :data:`client_app`
(``[tool.flwr.app.components]`` in the app's ``pyproject.toml``). They wrap the same apps
the simulation runs (:func:`server.server_app.build_server_app`,
:func:`clients.client_app.build_client_app`); what a simulation passes in a closure they read
from Flower's context instead.

Run config (the same for the server and every site; defaults in :data:`RUN_CONFIG_DEFAULTS`):

``run-dir``
    Absolute path of the run directory on the SuperLink's machine (checkpoints, metrics,
    audits, report). Under ``flwr run`` the ServerApp's working directory is wherever the
    SuperLink was started, so a relative path is an error.
``experiment-config``
    The resolved :class:`~simulations.experiment_config.ExperimentConfig` as YAML text. Empty: read
    ``<run-dir>/config.yaml`` (possible only where the run directory is visible, e.g. on a
    loopback consortium).
``dataset-meta``
    :class:`~simulations.run_dir.DatasetMeta` as JSON. Empty: ``<run-dir>/dataset.json``.
``phases``
    ``"train,audit"`` (default), ``"train"`` or ``"audit"``.
``write-report``
    Write ``report.*`` into the run directory after the audit phase.

Node config (each SuperNode's ``--node-config``): see :class:`NodeSettings`.

Each SuperNode starts a fresh ClientApp process per message, so nothing may live only in
memory across rounds: a site's DP ledger is a file under its ``state-dir`` (default: next to
its data), named after the run directory so that a resumed run keeps counting.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.clients.client_app import SiteRuntime, build_client_app
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.clients.site_policy import SitePolicy
from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.files import private_dir
from panoramia_fl.contracts.json_values import from_dict
from panoramia_fl.contracts.run_files import RunLayout, site_refusals_name
from panoramia_fl.server.server_app import ServerSettings, build_server_app
from panoramia_fl.simulations.apps import (
    SiteResolver,
    gradient_canary_settings,
    inversion_settings,
    server_settings,
)
from panoramia_fl.simulations.config_file import report_config
from panoramia_fl.simulations.experiment_config import (
    ConfigError,
    ExperimentConfig,
    load_config,
    validate_config,
)
from panoramia_fl.simulations.model_check_settings import deployed_model_check_settings
from panoramia_fl.simulations.reference_models import site_pool
from panoramia_fl.simulations.run_dir import DatasetMeta, read_public

log = logging.getLogger(__name__)

RUN_DIR_KEY = "run-dir"
EXPERIMENT_KEY = "experiment-config"
DATASET_KEY = "dataset-meta"
PHASES_KEY = "phases"
REPORT_KEY = "write-report"

RUN_CONFIG_DEFAULTS: dict[str, str | bool] = {
    RUN_DIR_KEY: "",
    EXPERIMENT_KEY: "",
    DATASET_KEY: "",
    PHASES_KEY: "train,audit",
    REPORT_KEY: True,
}
"""``[tool.flwr.app.config]``: ``flwr run`` only accepts overrides of keys declared there."""

_PHASES = ("train", "audit")
STATE_DIR_NAME = "panoramia-state"


class DeploymentConfigError(UserError, ValueError):
    """A run-config or node-config value is missing or wrong; the message names the key."""


class IdealSecureAggregationRefused(DeploymentConfigError):
    """``fl.secure_aggregation: ideal`` on a deployment: no real protocol backs it."""


class DishonestServerRefused(DeploymentConfigError):
    """``fl.adversary`` on a deployment: an attack on real sites, never a setting."""


@dataclass(frozen=True)
class DeploymentRun:
    """What one ``flwr run`` is about, read from the run config."""

    layout: RunLayout
    config: ExperimentConfig
    meta: DatasetMeta
    phases: tuple[str, ...]
    write_report: bool


@dataclass(frozen=True)
class NodeSettings:
    """A SuperNode's identity and local paths, from its ``--node-config``.

    ``partition-id`` (int, required)
        The site id, ``0 .. num-partitions - 1``.
    ``num-partitions`` (int, required)
        Number of sites in the consortium; must equal the config's ``partition.num_sites``.
    ``data-path`` (str)
        The site's own ``.npz`` file (:class:`clients.site_data.SiteData`). Default: the run
        directory's ``sites/site-<id>.npz`` (loopback only).
    ``state-dir`` (str)
        Where the site keeps its own files across messages (its DP ledger, its most exposed
        records when ``audit.exposed_records`` > 0). Default: a
        ``panoramia-state`` folder next to ``data-path``, else the run directory's
        ``site_state``.
    ``public-path`` (str)
        Public records of the same kind (``x``/``y`` arrays) used as a reference pool.
    ``policy-max-epsilon``, ``policy-allow-scores``, ``policy-allow-tracebacks``,
    ``policy-model-checks``, ``policy-bulletin``
        The site's own policy (:mod:`clients.site_policy`): the run config cannot change it.
    """

    partition_id: int
    num_partitions: int
    data_path: Path | None
    state_dir: Path | None
    public_path: Path | None
    policy: SitePolicy = SitePolicy()

    @classmethod
    def from_node_config(cls, node_config: dict[str, Any]) -> NodeSettings:
        def integer(key: str) -> int:
            if key not in node_config:
                raise DeploymentConfigError(
                    f"node config: {key!r} is missing; start the SuperNode with "
                    f"--node-config \"partition-id=<i> num-partitions=<n> data-path='<file>'\""
                )
            value = node_config[key]
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise DeploymentConfigError(f"node config: {key}={value!r} is not an integer")
            try:
                return int(value)
            except ValueError:
                raise DeploymentConfigError(
                    f"node config: {key}={value!r} is not an integer"
                ) from None

        def path(key: str) -> Path | None:
            value = node_config.get(key)
            if value is None or str(value) == "":
                return None
            return Path(str(value)).expanduser()

        settings = cls(
            partition_id=integer("partition-id"),
            num_partitions=integer("num-partitions"),
            data_path=path("data-path"),
            state_dir=path("state-dir"),
            public_path=path("public-path"),
            policy=SitePolicy.from_node_config(node_config),
        )
        if not 0 <= settings.partition_id < settings.num_partitions:
            raise DeploymentConfigError(
                f"node config: partition-id={settings.partition_id} is outside "
                f"0..{settings.num_partitions - 1} (num-partitions={settings.num_partitions})"
            )
        return settings


def parse_phases(text: str) -> tuple[str, ...]:
    """``"train,audit"`` -> ("train", "audit"), in run order; unknown names are errors."""
    names = [p.strip() for p in str(text).split(",") if p.strip()]
    bad = [p for p in names if p not in _PHASES]
    if bad or not names:
        raise DeploymentConfigError(
            f"run config: {PHASES_KEY}={text!r}: expected a comma-separated subset of "
            f"{', '.join(_PHASES)}"
        )
    return tuple(p for p in _PHASES if p in names)


def refuse_simulation_settings(config: ExperimentConfig) -> None:
    """Settings that exist in simulations only, each refused by a named error."""
    if config.fl.adversary:
        # The sites' own records would go to a server built to rebuild them.
        raise DishonestServerRefused(
            "fl.adversary: the dishonest server is a simulation's measurement (it sends "
            "sites crafted models to rebuild their records); remove it under the Deployment "
            "Engine"
        )
    if config.audit.canary_clients > 0:
        # Virtual clients the server adds itself: a measurement of a simulated run, never
        # something to put into a real consortium's model.
        raise DeploymentConfigError(
            f"audit.canary_clients: {config.audit.canary_clients} canary clients are for "
            "simulations only; set it to 0 under the Deployment Engine"
        )
    if config.fl.secure_aggregation == "ideal":
        # Unauthenticated keys, no recovery of a dropped site's masks, no check of what a
        # site sends: the guarantee of a simulation against an honest server, not a protocol.
        raise IdealSecureAggregationRefused(
            "fl.secure_aggregation: ideal is a simulation setting (the sites' masks are not "
            "a secure-aggregation protocol: unauthenticated keys, no dropout recovery); set "
            "it to none under the Deployment Engine until a real protocol backs it"
        )


def read_run(run_config: dict[str, Any]) -> DeploymentRun:
    """Resolve the run config of a ``flwr run`` into the experiment it runs."""
    raw_dir = str(run_config.get(RUN_DIR_KEY, "") or "")
    if not raw_dir:
        raise DeploymentConfigError(
            f"run config: {RUN_DIR_KEY!r} is empty; pass the prepared run directory with "
            f"flwr run ... --run-config <run-dir>/deployment/run-config.toml"
        )
    layout = RunLayout(Path(raw_dir).expanduser())
    if not layout.root.is_absolute():
        # The ServerApp's working directory is the SuperLink's, not the caller's.
        raise DeploymentConfigError(
            f"run config: {RUN_DIR_KEY}={raw_dir!r} must be an absolute path"
        )
    text = str(run_config.get(EXPERIMENT_KEY, "") or "")
    try:
        config = validate_config(yaml.safe_load(text) or {}) if text else load_config(layout.config)
    except ConfigError as err:
        source = f"run config {EXPERIMENT_KEY!r}" if text else str(layout.config)
        raise DeploymentConfigError(f"{source}: {err}") from None
    refuse_simulation_settings(config)
    meta_text = str(run_config.get(DATASET_KEY, "") or "")
    if meta_text:
        meta = from_dict(DatasetMeta, json.loads(meta_text))
    else:
        try:
            meta = DatasetMeta.read(layout)
        except FileNotFoundError:
            raise DeploymentConfigError(
                f"run config: {DATASET_KEY!r} is empty and {layout.dataset} "
                "does not exist on this machine"
            ) from None
    return DeploymentRun(
        layout=layout,
        config=config,
        meta=meta,
        phases=parse_phases(str(run_config.get(PHASES_KEY, "train,audit"))),
        write_report=bool(run_config.get(REPORT_KEY, True)),
    )


def site_state_path(node: NodeSettings, run: DeploymentRun) -> Path:
    """The site's own folder for this run: its DP ledger and exposed-records file, kept
    across the per-message ClientApp processes."""
    if node.state_dir is not None:
        state = node.state_dir
    elif node.data_path is not None:
        state = node.data_path.parent / STATE_DIR_NAME
    else:
        return run.layout.site_state
    return state / run.layout.root.name


def _load_public(path: Path) -> Records:
    if not path.exists():
        raise DeploymentConfigError(f"node config: public-path={str(path)!r} does not exist")
    try:
        return read_public(path)
    except ValueError as err:
        raise DeploymentConfigError(f"node config: public-path: {err}") from err


class DeploymentResolver:
    """``context -> SiteRuntime`` from the run config and the SuperNode's node config.

    The site itself is built by :class:`simulations.apps.SiteResolver` (the simulation's
    resolver, which already honours ``partition-id`` and ``data-path``); this adds the
    deployment's checks, the site's state folder (ledger, exposed records) and the optional
    public pool.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], SiteRuntime] = {}

    def __call__(self, context: Context) -> SiteRuntime:
        key = (int(context.run_id), int(context.node_config.get("partition-id", -1)))
        if key not in self._cache:
            self._cache[key] = self._build(context)
        return self._cache[key]

    def _build(self, context: Context) -> SiteRuntime:
        run = read_run(dict(context.run_config))
        node = NodeSettings.from_node_config(dict(context.node_config))
        if node.num_partitions != run.config.partition.num_sites:
            raise DeploymentConfigError(
                f"node config: num-partitions={node.num_partitions} but the experiment has "
                f"partition.num_sites={run.config.partition.num_sites}"
            )
        data_path = node.data_path
        if data_path is not None and not data_path.exists():
            raise DeploymentConfigError(
                f"node config: data-path={str(data_path)!r} does not exist on this SuperNode"
            )
        own_file = run.layout.site_file(node.partition_id)
        if data_path is None and not own_file.exists():
            raise DeploymentConfigError(
                "node config: data-path is not set and the run directory's "
                f"{own_file} is not on this SuperNode"
            )
        state = site_state_path(node, run)
        runtime = SiteResolver(run.config, run.meta, run.layout, state_dir=state)(context)
        if runtime.data.site_id != node.partition_id:
            raise DeploymentConfigError(
                f"node config: partition-id={node.partition_id} but its data file holds "
                f"site {runtime.data.site_id}"
            )
        data: SiteData = runtime.data
        if run.config.audit.reference_pool and node.public_path is not None:
            data = data.with_public(site_pool(run.config, _load_public(node.public_path)))
        private_dir(state)
        # A real site: its own policy (node config), noise nobody else can replay.
        return replace(
            runtime,
            data=data,
            policy=node.policy,
            secure_noise=True,
            refusal_log=state / site_refusals_name(node.partition_id),
            gradient_canaries=gradient_canary_settings(
                run.config, node.partition_id, state, seeded=False
            ),
            inversion=inversion_settings(run.config, node.partition_id, state),
            model_checks=deployed_model_check_settings(
                run.config, node.policy, node.partition_id, state
            ),
        )


def write_site_summary(run: DeploymentRun) -> Path:
    """``partition.json`` from what the sites reported, for runs whose data never was on
    the server (real sites): members from the audits or the last round's example counts."""
    from panoramia_fl.contracts.run_log import read_rounds
    from panoramia_fl.server.run_writer import read_site_audit

    rounds = read_rounds(run.layout)
    sites = []
    for site in range(run.config.partition.num_sites):
        trained = [r.sites[str(site)] for r in rounds if str(site) in r.sites]
        audit = read_site_audit(run.layout, site)
        members = None if audit is None else audit.n_members
        sites.append({
            "site_id": site,
            "train": members or (trained[-1].num_examples if trained else None),
            "holdout": None if audit is None else audit.n_holdout,
            "test": None,
        })  # fmt: skip
    path = run.layout.partition
    summary = {"sites": sites, "scheme": "site-local", "seed": run.config.seed}
    path.write_text(json.dumps(summary, indent=1))
    return path


def deployed_server_settings(run: DeploymentRun, phases: tuple[str, ...]) -> ServerSettings:
    """The ServerApp's settings on a real deployment: as in simulation, but its client-level
    noise comes from the OS's entropy, never from the run config's seed, and its central
    evaluation keeps this machine's threads (the sites train on their own nodes)."""
    settings = server_settings(
        run.config, run.meta, run.layout, phases=phases, progress=False, sites_here=False
    )
    return replace(settings, noise_source="os-entropy")


def _server_main(grid: Grid, context: Context) -> None:
    run = read_run(dict(context.run_config))
    run.layout.root.mkdir(parents=True, exist_ok=True)
    # As in the simulation runner: no audit phase when the config turns audits off.
    phases = tuple(p for p in run.phases if p != "audit" or run.config.audit.enabled)
    if phases:
        settings = deployed_server_settings(run, phases)
        build_server_app(settings)(grid, context)
    if not run.layout.partition.exists():
        write_site_summary(run)
    if run.write_report:
        from panoramia_fl.reporting import write_report

        files = write_report(run.layout, report_config(run.layout))
        log.info("report written: %s", files)


server_app = ServerApp()
"""ServerApp for ``flwr run``: federated rounds, then the audit fan-out, then the report."""
server_app.main()(_server_main)

client_app = build_client_app(DeploymentResolver())
"""ClientApp for ``flwr run``: one site, identified and located by its node config."""
