"""The server announces each round's model to its sites before it sends ``train``.

Outermost around the run's strategy: ``configure_train`` builds the round's train messages
(through every wrapper, a dishonest server's included), then sends each site of those
messages a ``query.announce`` with the digest of the round's global model and the round's
sites (:class:`contracts.model_flags.RoundAnnouncement`), waits for the replies, and only
then returns the train messages. Each site publishes what it was told on a bulletin only
sites write; before training, it compares the model it got against every site's entry
(:mod:`clients.model_checks`). One small message a site a round (a digest, no weights), all
sent before any site trains, so no site ever waits for a later one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from panoramia_fl.audit.received_model.digest import model_digest
from panoramia_fl.contracts.model_flags import ANNOUNCE, RoundAnnouncement
from panoramia_fl.contracts.wire import CONFIG, TrainInstructions, error_reason
from panoramia_fl.server.strategy import DelegatingStrategy, SiteAwareMixin

log = logging.getLogger(__name__)


class AnnouncingStrategy(DelegatingStrategy):
    """Announce each round's model (its digest) and sites before the train messages."""

    def __init__(self, inner: Strategy, sites: SiteAwareMixin, *, timeout: float) -> None:
        super().__init__(inner)
        self.sites, self.timeout = sites, timeout

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        messages = list(self.inner.configure_train(server_round, arrays, config, grid))
        if not messages:
            return messages
        # The round's sites (messages to nodes outside the node map are not the sites').
        nodes = [n for m in messages if (n := m.metadata.dst_node_id) in self.sites.site_of_node]
        # Every message of a round carries the same (global) round number.
        global_round = TrainInstructions.from_record(
            messages[0].content.config_records[CONFIG]
        ).server_round
        announced = RoundAnnouncement(
            server_round=global_round,
            digest=model_digest({k: a.numpy() for k, a in arrays.items()}),
            sites=tuple(sorted(self.sites.site_of_node[n] for n in nodes)),
        )
        asks = [
            Message(
                content=RecordDict({CONFIG: ConfigRecord(announced.to_values())}),
                message_type=f"{MessageType.QUERY}.{ANNOUNCE}",
                dst_node_id=node,
            )
            for node in nodes
        ]
        for reply in grid.send_and_receive(asks, timeout=self.timeout):
            if reply.has_error():
                # The site's own check will see its missing entry; the round goes on.
                log.warning(
                    "round %d: node %d did not publish the announcement: %s",
                    global_round,
                    reply.metadata.src_node_id,
                    error_reason(reply.error),
                )
        return messages
