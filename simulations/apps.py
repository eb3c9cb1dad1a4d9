"""Build the Flower apps of a run from its resolved config (simulation and deployment)."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import torch
from flwr.app import Context

from panoramia_fl.audit.adversary import SiteOptimizer
from panoramia_fl.audit.inversion.attack import LocalTraining
from panoramia_fl.clients.audit_handler import SiteAuditPolicy, make_audit_runner
from panoramia_fl.clients.client_app import SiteRuntime, build_client_app
from panoramia_fl.clients.dishonest_server import DishonestServerSettings
from panoramia_fl.clients.distributed_dp import DistributedDPSettings
from panoramia_fl.clients.inversion import InversionSettings
from panoramia_fl.clients.privacy import DPSettings
from panoramia_fl.clients.real_path_canaries import GradientCanarySettings
from panoramia_fl.clients.secure_sum_site import SecureSumSettings
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.clients.update_audits import UpdateAuditSettings
from panoramia_fl.contracts.checkpoint import StateDict
from panoramia_fl.contracts.run_files import (
    CheckpointMeta,
    RunLayout,
    exposed_records_name,
    gradient_canaries_name,
    site_accountant_history_name,
)
from panoramia_fl.ml.tasks import TorchTask
from panoramia_fl.server.adversary import AdversarySettings, Attack
from panoramia_fl.server.canary_clients import CanaryClientSettings
from panoramia_fl.server.client_dp import ClientDPSettings, calibrate_noise_multiplier
from panoramia_fl.server.sampling import sites_per_round
from panoramia_fl.server.server_app import CentralEvaluation, ServerSettings, build_server_app
from panoramia_fl.server.stop import StopSwitch
from panoramia_fl.server.strategy import StrategySettings
from panoramia_fl.simulations.experiment_config import (
    ExperimentConfig,
    evaluation_threads_beside_training,
)
from panoramia_fl.simulations.model_check_settings import checks_mode, model_check_settings
from panoramia_fl.simulations.process_heap import freeze_loaded_modules
from panoramia_fl.simulations.reference_models import load_reference_states, site_pool
from panoramia_fl.simulations.run_dir import DatasetMeta, load_public
from panoramia_fl.simulations.run_task import audit_device, make_task, pick_device


def dp_settings(config: ExperimentConfig, *, members: int | None = None) -> DPSettings | None:
    """The site's DP-SGD; its declared size is ``dp.declared_size``, else ``members`` (its
    count as the run starts)."""
    if not config.dp.enabled:
        return None
    return DPSettings(
        target_epsilon=config.dp.target_epsilon,
        noise_multiplier=config.dp.noise_multiplier,
        delta=config.dp.delta,
        max_grad_norm=config.dp.max_grad_norm,
        accountant=config.dp.accountant,
        # A site may be sampled in every round: calibrate for all of them.
        total_epochs=config.fl.local_epochs * config.fl.rounds,
        total_steps=(
            None if config.fl.local_steps is None else config.fl.local_steps * config.fl.rounds
        ),
        declared_size=config.dp.declared_size or members,
    )


def client_dp_settings(config: ExperimentConfig) -> ClientDPSettings | None:
    """Client-level DP of the run, its noise multiplier calibrated when a target is given."""
    if not config.dp.client_level:
        return None
    client = config.dp.client
    z = client.noise_multiplier
    if z is None:
        assert client.target_epsilon is not None
        # A site may be sampled in every round: calibrate for all of them.
        z = calibrate_noise_multiplier(
            client.target_epsilon, rounds=config.fl.rounds, delta=config.dp.delta
        )
    distributed = config.dp.distributed
    return ClientDPSettings(
        noise_multiplier=z,
        delta=config.dp.delta,
        clipping=client.clipping,
        clipping_side=client.clipping_side,
        clipping_norm=client.clipping_norm,
        target_clipped_quantile=client.target_clipped_quantile,
        clip_norm_lr=client.clip_norm_lr,
        clipped_count_stddev=client.clipped_count_stddev,
        mechanism="distributed" if distributed else "central",
        secure_aggregation=config.fl.secure_aggregation,
    )


def distributed_dp_settings(config: ExperimentConfig) -> DistributedDPSettings | None:
    """A site's share of distributed client-level DP (``dp.level: distributed``): the noise
    multiplier (calibrated as the central one), the clipping norm and the sites per round,
    all from the run's config."""
    client = client_dp_settings(config)
    if client is None or client.mechanism != "distributed":
        return None
    return DistributedDPSettings(
        noise_multiplier=client.noise_multiplier,
        clipping_norm=client.clipping_norm,
        sites_per_round=sites_per_round(config.partition.num_sites, config.fl.fraction_train),
    )


def canary_client_settings(
    config: ExperimentConfig, task: TorchTask
) -> CanaryClientSettings | None:
    """The run's canary clients (``audit.canary_clients``), over the model's trainable
    parameters (buffers such as BatchNorm statistics are left alone)."""
    if config.audit.canary_clients == 0:
        return None
    keys = tuple(k for k, p in task.make_model().named_parameters() if p.requires_grad)
    return CanaryClientSettings(
        count=config.audit.canary_clients,
        seed=config.seed,
        fraction=config.fl.fraction_train,
        keys=keys,
        delta=config.dp.delta,
        beta=config.audit.settings.beta,
    )


def gradient_canary_seed(run_seed: int, site_id: int) -> int:
    """The seed of one site's gradient canaries in a simulation: ``run_seed * 1_000 +
    site_id``.

    Why a mix: each site draws its own canary directions and coins while the run's seed still
    reproduces them (a deployment draws them from the site's OS entropy instead). While sites
    number under 1_000, no two sites of any two runs share a seed. The values are the ones
    runs have always used: changing them would change every saved run's white-box audit.
    """
    return run_seed * 1_000 + site_id


def gradient_canary_settings(
    config: ExperimentConfig, site_id: int, state_dir: Path, *, seeded: bool
) -> GradientCanarySettings | None:
    """The site's gradient canaries (``audit.gradient_canaries``); ``seeded``: coins from the
    run's seed (a simulation), else from the site's OS entropy (a deployment)."""
    if not config.audit.gradient_canaries:
        return None
    return GradientCanarySettings(
        pairs=config.audit.gradient_canaries,
        state_path=state_dir / gradient_canaries_name(site_id),
        beta=config.audit.settings.beta,
        seed=gradient_canary_seed(config.seed, site_id) if seeded else None,
    )


def inversion_settings(
    config: ExperimentConfig, site_id: int, state_dir: Path
) -> InversionSettings | None:
    """The site's gradient-inversion audit (``audit.inversion``), kept in its own folder."""
    if config.audit.inversion is None or not config.audit.inversion.attacks(site_id):
        return None
    return InversionSettings(
        config=config.audit.inversion,
        site_id=site_id,
        state_dir=state_dir,
        device=audit_device(config),
    )


def update_audit_settings(
    config: ExperimentConfig, site_id: int, state_dir: Path
) -> UpdateAuditSettings | None:
    """The site's audits of its own local models (``audit.updates``), kept in its folder."""
    rounds = config.audit.update_rounds(config.fl.rounds)
    if not rounds:
        return None
    return UpdateAuditSettings(rounds=rounds, site_id=site_id, state_dir=state_dir)


_BUILT: dict[str, dict[int, SiteRuntime]] = {}
"""The sites this process has built, by resolver (:attr:`SiteResolver.key`): the sites of
one resolver at a time, so a long-lived worker holds no earlier run's records."""


def adversary_settings(
    config: ExperimentConfig, task: TorchTask, layout: RunLayout
) -> AdversarySettings | None:
    """The run's dishonest server (``fl.adversary``): its attacks, the public records it
    crafts from, and the agreed model and local training; None: an honest server."""
    if not config.fl.adversary:
        return None
    spec = task.optimizer

    def public() -> tuple[torch.Tensor, torch.Tensor]:
        records = load_public(layout)
        if records is None:
            raise ValueError("fl.adversary: the server crafts its models from public records")
        x, y = task.tensors(records.x, records.y)[:2]
        return x, y

    return AdversarySettings(
        attacks=tuple(
            Attack(
                attack=a.attack,
                rounds=tuple(a.rounds),
                sites=tuple(a.sites),
                crafted=a.crafted,
                options=a.options,
            )
            for a in config.fl.adversary
        ),
        make_model=task.make_model,
        public=public,
        training=LocalTraining(
            num_examples=config.fl.batch_size,
            batch_size=config.fl.batch_size,
            epochs=config.fl.local_epochs,
            steps=config.fl.local_steps,
            optimizer=spec.name,
            learning_rate=spec.learning_rate,
            momentum=spec.momentum,
            weight_decay=spec.weight_decay,
        ),
        optimizer=SiteOptimizer(name=config.fl.optimizer, learning_rate=spec.learning_rate),
        seed=config.seed,
    )


def dishonest_server_settings(
    config: ExperimentConfig, site_id: int, state_dir: Path
) -> DishonestServerSettings | None:
    """The rounds the run's dishonest server attacks this site in (every site of an
    ``inconsistent`` round gets a crafted model; only its target's update is read)."""
    rounds = sorted({r for a in config.fl.adversary if site_id in a.sites for r in a.rounds})
    if not rounds:
        return None
    return DishonestServerSettings(rounds=tuple(rounds), site_id=site_id, state_dir=state_dir)


class SiteResolver:
    """``context -> SiteRuntime``, cached per site within a worker process.

    In simulation the site id is the node's ``partition-id``; ``data-path`` in the node
    config (Deployment Engine) points at the site's own data file instead of the run's.
    ``state_dir`` is where the site keeps its own files (default: the run's ``site_state``).

    Flower's simulation sends the ClientApp, and this resolver with it, pickled with every
    message, so the cache lives in the process (keyed by :attr:`key`, which travels with
    the pickle), not in the instance: a site's data, public pool and reference models are
    read once per worker, not once per round.
    """

    def __init__(
        self,
        config: ExperimentConfig,
        meta: DatasetMeta,
        layout: RunLayout,
        *,
        state_dir: Path | None = None,
    ) -> None:
        self.config, self.meta, self.layout = config, meta, layout
        self.state_dir = state_dir if state_dir is not None else layout.site_state
        self.key = uuid.uuid4().hex
        """This resolver's sites in the process's cache (the same in every unpickled copy)."""

    def __call__(self, context: Context) -> SiteRuntime:
        site_id = int(context.node_config["partition-id"])
        if self.key not in _BUILT:
            # A site process's first run: its modules (torch, Flower, ours) are loaded.
            freeze_loaded_modules()
            _BUILT.clear()
            _BUILT[self.key] = {}
        built = _BUILT[self.key]
        if site_id not in built:
            built[site_id] = self._build(site_id, context)
        return built[site_id]

    def _shared(self, dp: DPSettings | None) -> DPSettings | None:
        """An equal DP-SGD policy of a site this process already built for this run, else
        ``dp``: sites of one size then share the noise multiplier searched for it."""
        built = _BUILT[self.key].values()
        return next((site.dp for site in built if site.dp == dp), dp)

    def _build(self, site_id: int, context: Context) -> SiteRuntime:
        config = self.config
        data_path = context.node_config.get("data-path")
        path = Path(str(data_path)) if data_path else self.layout.site_file(site_id)
        data = SiteData.load(path)
        audit_cfg = config.audit
        if audit_cfg.reference_pool and (public := load_public(self.layout)) is not None:
            data = data.with_public(site_pool(config, public))
        runner = None
        if audit_cfg.enabled:
            states = load_reference_states(self.layout)
            runner = make_audit_runner(
                SiteAuditPolicy(
                    # The device of the process's own GPU share (none: the CPU).
                    settings=audit_cfg.settings.model_copy(
                        update={"device": audit_device(config).type}
                    ),
                    use_holdout=audit_cfg.use_holdout,
                    use_public_pool=audit_cfg.reference_pool,
                    reference_states=None if states is None else tuple(states),
                    exposed_records=audit_cfg.exposed_records,
                    exposed_records_path=self.state_dir / exposed_records_name(site_id),
                    attribute_inference=audit_cfg.attribute_inference,
                    seeding=audit_cfg.seeding,
                )
            )
        return SiteRuntime(
            site_id=site_id,
            task=make_task(config, self.meta),
            data=data,
            device=pick_device(config.resources.num_gpus),
            torch_threads=config.resources.train_threads,
            audit_torch_threads=config.resources.audit_threads,
            dp=self._shared(dp_settings(config, members=len(data.training_x))),
            accountant_history_path=self.state_dir / site_accountant_history_name(site_id),
            audit_runner=runner,
            return_scores=audit_cfg.enabled and audit_cfg.settings.return_scores,
            gradient_canaries=gradient_canary_settings(
                config, site_id, self.state_dir, seeded=True
            ),
            inversion=inversion_settings(config, site_id, self.state_dir),
            distributed_dp=distributed_dp_settings(config),
            secure_sum=(
                SecureSumSettings(site_id=site_id, state_dir=self.state_dir)
                if config.fl.secure_aggregation == "ideal"
                else None
            ),
            updates=update_audit_settings(config, site_id, self.state_dir),
            client_level_dp=config.dp.client_level,
            dishonest_server=dishonest_server_settings(config, site_id, self.state_dir),
            model_checks=model_check_settings(config, self.layout, site_id, self.state_dir),
        )


def central_evaluator(
    config: ExperimentConfig, meta: DatasetMeta, layout: RunLayout, *, sites_here: bool
) -> CentralEvaluation | None:
    """Evaluate the global model on the public split (records no site trains on).

    ``sites_here``: the sites train on this machine's cores (a simulation), so beside their
    training the evaluation takes the cores they leave
    (:func:`evaluation_threads_beside_training`); else, and with nothing beside it, the
    driver's torch threads. A matrix product can sum in another order on another thread
    count, so a score's last bits follow the machine, as the training's do.
    """
    public = load_public(layout)
    if public is None or not config.fl.central_evaluation:
        return None
    task = make_task(config, meta)
    x, y = public.x, public.y
    device = pick_device(config.resources.num_gpus)
    threads_beside = evaluation_threads_beside_training(config) if sites_here else None

    def evaluate(state: StateDict, *, beside_training: bool) -> dict[str, float]:
        model = task.make_model()
        model.load_state_dict(state)
        if not beside_training or threads_beside is None:
            return task.evaluate(model, x, y, device=device)
        # Per thread in torch (OpenMP): this sets the evaluating thread's count, and is
        # put back so that an evaluation with nothing beside it has the driver's again.
        previous = torch.get_num_threads()
        torch.set_num_threads(threads_beside)
        try:
            return task.evaluate(model, x, y, device=device)
        finally:
            torch.set_num_threads(previous)

    return evaluate


def server_settings(
    config: ExperimentConfig,
    meta: DatasetMeta,
    layout: RunLayout,
    *,
    phases: tuple[str, ...],
    progress: bool,
    stop: StopSwitch | None = None,
    sites_here: bool = True,
) -> ServerSettings:
    """The ServerApp's settings of a run; ``sites_here``: its sites train on this machine
    (a simulation), not on nodes of their own (a deployment)."""
    task = make_task(config, meta)

    def initial_state() -> dict[str, torch.Tensor]:
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        return {k: v.detach().clone() for k, v in task.make_model().state_dict().items()}

    return ServerSettings(
        layout=layout,
        num_sites=config.partition.num_sites,
        rounds=config.fl.rounds,
        local_epochs=config.fl.local_epochs,
        local_steps=config.fl.local_steps,
        seed=config.seed,
        strategy=StrategySettings(
            name=config.fl.strategy,
            fraction_train=config.fl.fraction_train,
            proximal_mu=config.fl.proximal_mu,
            server_learning_rate=config.fl.server_learning_rate,
            seed=config.seed,
            uniform_weights=config.dp.any_level,
            record_dp=config.dp.record_level,
        ),
        client_dp=client_dp_settings(config),
        canary_clients=canary_client_settings(config, task),
        initial_state=initial_state,
        central_eval=central_evaluator(config, meta, layout, sites_here=sites_here),
        checkpoint_meta=CheckpointMeta(
            modality=meta.modality,
            model=config.model.name,
            model_options=dict(config.model.options),
            num_classes=meta.num_classes,
            input_shape=tuple(meta.input_shape),
            dp=config.dp.any_level,
            dp_level=config.dp.level,
        ),
        phases=phases,
        progress=progress,
        audit_rounds=config.audit.audited_rounds(config.fl.rounds),
        stop=stop,
        secure_aggregation=config.fl.secure_aggregation,
        aggregate_rounds=aggregate_rounds(config),
        adversary=adversary_settings(config, task, layout),
        announce=checks_mode(config) != "off",
    )


def aggregate_rounds(config: ExperimentConfig) -> tuple[int, ...]:
    """The rounds whose sum each site's inversion audit attacks under secure aggregation
    (the server holds nothing else of them); () otherwise."""
    inversion = config.audit.inversion
    if config.fl.secure_aggregation == "none" or inversion is None:
        return ()
    return tuple(sorted(set(inversion.rounds)))


def build_apps(
    config: ExperimentConfig,
    meta: DatasetMeta,
    layout: RunLayout,
    *,
    phases: tuple[str, ...],
    progress: bool = True,
    stop: StopSwitch | None = None,
):
    """(ServerApp, ClientApp) for one run directory; ``stop`` lets the caller end the
    ServerApp's thread (:class:`server.stop.StopSwitch`)."""
    server_app = build_server_app(
        server_settings(config, meta, layout, phases=phases, progress=progress, stop=stop)
    )
    client_app = build_client_app(SiteResolver(config, meta, layout))
    return server_app, client_app
