"""A release policy: the thresholds and requirements a consortium agreed a run must meet
before its model may be released (``panoramia-fl gate``; ``report.policy`` in a config).

A threshold names any number of the metric registry (:func:`~.report_parts.metric_keys`) by
its key, the reading it holds to (the upper or lower end of its 95% interval, or its
value) and its limits, per site or for the consortium (its worst site). A requirement is a
check the reports already make (the DP-SGD conformance checks, the ordering check, the
headline's flags, the shares an attack rebuilt). Unknown keys and unknown metrics are
errors naming the key; the policy's owner (``simulations.cmd_gate``) reads the file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..numbers.report_parts import metric_keys

Reading = Literal["high", "low", "value"]
"""Which number of a metric a threshold holds: its 95% interval's upper end, its lower end,
or its value (an estimate's mean). A metric without an interval is its own interval."""
READINGS: dict[Reading, str] = {
    "high": "upper 95% CI end",
    "low": "lower 95% CI end",
    "value": "value",
}
"""How a rule's reading is said in its line."""
NotMeasured = Literal["fail", "allow"]
"""What a rule whose number was not measured counts as: a failure, or allowed."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThresholdRule(_Strict):
    """A limit on one registered metric."""

    metric: str = Field(description="a key of the metric registry (reporting.numbers.metrics)")
    read: Reading = "value"
    at_most: float | None = None
    at_least: float | None = None
    scope: Literal["site", "consortium"] = Field(
        "site", description="site: each site on its own; consortium: the run's worst site"
    )
    sites: list[int] | None = Field(None, description="the sites it holds for (None: all)")
    not_measured: NotMeasured | None = Field(None, description="None: the policy's")

    @field_validator("metric")
    @classmethod
    def _registered(cls, key: str) -> str:
        if key not in (known := metric_keys()):
            raise ValueError(f"unknown metric {key!r}; registered: {', '.join(known)}")
        return key

    @model_validator(mode="after")
    def _limited(self) -> ThresholdRule:
        if self.at_most is None and self.at_least is None:
            raise ValueError("a rule needs at_most, at_least or both")
        return self

    def text(self) -> str:
        """The rule as its lines name it: ``eps_tilde two-sided (upper 95% CI end) <= 0.5``."""
        limits = [
            f"{op} {v:g}"
            for op, v in (("<=", self.at_most), (">=", self.at_least))
            if v is not None
        ]
        worst = "worst site's " if self.scope == "consortium" else ""
        label = metric_keys()[self.metric].label
        return f"{worst}{label} ({READINGS[self.read]}) {' and '.join(limits)}"


class Requirements(_Strict):
    """Checks the reports make, each required or not."""

    dp_conformance: bool = Field(
        False, description="every DP-SGD conformance check of the site's real steps passes"
    )
    bounds_below_accountant: bool = Field(
        False, description="no measured lower bound above the guarantee it is checked against"
    )
    no_flagged_headline: bool = Field(False, description="no flag raised on the headline")
    max_rebuilt_share: float | None = Field(
        None, ge=0, le=1, description="no attack rebuilt more than this share of the records"
    )


class GatePolicy(_Strict):
    """A release policy (a YAML file; ``configs/policies/`` holds examples)."""

    name: str
    description: str = ""
    not_measured: NotMeasured = Field(
        "fail", description="a rule whose number was not measured fails unless 'allow'"
    )
    rules: list[ThresholdRule] = Field(default_factory=list)
    requirements: Requirements = Field(default_factory=Requirements)
