"""Experiment configuration: one validated pydantic model, loaded from YAML.

Unknown keys and bad values are errors naming the dotted key (``fl.rounds: ...``). The
resolved config is written to the run directory as ``config.yaml``.
"""

from __future__ import annotations

import math
import re
import types
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from audit.canaries.gradient_canaries import MIN_GRADIENT_CANARIES
from audit.config import AuditConfig, AuditSeeding, StrictModel
from audit.inversion.attack import InversionConfig
from audit.stats.one_run_methods import DEFAULT_DELTA
from audit.tabular.attribute_result import AttributeInferenceConfig
from contracts.dp_level import (
    CLIENT_LEVELS,
    RECORD_LEVELS,
    DPLevel,
    SecureAggregationMode,
    resolve_dp_level,
)
from contracts.plugins import PLUGINS_KEY, PluginError, import_plugins
from ml.partition import PartitionConfig
from server.sampling import sites_per_round
from simulations.adversary_config import AdversaryAttack, check_adversary
from simulations.config_keys import (
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
    num_cpus: float = Field(1, gt=0, description="CPUs per site process (training)")
    num_gpus: float | Literal["auto"] = Field(
        "auto", description="GPU fraction per site; auto: 0 without CUDA"
    )
    audit_num_cpus: float = Field(1, gt=0)
    audit_num_gpus: float | Literal["auto"] = "auto"
    torch_threads: int = Field(1, ge=1, description="torch.set_num_threads in each site")


class RayConfig(StrictModel):
    address: str | None = Field(
        None, description="join an existing Ray cluster (HOST:PORT); default: $RAY_ADDRESS"
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray instance")
    temp_dir: Path | None = Field(None, description="Ray session files (default: run dir)")


MIN_INPUT_CANARIES = 20
MIN_CANARY_CLIENTS = 10


def chosen_rounds(rounds: list[int] | None, every: int | None, num_rounds: int) -> set[int]:
    """The rounds ``rounds`` lists, or every ``every``-th one (k, 2k, ...); none of either."""
    if rounds is not None:
        return set(rounds)
    return set() if every is None else set(range(every, num_rounds + 1, every))


def check_round_choice(
    prefix: str, rounds: list[int] | None, every: int | None, num_rounds: int
) -> None:
    """``<prefix>rounds`` or ``<prefix>every``, each inside 1..fl.rounds (a ValueError
    naming the key)."""
    if rounds is not None and every is not None:
        raise ValueError(f"{prefix}rounds and {prefix}every: give one of them, not both")
    if rounds is not None:
        if not rounds:
            raise ValueError(f"{prefix}rounds: an empty list audits nothing; leave it unset")
        outside = sorted(r for r in set(rounds) if not 1 <= r <= num_rounds)
        if outside:
            raise ValueError(f"{prefix}rounds: {outside} outside 1..fl.rounds ({num_rounds})")
    if every is not None and every > num_rounds:
        raise ValueError(f"{prefix}every: {every} is more than fl.rounds ({num_rounds})")


class UpdateAuditConfig(StrictModel):
    """``audit.updates``: each site also audits its own local model of these rounds (the
    weights it sent the server), with the same games as the global models."""

    rounds: list[int] | None = Field(None, description="these rounds (1..fl.rounds)")
    every: int | None = Field(None, ge=1, description="every k-th round (k, 2k, ...)")

    @model_validator(mode="after")
    def _one_of(self) -> UpdateAuditConfig:
        if self.rounds is None and self.every is None:
            raise ValueError("give rounds: [...] or every: k")
        return self


RENAMED_AUDIT_KEYS = types.MappingProxyType(
    {"canaries": "input_canaries", "canary_twin": "canary_client_twin"}
)
"""``audit`` keys renamed to say which canaries they mean: older configs and older runs'
``config.yaml`` (which resume and re-render read) give them under the old name."""


def audit_value(audit: dict[str, Any], key: str) -> Any:
    """``audit[key]`` of a config read as plain data, or under the key's older name."""
    older = [old for old, new in RENAMED_AUDIT_KEYS.items() if new == key]
    return audit.get(key, audit.get(older[0]) if older else None)


class AuditPhaseConfig(StrictModel):
    enabled: bool = True
    seeding: AuditSeeding = Field(
        "sequence",
        description="how each site's audit is seeded (a run's config.yaml "
        "without it: legacy, as it was written)",
    )
    use_holdout: bool = Field(True, description="RM;RN and O(1) with the site's holdout")
    reference_pool: bool = Field(
        False,
        description="give sites the public split as a "
        "reference pool (needed by generator.kind=reference_pool)",
    )
    reference_records: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="share of the public split kept for the calibrated MIA's reference "
        "models (trained once per run, shared by the sites) and never put in a site's "
        "reference pool; used when the dataset has a public split and "
        "settings.calibration.reference_models > 0",
    )
    exposed_records: int = Field(
        0,
        ge=0,
        description="K > 0: each site writes the indices and scores of its K members with the "
        "highest calibrated MIA score into its own state directory (never into its reply)",
    )
    input_canaries: int = Field(
        0,
        ge=0,
        description="simulation only: N input canaries per site, records each trained on by an "
        "independent fair coin and audited one-run (Steinke et al. 2023) after training; never "
        "part of PANORAMIA's members, RM;RN or O(1). The trained model is not the plain one.",
    )
    canary_clients: int = Field(
        0,
        ge=0,
        description="simulation only: K > 0 draws 2K random unit directions over the model's "
        "trainable parameters and inserts each by a fair coin as a virtual client whose update "
        "is that direction (times the clipping norm, or the median site update norm without "
        "DP); the cosines of the final model delta give a client-level epsilon estimate and a "
        "lower bound (client_canaries.json).",
    )
    gradient_canaries: int = Field(
        0,
        ge=0,
        description="record-level DP only: K > 0 gives each site 2K gradient canaries, each "
        "inserted by a fair coin into its DP-SGD as a phantom record (its own coordinate, "
        "never touching the model); the site audits its own DP-SGD white-box from every noisy "
        "step (mechanism level) and from its round updates (server level): one-run lower "
        "bounds and an estimate of eps beside the accountant's (docs/white_box_audit.md)",
    )
    inversion: InversionConfig | None = Field(
        None,
        description="each site attacks its own update of these rounds as a curious server "
        "would (gradient inversion: FedSGD or FedAvg, images or tabular rows) and compares "
        "the reconstruction with its records; only summary numbers leave it "
        "(docs/inversion.md). Off (null) by default; {} takes the defaults (round 1)",
    )
    attribute_inference: AttributeInferenceConfig | None = Field(
        None,
        description="each site measures whether the final model reveals this sensitive field "
        "({field: name}, a column of the tabular schema) better for its members than for its "
        "held-out records, beside a baseline without the model (docs/attribute_inference.md). "
        "Off (null) by default",
    )
    canary_client_twin: bool = Field(
        True,
        description="with canary_clients: train the run again without them (no-canary-twin/) "
        "for the accuracy they cost; false skips that second training.",
    )
    rounds: list[int] | None = Field(
        None,
        description="also audit these rounds' global checkpoints (1..fl.rounds), each with "
        "the same settings; the final round is always audited (the main audit)",
    )
    every: int | None = Field(
        None, ge=1, description="also audit every k-th round's checkpoint (k, 2k, ...)"
    )
    updates: UpdateAuditConfig | None = Field(
        None,
        description="each site also audits its own local model of these rounds, the update "
        "it sent ({rounds: [...]} or {every: k}), beside that round's global model, which is "
        "audited too (docs/over_rounds.md)",
    )
    settings: AuditConfig = Field(default_factory=AuditConfig)

    @field_validator("canary_clients")
    @classmethod
    def _enough_canary_clients(cls, n: int) -> int:
        # A Gaussian fit needs a few cosines on each side of the coins.
        if 0 < n < MIN_CANARY_CLIENTS:
            raise ValueError(f"0 (off) or at least {MIN_CANARY_CLIENTS}, not {n}")
        return n

    def audited_rounds(self, num_rounds: int) -> tuple[int, ...]:
        """The rounds whose global model each site audits (the final one included): those
        of ``rounds`` / ``every`` and of ``updates``; () when only the final model is."""
        asked = chosen_rounds(self.rounds, self.every, num_rounds) | set(
            self.update_rounds(num_rounds)
        )
        return tuple(sorted(asked | {num_rounds})) if asked else ()

    def update_rounds(self, num_rounds: int) -> tuple[int, ...]:
        """The rounds whose local model each site keeps and audits (``updates``)."""
        updates = self.updates
        if updates is None:
            return ()
        return tuple(sorted(chosen_rounds(updates.rounds, updates.every, num_rounds)))

    @field_validator("gradient_canaries")
    @classmethod
    def _enough_gradient_canaries(cls, n: int) -> int:
        if 0 < n < MIN_GRADIENT_CANARIES:
            raise ValueError(f"0 (off) or at least {MIN_GRADIENT_CANARIES}, not {n}")
        return n

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for old, new in RENAMED_AUDIT_KEYS.items():
            if old in data and new in data:
                raise ValueError(f"{old} is the older name of {new}: give {new} only")
        return {RENAMED_AUDIT_KEYS.get(key, key): value for key, value in data.items()}

    @field_validator("input_canaries")
    @classmethod
    def _enough_input_canaries(cls, n: int) -> int:
        # Fewer coins than this give a one-run audit no power (and may all land one way).
        if 0 < n < MIN_INPUT_CANARIES:
            raise ValueError(f"0 (off) or at least {MIN_INPUT_CANARIES}, not {n}")
        return n


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
        from simulations.policy_file import load_policy

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
