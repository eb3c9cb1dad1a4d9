"""Experiment configuration: one validated pydantic model, loaded from YAML.

Unknown keys and bad values are errors naming the dotted key (``fl.rounds: ...``). The
resolved config is written to the run directory as ``config.yaml``.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from panoramia_fl.audit.config import StrictModel
from panoramia_fl.audit.stats.one_run_methods import DEFAULT_DELTA
from panoramia_fl.contracts.dp_level import (
    CLIENT_LEVELS,
    RECORD_LEVELS,
    DPLevel,
    SecureAggregationMode,
    resolve_dp_level,
)
from panoramia_fl.contracts.plugins import PLUGINS_KEY, PluginError, import_plugins
from panoramia_fl.ml.partition import PartitionConfig
from panoramia_fl.server.sampling import sites_per_round
from panoramia_fl.simulations.adversary_config import AdversaryAttack, check_adversary
from panoramia_fl.simulations.audit_phase_config import AuditPhaseConfig, check_round_choice
from panoramia_fl.simulations.config_keys import (
    ConfigError,
    apply_overrides,
    format_validation_error,
    parse_override,
)


class DataConfig(StrictModel):
    name: str = Field("fashion_mnist", description="registered dataset loader")
    root: Path | None = Field(
        None, description="folder with the dataset's files (None: the loader's default location)"
    )
    options: dict[str, Any] = Field(default_factory=dict, description="loader options")


class ModelConfig(StrictModel):
    name: str = "small_cnn"
    options: dict[str, Any] = Field(default_factory=dict)


ModelChecksMode = Literal["off", "refuse", "record"]


class FLConfig(StrictModel):
    strategy: str = Field(
        "fedavg", description="registered strategy: fedavg, fedprox, fedadam or a plugin's"
    )
    rounds: int = Field(5, ge=1)
    fraction_train: float = Field(1.0, gt=0, le=1)
    local_epochs: int = Field(1, ge=1)
    local_steps: int | None = Field(
        None,
        ge=1,
        description="each site takes this many local steps (batches) a round instead of "
        "local_epochs epochs; 1 is FedSGD (one gradient of one batch)",
    )
    batch_size: int = Field(64, ge=1)
    optimizer: Literal["sgd", "adam", "adamw"] = "adam"
    learning_rate: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    proximal_mu: float = Field(0.01, ge=0, description="FedProx proximal weight")
    server_learning_rate: float = Field(0.01, gt=0, description="FedAdam eta")
    central_evaluation: bool = True
    secure_aggregation: SecureAggregationMode = Field(
        "none",
        description="ideal: the server's strategy gets only each round's weighted sum "
        "(simulation only; docs/dp_settings.md); none: each site's update in the clear",
    )
    adversary: list[AdversaryAttack] = Field(
        default_factory=list,
        description="a server that does not play fair (simulation only; "
        "docs/threat_models.md): attacks by name at chosen rounds and target sites",
    )
    model_checks: ModelChecksMode | None = Field(
        None,
        description="sites check each received model before training (docs/model_checks.md)"
        ": refuse, record (log, train anyway), off; default: record with fl.adversary, else off",
    )


class ClientDPConfig(StrictModel):
    """Client-level DP: each sampled site's update is clipped and Gaussian noise of std
    ``z * C`` is added to their sum, by the server through Flower's strategy wrappers
    (``dp.level: client``; clipping on the server or by a client mod), or in shares of
    ``z * C / sqrt(n)`` by each of the ``n`` sites of a round (``dp.level: distributed``)."""

    noise_multiplier: float | None = Field(
        None,
        gt=0,
        description="z: noise std = z * clipping norm on the sum of the sites' updates "
        "(z * C / sites per round on their mean)",
    )
    target_epsilon: float | None = Field(
        None, gt=0, description="site-level epsilon over all rounds at dp.delta (calibrates z)"
    )
    clipping: Literal["fixed", "adaptive"] = "fixed"
    clipping_side: Literal["server", "client"] = Field(
        "server", description="client: Flower's fixedclipping_mod / adaptiveclipping_mod"
    )
    clipping_norm: float = Field(
        1.0, gt=0, description="fixed: the L2 norm of a site's update; adaptive: the first one"
    )
    target_clipped_quantile: float = Field(0.5, ge=0, le=1, description="adaptive clipping")
    clip_norm_lr: float = Field(0.2, gt=0, description="adaptive clipping")
    clipped_count_stddev: float | None = Field(
        None, gt=0, description="adaptive clipping (None: Flower's default, sites per round / 20)"
    )


class DPConfig(StrictModel):
    """Record-level DP-SGD at each site (Opacus) and/or client-level DP (Flower).

    ``level`` says which; when it is not set, ``enabled: true`` means ``record`` (the
    keys ``target_epsilon`` ... ``accountant`` are the record level's) and ``level`` wins
    over ``enabled`` when both are given.
    """

    level: DPLevel | None = None
    enabled: bool = Field(False, description="record-level DP-SGD (set from level)")
    target_epsilon: float | None = Field(None, gt=0, description="for the whole training")
    noise_multiplier: float | None = Field(None, gt=0)
    delta: float = Field(DEFAULT_DELTA, gt=0, lt=1)
    max_grad_norm: float = Field(1.0, gt=0)
    accountant: Literal["rdp", "prv"] = "rdp"
    declared_size: int | None = Field(
        None,
        ge=1,
        description="record level: the record count every site declares before training, "
        "which sets its sampling rate, steps and divisor (None: each site's own member "
        "count, which the ledger names as outside the guarantee)",
    )
    client: ClientDPConfig = Field(default_factory=ClientDPConfig)

    @model_validator(mode="after")
    def _resolve_level(self) -> DPConfig:
        no_record = self.target_epsilon is not None and math.isinf(self.target_epsilon)
        if no_record:
            object.__setattr__(self, "target_epsilon", None)
        level = resolve_dp_level(self.level, enabled=self.enabled, record_epsilon_inf=no_record)
        object.__setattr__(self, "level", level)
        object.__setattr__(self, "enabled", level in RECORD_LEVELS)
        if self.enabled and (self.target_epsilon is None) == (self.noise_multiplier is None):
            raise ValueError("set exactly one of target_epsilon or noise_multiplier")
        client = self.client
        if self.client_level and (client.target_epsilon is None) == (
            client.noise_multiplier is None
        ):
            raise ValueError(
                "client: set exactly one of client.target_epsilon or client.noise_multiplier"
            )
        return self

    @property
    def record_level(self) -> bool:
        """DP-SGD at each site (Opacus)."""
        return self.enabled

    @property
    def client_level(self) -> bool:
        """Clipped site updates and a noised aggregate (central or distributed)."""
        return self.level in CLIENT_LEVELS

    @property
    def distributed(self) -> bool:
        """Each site clips its update and adds its share of the client-level noise."""
        return self.level == "distributed"

    @property
    def any_level(self) -> bool:
        return self.level != "none"


class ResourcesConfig(StrictModel):
    num_cpus: float | Literal["auto"] = Field(
        "auto",
        description="CPUs per site process (training); auto: this machine's CPUs (ray.num_cpus "
        "when set) shared by the sites, whole, at least 1; 1 in a Ray cluster the run joins",
    )
    num_gpus: float | Literal["auto"] = Field(
        "auto", description="GPU fraction per site; auto: 0 without CUDA"
    )
    audit_num_cpus: float | Literal["auto"] = Field(
        "auto", description="CPUs per site process (audits); auto: as num_cpus"
    )
    audit_num_gpus: float | Literal["auto"] = "auto"
    torch_threads: int | Literal["auto"] = Field(
        "auto",
        description="torch.set_num_threads in each site process; auto: the whole CPUs Ray "
        "gives it (num_cpus while training, audit_num_cpus while auditing; at least 1)",
    )

    @field_validator("torch_threads", mode="before")
    @classmethod
    def _threads_or_auto(cls, value: object) -> object:
        # One message for the two forms (pydantic would name each arm of the union).
        if value == "auto" or (type(value) is int and value >= 1):
            return value
        raise ValueError(f"'auto' or a whole number of threads >= 1, not {value!r}")

    @field_validator("num_cpus", "audit_num_cpus", mode="before")
    @classmethod
    def _positive_or_auto(cls, value: object) -> object:
        # One message for the two forms (pydantic would name each arm of the union).
        if value == "auto":
            return value
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return value
        raise ValueError(f"'auto' or a number of CPUs > 0, not {value!r}")

    @property
    def train_cpus(self) -> float:
        """CPUs Ray gives a site process while it trains (``num_cpus``, resolved)."""
        return _resolved(self.num_cpus, "num_cpus")

    @property
    def audit_cpus(self) -> float:
        """CPUs Ray gives a site process while it audits (``audit_num_cpus``, resolved)."""
        return _resolved(self.audit_num_cpus, "audit_num_cpus")

    @property
    def train_threads(self) -> int:
        """torch threads of a site's local training."""
        return self._threads(self.train_cpus)

    @property
    def audit_threads(self) -> int:
        """torch threads of a site's audit and of the reference models' Ray tasks."""
        return self._threads(self.audit_cpus)

    def _threads(self, cpus: float) -> int:
        if self.torch_threads != "auto":
            return self.torch_threads
        # Whole CPUs: a site holding 1.5 of Ray's CPUs gets one thread, never more threads
        # than the cores Ray counts for it (0.5 each: two sites share a core, one thread each).
        return max(1, math.floor(cpus + 1e-9))


def _resolved(cpus: float | str, key: str) -> float:
    if isinstance(cpus, str):  # ExperimentConfig resolves 'auto' when it is validated
        raise ValueError(f"resources.{key}: 'auto' not resolved (a ResourcesConfig alone)")
    return float(cpus)


RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""Ray's own variable naming a cluster to join: the default of ``ray.address``."""


def site_cpus(*, machine_cpus: int, sites: int, joins_cluster: bool) -> float:
    """``resources.num_cpus: auto``: the machine's CPUs shared by the sites, whole, at least 1
    (a site never holds a core another site needs: every site trains at once when they
    fit); 1 when the run joins a cluster, whose CPUs this machine cannot count."""
    if joins_cluster:
        return 1.0
    return float(max(1, machine_cpus // max(1, sites)))


class RayConfig(StrictModel):
    address: str | None = Field(
        None, description="join an existing Ray cluster (HOST:PORT); default: $RAY_ADDRESS"
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray instance")
    temp_dir: Path | None = Field(
        None,
        description="a local Ray's session files (default: a private folder in the system's "
        "temporary folder, removed after the run); unused when joining a cluster",
    )
    fork_workers: bool = Field(
        True,
        description="a local Ray's workers (the site processes) forked from one process that "
        "imported torch, Flower and the site code once, on Linux; false: each worker imports "
        "its own as it starts. Results are the same either way",
    )


class ReportSectionConfig(StrictModel):
    """What the run's report adds to its numbers."""

    policy: Path | None = Field(
        None,
        description="a release policy (configs/policies/): the report and the evidence pack "
        "show its verdict (panoramia-fl gate checks it on its own)",
    )

    @field_validator("policy")
    @classmethod
    def _readable_policy(cls, policy: Path | None) -> Path | None:
        # Read now, so a bad policy stops the run before it trains; kept absolute, so that
        # the run's config.yaml names it wherever its report is written again.
        if policy is None:
            return None
        from panoramia_fl.simulations.policy_file import load_policy

        load_policy(policy)
        return policy.resolve()


SEED_LIMIT = 2**32
"""Seeds are below this (numpy's seeds are 32-bit)."""

RUN_NAME = re.compile(r"^(?!\.+$)[A-Za-z0-9_.=+,-]+$")
"""A run's name is one folder inside ``output_dir``: no separators, not ``.`` or ``..``."""


class ExperimentConfig(StrictModel):
    name: str = "default"
    seed: int = Field(0, ge=0, lt=SEED_LIMIT, description="seeds data, training and audits")
    output_dir: Path = Path("runs")
    plugins: list[str] = Field(
        default_factory=list,
        description="modules imported before any name is looked up (their registrations "
        "add models, datasets, generators, strategies); see docs/plugins.md",
    )
    data: DataConfig = Field(default_factory=DataConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    fl: FLConfig = Field(default_factory=FLConfig)
    dp: DPConfig = Field(default_factory=DPConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    audit: AuditPhaseConfig = Field(default_factory=AuditPhaseConfig)
    report: ReportSectionConfig = Field(default_factory=ReportSectionConfig)

    @field_validator("plugins")
    @classmethod
    def _import_plugins(cls, plugins: list[str]) -> list[str]:
        # Here, so that whoever holds a validated config (driver, ServerApp under
        # `flwr run`) can look its names up; Ray workers import them in make_task.
        import_plugins(plugins)
        return plugins

    @field_validator("name")
    @classmethod
    def _one_folder(cls, name: str) -> str:
        # The run directory is output_dir/name: a separator or '..' would put it elsewhere.
        if not RUN_NAME.match(name):
            raise ValueError(
                f"{name!r} must be one folder name inside output_dir: letters, digits and "
                "_ . = + , - only, not '.' or '..'"
            )
        return name

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentConfig:
        _resolve_site_cpus(self)
        _who_holds_updates(self)
        _check_central_client_dp(self)
        _check_audit_phase(self)
        check_adversary(
            self.fl.adversary,
            num_rounds=self.fl.rounds,
            num_sites=self.partition.num_sites,
            audit_enabled=self.audit.enabled,
        )
        settings = self.audit.settings
        if "delta" not in settings.model_fields_set:
            # The one-run bounds state eps at the accountant's delta, so they can be checked
            # against its epsilon.
            object.__setattr__(
                self.audit, "settings", settings.model_copy(update={"delta": self.dp.delta})
            )
        elif self.dp.any_level and settings.delta != self.dp.delta:
            raise ValueError(
                f"audit.settings.delta: {settings.delta:g} differs from dp.delta "
                f"{self.dp.delta:g}; the one-run bounds are checked against the accountant's "
                "epsilon at dp.delta (leave audit.settings.delta unset)"
            )
        return self


def ray_address(config: ExperimentConfig) -> str | None:
    """The cluster a run joins: ``ray.address``, else ``$RAY_ADDRESS`` (as ``ray.init``
    reads it); None: a private local Ray for the run."""
    return config.ray.address or os.environ.get(RAY_ADDRESS_ENV) or None


def local_cpus(config: ExperimentConfig) -> int:
    """The CPUs of a Ray the run starts on this machine: ``ray.num_cpus``, else the
    machine's."""
    return config.ray.num_cpus or os.cpu_count() or 1


def processes_that_fit(cpus: float, per_process: float) -> int:
    """How many processes of ``per_process`` CPUs Ray runs at once on ``cpus`` CPUs, at least
    1 (Flower's actors: one per site that fits)."""
    return max(1, math.floor(cpus / per_process + 1e-9))


def sites_at_once(config: ExperimentConfig, cpus: float, *, sites: int) -> int:
    """How many of ``sites`` train at once on ``cpus`` CPUs (``resources.num_cpus`` each)."""
    return min(sites, processes_that_fit(cpus, config.resources.train_cpus))


def evaluation_threads_beside_training(config: ExperimentConfig) -> int:
    """torch threads of the driver's central evaluation of a round while the sites train the
    next one: this machine's CPUs that the training sites do not hold, whole, at least 1; 1
    when the run joins a cluster, whose sites may share this machine's cores.

    More threads than the free cores take CPU from the sites and gain the evaluation nothing:
    torch's threads spin while they wait for a core. The last round's evaluation, which
    nothing runs beside, keeps the driver's threads.
    """
    if ray_address(config) is not None:
        return 1
    machine = local_cpus(config)
    sampled = sites_per_round(config.partition.num_sites, config.fl.fraction_train)
    training = sites_at_once(config, machine, sites=sampled) * config.resources.train_cpus
    return max(1, math.floor(machine - training + 1e-9))


def _resolve_site_cpus(config: ExperimentConfig) -> None:
    """``resources.num_cpus`` / ``audit_num_cpus: auto`` as numbers (:func:`site_cpus`), so
    that the run's config.yaml records what each site held."""
    res = config.resources
    auto = [k for k in ("num_cpus", "audit_num_cpus") if getattr(res, k) == "auto"]
    if not auto:
        return
    share = site_cpus(
        machine_cpus=local_cpus(config),
        sites=config.partition.num_sites,
        joins_cluster=ray_address(config) is not None,
    )
    object.__setattr__(config, "resources", res.model_copy(update=dict.fromkeys(auto, share)))


def _check_central_client_dp(config: ExperimentConfig) -> None:
    """Central client-level DP: a strategy Flower's calibration fits, and adaptive
    clipping's count noise below the update noise it must not swamp."""
    client = config.dp.client
    central = config.dp.client_level and not config.dp.distributed
    if central and config.fl.strategy not in ("fedavg", "fedprox"):
        # Flower's noise calibration is for the (uniform) mean of clipped updates; a
        # server optimiser (FedAdam) would noise its own step instead. (Distributed
        # noise is in the sum already: a server optimiser post-processes it.)
        raise ValueError(
            f"dp.level: client-level DP needs fl.strategy fedavg or fedprox, "
            f"not {config.fl.strategy}"
        )
    if central and client.clipping == "adaptive":
        per_round = sites_per_round(config.partition.num_sites, config.fl.fraction_train)
        count_std = client.clipped_count_stddev or per_round / 20
        z = client.noise_multiplier
        if z is not None and z >= 2 * count_std:
            raise ValueError(
                f"dp.client.clipped_count_stddev: adaptive clipping with noise_multiplier "
                f"{z} needs clipped_count_stddev > {z / 2} (now {count_std:g})"
            )


def _check_audit_phase(config: ExperimentConfig) -> None:
    """Canaries, gradient canaries, the inversion audit and update audits run in the audit
    phase, on rounds the run has."""
    if config.audit.input_canaries and not config.audit.enabled:
        raise ValueError(
            "audit.input_canaries: input canaries are audited in the audit phase (enabled)"
        )
    if config.audit.gradient_canaries and not config.dp.record_level:
        raise ValueError(
            "audit.gradient_canaries: gradient canaries audit a site's DP-SGD, so they need "
            f"record-level DP (dp.level record or both; now {config.dp.level})"
        )
    if config.audit.gradient_canaries and not config.audit.enabled:
        raise ValueError(
            "audit.gradient_canaries: the canaries are audited in the audit phase (enabled)"
        )
    inversion = config.audit.inversion
    if inversion is not None:
        if not config.audit.enabled:
            raise ValueError(
                "audit.inversion: the inversion audit runs in the audit phase (enabled)"
            )
        late = [r for r in inversion.rounds if r > config.fl.rounds]
        if late:
            raise ValueError(
                f"audit.inversion.rounds: {late} outside 1..fl.rounds ({config.fl.rounds})"
            )
        absent = [s for s in inversion.sites or [] if s >= config.partition.num_sites]
        if absent:
            raise ValueError(
                f"audit.inversion.sites: {absent} outside 0..partition.num_sites - 1 "
                f"({config.partition.num_sites - 1})"
            )
    if config.audit.attribute_inference is not None and not (
        config.audit.enabled and config.partition.holdout_fraction > 0
    ):
        raise ValueError(
            "audit.attribute_inference: runs in the audit phase (enabled) against the sites' "
            "held-out records (partition.holdout_fraction > 0)"
        )
    check_round_choice("audit.", config.audit.rounds, config.audit.every, config.fl.rounds)
    updates = config.audit.updates
    if updates is not None:
        if not config.audit.enabled:
            raise ValueError("audit.updates: the updates are audited in the audit phase")
        check_round_choice("audit.updates.", updates.rounds, updates.every, config.fl.rounds)


def _who_holds_updates(config: ExperimentConfig) -> None:
    """The combinations distributed DP and ideal secure aggregation allow (a ``ValueError``
    naming the key)."""
    dp, client = config.dp, config.dp.client
    if dp.distributed and client.clipping == "adaptive":
        raise ValueError(
            "dp.client.clipping: distributed DP clips with a fixed norm at each site "
            "(adaptive clipping needs the server to count clipped updates)"
        )
    if dp.distributed and "clipping_side" not in client.model_fields_set:
        # The resolved config (config.yaml) says where the clipping happens, and reads back.
        client = client.model_copy(update={"clipping_side": "client"})
        object.__setattr__(dp, "client", client)
    if dp.distributed and client.clipping_side != "client":
        raise ValueError("dp.client.clipping_side: under dp.level distributed each site clips")
    if config.fl.secure_aggregation == "none":
        return
    if dp.client_level and not dp.distributed:
        raise ValueError(
            f"fl.secure_aggregation: ideal hides each update from the server, which central "
            f"client-level DP (dp.level {dp.level}) must clip and noise: use dp.level distributed"
        )
    if sites_per_round(config.partition.num_sites, config.fl.fraction_train) < 2:
        raise ValueError("fl.secure_aggregation: ideal needs at least 2 sites a round")
    if config.audit.canary_clients and not dp.distributed:
        raise ValueError(
            "audit.canary_clients: under fl.secure_aggregation ideal they need dp.level "
            "distributed (the server no longer sees the update norms that scale them)"
        )
    if config.audit.updates is not None and not any(
        a.attack == "inconsistent" for a in config.fl.adversary
    ):
        # Under inconsistent the sum is the target's update: the audit reads what it held.
        raise ValueError(
            "audit.updates: under fl.secure_aggregation ideal the server holds only each "
            "round's sum, never a site's own update (but under an fl.adversary inconsistent "
            "attack); audit the global models with audit.rounds"
        )


def _plugin_error(err: ValidationError) -> PluginError | None:
    """A plugin's own error as it was raised (it names the module and the plugins key)."""
    for e in err.errors():
        cause = (e.get("ctx") or {}).get("error")
        if e["loc"][:1] == (PLUGINS_KEY,) and isinstance(cause, PluginError):
            return cause
    return None


def validate_config(raw: dict[str, Any]) -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as err:
        plugin = _plugin_error(err)
        if plugin is not None:
            raise plugin from None
        raise ConfigError(format_validation_error(err)) from None


def load_config(path: Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read YAML, apply ``key=value`` overrides, validate."""
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    parsed = dict(parse_override(item) for item in overrides or [])
    return validate_config(apply_overrides(raw, parsed))
