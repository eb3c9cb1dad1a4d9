"""What a run lost: site audits that failed or never came, and site updates that rounds lost
(a site that failed, was rejected or whose process was ended). The report opens with it and
the CLI says it on stderr, with its own exit status."""

from __future__ import annotations

from dataclasses import dataclass, field

from panoramia_fl.contracts.errors import memory_killed

from .schema import RunReport

LOST_HEADLINE = "Sites were lost in this run."

NOT_STARTED = (
    "The run stopped before its first round finished: nothing was trained or audited yet, so "
    "no site was lost and there is nothing to report; panoramia-fl run --resume RUN_DIR "
    "continues it."
)
"""What the report of a run stopped before any round says, instead of lost sites."""


def stopped_before_training(report: RunReport) -> bool:
    """No round logged and no site audited: the run stopped before its first round."""
    return not report.rounds and all(s.status == "missing" for s in report.sites)


MEMORY_KILLER = (
    "Ray's memory killer ended site processes: the machine ran short of memory with this many "
    "sites at once."
)


@dataclass(frozen=True)
class LostSites:
    """The sites a run lost, and why (each reason's first line)."""

    failed_audits: dict[int, str] = field(default_factory=dict)
    """Site id -> why its audit failed."""
    missing_audits: list[int] = field(default_factory=list)
    """Sites without an audit file in a run that audits."""
    lost_updates: dict[int, dict[str, str]] = field(default_factory=dict)
    """Round -> site id (as text) -> why its update was not aggregated."""

    def __bool__(self) -> bool:
        return bool(self.failed_audits or self.missing_audits or self.lost_updates)

    @property
    def memory_killed(self) -> bool:
        """Whether Ray's memory killer caused any of the losses."""
        reasons = [*self.failed_audits.values()]
        reasons += [why for sites in self.lost_updates.values() for why in sites.values()]
        return any(memory_killed(why) for why in reasons)

    def lines(self) -> list[str]:
        """One line per kind of loss (and the memory killer, when it was the cause)."""
        lines = []
        if self.failed_audits or self.missing_audits:
            lost = [f"site {s} failed ({why})" for s, why in sorted(self.failed_audits.items())]
            lost += [f"site {s} has no audit file" for s in self.missing_audits]
            lines.append(f"Site audits lost: {'; '.join(lost)}.")
        for server_round, sites in sorted(self.lost_updates.items()):
            first_site, why = next(iter(sites.items()))
            lines.append(
                f"Round {server_round} lost the update{'s' * (len(sites) != 1)} of "
                f"site{'s' * (len(sites) != 1)} {', '.join(sites)} (site {first_site}: {why})."
            )
        if self.memory_killed:
            lines.append(MEMORY_KILLER)
        return lines


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:200] if lines else "no reason given"


def lost_sites(report: RunReport, *, audited: bool) -> LostSites:
    """What ``report``'s run lost; ``audited``: the run audits its sites (``audit.enabled``),
    so a site without an audit file is a lost one."""
    return LostSites(
        failed_audits={
            s.site_id: _first_line(s.error) for s in report.sites if s.status == "failed"
        },
        missing_audits=(
            [s.site_id for s in report.sites if s.status == "missing"]
            if audited and not stopped_before_training(report)
            else []
        ),
        lost_updates={
            r.round: {site: _first_line(why) for site, why in r.failures.items()}
            for r in report.rounds
            if r.failures
        },
    )
