"""The ClientApp: each site trains locally and, at the end, audits the global model.

Message types handled:

- ``train``: one round of local training; replies with weights and the site's metrics.
- ``query.announce``: the server's word on the coming round (the digest of its model and its
  sites), which the site publishes on the bulletin (:mod:`clients.model_checks`); before it
  trains, the site checks the model it got and refuses a flagged one (Flower's error reply
  with :data:`~contracts.model_flags.MODEL_FLAGGED_CODE`: nothing trained, nothing sent).
- ``query.whoami``: the site id (Flower replies carry node ids, not site ids).
- ``query.audit``: run PANORAMIA on the site's own members against the final model; replies
  with summary numbers and curves only, or, when the audit raises, with Flower's error reply
  (the error text and a short traceback).

The messages' contents are the typed values of :mod:`contracts.wire`.

Everything a site needs (its task, data, DP policy, audit settings, its own
:class:`~clients.site_policy.SitePolicy`) comes from a ``resolve(context) -> SiteRuntime``
callable, so the same app runs in simulation and under the Deployment Engine. A message that
asks for more than the site's policy allows gets Flower's error reply with
:data:`~contracts.wire.SITE_REFUSED_CODE`, naming the policy key, and the refusal goes to
the site's own log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod

from panoramia_fl.audit.canaries.gradient_canaries import GradientCanaryResult
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.clients.audit_handler import AuditRunner
from panoramia_fl.clients.dishonest_server import (
    DishonestServerSettings,
    held_models,
    held_rounds,
    keep_used,
    score_rebuilt,
)
from panoramia_fl.clients.distributed_dp import (
    DistributedDPSettings,
    applied,
    noise_generator,
    privatised,
)
from panoramia_fl.clients.inversion import InversionSettings, inversion_audit, keep_round
from panoramia_fl.clients.model_checks import (
    BulletinConflict,
    ModelCheckSettings,
    check_received,
    publish,
)
from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.real_path_canaries import GradientCanarySettings, GradientCanaryState
from panoramia_fl.clients.secure_sum_site import (
    SecureSumError,
    SecureSumSettings,
    commit,
    masked_update,
)
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.clients.site_policy import MODEL_CHECKS_KEY, SitePolicy, SiteRefusal, log_refusal
from panoramia_fl.clients.site_training import LocalTrainResult, TrainableTask, train_locally
from panoramia_fl.clients.update_audits import (
    KeptModel,
    UpdateAuditSettings,
    keep_local_model,
    kept_models,
    with_epsilons,
)
from panoramia_fl.contracts.model_flags import (
    ANNOUNCE,
    MODEL_FLAGGED_CODE,
    ModelFlag,
    RoundAnnouncement,
)
from panoramia_fl.contracts.secure_sum import (
    SECURE_SUM,
    WEIGHT_KEYS,
    SecureSumInstructions,
    weight_of,
)
from panoramia_fl.contracts.site_audit import SiteAudit
from panoramia_fl.contracts.wire import (
    ARRAYS,
    AUDIT,
    AUDIT_QUERY,
    CONFIG,
    METRICS,
    SITE_REFUSED_CODE,
    WHOAMI,
    AuditFailure,
    AuditInstructions,
    TrainInstructions,
    TrainReply,
    WhoamiReply,
    WireError,
    audit_record,
    round_arrays,
)

ACCOUNTANT_HISTORY_KEY = "dp-accountant_history"


@dataclass(frozen=True)
class SiteRuntime:
    """A site's task, data and policies, resolved from the Flower context."""

    site_id: int
    task: TrainableTask
    data: SiteData
    device: torch.device
    torch_threads: int
    """torch threads while training (``resources.torch_threads``, resolved)."""
    dp: DPSettings | None
    accountant_history_path: Path | None
    audit_runner: AuditRunner | None
    """Runs the audit (:func:`clients.audit_handler.make_audit_runner`): PANORAMIA, the
    canaries' one-run audit, and the earlier rounds' brief audits."""
    policy: SitePolicy = SitePolicy.simulated()
    """What the site accepts and lets leave (a SuperNode's node config; simulation: all)."""
    audit_torch_threads: int | None = None
    """torch threads while auditing (None: :attr:`torch_threads`)."""
    secure_noise: bool = False
    """DP-SGD noise and sampling from the OS's entropy (a real deployment), not the seed."""
    return_scores: bool = False
    """The run's audit would put per-record scores in the reply."""
    refusal_log: Path | None = None
    """The site's own log of what its policy refused (None: the Python log only)."""
    gradient_canaries: GradientCanarySettings | None = None
    """Gradient canaries in the site's DP-SGD (record-level DP only), audited white-box."""
    inversion: InversionSettings | None = None
    """The site keeps its chosen rounds' updates and attacks them at audit time."""
    distributed_dp: DistributedDPSettings | None = None
    """Distributed client-level DP: the site clips its update and adds its noise share."""
    secure_sum: SecureSumSettings | None = None
    """Secure aggregation (ideal): the update leaves only masked, in the round's sum."""
    updates: UpdateAuditSettings | None = None
    """The site keeps its chosen rounds' local models and audits them at audit time."""
    client_level_dp: bool = False
    """The run is under client-level DP (central or distributed): the site's replies carry
    only what that guarantee covers (no loss, no count; FedAvg's weight is the unit one)."""
    dishonest_server: DishonestServerSettings | None = None
    """Simulation: the rounds the run's dishonest server attacks the site in (it keeps the
    records its steps used, to score what that server rebuilt)."""
    model_checks: ModelCheckSettings | None = None
    """The checks on each received model before training; None: the site trains any model."""


Resolver = Callable[[Context], SiteRuntime]


def _accountant_history(runtime: SiteRuntime, context: Context) -> AccountantHistory:
    assert runtime.dp is not None
    if ACCOUNTANT_HISTORY_KEY in context.state.config_records:
        text = str(context.state.config_records[ACCOUNTANT_HISTORY_KEY]["json"])
        return AccountantHistory.from_json(text)
    return AccountantHistory.load(runtime.accountant_history_path, accountant=runtime.dp.accountant)


def _save_accountant_history(
    accountant_history: AccountantHistory, runtime: SiteRuntime, context: Context
) -> None:
    context.state.config_records[ACCOUNTANT_HISTORY_KEY] = ConfigRecord(
        {"json": accountant_history.to_json()}
    )
    accountant_history.save(runtime.accountant_history_path)


_CLIPPING_MODS = {"fixed": fixedclipping_mod, "adaptive": adaptiveclipping_mod}


def clipping_mod(msg: Message, context: Context, call_next: Callable) -> Message:
    """Flower's client-side clipping mod of the kind the server's DP wrapper asked for
    (client-level DP with clipping at the sites); otherwise the update goes out as is."""
    kind = TrainInstructions.from_record(msg.content.config_records[CONFIG]).client_clipping
    if kind is None:
        return call_next(msg, context)
    return _CLIPPING_MODS[kind](msg, context, call_next)


def build_client_app(resolve: Resolver) -> ClientApp:
    """Build the ClientApp around a site resolver."""
    app = ClientApp()

    @app.train(mods=[clipping_mod])
    def train(msg: Message, context: Context) -> Message:
        runtime = resolve(context)
        # The site's threads from here, its checks of the model included: a process that
        # imported torch before Ray gave it its CPUs (a worker started ahead) has one a core.
        torch.set_num_threads(runtime.torch_threads)
        try:
            flag = _checked(msg, context, runtime)
            if flag is not None and runtime.model_checks is not None:
                if runtime.model_checks.refuse:
                    return _refuse_model(msg, context, runtime, flag)
                logging.getLogger(__name__).warning("record only, trained: %s", flag.sentence())
            return _train(msg, context, runtime)
        except SiteRefusal as refusal:
            return _refuse(msg, context, runtime, refusal)

    @app.query(ANNOUNCE)
    def announce(msg: Message, context: Context) -> Message:
        runtime = resolve(context)
        try:
            announced = RoundAnnouncement.from_values(msg.content.config_records[CONFIG])
            if runtime.model_checks is not None:
                publish(runtime.model_checks, runtime.site_id, announced)
        except (BulletinConflict, WireError) as err:
            reason = f"{type(err).__name__}: site {runtime.site_id}: {err}"
            return Message(Error(code=SITE_REFUSED_CODE, reason=reason), reply_to=msg)
        return Message(content=RecordDict(), reply_to=msg)

    @app.query(SECURE_SUM)
    def secure_sum(msg: Message, context: Context) -> Message:
        runtime = resolve(context)
        try:
            if runtime.secure_sum is None:
                raise SecureSumError("the site's config has no secure aggregation")
            asked = SecureSumInstructions.from_values(msg.content.config_records[CONFIG])
            masked = masked_update(runtime.secure_sum, asked)
        except (SecureSumError, WireError) as err:
            # The site keeps its update to itself: the sum of this round cannot be read.
            reason = f"{type(err).__name__}: site {runtime.site_id}: {err}"
            return Message(Error(code=SITE_REFUSED_CODE, reason=reason), reply_to=msg)
        arrays = ArrayRecord({k: Array(v) for k, v in masked.items()})
        return Message(content=RecordDict({ARRAYS: arrays}), reply_to=msg)

    return add_site_queries(app, resolve)


def add_site_queries(app: ClientApp, resolve: Resolver) -> ClientApp:
    """Add ``query.whoami`` and ``query.audit`` to ``app`` (this project's ClientApp or a
    user's own: :mod:`deployment.site_audits`); returns ``app``."""

    @app.query(WHOAMI)
    def whoami(msg: Message, context: Context) -> Message:
        reply = WhoamiReply(site_id=resolve(context).site_id)
        return Message(content=RecordDict({METRICS: reply.to_record()}), reply_to=msg)

    @app.query(AUDIT_QUERY)
    def audit(msg: Message, context: Context) -> Message:
        started = time.time()
        runtime = resolve(context)
        try:
            runtime.policy.check_audit(return_scores=runtime.return_scores)
            reply = _audit(msg, context, runtime, started)
        except SiteRefusal as refusal:
            return _refuse(msg, context, runtime, refusal)
        except Exception as err:  # the site's error goes back as Flower's error reply
            logging.getLogger(__name__).debug("audit failed", exc_info=True)
            failure = AuditFailure.of(
                err,
                elapsed_s=time.time() - started,
                with_traceback=runtime.policy.allow_tracebacks,
            )
            return Message(failure.to_error(), reply_to=msg)
        return Message(content=RecordDict({AUDIT: audit_record(reply)}), reply_to=msg)

    return app


def _refuse(msg: Message, context: Context, runtime: SiteRuntime, refusal: SiteRefusal) -> Message:
    """The error reply of a refusal, after writing it to the site's own log."""
    logging.getLogger(__name__).warning("site %d: %s", runtime.site_id, refusal)
    if runtime.refusal_log is not None:
        log_refusal(runtime.refusal_log, runtime.site_id, refusal, run_id=int(context.run_id))
    reason = f"SiteRefusal: site {runtime.site_id}: {refusal}"
    return Message(Error(code=SITE_REFUSED_CODE, reason=reason), reply_to=msg)


def _checked(msg: Message, context: Context, runtime: SiteRuntime) -> ModelFlag | None:
    """The site's verdict on the model of a train message (None: it passed, or the site
    runs no checks)."""
    if runtime.model_checks is None:
        return None
    asked = TrainInstructions.from_record(msg.content.config_records[CONFIG])
    return check_received(
        runtime.model_checks,
        site_id=runtime.site_id,
        server_round=asked.server_round,
        received=msg.content.array_records[ARRAYS],
        task=runtime.task,
        records=runtime.data.training_x,
        labels=runtime.data.training_y,
        context=context,
    )


def _refuse_model(msg: Message, context: Context, runtime: SiteRuntime, flag: ModelFlag) -> Message:
    """The error reply of a flagged model (its verdict), after the site's own log."""
    logging.getLogger(__name__).warning("%s", flag.sentence())
    if runtime.refusal_log is not None:
        refusal = SiteRefusal(
            MODEL_CHECKS_KEY,
            f"the model of round {flag.server_round}",
            "; ".join(o.sentence() for o in flag.flagged),
        )
        log_refusal(runtime.refusal_log, runtime.site_id, refusal, run_id=int(context.run_id))
    return Message(Error(code=MODEL_FLAGGED_CODE, reason=flag.to_reason()), reply_to=msg)


def round_training_seed(run_seed: int, server_round: int, site_id: int) -> int:
    """The seed of one site's local training in one round: ``run_seed * 100_003 +
    server_round * 1_009 + site_id``.

    Why a mix: each site and each round draws its own batches and initial randomness (and,
    where no OS entropy is asked for, its DP noise and Poisson sampling) while the run's seed
    still reproduces them all. The multipliers keep the terms apart: no two (round, site)
    pairs of a run share a seed while sites number under 1_009, and no two runs of different
    seeds (a replicate set, a sweep) share one while rounds also stay under 99. The values are
    the ones runs have always used: changing them would change every saved run's training.
    """
    return run_seed * 100_003 + server_round * 1_009 + site_id


def _train(msg: Message, context: Context, runtime: SiteRuntime) -> Message:
    """One round of local training, within the site's policy."""
    dp = runtime.dp
    runtime.policy.check_training(
        record_dp=dp is not None, target_epsilon=None if dp is None else dp.target_epsilon
    )
    asked = TrainInstructions.from_record(msg.content.config_records[CONFIG])
    state = msg.content.array_records[ARRAYS].to_torch_state_dict()
    accountant_history = _accountant_history(runtime, context) if runtime.dp is not None else None
    gradient_canary_state = None
    if runtime.gradient_canaries is not None and runtime.dp is not None:
        gradient_canary_state = runtime.gradient_canaries.load_or_new()
    keeps_round = runtime.inversion is not None and runtime.inversion.wants(asked.server_round)
    attacked = runtime.dishonest_server is not None and runtime.dishonest_server.wants(
        asked.server_round
    )
    result = train_locally(
        runtime.task,
        state,
        x=runtime.data.training_x,
        y=runtime.data.training_y,
        epochs=asked.local_epochs,
        seed=round_training_seed(asked.seed, asked.server_round, runtime.site_id),
        device=runtime.device,
        proximal_mu=asked.proximal_mu or 0.0,
        dp=runtime.dp,
        accountant_history=accountant_history,
        secure_noise=runtime.secure_noise,
        gradient_canaries=gradient_canary_state,
        local_steps=asked.local_steps,
        keep_used=keeps_round or attacked,
    )
    # An update above the site's maximum is not sent, so its steps are not spent.
    runtime.policy.check_release(result.dp_epsilon)
    if accountant_history is not None:
        _save_accountant_history(accountant_history, runtime, context)
    if gradient_canary_state is not None and runtime.gradient_canaries is not None:
        gradient_canary_state.save(runtime.gradient_canaries.state_path)
    update = _leaving_update(runtime, asked, state, result.state_dict)
    if update is not None:
        result = replace(result, state_dict=applied(state, update))
    _keep_for_audits(runtime, asked, state, result, inversion=keeps_round)
    if attacked and runtime.dishonest_server is not None:
        keep_used(runtime.dishonest_server, asked.server_round, result.used)
    # Under DP at either level the count and the loss stay here: no accountant covers them
    # (contracts.reply_keys.REPLY_KEYS); FedAvg then averages by the unit weight.
    private = runtime.dp is not None or runtime.client_level_dp
    reply = TrainReply(
        site_id=runtime.site_id,
        train_loss=None if private else result.train_loss,
        num_examples=None if private else result.num_examples,
        dp_epsilon=result.dp_epsilon,
        noise_multiplier=result.noise_multiplier,
    )
    if runtime.secure_sum is not None:
        return _secure_sum_reply(msg, runtime.secure_sum, asked, state, result, reply)
    content = RecordDict({ARRAYS: ArrayRecord(result.state_dict), METRICS: reply.to_record()})
    return Message(content=content, reply_to=msg)


def _keep_for_audits(
    runtime: SiteRuntime,
    asked: TrainInstructions,
    state: dict[str, torch.Tensor],
    result: LocalTrainResult,
    *,
    inversion: bool,
) -> None:
    """What the site keeps of the round for its own audits, never sent: its local model
    (``audit.updates``) and, with ``inversion``, the round's state for the inversion audit."""
    if runtime.updates is not None and runtime.updates.wants(asked.server_round):
        keep_local_model(runtime.updates, asked.server_round, result)
    if inversion and runtime.inversion is not None:
        keep_round(
            runtime.inversion,
            asked.server_round,
            state,
            result,
            epochs=asked.local_epochs,
            steps=asked.local_steps,
        )


def _leaving_update(
    runtime: SiteRuntime,
    asked: TrainInstructions,
    state: dict[str, torch.Tensor],
    trained: dict[str, torch.Tensor],
) -> dict[str, torch.Tensor] | None:
    """Under distributed DP, the round's update clipped and with the site's noise share
    (seeded by the run, the round and the site; from the OS's entropy on a deployment);
    otherwise None (the trained weights leave as they are)."""
    settings = runtime.distributed_dp
    if settings is None:
        return None
    generator = noise_generator(
        seed=None if runtime.secure_noise else asked.seed,
        server_round=asked.server_round,
        site_id=runtime.site_id,
    )
    return privatised(state, trained, settings, generator, secure_mode=runtime.secure_noise)


def _secure_sum_reply(
    msg: Message,
    settings: SecureSumSettings,
    asked: TrainInstructions,
    state: dict[str, torch.Tensor],
    result: LocalTrainResult,
    reply: TrainReply,
) -> Message:
    """Step 1 of a secure sum: keep the update (what would have left the site, minus the
    global weights) and send the site's numbers with a key for the sum, no weights."""
    update = {
        k: (result.state_dict[k].double() - v.double()).numpy()
        if v.is_floating_point()
        else np.zeros(tuple(v.shape))
        for k, v in state.items()
    }
    numbers = reply.to_record()
    weights = {k: float(weight_of(numbers, k)) for k in WEIGHT_KEYS if k in numbers}
    key = commit(settings, asked.server_round, update, weights)
    content = RecordDict({METRICS: numbers, SECURE_SUM: ConfigRecord(key.to_values())})
    return Message(content=content, reply_to=msg)


def _audit(
    msg: Message, context: Context, runtime: SiteRuntime, started: float
) -> SiteAudit[SiteResults]:
    """Run the site's audit of the final model in ``msg``."""
    torch.set_num_threads(runtime.audit_torch_threads or runtime.torch_threads)
    if runtime.audit_runner is None:
        raise RuntimeError(f"site {runtime.site_id}: auditing is not configured")
    asked = AuditInstructions.from_record(msg.content.config_records[CONFIG])
    arrays = msg.content.array_records

    def model_of(name: str) -> torch.nn.Module:
        if name not in arrays:
            raise WireError(f"audit query: no {name!r} weights")
        model = runtime.task.make_model()
        model.load_state_dict(arrays[name].to_torch_state_dict())
        return model

    final = model_of(ARRAYS) if asked.main else None
    earlier = {r: model_of(round_arrays(r)) for r in asked.rounds}
    attacked = held_rounds(msg.content) if asked.main else []
    held = held_models(msg.content, attacked)
    # The site's own updates are audited with its main audit (a resumed run keeps them).
    kept = kept_models(runtime.updates) if asked.main and runtime.updates is not None else []
    kept = _server_held(runtime, kept, held)
    updates = {k.server_round: k.model(runtime.task) for k in kept}
    results = runtime.audit_runner(runtime.task, final, runtime.data, asked.seed, earlier, updates)
    results = replace(results, updates=with_epsilons(results.updates, kept))
    dp_eps = accountant_history = None
    if runtime.dp is not None:
        accountant_history = _accountant_history(runtime, context)
        dp_eps = accountant_history.epsilon(runtime.dp.delta)
    if asked.main:
        inversion = []
        if runtime.inversion is not None:
            inversion = inversion_audit(
                runtime.inversion,
                runtime.task,
                runtime.data,
                seed=asked.seed * 31 + runtime.site_id,
                sums=_round_sums(runtime, arrays, held),
            )
        rebuilt = []
        if runtime.dishonest_server is not None and attacked:
            rebuilt = score_rebuilt(
                runtime.dishonest_server, runtime.task, runtime.data, msg.content, attacked
            )
        results = replace(
            results,
            gradient_canaries=_gradient_canary_audit(runtime, asked.seed, accountant_history),
            inversion=inversion,
            dishonest_server=rebuilt,
        )
    return SiteAudit(
        site_id=runtime.site_id,
        n_members=int(len(runtime.data.train_x)),
        n_holdout=int(len(runtime.data.holdout_x)),
        elapsed_s=time.time() - started,
        dp_epsilon=dp_eps,
        results=results,
    )


def _round_sums(
    runtime: SiteRuntime, arrays: Any, held: dict[int, dict[str, torch.Tensor]]
) -> dict[int, dict[str, torch.Tensor]] | None:
    """Under secure aggregation, the global weights after each round the inversion audit
    attacks (sent with the audit: the server held only that round's sum), or the site's
    local model as a dishonest server held it (``held``); else None."""
    if runtime.secure_sum is None or runtime.inversion is None:
        return None
    rounds = [r for r in runtime.inversion.config.rounds if round_arrays(r) in arrays]
    sums = {r: arrays[round_arrays(r)].to_torch_state_dict() for r in rounds}
    return sums | {r: model for r, model in held.items() if r in runtime.inversion.config.rounds}


def _server_held(
    runtime: SiteRuntime, kept: list[KeptModel], held: dict[int, dict[str, torch.Tensor]]
) -> list[KeptModel]:
    """The site's local models its update audit reads: what the server held of them. Its
    own copies, each replaced by a dishonest server's where one read it; under secure
    aggregation only those (an honest server holds no site's update there)."""
    if runtime.updates is None:
        return kept
    eps = {k.server_round: k.dp_epsilon for k in kept}
    by_round = {} if runtime.secure_sum is not None else {k.server_round: k for k in kept}
    for r, state in held.items():
        if runtime.updates.wants(r):
            by_round[r] = KeptModel(server_round=r, state_dict=state, dp_epsilon=eps.get(r))
    return [by_round[r] for r in sorted(by_round)]


def _gradient_canary_audit(
    runtime: SiteRuntime, seed: int, accountant_history: AccountantHistory | None
) -> GradientCanaryResult | None:
    """The site's white-box audit of its own DP-SGD: its canaries' statistics and the
    conformance checks of its real steps against its accountant history."""
    settings = runtime.gradient_canaries
    if settings is None or runtime.dp is None or accountant_history is None:
        return None
    if not settings.state_path.exists():
        raise RuntimeError(
            f"site {runtime.site_id}: no gradient-canary statistics at {settings.state_path} "
            "(the site took part in no DP-SGD round)"
        )
    state = GradientCanaryState.load(settings.state_path)
    result = state.audit(
        beta=settings.beta,
        seed=seed * 31 + runtime.site_id,
        dp=runtime.dp,
        accountant_history=accountant_history,
    )
    if runtime.secure_sum is not None:
        # The server holds the round's sum, not this site's update: the server level reads
        # the site's own update, so it says nothing of that server (not measured).
        levels = {k: v for k, v in result.levels.items() if k != "server"}
        result = replace(result, levels=levels)
    return result
