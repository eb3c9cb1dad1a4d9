"""A release policy's verdict as the reports hold it (report.json's ``gate``, a site's page,
``gate.json``): one line per site and rule (:mod:`.gate` reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Outcome = Literal["pass", "fail", "not measured"]


@dataclass(frozen=True)
class GateLine:
    """One rule at one site (or for the consortium)."""

    where: str
    """``site 0``, ``consortium`` (a sweep's: ``point eps=8, site 0``)."""
    rule: str
    outcome: Outcome
    failed: bool
    """Whether it counts against the verdict: a failure, or not measured where the policy
    does not allow that."""
    value: float | None
    detail: str
    """What was read, or why nothing was."""

    @property
    def shown(self) -> str:
        """Its outcome as shown: ``not measured`` that fails says so."""
        counts = " (counts as a failure)" if self.failed and self.outcome != "fail" else ""
        return self.outcome + counts

    def text(self) -> str:
        """The line the terminal shows."""
        counts = self.shown.removeprefix(self.outcome)
        return f"{self.outcome.upper():<12} {self.where}: {self.rule}: {self.detail}{counts}"


@dataclass(frozen=True)
class GateVerdict:
    """A policy's verdict on a run (or a sweep, or one site)."""

    policy: str
    description: str
    passed: bool
    lines: list[GateLine]
    counts: dict[str, int]
    """Lines per outcome, and ``failing``: those that count as a failure."""
