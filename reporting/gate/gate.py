"""The release gate: a run's sites (or a sweep's points') against a release policy
(:class:`~.gate_policy.GatePolicy`), one line per site and rule, each pass, fail or not
measured; the verdict passes when no line counts as a failure.

Every number is read through the metric registry (:mod:`.metrics`) and every check is one
the reports already make (:class:`~.schema.ChecksReport`, the headline's flags): the gate
adds no reading of its own. Its lines go to the terminal, ``gate.json`` and JUnit XML
(:func:`junit_xml`), the form CI systems read.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import replace

from panoramia_fl.audit.result import Interval

from ..numbers.formatting import fmt
from ..numbers.headline_flags import headline_flags
from ..numbers.metrics import Metric
from ..numbers.report_parts import lower_bounds, metric_keys, rebuilt_shares
from ..schemas.gate_schema import GateLine, GateVerdict
from ..schemas.schema import FLAGS, SiteReport
from .gate_policy import GatePolicy, Reading, Requirements, ThresholdRule


def verdict_of(policy: GatePolicy, lines: list[GateLine]) -> GateVerdict:
    """The verdict of ``lines``: passed when none counts as a failure."""
    outcomes = ("pass", "fail", "not measured")
    counts = {o: sum(line.outcome == o for line in lines) for o in outcomes}
    counts["failing"] = sum(line.failed for line in lines)
    return GateVerdict(policy.name, policy.description, not counts["failing"], lines, counts)


def gate_lines(
    policy: GatePolicy, sites: Sequence[SiteReport], *, prefix: str = ""
) -> list[GateLine]:
    """Every line of ``policy`` on a run's sites: each site's thresholds and requirements in
    the policy's order, a site a rule names that the run lacks, then the consortium's
    thresholds; ``prefix`` goes before each line's place (a sweep's point)."""
    present = {s.site_id for s in sites}
    lines = [line for site in sites for line in site_gate_lines(policy, site)]
    lines += [
        _line(policy, rule, f"site {sid}", rule.text(), None, "not in this run")
        for rule in policy.rules
        if rule.scope == "site"
        for sid in sorted(set(rule.sites or ()) - present)
    ]
    lines += [
        _consortium_line(policy, rule, sites) for rule in policy.rules if rule.scope == "consortium"
    ]
    return [replace(line, where=prefix + line.where) for line in lines]


def unread_run_line(policy: GatePolicy, where: str, why: str) -> GateLine:
    """The one line of a run that could not be read (a sweep's point): not measured."""
    return _line(policy, None, where, "its run", None, why)


def site_gate_lines(policy: GatePolicy, site: SiteReport) -> list[GateLine]:
    """The lines of one site alone (its own page and pack): no consortium rule, whose
    reading is another site's number."""
    rules = [
        _site_line(policy, rule, site)
        for rule in policy.rules
        if rule.scope == "site" and (rule.sites is None or site.site_id in rule.sites)
    ]
    return rules + _requirement_lines(policy, site)


def _line(
    policy: GatePolicy,
    rule: ThresholdRule | None,
    where: str,
    text: str,
    passed: bool | None,
    detail: str,
    value: float | None = None,
) -> GateLine:
    """A line; ``passed`` None: not measured (a failure unless the rule or policy allows)."""
    if passed is None:
        own = None if rule is None else rule.not_measured
        allowed = (own or policy.not_measured) == "allow"
        return GateLine(where, text, "not measured", not allowed, value, detail)
    return GateLine(where, text, "pass" if passed else "fail", not passed, value, detail)


def reading(metric: Metric, site: SiteReport, read: Reading) -> float | None:
    """The number a rule reads of ``metric`` at ``site``: its interval's end or its value
    (a number without an interval is its own interval); None when not measured."""
    value = metric.get(site)
    if isinstance(value, Interval) and read != "value":
        end = value.high if read == "high" else value.low
        return end if math.isfinite(end) else None
    return metric.value(site)


def _within(rule: ThresholdRule, value: float) -> bool:
    low_ok = rule.at_least is None or value >= rule.at_least
    return low_ok and (rule.at_most is None or value <= rule.at_most)


def _site_line(policy: GatePolicy, rule: ThresholdRule, site: SiteReport) -> GateLine:
    value = reading(metric_keys()[rule.metric], site, rule.read)
    where = f"site {site.site_id}"
    if value is None:
        why = "its audit " + site.status if site.status != "ok" else "not in this site's results"
        return _line(policy, rule, where, rule.text(), None, why)
    return _line(policy, rule, where, rule.text(), _within(rule, value), fmt(value), value)


def _consortium_line(
    policy: GatePolicy, rule: ThresholdRule, sites: Sequence[SiteReport]
) -> GateLine:
    """A consortium rule: every chosen site's reading within the limits; its value the
    worst one (the largest against at_most, else the smallest)."""
    chosen = [s for s in sites if rule.sites is None or s.site_id in rule.sites]
    values = {s.site_id: reading(metric_keys()[rule.metric], s, rule.read) for s in chosen}
    unread = [sid for sid, v in values.items() if v is None]
    unread += sorted(set(rule.sites or ()) - {s.site_id for s in sites})
    if unread or not values:
        why = f"not measured at site {', '.join(map(str, unread))}" if unread else "no site"
        return _line(policy, rule, "consortium", rule.text(), None, why)
    read = {sid: v for sid, v in values.items() if v is not None}
    worst = (max if rule.at_most is not None else min)(read, key=lambda sid: read[sid])
    passed = all(_within(rule, v) for v in read.values())
    value = read[worst]
    return _line(
        policy, rule, "consortium", rule.text(), passed, f"{fmt(value)} (site {worst})", value
    )


REQUIREMENT_TEXT = {
    "dp_conformance": "every DP-SGD conformance check passes",
    "bounds_below_accountant": "no measured lower bound above its guarantee",
    "no_flagged_headline": "no flag on the headline",
}
"""How each required check is named in its line (``max_rebuilt_share``'s names its share)."""


def _requirement_lines(policy: GatePolicy, site: SiteReport) -> list[GateLine]:
    req: Requirements = policy.requirements
    where = f"site {site.site_id}"
    found = [
        (name, check(site))
        for name, check in (
            ("dp_conformance", _conformance),
            ("bounds_below_accountant", _ordering),
            ("no_flagged_headline", _flags),
        )
        if getattr(req, name)
    ]
    lines = [_line(policy, None, where, REQUIREMENT_TEXT[n], ok, why) for n, (ok, why) in found]
    if req.max_rebuilt_share is not None:
        ok, why, value = _rebuilt(site, req.max_rebuilt_share)
        text = f"nothing rebuilt above a share of {req.max_rebuilt_share:g}"
        lines.append(_line(policy, None, where, text, ok, why, value))
    return lines


def _conformance(site: SiteReport) -> tuple[bool | None, str]:
    canaries = site.results.gradient_canaries
    result = None if canaries is None else canaries.conformance
    if result is None:
        return None, "no conformance checks ran (audit.gradient_canaries, record-level DP)"
    failed = [c.name.replace("_", " ") for c in result.failed]
    if failed:
        return False, f"{len(failed)} of {len(result.checks)} failed: {', '.join(failed)}"
    return True, f"all {len(result.checks)} checks passed over {result.steps:,} steps"


def _ordering(site: SiteReport) -> tuple[bool | None, str]:
    above = [v.label for v in site.checks.bound_violations if not v.conformance]
    if above:
        return False, f"above the guarantee: {', '.join(above)}"
    p = site.privacy
    if p.dp_epsilon is None and p.client_epsilon is None:
        return None, "no DP guarantee to check the bounds against"
    measured = [m.label for m in lower_bounds() if m.value(site) is not None]
    if not measured:
        return None, "no lower bound measured"
    return True, f"{len(measured)} bounds at or below it"


def _flags(site: SiteReport) -> tuple[bool | None, str]:
    if site.panoramia is None:
        return None, f"its audit {site.status}"
    raised = [FLAGS[name].label for name in headline_flags(site.panoramia)]
    return (False, f"flagged: {', '.join(raised)}") if raised else (True, "no flag raised")


def _rebuilt(site: SiteReport, share: float) -> tuple[bool | None, str, float | None]:
    shares = rebuilt_shares()
    read = [(m, v) for m in shares if (v := m.value(site)) is not None]
    if not read:
        names = ", ".join(m.label for m in shares)
        return None, f"no attack that rebuilds records ran ({names})", None
    metric, worst = max(read, key=lambda mv: mv[1])
    return worst <= share, f"{fmt(worst)} ({metric.label})", worst


def junit_xml(verdict: GateVerdict, *, suite: str) -> str:
    """The verdict as JUnit XML: one test suite, one test case per line (class: its place,
    name: its rule); a failure or a not-measured line that counts as one is a
    ``<failure>``, an allowed not-measured line is ``<skipped>``."""
    skipped = sum(not line.failed and line.outcome == "not measured" for line in verdict.lines)
    root = ET.Element("testsuites", name=f"panoramia-fl gate: {verdict.policy}")
    attrs = {
        "name": suite,
        "tests": str(len(verdict.lines)),
        "failures": str(verdict.counts["failing"]),
        "errors": "0",
        "skipped": str(skipped),
        "time": "0",
    }
    for key in ("tests", "failures", "errors", "skipped", "time"):
        root.set(key, attrs[key])
    tests = ET.SubElement(root, "testsuite", attrs)
    for line in verdict.lines:
        case = ET.SubElement(tests, "testcase", classname=line.where, name=line.rule, time="0")
        if line.failed:
            failure = ET.SubElement(case, "failure", message=line.detail, type=line.outcome)
            failure.text = line.text()
        elif line.outcome == "not measured":
            ET.SubElement(case, "skipped", message=line.detail)
        else:
            ET.SubElement(case, "system-out").text = line.detail
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
