"""The messages between the ServerApp and the ClientApps, as typed values.

Each message is a frozen dataclass with ``to_record()`` (the Flower record it travels as)
and ``from_record()`` (its inverse, which checks every key it reads and ignores keys it
does not know: Flower's own strategies and mods add theirs). An optional value travels as
an absent key, never as a sentinel. A message's records sit in its ``RecordDict`` under
the names below.

- ``train``: the server sends the global weights (:data:`ARRAYS`) and
  :class:`TrainInstructions` (:data:`CONFIG`); the site replies with its weights
  (:data:`ARRAYS`) and a :class:`TrainReply` (:data:`METRICS`).
- ``query.whoami`` (:data:`WHOAMI`): empty; the site replies with a :class:`WhoamiReply`
  (:data:`METRICS`).
- ``query.audit`` (:data:`AUDIT_QUERY`): the final weights (:data:`ARRAYS`) and
  :class:`AuditInstructions` (:data:`CONFIG`); the site replies with its
  :class:`~contracts.site_audit.SiteAudit` (:func:`audit_record`, under :data:`AUDIT`), or,
  when its audit fails, with Flower's error reply carrying an :class:`AuditFailure` (the one
  failure channel).

The keys a site's replies carry, and what covers each under record-level DP, are defined in
:mod:`contracts.reply_keys` (``REPLY_KEYS``).

Every reply is checked as it is read (``from_record``): types, finite numbers, ranges
(``num-examples`` > 0, epsilons and counts >= 0), the weights' names, shapes and values
(:func:`check_arrays`), and the size and nesting depth of JSON it carries. A reply that
fails raises :class:`WireError` naming the key; the server then counts that site as failed
for the round or the audit and goes on.

The record names and the keys Flower reads itself stay as Flower spells them: FedAvg
averages by ``num-examples`` (or :data:`UNIT_WEIGHT`), stamps ``server-round`` and FedProx
``proximal-mu`` into the train config, and the client-side clipping mods want exactly one
ArrayRecord and one ConfigRecord in a train message (and one MetricRecord in its reply).
"""

from __future__ import annotations

import json
import math
import re
import traceback as tb
from dataclasses import dataclass, fields
from typing import Any, Literal, cast, get_args

from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Error,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
)

from panoramia_fl.contracts.json_values import from_dict, json_name, json_safe
from panoramia_fl.contracts.reply_keys import (
    ARRAYS,
    DP_EPSILON,
    ELAPSED_S,
    N_HOLDOUT,
    N_MEMBERS,
    NOISE_MULTIPLIER,
    NUM_EXAMPLES,
    SITE_ID,
    TRAIN_LOSS,
    UNIT_WEIGHT,
    kind_key,
)
from panoramia_fl.contracts.site_audit import K, SiteAudit

# Record names inside a message's RecordDict (the weights' name, ARRAYS, is a reply key).
CONFIG = "config"
"""What the server asks of a site (a ``ConfigRecord``): Flower's train config name."""
METRICS = "metrics"
"""A train or whoami reply (a ``MetricRecord``)."""
AUDIT = "audit"
"""An audit reply (a ``ConfigRecord``)."""


def round_arrays(server_round: int) -> str:
    """The record name of round ``server_round``'s global weights in an audit query."""
    return f"{ARRAYS}.round-{server_round}"


# Query actions (``query.<action>`` message types).
WHOAMI = "whoami"
AUDIT_QUERY = "audit"

# Keys of the server's messages (a reply's keys: contracts.reply_keys). Those marked
# Flower's are read or written by Flower itself: keep them as they are.
LOCAL_EPOCHS = "local-epochs"
SEED = "seed"
SERVER_ROUND = "server-round"
"""Flower's: FedAvg stamps each start's round; the server overwrites it with the global one."""
PROXIMAL_MU = "proximal-mu"
"""Flower's: FedProx's proximal term."""
CLIENT_CLIPPING = "client-clipping"
"""A train config's ``fixed`` / ``adaptive``: the site runs Flower's clipping mod of that
kind on its update (client-level DP with ``dp.client.clipping_side: client``)."""
LOCAL_STEPS = "local-steps"
"""A train config's number of local steps (batches), in place of its local epochs."""
AUDIT_ROUNDS = "audit-rounds"
"""An audit query's earlier rounds, each with its weights in :func:`round_arrays`."""
MAIN_AUDIT = "main-audit"
"""An audit query asks for the full audit of the final weights (:data:`ARRAYS`)."""

ClientClipping = Literal["fixed", "adaptive"]
CLIENT_CLIPPINGS: tuple[str, ...] = get_args(ClientClipping)


MAX_JSON_CHARS = 16_000_000
"""The largest JSON text a reply may carry in one key (an audit result is ~0.2 MB)."""
MAX_JSON_DEPTH = 24
"""The deepest nesting of JSON a reply may carry (an audit result nests ~6 deep); checked
before parsing, so a deeply nested text cannot exhaust the server's recursion limit."""
MAX_REASON_CHARS = 4_000
"""An error reply's reason is cut to this length."""
EPSILON_KEYS = frozenset(
    {"eps_tilde", "eps_tilde_two_sided", "rm_rn_eps_lb", "o1_eps_lb", "eps_lb"}
)
"""Keys of an audit's JSON whose value (a number, or an interval's ``mean``) is an epsilon
and so may not be negative (a negative one would read as a bound violation)."""
COUNT_KEYS = frozenset(
    {"n_canaries", "n_included", "guesses", "correct", "member_guesses", "predictions"}
)
"""Keys of an audit's JSON that count something (>= 0); every value of ``sizes`` too."""


def message_keys(content: RecordDict) -> list[str]:
    """Every key a reply's content carries: its array records' names (the weights, as
    :data:`ARRAYS`) and the keys of its metric and config records, sorted."""
    keys = set(content.array_records)
    for metrics in content.metric_records.values():
        keys.update(metrics.keys())
    for config in content.config_records.values():
        keys.update(config.keys())
    return sorted(keys)


class WireError(ValueError):
    """A record that does not hold the message it should (the message names the key)."""


def _get(record: ConfigRecord | MetricRecord, key: str, what: str) -> object:
    if key not in record:
        raise WireError(f"{what}: key {key!r} is missing")
    return record[key]


def _int(record: ConfigRecord | MetricRecord, key: str, what: str) -> int:
    value = _get(record, key, what)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{what}: key {key!r} must be an integer, got {value!r}")
    return value


def _float(record: ConfigRecord | MetricRecord, key: str, what: str) -> float:
    value = _get(record, key, what)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{what}: key {key!r} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise WireError(f"{what}: key {key!r} must be finite, got {value!r}")
    return float(value)


def _opt_float(record: ConfigRecord | MetricRecord, key: str, what: str) -> float | None:
    return _float(record, key, what) if key in record else None


def _at_least(value: float, low: float, key: str, what: str, *, strict: bool = False) -> None:
    if value < low or (strict and value == low):
        sign = ">" if strict else ">="
        raise WireError(f"{what}: key {key!r} must be {sign} {low:g}, got {value!r}")


def _json_depth_ok(text: str, limit: int) -> bool:
    """Whether ``text``'s brackets nest at most ``limit`` deep (strings skipped)."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return False
        elif char in "]}":
            depth -= 1
    return True


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _negative(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value < 0


def _check_numbers(node: Any, path: str, what: str) -> None:
    """Epsilons (:data:`EPSILON_KEYS`) and counts (:data:`COUNT_KEYS`, ``sizes``) >= 0."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            number = value.get("mean") if isinstance(value, dict) else value
            if key in EPSILON_KEYS and _negative(number):
                raise WireError(f"{what}: {where} is an epsilon and negative: {number!r}")
            if (key in COUNT_KEYS or path.endswith("sizes")) and _negative(value):
                raise WireError(f"{what}: {where} is a count and negative: {value!r}")
            _check_numbers(value, where, what)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_numbers(value, f"{path}[{i}]", what)


def _str(record: ConfigRecord, key: str, what: str) -> str:
    value = _get(record, key, what)
    if not isinstance(value, str):
        raise WireError(f"{what}: key {key!r} must be a string, got {value!r}")
    return value


def _json_value(record: ConfigRecord, key: str, what: str) -> dict[str, Any] | list[Any]:
    """A JSON object or list within :data:`MAX_JSON_CHARS` and :data:`MAX_JSON_DEPTH`,
    finite numbers only, its epsilons and counts non-negative."""
    text = _str(record, key, what)
    if len(text) > MAX_JSON_CHARS:
        raise WireError(
            f"{what}: key {key!r} holds {len(text)} characters (at most {MAX_JSON_CHARS})"
        )
    if not _json_depth_ok(text, MAX_JSON_DEPTH):
        raise WireError(f"{what}: key {key!r} nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as err:  # JSONDecodeError included
        raise WireError(f"{what}: key {key!r} is not valid JSON: {err}") from err
    if not isinstance(value, dict | list):
        raise WireError(f"{what}: key {key!r} must hold a JSON object or list")
    _check_numbers(value, key, what)
    return value


def check_arrays(reply: ArrayRecord, sent: ArrayRecord, what: str) -> None:
    """``reply`` holds the arrays ``sent`` did (names, shapes), all finite numbers."""
    if list(reply.keys()) != list(sent.keys()):
        missing = sorted(set(sent.keys()) - set(reply.keys()))
        extra = sorted(set(reply.keys()) - set(sent.keys()))
        raise WireError(f"{what}: weights differ in names (missing {missing}, unexpected {extra})")
    for name, array in reply.items():
        want = sent[name]
        if tuple(array.shape) != tuple(want.shape):
            raise WireError(
                f"{what}: weight {name!r} has shape {list(array.shape)}, "
                f"expected {list(want.shape)}"
            )
        values = array.numpy()
        # Dtypes may differ (FedAvg's mean turns an integer buffer into floats); they must
        # be numbers.
        if values.dtype.kind not in "biuf":
            raise WireError(f"{what}: weight {name!r} holds {values.dtype}, not numbers")
        # min and max carry any NaN or infinity through (no numpy import in contracts).
        if (
            values.dtype.kind in "fc"
            and values.size
            and not (math.isfinite(float(values.min())) and math.isfinite(float(values.max())))
        ):
            raise WireError(f"{what}: weight {name!r} holds NaN or infinite values")


@dataclass(frozen=True)
class TrainInstructions:
    """A train message's config: what a site's local training round needs."""

    local_epochs: int
    seed: int
    """The run's seed; the site derives its round's seed from it, the round and its id."""
    server_round: int
    """The global round (1-based). The server sends the run's settings once and the
    strategy stamps each message's round (a resumed run sends the global one)."""
    client_clipping: ClientClipping | None = None
    """Client-level DP clipped at the site: the kind of Flower mod to run; None: no mod."""
    proximal_mu: float | None = None
    """FedProx's proximal term (set by Flower's FedProx); None: plain local training."""
    local_steps: int | None = None
    """That many local steps (batches) instead of ``local_epochs`` epochs (FedSGD: 1)."""

    def to_record(self) -> ConfigRecord:
        record = ConfigRecord(
            {LOCAL_EPOCHS: self.local_epochs, SEED: self.seed, SERVER_ROUND: self.server_round}
        )
        if self.local_steps is not None:
            record[LOCAL_STEPS] = self.local_steps
        if self.client_clipping is not None:
            record[CLIENT_CLIPPING] = self.client_clipping
        if self.proximal_mu is not None:
            record[PROXIMAL_MU] = self.proximal_mu
        return record

    @classmethod
    def from_record(cls, record: ConfigRecord) -> TrainInstructions:
        what = "train config"
        clipping: ClientClipping | None = None
        if CLIENT_CLIPPING in record:
            kind = _str(record, CLIENT_CLIPPING, what)
            if kind not in CLIENT_CLIPPINGS:
                raise WireError(f"{what}: {CLIENT_CLIPPING}: unknown clipping {kind!r}")
            clipping = cast(ClientClipping, kind)
        return cls(
            local_epochs=_int(record, LOCAL_EPOCHS, what),
            seed=_int(record, SEED, what),
            server_round=_int(record, SERVER_ROUND, what),
            client_clipping=clipping,
            proximal_mu=_opt_float(record, PROXIMAL_MU, what),
            local_steps=_int(record, LOCAL_STEPS, what) if LOCAL_STEPS in record else None,
        )

    @staticmethod
    def stamp_round(record: ConfigRecord, server_round: int) -> None:
        """Set the round of a train config in place (Flower's strategies build the
        messages; the server then says which global round each one is)."""
        record[SERVER_ROUND] = server_round


@dataclass(frozen=True)
class TrainReply:
    """A site's numbers after one round of local training (beside its weights).

    Every site of a run reports the same keys (Flower aggregates only replies whose
    MetricRecords agree): which optional ones are present depends on the run's DP level,
    which every site shares. What covers each key:
    :data:`contracts.reply_keys.REPLY_KEYS`.
    """

    site_id: int
    train_loss: float | None
    """None under DP at either level (no accountant covers it)."""
    num_examples: int | None
    """FedAvg's weight without DP (the default ``weighted_by_key``); None under DP at
    either level (``contracts.reply_keys.DECLARED_SIZE_ADJACENCY``; FedAvg then weighs by
    :data:`UNIT_WEIGHT`)."""
    dp_epsilon: float | None = None
    """The site's record-level (Opacus) epsilon so far; None without record-level DP."""
    noise_multiplier: float | None = None
    """DP-SGD's noise multiplier this round; None without record-level DP."""
    unit_weight: int = 1
    """The weight under client-level DP (``weighted_by_key``: :data:`UNIT_WEIGHT`): 1 for
    every site, a uniform mean."""

    def to_record(self) -> MetricRecord:
        values: dict[str, MetricRecordValues] = {
            SITE_ID: self.site_id,
            UNIT_WEIGHT: self.unit_weight,
        }
        for key, value in (
            (NUM_EXAMPLES, self.num_examples),
            (TRAIN_LOSS, self.train_loss),
            (DP_EPSILON, self.dp_epsilon),
            (NOISE_MULTIPLIER, self.noise_multiplier),
        ):
            if value is not None:
                values[key] = value
        return MetricRecord(values)

    @classmethod
    def from_record(
        cls, record: MetricRecord, *, record_dp: bool | None = None, any_dp: bool | None = None
    ) -> TrainReply:
        """``record_dp`` and ``any_dp`` (the run's record-level DP and DP at either level,
        when known; ``any_dp`` defaults to ``record_dp``): the keys that depend on them must
        be there or absent as they say, so every reply of a round carries the same keys."""
        what = "train reply"
        if record_dp is not None:
            _check_dp_keys(record, record_dp, record_dp if any_dp is None else any_dp, what)
        reply = cls(
            site_id=_int(record, SITE_ID, what),
            train_loss=_opt_float(record, TRAIN_LOSS, what),
            num_examples=_int(record, NUM_EXAMPLES, what) if NUM_EXAMPLES in record else None,
            dp_epsilon=_opt_float(record, DP_EPSILON, what),
            noise_multiplier=_opt_float(record, NOISE_MULTIPLIER, what),
            unit_weight=_int(record, UNIT_WEIGHT, what),
        )
        _at_least(reply.site_id, 0, SITE_ID, what)
        if reply.num_examples is not None:
            # FedAvg divides by the sum of these: zero or negative ones would break the mean.
            _at_least(reply.num_examples, 0, NUM_EXAMPLES, what, strict=True)
        if reply.unit_weight != 1:
            raise WireError(f"{what}: key {UNIT_WEIGHT!r} must be 1, got {reply.unit_weight}")
        for key, value in (
            (DP_EPSILON, reply.dp_epsilon),
            (NOISE_MULTIPLIER, reply.noise_multiplier),
        ):
            if value is not None:
                _at_least(value, 0, key, what)
        return reply


def _check_dp_keys(record: MetricRecord, record_dp: bool, any_dp: bool, what: str) -> None:
    """DP-SGD's keys exactly under record-level DP; the count and the loss exactly without DP
    at any level (no accountant covers them)."""
    for keys, sent, why in (
        ((DP_EPSILON, NOISE_MULTIPLIER), record_dp, "without record-level DP"),
        ((TRAIN_LOSS, NUM_EXAMPLES), not any_dp, "under DP (no accountant covers it)"),
    ):
        for key in keys:
            if sent:
                _get(record, key, what)
            elif key in record:
                raise WireError(f"{what}: key {key!r} is not sent {why}")


@dataclass(frozen=True)
class WhoamiReply:
    """Which site a node is (Flower's replies carry node ids, not site ids)."""

    site_id: int

    def to_record(self) -> MetricRecord:
        return MetricRecord({SITE_ID: self.site_id})

    @classmethod
    def from_record(cls, record: MetricRecord) -> WhoamiReply:
        site_id = _int(record, SITE_ID, "whoami reply")
        _at_least(site_id, 0, SITE_ID, "whoami reply")
        return cls(site_id=site_id)


@dataclass(frozen=True)
class AuditInstructions:
    """An audit query's config: the full audit of the final weights (:data:`ARRAYS`) when
    ``main``, and the brief audit of each earlier round in ``rounds`` (weights under
    :func:`round_arrays`), all with the same settings and seed."""

    seed: int
    rounds: tuple[int, ...] = ()
    main: bool = True

    def to_record(self) -> ConfigRecord:
        record = ConfigRecord({SEED: self.seed, MAIN_AUDIT: self.main})
        if self.rounds:
            record[AUDIT_ROUNDS] = list(self.rounds)
        return record

    @classmethod
    def from_record(cls, record: ConfigRecord) -> AuditInstructions:
        what = "audit config"
        rounds = record.get(AUDIT_ROUNDS, [])
        if not isinstance(rounds, list) or not all(
            isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in rounds
        ):
            raise WireError(f"{what}: key {AUDIT_ROUNDS!r} must be a list of rounds >= 1")
        main = record.get(MAIN_AUDIT, True)
        if not isinstance(main, bool):
            raise WireError(f"{what}: key {MAIN_AUDIT!r} must be true or false")
        if not main and not rounds:
            raise WireError(f"{what}: asks for no audit (no main audit, no rounds)")
        return cls(seed=_int(record, SEED, what), rounds=tuple(int(r) for r in rounds), main=main)


def audit_record(audit: SiteAudit[Any]) -> ConfigRecord:
    """A site's audit as its reply's record: the sizes, time and epsilon as keys, each kind
    of audit it ran as JSON (:func:`kind_key`); a kind it did not run is absent."""
    record = ConfigRecord({SITE_ID: audit.site_id})
    for key, value in (
        (N_MEMBERS, audit.n_members),
        (N_HOLDOUT, audit.n_holdout),
        (ELAPSED_S, audit.elapsed_s),
        (DP_EPSILON, audit.dp_epsilon),
    ):
        if value is not None:
            record[key] = value
    for kind in fields(audit.results):
        value = getattr(audit.results, kind.name)
        if value is not None and value != []:
            record[kind_key(json_name(kind))] = json.dumps(json_safe(value))
    return record


def audit_reply(record: ConfigRecord, kinds: type[K]) -> SiteAudit[K]:
    """The site's audit in its reply's record (the inverse of :func:`audit_record`): the
    sizes and time must be there, and at least one kind of audit, each read by the results'
    type ``kinds`` with every key checked."""
    what = "audit reply"
    keys = [kind_key(json_name(kind)) for kind in fields(kinds)]  # type: ignore[arg-type]  # K: a dataclass, unsayable
    sent = {
        json_name(kind): _json_value(record, key, what)
        for kind, key in zip(fields(kinds), keys, strict=True)  # type: ignore[arg-type]  # as above
        if key in record
    }
    if not sent:
        raise WireError(f"{what}: holds no audit (none of the keys {keys})")
    try:
        results = from_dict(kinds, sent)
    except ValueError as err:
        raise WireError(f"{what}: {err}") from None
    audit: SiteAudit[K] = SiteAudit(
        site_id=_int(record, SITE_ID, what),
        n_members=_int(record, N_MEMBERS, what),
        n_holdout=_int(record, N_HOLDOUT, what),
        elapsed_s=_float(record, ELAPSED_S, what),
        dp_epsilon=_opt_float(record, DP_EPSILON, what),
        results=results,
    )
    for key, value in (
        (SITE_ID, audit.site_id),
        (N_MEMBERS, audit.n_members),
        (N_HOLDOUT, audit.n_holdout),
        (ELAPSED_S, audit.elapsed_s),
        (DP_EPSILON, audit.dp_epsilon),
    ):
        if value is not None:
            _at_least(value, 0, key, what)
    return audit


AUDIT_FAILED_CODE = 4001
"""The Flower ``Error`` code of a site whose audit raised (Flower's own codes are 0-8)."""
SITE_REFUSED_CODE = 4003
"""The Flower ``Error`` code of a site that refused a message its policy does not allow (the
reason names the policy key; ``clients.site_policy``)."""
TRACEBACK_FRAMES = 5
"""The last frames of the site's traceback travel with its error (where it raised)."""
_MARK = "--- site traceback"
_MARK_RE = re.compile(r"\n--- site traceback(?: \(audit ran (?P<elapsed>[^ ]+) s\))? ---\n")


def error_reason(error: Error) -> str:
    """An error reply's reason, cut to :data:`MAX_REASON_CHARS` (a site's text is stored
    and shown)."""
    reason = str(error.reason or f"error reply with code {error.code} and no reason")
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS] + f" [... {len(reason) - MAX_REASON_CHARS} more]"
    return reason


@dataclass(frozen=True)
class AuditFailure:
    """A site's audit that raised, as Flower's error reply (``Message(error, reply_to=)``).

    The error's reason is readable as it is: the error text, then a marker line (with the
    audit's running time) and the site's short traceback.
    """

    error: str
    """``"<ExceptionType>: <message>"``, or Flower's reason for an error of its own."""
    traceback: str | None = None
    elapsed_s: float | None = None

    @classmethod
    def of(
        cls, err: BaseException, *, elapsed_s: float | None = None, with_traceback: bool = True
    ) -> AuditFailure:
        """The failure of ``err``, being handled: with its last :data:`TRACEBACK_FRAMES`
        frames when ``with_traceback`` (a site's policy may keep its paths and code home)."""
        text = None
        if with_traceback:
            lines = tb.format_exception(type(err), err, err.__traceback__, limit=-TRACEBACK_FRAMES)
            text = "".join(lines)
        return cls(error=f"{type(err).__name__}: {err}", traceback=text, elapsed_s=elapsed_s)

    def to_error(self) -> Error:
        reason = self.error
        if self.traceback is not None or self.elapsed_s is not None:
            ran = "" if self.elapsed_s is None else f" (audit ran {self.elapsed_s!r} s)"
            reason += f"\n{_MARK}{ran} ---\n{self.traceback or ''}"
        return Error(code=AUDIT_FAILED_CODE, reason=reason)

    @classmethod
    def from_error(cls, error: Error) -> AuditFailure:
        """The failure an error reply reports. A reason that Flower wrote (the ClientApp
        crashed, the node went away) is the error text, with no traceback."""
        reason = error_reason(error)
        if error.code != AUDIT_FAILED_CODE:
            return cls(error=reason)
        match = _MARK_RE.search(reason)
        if match is None:
            return cls(error=reason)
        try:
            elapsed = float(match.group("elapsed") or "nan")
        except ValueError:
            elapsed = math.nan
        return cls(
            error=reason[: match.start()],
            traceback=reason[match.end() :] or None,
            elapsed_s=None if math.isnan(elapsed) else elapsed,
        )
