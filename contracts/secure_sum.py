"""What the server and the sites agree on for a secure sum (``fl.secure_aggregation: ideal``).

A round under secure aggregation takes two messages per site:

1. ``train``: the site trains and keeps its (weighted) update to itself; its reply holds its
   :class:`~contracts.wire.TrainReply` (:data:`~contracts.wire.METRICS`) and, under
   :data:`SECURE_SUM`, a fresh public key for the round (:class:`SecureSumKey`), no weights.
2. ``query.secure_sum`` (:data:`SECURE_SUM`): the server sends every site whose training
   reply it accepted the list of those sites and their keys (:class:`SecureSumInstructions`);
   each replies with its update in fixed point, masked (:data:`~contracts.wire.ARRAYS`,
   ``uint64`` arrays of the global weights' names and shapes: :func:`check_masked`).

Fixed point: a value ``v`` travels as ``round(v * 2**FIXED_POINT_BITS)`` modulo ``2**64``
(two's complement), so the server adds the masked arrays as unsigned 64-bit integers
(wrapping) and reads the sum back as signed. Each pair of sites masks with opposite signs,
so the masks cancel exactly in the sum of all of them and in no smaller one. The values are
lists of plain values (``to_values`` / ``from_values``): the caller puts them in Flower's
records (only :mod:`contracts.wire` imports Flower).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from panoramia_fl.contracts.reply_keys import PUBLIC_KEY
from panoramia_fl.contracts.wire import NUM_EXAMPLES, UNIT_WEIGHT, WireError

SECURE_SUM = "secure_sum"
"""The record name of a round's key in a train reply, and the query action of step 2."""
SERVER_ROUND = "server-round"
PEER_SITES = "peer-sites"
PEER_KEYS = "peer-keys"
WEIGHT_KEY = "weight-key"
WEIGHT_KEYS = (NUM_EXAMPLES, UNIT_WEIGHT)
"""The train-reply keys a site may be asked to weight its update by (FedAvg's)."""
PUBLIC_KEY_BYTES = 32
"""An X25519 public key."""
FIXED_POINT_BITS = 32
"""Fractional bits of the fixed-point values (a resolution of 2**-32)."""
RING_DTYPE = "uint64"
"""The masked values' type: sums wrap modulo 2**64."""
MIN_PARTIES = 2
"""A secure sum needs at least two sites: the sum of one update is that update."""


def max_abs_value(parties: int) -> float:
    """The largest magnitude one site's (weighted) value may have so that the sum of
    ``parties`` of them still reads back (within the signed 64-bit range)."""
    return 2.0 ** (62 - FIXED_POINT_BITS) / max(parties, 1)


@dataclass(frozen=True)
class SecureSumKey:
    """A site's public key for one round's secure sum (beside its train reply)."""

    public_key: bytes

    def to_values(self) -> dict[str, Any]:
        return {PUBLIC_KEY: self.public_key}

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> SecureSumKey:
        return cls(public_key=_key(values.get(PUBLIC_KEY), f"train reply: {SECURE_SUM}"))


@dataclass(frozen=True)
class SecureSumInstructions:
    """Step 2 of a round: every site in the sum (this one included) with its key, and the
    train-reply key the sites weight their updates by."""

    server_round: int
    weight_key: str
    peers: dict[int, bytes]
    """site id -> its public key for the round."""

    def to_values(self) -> dict[str, Any]:
        sites = sorted(self.peers)
        return {
            SERVER_ROUND: self.server_round,
            WEIGHT_KEY: self.weight_key,
            PEER_SITES: sites,
            PEER_KEYS: [self.peers[s] for s in sites],
        }

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> SecureSumInstructions:
        what = f"{SECURE_SUM} query"
        server_round = values.get(SERVER_ROUND)
        if not isinstance(server_round, int) or isinstance(server_round, bool) or server_round < 1:
            raise WireError(f"{what}: key {SERVER_ROUND!r} must be a round >= 1")
        weight = values.get(WEIGHT_KEY)
        if weight not in WEIGHT_KEYS:
            raise WireError(f"{what}: key {WEIGHT_KEY!r} must be one of {list(WEIGHT_KEYS)}")
        sites, keys = values.get(PEER_SITES), values.get(PEER_KEYS)
        if not isinstance(sites, list) or not all(_whole(s) and s >= 0 for s in sites):
            raise WireError(f"{what}: key {PEER_SITES!r} must be a list of site ids")
        if not isinstance(keys, list) or len(keys) != len(sites) or len(set(sites)) != len(sites):
            raise WireError(f"{what}: {PEER_SITES!r} and {PEER_KEYS!r} must pair distinct sites")
        return cls(
            server_round=server_round,
            weight_key=str(weight),
            peers={int(s): _key(k, what) for s, k in zip(sites, keys, strict=True)},
        )


def weight_of(numbers: Mapping[str, Any], key: str) -> int:
    """A train reply's weight under ``key`` (one of :data:`WEIGHT_KEYS`), from its values."""
    value = numbers.get(key)
    if key not in WEIGHT_KEYS or not _whole(value) or value < 1:
        raise WireError(f"train reply: key {key!r} is not a positive weight")
    return int(value)


def check_masked(reply: Any, sent: Any, what: str) -> None:
    """A masked reply (an ``ArrayRecord``) holds the arrays ``sent`` did (names, shapes),
    each of :data:`RING_DTYPE`."""
    names, want = list(reply.keys()), list(sent.keys())
    if names != want:
        raise WireError(f"{what}: masked arrays differ in names from the global weights")
    for name, array in reply.items():
        if tuple(array.shape) != tuple(sent[name].shape):
            raise WireError(f"{what}: masked {name!r} has shape {list(array.shape)}")
        if str(array.dtype) != RING_DTYPE:
            raise WireError(f"{what}: masked {name!r} holds {array.dtype}, not {RING_DTYPE}")


def _key(value: Any, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != PUBLIC_KEY_BYTES:
        raise WireError(f"{what}: a public key must be {PUBLIC_KEY_BYTES} bytes")
    return value


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
