"""Every kind of audit a site runs, in one record: the results of a site's audit
(``contracts.site_audit.SiteAudit[SiteResults]``), as its reply carries them and its audit
file holds them.

Each field is one kind, None (or empty) when the site did not run it; its name (or its
``json_key``) is its key in the audit file and, as ``<key>-json``, in the reply
(``contracts.wire``). A kind
measured per round is a list with one entry per round, in round order, each saying its
``round``. docs/development.md says how to add a kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from panoramia_fl.audit.canaries.gradient_canaries import GradientCanaryResult
from panoramia_fl.audit.canaries.input_canaries import InputCanaryResult
from panoramia_fl.audit.inversion.inversion_result import InversionResult
from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.audit.result import PanoramiaResult
from panoramia_fl.audit.tabular.attribute_result import AttributeInferenceResult
from panoramia_fl.contracts.held_rounds import DishonestServerResult
from panoramia_fl.contracts.json_values import json_key, json_name, older_key


@dataclass(frozen=True)
class SiteResults:
    """The audits of one site (summary numbers only: what may leave the site)."""

    panoramia: PanoramiaResult | None = field(default=None, metadata=json_key("result"))
    """PANORAMIA on the final model, with its comparisons on the site's real non-members;
    None when only earlier rounds were asked for (and in a failed audit's file). Key
    ``result`` (``result-json`` in the reply), as files have always had it."""
    input_canaries: InputCanaryResult | None = field(default=None, metadata=older_key("canary"))
    """The one-run audit of the site's input canaries (``audit.input_canaries``); key
    ``canary`` in files older than the name."""
    by_round: list[RoundLeakage] = field(default_factory=list)
    """PANORAMIA in brief on earlier rounds' global models (``audit.rounds`` /
    ``audit.every``); in the audit file the final round's too, each with the round's
    global accuracy."""
    gradient_canaries: GradientCanaryResult | None = None
    """The white-box audit of the site's DP-SGD (``audit.gradient_canaries``)."""
    inversion: list[InversionResult] = field(default_factory=list)
    """The gradient-inversion audit of the site's own updates (``audit.inversion``)."""
    updates: list[RoundLeakage] = field(default_factory=list)
    """PANORAMIA in brief on the site's own local models of chosen rounds, the weights it
    sent the server (``audit.updates``), with the same games as the global models of those
    rounds (``by_round``); each with the site's DP-SGD epsilon after its round."""
    attribute_inference: AttributeInferenceResult | None = None
    """Attribute inference on the final model: does it reveal a sensitive field better for
    the site's members than for its held-out records (``audit.attribute_inference``)?"""
    dishonest_server: list[DishonestServerResult] = field(default_factory=list)
    """What the run's dishonest server (``fl.adversary``, simulations only) rebuilt of the
    site's records in each round it attacked the site, scored by the site."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):
                rounds = [entry.round for entry in value]
                if rounds != sorted(set(rounds)):
                    raise ValueError(
                        f"key '{json_name(f)}' must hold one entry per round, in round order, "
                        f"got rounds {rounds}"
                    )

    def audited_rounds(self) -> set[int]:
        """The rounds :attr:`by_round` holds."""
        return {line.round for line in self.by_round}
