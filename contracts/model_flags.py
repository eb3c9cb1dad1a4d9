"""What a site says about a model it refused to train: the checks' verdict, one typed value.

Before it trains, a site checks the model the server sent (``audit.received_model``: every
site of the round received the same weights, the move from the previous global model is one
the agreed training allows, the first layer looks like a trained layer on the site's own
records). A flagged model is not trained and nothing of the site leaves that round: the
site's train reply is Flower's error reply with :data:`MODEL_FLAGGED_CODE` whose reason is
:meth:`ModelFlag.to_reason` (a sentence, then the verdict as JSON). The server keeps it in
the round's line of ``metrics.jsonl`` (``RoundRecord.flagged``), where the reports read it.

This is the one place the verdict's fields are defined: the site writes it, the server and
the reports (the site page, the consortium report, the dishonest-server section) read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from panoramia_fl.contracts.json_values import from_dict, json_safe

MODEL_FLAGGED_CODE = 4005
"""The Flower ``Error`` code of a site that refused a round's model: a check flagged it."""

CheckName = Literal["consistency", "plausibility", "lone_units", "repeated_rows", "dead_units"]
CHECK_NAMES: tuple[str, ...] = get_args(CheckName)
"""Every check a site runs on a received model, in the order it runs them."""

CHECK_MEANINGS: dict[str, str] = {
    "consistency": "every site of the round received the same weights (published digests)",
    "plausibility": "the move from the previous global model, in the agreed local steps",
    "lone_units": "share of first-layer units active for at most one record in a batch",
    "repeated_rows": "share of first-layer weight rows nearly collinear with another row",
    "dead_units": "share of first-layer units inactive on every one of the site's records",
}
"""One line per check, for the reports."""

_MARK = "\nmodel-flag: "


@dataclass(frozen=True)
class CheckOutcome:
    """One check of one received model."""

    check: CheckName
    statistic: float
    """What the check measured (its unit: :data:`CHECK_MEANINGS`)."""
    threshold: float
    """The model is flagged when ``statistic`` is above it."""
    honest_range: str
    """What honest models read, as measured (e.g. ``0 to 0.03 over 432 honest rounds``)."""
    detail: str = ""
    """A sentence for the reader (what differed, which layer)."""

    @property
    def flagged(self) -> bool:
        return self.statistic > self.threshold

    def sentence(self) -> str:
        """``check: statistic above threshold (honest: range); detail``."""
        text = (
            f"{self.check} {self.statistic:.4g} > {self.threshold:.4g} "
            f"(honest models: {self.honest_range})"
        )
        return f"{text}; {self.detail}" if self.detail else text


@dataclass(frozen=True)
class ModelFlag:
    """A site's verdict on a round's model it refused: the checks that flagged it."""

    site_id: int
    server_round: int
    flagged: list[CheckOutcome] = field(default_factory=list)
    """The checks above their threshold (at least one)."""

    @property
    def checks(self) -> list[str]:
        """The names of the checks that flagged the model."""
        return [o.check for o in self.flagged]

    def sentence(self) -> str:
        """One line: the site trained nothing and sent nothing, and why."""
        why = "; ".join(o.sentence() for o in self.flagged)
        return (
            f"site {self.site_id} refused the model of round {self.server_round} (trained "
            f"nothing, sent nothing): {why}"
        )

    def to_reason(self) -> str:
        """The error reply's reason: the sentence, then the verdict as JSON."""
        return self.sentence() + _MARK + json.dumps(json_safe(self), sort_keys=True)

    @classmethod
    def from_reason(cls, reason: str) -> ModelFlag | None:
        """The verdict in an error reply's reason; None when it carries none (or a malformed
        one: the reason's text still says what happened)."""
        _, mark, text = reason.partition(_MARK)
        if not mark:
            return None
        try:
            flag = from_dict(cls, json.loads(text))
        except ValueError:  # JSONDecodeError included
            return None
        return flag if flag.flagged else None


ANNOUNCE = "announce"
"""The query action (``query.announce``) by which the server announces a round's model to
each of its sites before it sends ``train`` (:class:`RoundAnnouncement`)."""
_ROUND, _DIGEST, _SITES = "server-round", "model-digest", "round-sites"


@dataclass(frozen=True)
class RoundAnnouncement:
    """The server's word on a round, to one site: the digest of the model it will send
    (``audit.received_model.digest``) and the round's sites. The site publishes it on the
    bulletin and replies with nothing."""

    server_round: int
    digest: str
    sites: tuple[int, ...]

    def to_values(self) -> dict[str, Any]:
        return {_ROUND: self.server_round, _DIGEST: self.digest, _SITES: list(self.sites)}

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RoundAnnouncement:
        """Checked (a :class:`contracts.wire.WireError` naming the key)."""
        from panoramia_fl.contracts.wire import WireError  # Flower's records: the site's side only

        what = f"{ANNOUNCE} query"
        server_round, digest, sites = values.get(_ROUND), values.get(_DIGEST), values.get(_SITES)
        if not isinstance(server_round, int) or isinstance(server_round, bool) or server_round < 1:
            raise WireError(f"{what}: key {_ROUND!r} must be a round >= 1")
        if not isinstance(digest, str) or len(digest) != 64:
            raise WireError(f"{what}: key {_DIGEST!r} must be a SHA-256 hex digest")
        if not isinstance(sites, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sites
        ):
            raise WireError(f"{what}: key {_SITES!r} must be a list of site ids")
        return cls(server_round=server_round, digest=digest, sites=tuple(sorted(set(sites))))


@dataclass(frozen=True)
class CheckRecord:
    """One line of a site's own log of its checks (``contracts.run_files.model_checks_name``
    in its state folder): every check of one received model, and what the site did."""

    site_id: int
    server_round: int
    outcomes: list[CheckOutcome] = field(default_factory=list)
    refused: bool = False
    """The site refused the model (``refuse``); False: it passed, or was trained anyway
    (``record``, a simulation measuring an attack)."""

    @property
    def flagged(self) -> list[CheckOutcome]:
        """The checks above their threshold."""
        return [o for o in self.outcomes if o.flagged]

    def to_line(self) -> str:
        return json.dumps(json_safe(self), sort_keys=True)


def read_check_records(path: Path) -> list[CheckRecord]:
    """A site's log of its checks (empty when it has none), in the order written."""
    if not path.exists():
        return []
    return [from_dict(CheckRecord, json.loads(line)) for line in path.read_text().splitlines()]
