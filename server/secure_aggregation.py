"""Ideal secure aggregation (``fl.secure_aggregation: ideal``): the strategy gets each
round's weighted sum and no site's update.

:class:`SecureAggregation` stands where :class:`~server.strategy.ScreenedStrategy` stands
otherwise, around every aggregating strategy. A round:

1. the sites train; each train reply holds the site's numbers and a key for the round's
   sum, no weights (:meth:`~server.strategy.SiteAwareMixin.screen` checks them and refuses
   weights sent in the clear);
2. every accepted site gets the list of the accepted sites and their keys and answers with
   its weighted update in fixed point plus pairwise masks (:mod:`clients.secure_sum_site`);
   the server adds the masked arrays modulo ``2**64``, where the masks cancel, and reads the
   weighted sum of the updates;
3. the strategy inside receives one reply standing for the round: the global weights plus
   that sum over the total weight, weighted by the total weight (FedAvg's mean of the sites'
   weights, exactly; canary clients are averaged in beside it as before).

Dropouts: a site that fails in step 1 is left out of the sum (under distributed DP the sum
then holds fewer noise shares; :mod:`server.client_dp` accounts for that round as it
happened). A site that fails in step 2 leaves its masks in the others' arrays, so the sum
cannot be read: the round is void (every site of it is marked failed with the reason, the
model is carried over, nothing is released). A real protocol recovers the dropped site's
masks; this one is named ideal because it does not, among other things
(:mod:`clients.secure_sum_site`).

What is lost on the server's side: every check of one update's values (finiteness, norms,
and the clipping of central client-level DP, which is why the config refuses that pairing).
The sites clip their own updates (distributed DP) and refuse values the fixed point cannot
carry; the fixed point carries finite values only. A site sending garbage inside its range
spoils the sum undetected: input validation is beyond the ideal setting too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from panoramia_fl.contracts.secure_sum import (
    FIXED_POINT_BITS,
    MIN_PARTIES,
    RING_DTYPE,
    SECURE_SUM,
    SecureSumInstructions,
    check_masked,
    weight_of,
)
from panoramia_fl.contracts.wire import ARRAYS, CONFIG, METRICS, WireError, error_reason
from panoramia_fl.server.strategy import DelegatingStrategy, RoundReplies, SiteAwareMixin

log = logging.getLogger(__name__)


class SecureAggregation(DelegatingStrategy):
    """Around every aggregating strategy: screens the train replies, forms the round's
    secure sum with the sites, and hands ``inner`` only that sum."""

    def __init__(self, inner: Strategy, sites: SiteAwareMixin, *, timeout: float) -> None:
        super().__init__(inner)
        self.sites, self.timeout = sites, timeout
        self._grid: Grid | None = None
        self._current: ArrayRecord | None = None
        self.held_sum: dict[str, np.ndarray] | None = None
        """The round's weighted sum of the updates (float64), all the server holds of it (a
        dishonest server reads it: :mod:`server.adversary`); None before it is read."""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._grid, self._current = grid, arrays
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        self.held_sum = None
        self.sites.screen(server_round, replies, secure_sum=True)
        record = self.sites.rounds[server_round]
        if not record.public_keys:
            return self.inner.aggregate_train(server_round, [])
        if len(record.public_keys) < MIN_PARTIES:
            # The sum of one update is that update: no site would mask for it.
            alone = {
                s: f"the only site left of the round (at least {MIN_PARTIES} needed)"
                for s in record.public_keys
            }
            self._void(record, alone)
            return None, None
        total = self._secure_sum(server_round, record)
        if total is None:
            return None, None
        self.held_sum = total
        return self.inner.aggregate_train(server_round, [self._sum_reply(total, record)])

    def _secure_sum(self, server_round: int, record: RoundReplies) -> dict[str, np.ndarray] | None:
        """The weighted sum of the accepted sites' updates (float64), or None when a site's
        masked update is missing (the round is then void)."""
        assert self._grid is not None and self._current is not None
        node_of_site = {s: n for n, s in self.sites.site_of_node.items()}
        asked = SecureSumInstructions(
            server_round=self.sites.round_offset + server_round,
            weight_key=self.sites.weighted_by_key,
            peers=dict(record.public_keys),
        )
        messages = [
            Message(
                content=RecordDict({CONFIG: ConfigRecord(asked.to_values())}),
                message_type=f"{MessageType.QUERY}.{SECURE_SUM}",
                dst_node_id=node_of_site[site],
            )
            for site in sorted(asked.peers)
        ]
        masked: dict[int, ArrayRecord] = {}
        why: dict[int, str] = {}
        for reply in self._grid.send_and_receive(messages, timeout=self.timeout):
            site = self.sites.site_of_node.get(reply.metadata.src_node_id, -1)
            if site not in asked.peers or site in masked:
                continue
            try:
                masked[site] = self._masked(reply)
            except WireError as err:
                why[site] = str(err)
        missing = sorted(set(asked.peers) - set(masked))
        if missing:
            self._void(record, {s: why.get(s, "no masked update arrived") for s in missing})
            return None
        return _decoded(_ring_sum(list(masked.values())))

    def _masked(self, reply: Message) -> ArrayRecord:
        if reply.has_error():
            raise WireError(error_reason(reply.error))
        if ARRAYS not in reply.content.array_records:
            raise WireError(f"{SECURE_SUM} reply: no {ARRAYS!r} record")
        arrays = reply.content.array_records[ARRAYS]
        check_masked(arrays, self._current, f"{SECURE_SUM} reply")
        return arrays

    @staticmethod
    def _void(record: RoundReplies, missing: dict[int, str]) -> None:
        """Mark every site of the round failed: the sum cannot be unmasked."""
        lost = "; ".join(f"site {s}: {why}" for s, why in sorted(missing.items()))
        reason = (
            f"secure aggregation: the round's sum could not be read ({lost}); the ideal "
            "setting recovers no dropped site's masks, so no update was aggregated"
        )
        for site in record.sites:
            record.failures[site] = reason
        record.sites.clear()
        log.warning(reason)

    def _sum_reply(self, total: dict[str, np.ndarray], record: RoundReplies) -> Message:
        """One reply standing for the round: the global weights plus the sum over the total
        weight, weighted by the total weight."""
        assert self._current is not None
        key = self.sites.weighted_by_key
        weight = sum(weight_of(r.to_record(), key) for r in record.sites.values())
        arrays = {}
        for name, array in self._current.items():
            now = array.numpy()
            mean = now.astype(np.float64) + total[name] / weight
            arrays[name] = Array(np.asarray(mean.astype(now.dtype)))  # 0-d stays an array
        metrics = MetricRecord({key: weight})
        content = RecordDict({ARRAYS: ArrayRecord(arrays), METRICS: metrics})
        return Message(content=content, dst_node_id=0, message_type=MessageType.TRAIN)


def _ring_sum(masked: list[ArrayRecord]) -> dict[str, np.ndarray]:
    """The masked arrays added modulo ``2**64`` (unsigned integers wrap)."""
    total = {name: np.zeros(a.shape, dtype=RING_DTYPE) for name, a in masked[0].items()}
    for arrays in masked:
        for name, array in arrays.items():
            total[name] += array.numpy()
    return total


def _decoded(total: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fixed-point sum read back as signed values (float64)."""
    scale = float(2**FIXED_POINT_BITS)
    return {k: v.view(np.int64).astype(np.float64) / scale for k, v in total.items()}
