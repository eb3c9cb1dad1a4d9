"""The keys a site's replies carry and what covers each under record-level DP.

A train reply carries the site's weights (:data:`ARRAYS`) and a few numbers; an audit reply
the site's audit of its own records. Each key is defined here once, beside its
:data:`Coverage` under record-level DP (DP-SGD at the site, Opacus's add/remove
adjacency); :mod:`contracts.wire` builds and checks the messages from these keys, the
report's privacy ledger and docs/security.md read their coverage. Standard library only, so
the report reads it without importing Flower.

Under client-level DP (central or distributed, with or without ideal secure aggregation) a
train reply carries only what that guarantee covers as well: the update the mechanism clips
and noises, the site's id and its unit weight; never the loss or the count, which no
accountant covers. Against the server itself only record-level DP, or distributed DP's noise
share, covers the update (central client-level DP noises the aggregate after the server has
seen each update).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Coverage = Literal["dp_output", "public", "declared", "outside", "audit"]
"""What covers a value a site sends, under DP (record level; client level for the keys a
client-level reply carries)."""
COVERAGES: dict[Coverage, str] = {
    "dp_output": "covered: an output of the site's DP-SGD, or a function of it alone",
    "public": "covered: says nothing about the records",
    "declared": "a function of the run's settings and the site's declared size only; "
    "covered when that size is a public number (dp.declared_size), outside the guarantee "
    "when it is the site's own member count",
    "outside": "outside the guarantee: computed from the records without noise; the site "
    "sends it only without DP (record or client level)",
    "audit": "outside the guarantee: the site's audit of its own records (exact counts, "
    "results without noise), sent once after training, as its policy allows",
}
"""Each coverage in words."""
COVERED: frozenset[Coverage] = frozenset({"dp_output", "public"})
"""Covered whatever the site declared (``declared`` is covered with a public declared
size)."""
DECLARED_SIZE_ADJACENCY = (
    "add/remove adjacency (Opacus's accountants) treats the record count as secret: a "
    "server that knows the rest of the data learns from the count whether a record is there"
)
"""Why a value derived from the site's own member count is outside the guarantee."""


@dataclass(frozen=True)
class ReplyKey:
    """One key a site's reply may carry, what it holds, and what covers it in a train and
    in an audit reply (None: that reply does not carry it)."""

    key: str
    meaning: str
    train: Coverage | None = None
    audit: Coverage | None = None


REPLY_KEYS: dict[str, ReplyKey] = {}
"""Every key of a train or audit reply, by key."""


def _reply_key(
    key: str, meaning: str, *, train: Coverage | None = None, audit: Coverage | None = None
) -> str:
    REPLY_KEYS[key] = ReplyKey(key, meaning, train=train, audit=audit)
    return key


# Those marked Flower's are read or written by Flower itself: keep them as they are.
ARRAYS = _reply_key("arrays", "the site's weights after its local training", train="dp_output")
"""Flower's: the model weights' record name (an ``ArrayRecord``), both ways."""
SITE_ID = _reply_key("site-id", "which site replies", train="public", audit="public")
TRAIN_LOSS = _reply_key(
    "train-loss",
    "the mean loss of the round's local training on the site's records",
    train="outside",
)
"""Never sent under DP at either level."""
NUM_EXAMPLES = _reply_key(
    "num-examples", "the number of records the site trained on (FedAvg's weight)", train="outside"
)
"""Flower's: FedAvg's default ``weighted_by_key``. Never sent under DP at either level."""
UNIT_WEIGHT = _reply_key(
    "unit-weight", "the site's FedAvg weight under DP: 1 for every site", train="public"
)
"""A train reply's weight 1: under DP (record or client level) the aggregate is a uniform
mean. Client level: what Flower's noise (``z * C / k``) is calibrated for; record level: no
record count leaves the site (FedAvg's ``weighted_by_key``)."""
DP_EPSILON = _reply_key(
    "dp-epsilon",
    "the site's DP-SGD epsilon so far (its accountant)",
    train="declared",
    audit="declared",
)
NOISE_MULTIPLIER = _reply_key(
    "noise-multiplier", "DP-SGD's noise multiplier this round", train="declared"
)
NORM_BIT = _reply_key(
    "norm_bit",
    "whether the update's norm was at most the clipping norm (Flower's adaptive clipping "
    "mod at the site)",
    train="dp_output",
)
"""Flower's: ``adaptiveclipping_mod`` adds it to the reply; a function of the update alone."""
PUBLIC_KEY = _reply_key(
    "public-key",
    "the site's fresh key for the round's secure sum (fl.secure_aggregation: ideal); its "
    "update leaves later, masked",
    train="public",
)
"""A train reply's key under ideal secure aggregation (:mod:`contracts.secure_sum`)."""
KIND_JSON = _reply_key(
    "<kind>-json",
    "each kind of audit the site ran (the results' fields: the final model's audit, its "
    "input canaries, earlier rounds, its own updates, ...), summary numbers only",
    audit="audit",
)
"""The pattern of an audit reply's per-kind keys (:func:`kind_key`)."""


def kind_key(name: str) -> str:
    """The key of the reply's kind of audit ``name`` (a field of the audit's results): its
    JSON, under ``<name>-json`` (``result-json``, ``by-round-json``, ...)."""
    return KIND_JSON.replace("<kind>", name.replace("_", "-"))


N_MEMBERS = _reply_key("n-members", "the site's member count", audit="audit")
N_HOLDOUT = _reply_key("n-holdout", "the site's held-out (non-member) count", audit="audit")
ELAPSED_S = _reply_key("elapsed-s", "how long the audit ran", audit="audit")
