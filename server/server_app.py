"""The ServerApp: federated rounds with checkpoints, then the audit phase's fan-out.

Generic over the task: initial weights, central evaluation and checkpoint metadata are
arguments (:class:`ServerSettings`), so the server never imports the harness or data.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.checkpoint import (
    Checkpoint,
    StateDict,
    latest_round_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from panoramia_fl.contracts.dp_level import SecureAggregationMode
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import NOISE_NOTES, CheckpointMeta, NoiseSource, RunLayout
from panoramia_fl.contracts.site_audit import SiteAudit, SiteAuditFile
from panoramia_fl.contracts.wire import (
    ARRAYS,
    AUDIT,
    AUDIT_QUERY,
    CONFIG,
    METRICS,
    WHOAMI,
    AuditFailure,
    AuditInstructions,
    TrainInstructions,
    WhoamiReply,
    WireError,
    audit_reply,
    round_arrays,
)
from panoramia_fl.server.adversary import AdversarySettings, DishonestServer, Holdings
from panoramia_fl.server.announce import AnnouncingStrategy
from panoramia_fl.server.canary_clients import (
    CanaryClients,
    CanaryClientSettings,
    measure_canary_clients,
)
from panoramia_fl.server.client_dp import (
    ClientDPAccounting,
    ClientDPSettings,
    client_clipping,
    wrap_strategy,
)
from panoramia_fl.server.round_audits import (
    SiteAuditPlan,
    global_accuracy,
    plan_audits,
    round_weights,
    with_rounds,
)
from panoramia_fl.server.run_writer import read_site_audit, truncate_rounds, write_site_audit
from panoramia_fl.server.secure_aggregation import SecureAggregation
from panoramia_fl.server.stop import StoppableGrid, StopSwitch
from panoramia_fl.server.strategy import (
    RoundWriter,
    ScreenedStrategy,
    SiteAwareMixin,
    StrategySettings,
    make_strategy,
)

log = logging.getLogger(__name__)


class CentralEvaluation(Protocol):
    """The global model's scores on the central data (``loss``, ``accuracy`` ...).

    ``beside_training``: the sites train the next round meanwhile (every round but a start's
    last), so the evaluation should leave them the cores they hold.
    """

    def __call__(self, state: StateDict, *, beside_training: bool) -> dict[str, float]: ...


@dataclass(frozen=True)
class ServerSettings:
    """Everything the ServerApp needs, handed in by whoever builds it."""

    layout: RunLayout
    num_sites: int
    rounds: int
    local_epochs: int
    seed: int
    strategy: StrategySettings
    client_dp: ClientDPSettings | None
    """Client-level DP (Flower's wrappers and the run's client-level accounting); ``None``: off."""
    initial_state: Callable[[], StateDict]
    canary_clients: CanaryClientSettings | None = None
    """Canary clients in the rounds (simulation only); ``None``: none."""
    central_eval: CentralEvaluation | None = None
    checkpoint_meta: CheckpointMeta | None = None
    phases: tuple[str, ...] = ("train", "audit")
    node_wait_s: float = 300.0
    timeout_s: float = 24 * 3600.0
    progress: bool = True
    audit_rounds: tuple[int, ...] = ()
    """Global rounds whose checkpoints each site audits too (``audit.rounds`` /
    ``audit.every``); empty: the final model only."""
    local_steps: int | None = None
    """``fl.local_steps``: each site takes that many local steps a round, not epochs."""
    noise_source: NoiseSource = "seeded"
    """``seeded`` (simulation): client-level noise follows numpy's global generator as the
    harness seeded it, reproducibly; ``os-entropy`` (a real deployment): that generator is
    reseeded from the OS's entropy before training, so nobody can replay the noise."""
    stop: StopSwitch | None = None
    """Lets the harness stop the ServerApp (Ctrl-C); ``None``: runs to the end."""
    secure_aggregation: SecureAggregationMode = "none"
    """``ideal``: the strategy receives only each round's weighted sum
    (:mod:`server.secure_aggregation`; a simulation setting)."""
    aggregate_rounds: tuple[int, ...] = ()
    """Rounds whose global weights go with each main audit, so that a site can read what the
    server held of that round, the sum (secure aggregation with ``audit.inversion``)."""
    announce: bool = False
    """Announce each round's model to its sites before training, for the sites' consistency
    check (:mod:`server.announce`; ``fl.model_checks``)."""
    adversary: AdversarySettings | None = None
    """A server that does not play fair (``fl.adversary``, simulations only); None: honest."""

    @property
    def fanout(self) -> AuditFanout:
        """The audit phase's settings."""
        return AuditFanout(
            layout=self.layout,
            seed=self.seed,
            audit_rounds=self.audit_rounds,
            timeout_s=self.timeout_s,
            progress=self.progress,
            aggregate_rounds=self.aggregate_rounds,
        )


@dataclass(frozen=True)
class AuditFanout:
    """What the audit phase needs: this ServerApp's and a user's own
    (:mod:`deployment.site_audits`)."""

    layout: RunLayout
    seed: int
    audit_rounds: tuple[int, ...] = ()
    timeout_s: float = 24 * 3600.0
    progress: bool = True
    aggregate_rounds: tuple[int, ...] = ()
    """Rounds whose global weights go with each main audit besides ``audit_rounds``'."""
    held: Holdings | None = None
    """What a dishonest server held of each site: it goes with that site's main audit."""


def wait_for_nodes(grid: Grid, n: int, timeout: float) -> list[int]:
    """The node ids once ``n`` nodes have connected (a TimeoutError after ``timeout`` s)."""
    deadline = time.time() + timeout
    while len(nodes := list(grid.get_node_ids())) < n:
        if time.time() > deadline:
            raise TimeoutError(f"only {len(nodes)} of {n} sites connected within {timeout}s")
        time.sleep(0.5)
    return nodes


def site_map(grid: Grid, nodes: list[int], timeout: float) -> dict[int, int]:
    """node id -> site id, asked of every node (replies carry node ids only)."""
    messages = [
        Message(
            content=RecordDict(), message_type=f"{MessageType.QUERY}.{WHOAMI}", dst_node_id=node
        )
        for node in nodes
    ]
    mapping = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            raise RuntimeError(f"node {node} did not say which site it is: {reply.error.reason}")
        try:
            if METRICS not in reply.content.metric_records:
                raise WireError(f"whoami reply: no {METRICS!r} record")
            whoami = WhoamiReply.from_record(reply.content.metric_records[METRICS])
        except WireError as err:
            raise RuntimeError(f"node {node} did not say which site it is: {err}") from None
        mapping[node] = whoami.site_id
    if sorted(mapping.values()) != list(range(len(nodes))):
        raise RuntimeError(
            f"site ids reported by the nodes are not 0..{len(nodes) - 1}: "
            f"{sorted(mapping.values())}"
        )
    return mapping


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=True)


def run_training(
    grid: Grid,
    settings: ServerSettings,
    site_of_node: dict[int, int],
    held: Holdings | None = None,
) -> StateDict:
    """Rounds from the last checkpoint to ``settings.rounds``; returns the final weights.

    Each round is written by :class:`~server.strategy.RoundWriter` (its checkpoint last), so
    a resumed run continues from the last checkpoint and redoes whatever lies past it.
    ``held``: where a dishonest server (``settings.adversary``) keeps what it held.
    """
    layout = settings.layout
    latest = latest_round_checkpoint(layout)
    if latest is not None:
        done, state = latest.round, latest.state_dict
    else:
        done, state = 0, settings.initial_state()
    truncate_rounds(layout, done)
    sites = make_strategy(
        settings.strategy,
        num_sites=settings.num_sites,
        site_of_node=site_of_node,
        round_offset=done,
    )
    if done >= settings.rounds:
        if not layout.client_canaries.exists():  # stopped between the last round and this
            _measure_canary_clients(settings, sites.sites_per_round)
        return state
    strategy = _aggregating_strategy(settings, sites, done, held)
    if settings.announce:
        strategy = AnnouncingStrategy(strategy, sites, timeout=settings.timeout_s)
    client_dp = _client_dp_accounting(settings, sites.sites_per_round, done)
    bar = _progress(settings.rounds, "FL rounds", settings.progress)
    bar.update(done)

    def show(global_round: int, scores: dict[str, float]) -> None:
        bar.update(1)
        bar.set_postfix({f"global_{k}": round(v, 3) for k, v in scores.items()})

    writer = RoundWriter(
        strategy,
        sites,
        layout=layout,
        round_offset=done,
        meta=settings.checkpoint_meta,
        client_dp=client_dp,
        stop=settings.stop,
        on_commit=show,
    )
    seed_server_noise(settings.noise_source)
    result = writer.start(
        grid=grid,
        initial_arrays=ArrayRecord(state),
        num_rounds=settings.rounds - done,
        train_config=_train_instructions(settings, done),
        evaluate_fn=_central_evaluation(settings.central_eval, last_round=settings.rounds - done),
        timeout=settings.timeout_s,
    )
    bar.close()
    _measure_canary_clients(settings, sites.sites_per_round)
    return result.arrays.to_torch_state_dict()


def _client_dp_accounting(
    settings: ServerSettings, sites_per_round: int, done: int
) -> ClientDPAccounting | None:
    """The client-level DP accounting (None without client-level DP), cut back to the ``done``
    rounds a resumed run keeps."""
    if settings.client_dp is None:
        return None
    client_dp = ClientDPAccounting.load_or_new(
        settings.layout,
        settings.client_dp,
        population_size=settings.num_sites,
        sites_per_round=sites_per_round,
    )
    client_dp.truncate(done)
    client_dp.noise_note = NOISE_NOTES[settings.noise_source]
    return client_dp


def _train_instructions(settings: ServerSettings, done: int) -> ConfigRecord:
    """The run's settings for every train message; the strategy stamps each message's
    (global) round."""
    return TrainInstructions(
        local_epochs=settings.local_epochs,
        local_steps=settings.local_steps,
        seed=settings.seed,
        server_round=done + 1,
        client_clipping=client_clipping(settings.client_dp),
    ).to_record()


def _aggregating_strategy(
    settings: ServerSettings, sites: SiteAwareMixin, done: int, held: Holdings | None = None
) -> Strategy:
    """The site-aware strategy inside Flower's central DP wrapper (if any), the canary
    clients (if any), a dishonest server (if any), and the reply screening or the secure sum
    outermost."""
    strategy: Strategy = sites
    dp = settings.client_dp
    central = dp is not None and dp.mechanism == "central"
    if central:
        assert dp is not None
        strategy = wrap_strategy(sites, dp, sites_per_round=sites.sites_per_round)
    if settings.canary_clients is not None:
        # Outside the DP wrapper: the canaries' replies are clipped and noised with the
        # sites'; distributed, they are added to the sum at the clipping norm, noise-free.
        strategy = CanaryClients(
            strategy,
            settings.canary_clients,
            weighted_by_key=sites.weighted_by_key,
            sites_per_round=sites.sites_per_round,
            round_offset=done,
            dp_wrapper=strategy if central else None,
            clipping_norm=None if dp is None else dp.clipping_norm,
        )
    adversary = None
    if settings.adversary is not None:
        # Outside the DP wrappers: the server reads each update before its own noise.
        strategy = adversary = DishonestServer(
            strategy, sites, settings.adversary, Holdings() if held is None else held
        )
    if settings.secure_aggregation == "ideal":
        secure = SecureAggregation(strategy, sites, timeout=settings.timeout_s)
        if adversary is not None:
            adversary.secure_sum = secure
        return secure
    # Around every aggregating strategy: none, Flower's DP wrappers included, reads an
    # unchecked reply.
    return ScreenedStrategy(strategy, sites)


def _central_evaluation(
    evaluate: CentralEvaluation | None, *, last_round: int
) -> Callable[[int, ArrayRecord], MetricRecord | None] | None:
    """Flower's ``evaluate_fn``: the global model's scores on the central data, if any.
    ``last_round``: this start's last round, the one no training runs beside."""
    if evaluate is None:
        return None

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        state = arrays.to_torch_state_dict()
        scores = evaluate(state, beside_training=server_round < last_round)
        return MetricRecord({k: float(v) for k, v in scores.items()})

    return evaluate_fn


def _measure_canary_clients(settings: ServerSettings, sites_per_round: int) -> None:
    """``client_canaries.json`` from the round checkpoints, when the run has canaries."""
    if settings.canary_clients is None:
        return
    dp = settings.client_dp
    measure_canary_clients(
        settings.layout,
        settings.canary_clients,
        initial_state=settings.initial_state,
        rounds=settings.rounds,
        real_sites=settings.num_sites,
        sites_per_round=sites_per_round,
        noise_multiplier=None if dp is None else dp.noise_multiplier,
        clipping=None if dp is None else dp.clipping,
    )


def seed_server_noise(source: NoiseSource) -> None:
    """Flower's client-level DP wrappers draw their noise (and adaptive clipping its count
    noise) from numpy's global generator. ``os-entropy``: reseed it from 256 bits of the
    OS's entropy, so neither the run config's seed nor anything else the operator knows
    replays the noise. ``seeded``: leave it as the harness seeded it (reproducible).

    What remains: numpy's global generator is a Mersenne Twister and Flower draws one
    Gaussian per coordinate (no sum of several, as Opacus's ``secure_mode`` does).
    """
    if source == "os-entropy":
        np.random.seed(np.frombuffer(os.urandom(32), dtype=np.uint32))


def run_audits(
    grid: Grid,
    settings: AuditFanout,
    site_of_node: dict[int, int],
    state: StateDict,
    model_round: int,
) -> None:
    """Send every site still missing an audit of the final model (of round
    ``model_round``) or of an earlier round in ``settings.audit_rounds`` one message with
    those weights; write each site's file as soon as its reply arrives."""
    layout = settings.layout
    plans = plan_audits(layout, sorted(site_of_node.values()), model_round, settings.audit_rounds)
    if not plans:
        return
    node_of_site = {s: n for n, s in site_of_node.items()}
    wanted = {r for p in plans for r in p.rounds} | set(settings.aggregate_rounds)
    weights = round_weights(layout, tuple(sorted(wanted)))
    messages = []
    for plan in plans:
        asked = AuditInstructions(seed=settings.seed, rounds=plan.rounds, main=plan.main)
        records: dict[str, Any] = {CONFIG: asked.to_record()}
        sent = set(plan.rounds)
        if plan.main:
            records[ARRAYS] = ArrayRecord(state)
            sent |= set(settings.aggregate_rounds)
            if settings.held is not None:
                records.update(settings.held.audit_records(plan.site))
        records.update({round_arrays(r): weights[round_arrays(r)] for r in sorted(sent)})
        messages.append(
            Message(
                content=RecordDict(records),
                message_type=f"{MessageType.QUERY}.{AUDIT_QUERY}",
                dst_node_id=node_of_site[plan.site],
            )
        )
    pending = set(grid.push_messages(messages))
    plan_of_site = {p.site: p for p in plans}
    accuracy = global_accuracy(layout)
    bar = _progress(len(plans), "site audits", settings.progress)
    deadline = time.time() + settings.timeout_s
    while pending and time.time() < deadline:
        for reply in grid.pull_messages(pending):
            pending.discard(reply.metadata.reply_to_message_id)
            site = site_of_node.get(reply.metadata.src_node_id)
            if site is None or site not in plan_of_site:
                log.warning(
                    "an audit reply from node %d, not in the node map, was dropped",
                    reply.metadata.src_node_id,
                )
                continue
            _write_reply(settings, plan_of_site[site], reply, model_round, accuracy)
            bar.update(1)
        time.sleep(StoppableGrid.POLL_S)
    bar.close()
    if pending:
        log.warning("%d site audits did not answer in time", len(pending))


def _write_reply(
    settings: AuditFanout,
    plan: SiteAuditPlan,
    reply: Message,
    model_round: int,
    accuracy: dict[int, float],
) -> None:
    """Write ``plan.site``'s file: its new main audit, or (rounds only) the kept one; both
    with the rounds it audited. A failed rounds-only audit keeps the file as it is."""
    site = plan.site
    before = read_site_audit(settings.layout, site)
    outcome = audit_outcome(reply, site)
    if plan.main:
        audit = site_audit_file(site, outcome, model_round)
    elif isinstance(outcome, AuditFailure) or before is None:
        log.warning(
            "site %d: the audit of rounds %s failed: %s",
            site,
            plan.rounds,
            getattr(outcome, "error", "no audit file to add them to"),
        )
        return
    else:
        audit = before
    earlier = [] if isinstance(outcome, AuditFailure) else outcome.results.by_round
    try:
        audit = with_rounds(
            audit, earlier, before=before, rounds=settings.audit_rounds, accuracy=accuracy
        )
    except ValueError as err:
        log.warning("site %d: its audits of earlier rounds were dropped: %s", site, err)
    write_site_audit(settings.layout, audit)


def audit_outcome(reply: Message, site: int) -> SiteAudit[SiteResults] | AuditFailure:
    """What ``site``'s audit reply says: its audit, or its failure (an error reply; a reply
    that does not hold a valid audit of that site counts as one)."""
    if reply.has_error():
        return AuditFailure.from_error(reply.error)
    if AUDIT not in reply.content.config_records:
        return AuditFailure(error=f"the audit reply has no {AUDIT!r} record")
    try:
        outcome = audit_reply(reply.content.config_records[AUDIT], SiteResults)
    except WireError as err:
        return AuditFailure(error=f"malformed audit reply: {err}")
    if outcome.site_id != site:
        return AuditFailure(
            error=f"malformed audit reply: claims site {outcome.site_id}, but its node is "
            f"site {site}"
        )
    return outcome


def site_audit_file(
    site: int, outcome: SiteAudit[SiteResults] | AuditFailure, model_round: int
) -> SiteAuditFile[SiteResults]:
    """The site's audit file (``audits/site-<id>.json``) from its reply's outcome
    (:func:`audit_outcome`)."""
    if isinstance(outcome, AuditFailure):
        return SiteAuditFile(
            site_id=site,
            status="failed",
            error=outcome.error,
            elapsed_s=outcome.elapsed_s,
            traceback=outcome.traceback,
            model_round=model_round,
            results=SiteResults(),
        )
    if outcome.results.panoramia is None:
        return SiteAuditFile(
            site_id=site,
            status="failed",
            error="malformed audit reply: no main audit, though one was asked for",
            elapsed_s=outcome.elapsed_s,
            model_round=model_round,
            results=SiteResults(),
        )
    # The file's lines of earlier rounds come from with_rounds (with the final round's).
    sent = replace(outcome, results=replace(outcome.results, by_round=[]))
    return SiteAuditFile.of(sent, model_round=model_round)


def record_noise_source(settings: ServerSettings) -> None:
    """``noise.json``: where this run's DP randomness comes from, for the report."""
    if "train" not in settings.phases:
        return  # the noise of an audit-only start is the training's, already recorded
    content = {"source": settings.noise_source, "note": NOISE_NOTES[settings.noise_source]}
    atomic_write_text(settings.layout.noise, json.dumps(content, indent=1) + "\n")


def build_server_app(settings: ServerSettings) -> ServerApp:
    """The ServerApp for ``settings.phases`` (train, audit, or both in order)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        if settings.stop is not None:
            settings.stop.thread = threading.current_thread()
            grid = StoppableGrid(grid, settings.stop)
        record_noise_source(settings)
        nodes = wait_for_nodes(grid, settings.num_sites, settings.node_wait_s)
        site_of_node = site_map(grid, nodes, settings.timeout_s)
        state, model_round = None, settings.rounds
        held = None if settings.adversary is None else Holdings.load(settings.layout)
        if "train" in settings.phases:
            state = run_training(grid, settings, site_of_node, held)
            save_checkpoint(
                settings.layout.final_model,
                Checkpoint(round=settings.rounds, state_dict=state, meta=settings.checkpoint_meta),
            )
        if "audit" in settings.phases:
            if state is None:
                final = load_checkpoint(settings.layout.final_model)
                state, model_round = final.state_dict, final.round
            run_audits(grid, replace(settings.fanout, held=held), site_of_node, state, model_round)

    return app
