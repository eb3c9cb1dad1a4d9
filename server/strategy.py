"""Strategies: Flower's FedAvg / FedProx / FedAdam, made site-aware.

The wrapper (1) samples sites per round deterministically from the seed and the global
round (Flower samples node ids at random, and node ids differ between runs; a resumed run
samples as the uninterrupted one would), (2) keeps each site's training metrics of the
round, which Flower's aggregation would average away, and (3) screens every reply before
any aggregation reads it (:meth:`SiteAwareMixin.screen`, applied outermost by
:class:`ScreenedStrategy`): a site is the one the node map says (never what its reply
claims), and a reply that fails :mod:`contracts.wire`'s checks or comes from a site not
sampled marks that site failed for the round, with the reason, while the others aggregate.
Client-level DP wraps these strategies in Flower's own DP wrappers (:mod:`server.client_dp`).
:class:`RoundWriter`, around them all, writes each finished round to the run directory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAdam, FedAvg, FedProx, Result, Strategy

from panoramia_fl.contracts.checkpoint import Checkpoint, save_checkpoint
from panoramia_fl.contracts.model_flags import MODEL_FLAGGED_CODE, ModelFlag
from panoramia_fl.contracts.registry import Registry
from panoramia_fl.contracts.run_files import CheckpointMeta, RunLayout
from panoramia_fl.contracts.run_log import RoundRecord, SiteRound
from panoramia_fl.contracts.secure_sum import SECURE_SUM, SecureSumKey
from panoramia_fl.contracts.wire import (
    ARRAYS,
    CONFIG,
    METRICS,
    UNIT_WEIGHT,
    TrainInstructions,
    TrainReply,
    WireError,
    check_arrays,
    error_reason,
    message_keys,
)
from panoramia_fl.server.client_dp import ClientDPAccounting
from panoramia_fl.server.round_commits import RoundCommits
from panoramia_fl.server.run_writer import append_round
from panoramia_fl.server.sampling import sites_per_round
from panoramia_fl.server.stop import StopSwitch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StrategySettings:
    name: str = "fedavg"
    fraction_train: float = 1.0
    proximal_mu: float = 0.01
    server_learning_rate: float = 0.01
    seed: int = 0
    uniform_weights: bool = False
    """Average site updates uniformly (under DP at either level) instead of by example
    count (:data:`contracts.wire.UNIT_WEIGHT`)."""
    record_dp: bool = False
    """The sites train with DP-SGD: their replies carry its keys (never a count or a loss
    under DP at either level: :meth:`contracts.wire.TrainReply.from_record`)."""


@dataclass
class RoundReplies:
    """What the sites reported in one round (by site id)."""

    sites: dict[int, TrainReply] = field(default_factory=dict)
    """The replies aggregated (every one passed the checks)."""
    sent: dict[int, list[str]] = field(default_factory=dict)
    """Every key each aggregated reply carried (:func:`contracts.wire.message_keys`)."""
    failures: dict[int, str] = field(default_factory=dict)
    """Sites whose reply was an error or failed the checks, with the reason (site -1: a
    node that is not in the node map)."""
    sampled: list[int] = field(default_factory=list)
    """The sites asked to train this round."""
    public_keys: dict[int, bytes] = field(default_factory=dict)
    """Under secure aggregation: each accepted site's key for the round's secure sum."""
    flagged: dict[int, ModelFlag] = field(default_factory=dict)
    """Sites that refused the round's model, with their checks' verdict (also a failure)."""


class SiteAwareMixin(FedAvg):
    """Deterministic per-round site sampling and per-site metric capture.

    Mixed in before a FedAvg-family strategy (``SiteFedProx(SiteAwareMixin, FedProx)``), so
    ``super()`` reaches that strategy's ``configure_train`` / ``aggregate_train``. Based on
    FedAvg, which FedProx and FedAdam extend: every site-aware strategy is a Flower strategy.
    """

    @classmethod
    def own_options(cls, settings: StrategySettings) -> dict[str, Any]:
        """The strategy's own constructor arguments (beyond FedAvg's) from the settings."""
        return {}

    def setup_sites(
        self,
        *,
        site_of_node: Mapping[int, int],
        fraction: float,
        seed: int,
        round_offset: int = 0,
        record_dp: bool = False,
        any_dp: bool = False,
    ) -> None:
        """``round_offset``: rounds already done before this start (a resumed run);
        ``record_dp``: :attr:`StrategySettings.record_dp`; ``any_dp``: DP at either level
        (:attr:`StrategySettings.uniform_weights`), so no reply carries a count or a loss."""
        self.site_of_node = dict(site_of_node)
        self.record_dp = record_dp
        self.any_dp = any_dp
        self.site_fraction = fraction
        self.sampling_seed = seed
        self.round_offset = round_offset
        self.rounds: dict[int, RoundReplies] = {}
        self._sent: dict[int, ArrayRecord] = {}

    @property
    def sites_per_round(self) -> int:
        return sites_per_round(len(self.site_of_node), self.site_fraction)

    def sites_for_round(self, server_round: int) -> list[int]:
        """The sites sampled in this start's ``server_round`` (seeded by the global round)."""
        sites = sorted(self.site_of_node.values())
        rng = np.random.default_rng([self.sampling_seed, self.round_offset + server_round])
        return sorted(int(s) for s in rng.choice(sites, size=self.sites_per_round, replace=False))

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        chosen = set(self.sites_for_round(server_round))
        self.rounds[server_round] = RoundReplies(sampled=sorted(chosen))
        self._sent = {server_round: arrays}  # what replies must match (names, shapes)
        messages = super().configure_train(server_round, arrays, config, grid)
        kept = [m for m in messages if self.site_of_node.get(m.metadata.dst_node_id) in chosen]
        for message in kept:
            # Flower counts the rounds of each start from 1; the sites seed their training by
            # the round, so a resumed run must send the global one (or it would replay the
            # seeds, DP-SGD noise included, of its first rounds).
            TrainInstructions.stamp_round(
                message.content.config_records[CONFIG], self.round_offset + server_round
            )
        return kept

    def screen(
        self, server_round: int, replies: Iterable[Message], *, secure_sum: bool = False
    ) -> list[Message]:
        """The replies fit to aggregate; every other one marks its site failed (reason).
        ``secure_sum``: the replies hold a key for the round's secure sum instead of weights
        (:mod:`server.secure_aggregation`)."""
        record = self.rounds.setdefault(server_round, RoundReplies())
        kept = []
        for msg in replies:
            site = self.site_of_node.get(msg.metadata.src_node_id, -1)
            why = self._rejection(server_round, site, msg, record, secure_sum)
            if why is None:
                kept.append(msg)
            else:
                record.failures[site] = why
                flag = flagged_model(msg)
                if flag is not None and site >= 0:
                    record.flagged[site] = flag
        # In site order, not arrival order: the aggregate's float sums then do not depend on
        # which site finished first, so a rerun or a resumed run gets the same model.
        return sorted(kept, key=lambda msg: self.site_of_node[msg.metadata.src_node_id])

    def _rejection(
        self, server_round: int, site: int, msg: Message, record: RoundReplies, secure_sum: bool
    ) -> str | None:
        """Why ``msg`` (from ``site``, by the node map) may not be aggregated, or None."""
        if msg.has_error():
            return error_reason(msg.error)
        if site < 0:
            return f"node {msg.metadata.src_node_id} is not in the node map"
        if site not in record.sampled:
            return f"site {site} was not sampled in this round"
        if site in record.sites:
            return f"site {site} replied twice"
        try:
            if METRICS not in msg.content.metric_records:
                raise WireError(f"train reply: no {METRICS!r} record")
            metrics = msg.content.metric_records[METRICS]
            reply = TrainReply.from_record(metrics, record_dp=self.record_dp, any_dp=self.any_dp)
            if self.weighted_by_key not in metrics:
                raise WireError(f"train reply: no {self.weighted_by_key!r}, the strategy's weight")
            if reply.site_id != site:
                raise WireError(
                    f"train reply: claims site {reply.site_id}, but node "
                    f"{msg.metadata.src_node_id} is site {site}"
                )
            if secure_sum:
                record.public_keys[site] = self._key(msg)
            else:
                self._weights(server_round, msg)
        except WireError as err:
            return f"rejected: {err}"
        record.sites[site] = reply
        record.sent[site] = message_keys(msg.content)
        return None

    def _weights(self, server_round: int, msg: Message) -> None:
        """The reply's weights: the names and shapes sent, finite numbers."""
        if ARRAYS not in msg.content.array_records:
            raise WireError(f"train reply: no {ARRAYS!r} record")
        sent = self._sent.get(server_round)
        if sent is not None:
            check_arrays(msg.content.array_records[ARRAYS], sent, "train reply")

    @staticmethod
    def _key(msg: Message) -> bytes:
        """The reply's key for the secure sum; weights in the clear are refused unread."""
        if msg.content.array_records:
            raise WireError("train reply: weights in the clear under secure aggregation")
        if SECURE_SUM not in msg.content.config_records:
            raise WireError(f"train reply: no {SECURE_SUM!r} record")
        return SecureSumKey.from_values(msg.content.config_records[SECURE_SUM]).public_key


def flagged_model(msg: Message) -> ModelFlag | None:
    """The site's verdict when its reply refuses the round's model (else None)."""
    if not msg.has_error() or msg.error.code != MODEL_FLAGGED_CODE:
        return None
    return ModelFlag.from_reason(str(msg.error.reason or ""))


class DelegatingStrategy(Strategy):
    """A strategy that hands every step to ``inner``; wrappers override the steps they
    change."""

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner

    def summary(self) -> None:
        self.inner.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        return self.inner.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return self.inner.aggregate_evaluate(server_round, replies)


class ScreenedStrategy(DelegatingStrategy):
    """Around every aggregating strategy: each train reply passes
    :meth:`SiteAwareMixin.screen` before any of them (Flower's DP wrappers included) reads
    it."""

    def __init__(self, inner: Strategy, sites: SiteAwareMixin) -> None:
        super().__init__(inner)
        self.sites = sites

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        return self.inner.aggregate_train(server_round, self.sites.screen(server_round, replies))


EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]
"""Flower's ``evaluate_fn``: the central evaluation of a round's global model."""


class RoundWriter(DelegatingStrategy):
    """Writes each finished round of ``strategy.start``: the client-level DP accounting, the
    metrics line, then the checkpoint, which commits the round; once per round, in order.

    A kill at any point loses nothing finished, and a resumed run drops (and redoes)
    whatever lies past the last checkpoint. A stop request (``stop``) abandons the round in
    progress before anything of it is written. ``evaluate_fn`` only evaluates: its
    ``loss`` / ``accuracy`` / ``perplexity`` go into the round's line. A round is evaluated
    and written while the next one trains (:class:`~server.round_commits.RoundCommits`);
    ``start`` returns once the last round is written.
    """

    def __init__(
        self,
        inner: Strategy,
        sites: SiteAwareMixin,
        *,
        layout: RunLayout,
        round_offset: int = 0,
        meta: CheckpointMeta | None = None,
        client_dp: ClientDPAccounting | None = None,
        stop: StopSwitch | None = None,
        on_commit: Callable[[int, dict[str, float]], None] | None = None,
    ) -> None:
        """``round_offset``: rounds done before this start; ``on_commit``: called with the
        global round and its scores once the round is written (progress display)."""
        super().__init__(inner)
        self.sites, self.layout, self.round_offset = sites, layout, round_offset
        self.meta, self.client_dp, self.stop, self.on_commit = meta, client_dp, stop, on_commit
        self._started = time.time()

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: EvaluateFn | None = None,
    ) -> Result:
        """Flower's rounds, each one written after its central evaluation."""
        self._started = time.time()

        def evaluate_and_write(server_round: int, arrays: ArrayRecord) -> None:
            scores = None if evaluate_fn is None else evaluate_fn(server_round, arrays)
            self.write_round(server_round, arrays, {} if scores is None else dict(scores))

        def queue_round(server_round: int, arrays: ArrayRecord) -> None:
            """Flower's ``evaluate_fn``. It returns no scores: Flower's own record of them
            (its ``Result``) stays empty, the run's are in metrics.jsonl."""
            if server_round == 0:
                return  # the starting model: nothing to write, nothing to evaluate
            if self.stop is not None:
                self.stop.check()  # a stopped run's round is abandoned, not written
            commits.submit(server_round, arrays)

        with RoundCommits(evaluate_and_write) as commits:
            return super().start(
                grid,
                initial_arrays,
                num_rounds=num_rounds,
                timeout=timeout,
                train_config=train_config,
                evaluate_config=evaluate_config,
                evaluate_fn=queue_round,
            )

    def write_round(self, server_round: int, arrays: ArrayRecord, scores: dict[str, Any]) -> None:
        """The client-level DP accounting, the metrics line and the checkpoint of this start's
        ``server_round``."""
        global_round = self.round_offset + server_round
        record = self.sites.rounds.get(server_round)
        client_dp = self.client_dp
        if client_dp is not None:
            # The noise was sized for every sampled site; fewer may have been averaged.
            aggregated = None if record is None else len(record.sites)
            client_dp.record_round(
                global_round, self.sites.sites_for_round(server_round), aggregated=aggregated
            )
            client_dp.save(self.layout)
        line = RoundRecord(
            round=global_round,
            global_loss=scores.get("loss"),
            global_accuracy=scores.get("accuracy"),
            global_perplexity=scores.get("perplexity"),
            elapsed_s=time.time() - self._started,
            sites={
                str(site): SiteRound(
                    train_loss=m.train_loss,
                    dp_epsilon=m.dp_epsilon,
                    num_examples=m.num_examples,
                    dp_epsilon_client=None if client_dp is None else client_dp.epsilon(site),
                    sent=record.sent.get(site),
                )
                for site, m in sorted(record.sites.items())
            }
            if record is not None
            else {},
            failures={} if record is None else {str(s): r for s, r in record.failures.items()},
            flagged={} if record is None else {str(s): f for s, f in record.flagged.items()},
        )
        append_round(self.layout, line)
        if line.empty:
            log.warning(
                "round %d: no site's update was aggregated; the model is carried over (%s)",
                global_round,
                "; ".join(f"site {s}: {why}" for s, why in line.failures.items()) or "no reply",
            )
        save_checkpoint(
            self.layout.round_checkpoint(global_round),
            Checkpoint(round=global_round, state_dict=arrays.to_torch_state_dict(), meta=self.meta),
        )
        if self.on_commit is not None:
            self.on_commit(global_round, scores)


STRATEGIES: Registry[type[SiteAwareMixin]] = Registry("strategy", config_key="fl.strategy")
"""The site-aware strategies by ``fl.strategy``."""


@STRATEGIES.register("fedavg")
class SiteFedAvg(SiteAwareMixin, FedAvg):
    pass


@STRATEGIES.register("fedprox")
class SiteFedProx(SiteAwareMixin, FedProx):
    @classmethod
    def own_options(cls, settings: StrategySettings) -> dict[str, Any]:
        return {"proximal_mu": settings.proximal_mu}


@STRATEGIES.register("fedadam")
class SiteFedAdam(SiteAwareMixin, FedAdam):
    @classmethod
    def own_options(cls, settings: StrategySettings) -> dict[str, Any]:
        return {"eta": settings.server_learning_rate}


def make_strategy(
    settings: StrategySettings,
    *,
    num_sites: int,
    site_of_node: Mapping[int, int],
    round_offset: int = 0,
) -> SiteAwareMixin:
    """Build the configured strategy; client-side evaluation is off (central eval instead)."""
    common: dict[str, Any] = {
        "fraction_train": 1.0,  # sampling is done by SiteAwareMixin
        "fraction_evaluate": 0.0,
        "min_train_nodes": 1,
        "min_available_nodes": num_sites,
    }
    if settings.uniform_weights:
        common["weighted_by_key"] = UNIT_WEIGHT
    cls = STRATEGIES.get(settings.name)
    strategy = cls(**common, **cls.own_options(settings))
    strategy.setup_sites(
        site_of_node=site_of_node,
        fraction=settings.fraction_train,
        seed=settings.seed,
        round_offset=round_offset,
        record_dp=settings.record_dp,
        any_dp=settings.uniform_weights,
    )
    return strategy
