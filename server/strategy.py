"""Strategies: Flower's FedAvg / FedProx / FedAdam, made site-aware.

The wrapper (1) samples sites per round deterministically from the seed and the global
round (Flower samples node ids at random, and node ids differ between runs; a resumed run
samples as the uninterrupted one would) and (2) keeps each site's training metrics of the
round, which Flower's aggregation would average away. Client-level DP wraps these
strategies in Flower's own DP wrappers (:mod:`server.client_dp`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAdam, FedAvg, FedProx

from contracts.registry import Registry
from contracts.wire import CONFIG, METRICS, UNIT_WEIGHT, TrainInstructions, TrainReply


@dataclass(frozen=True)
class StrategySettings:
    name: str = "fedavg"
    fraction_train: float = 1.0
    proximal_mu: float = 0.01
    server_learning_rate: float = 0.01
    seed: int = 0
    uniform_weights: bool = False
    """Average site updates uniformly (client-level DP) instead of by example count."""


@dataclass
class RoundRecord:
    """What the sites reported in one round (by site id)."""

    sites: dict[int, TrainReply] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)


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
    ) -> None:
        """``round_offset``: rounds already done before this start (a resumed run)."""
        self.site_of_node = dict(site_of_node)
        self.site_fraction = fraction
        self.sampling_seed = seed
        self.round_offset = round_offset
        self.rounds: dict[int, RoundRecord] = {}

    @property
    def sites_per_round(self) -> int:
        return max(1, int(round(self.site_fraction * len(self.site_of_node))))

    def sites_for_round(self, server_round: int) -> list[int]:
        """The sites sampled in this start's ``server_round`` (seeded by the global round)."""
        sites = sorted(self.site_of_node.values())
        rng = np.random.default_rng([self.sampling_seed, self.round_offset + server_round])
        return sorted(int(s) for s in rng.choice(sites, size=self.sites_per_round, replace=False))

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        chosen = set(self.sites_for_round(server_round))
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

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        record = self.rounds.setdefault(server_round, RoundRecord())
        for msg in replies:
            site = self.site_of_node.get(msg.metadata.src_node_id, -1)
            if msg.has_error():
                record.failures[site] = str(msg.error.reason)
                continue
            reply = TrainReply.from_record(msg.content.metric_records[METRICS])
            record.sites[reply.site_id] = reply
        return super().aggregate_train(server_round, replies)


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
    )
    return strategy
