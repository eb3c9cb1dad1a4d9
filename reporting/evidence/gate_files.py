"""The release gate on a run directory or a sweep's folder: its verdict
(:mod:`.gate`) from the saved results, and the verdict's files (``gate.json``, JUnit XML)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import RunLayout

from ..assembly.aggregate import build_report
from ..assembly.inputs import load_run
from ..assembly.run_config import ConfigReader
from ..assembly.writers import report_to_json_text
from ..gate.gate import GateLine, GateVerdict, gate_lines, junit_xml, unread_run_line, verdict_of
from ..gate.gate_policy import GatePolicy
from ..sweeps.sweep_report import SWEEP_JSON, saved_sweep_points

GATE_JSON = "gate.json"
GATE_JUNIT = "gate-junit.xml"


def gate_folder(policy: GatePolicy, root: Path, read_config: ConfigReader) -> GateVerdict:
    """The policy's verdict on a run directory, or on every point of a sweep's folder (its
    lines prefixed ``point LABEL, ``); each run's config as ``read_config`` reads it. A
    :class:`RunFileError` names a run's missing or malformed file (a sweep's unreadable
    point is one line instead, not measured)."""
    layout = RunLayout(root)
    if layout.config.exists() or not (root / SWEEP_JSON).exists():
        report = build_report(load_run(layout, read_config(layout)))
        return verdict_of(policy, gate_lines(policy, report.sites))
    lines = [
        line
        for point in saved_sweep_points(root)
        for line in _point_lines(policy, point.layout, f"point {point.label}", read_config)
    ]
    return verdict_of(policy, lines)


def _point_lines(
    policy: GatePolicy, layout: RunLayout, where: str, read_config: ConfigReader
) -> list[GateLine]:
    try:
        report = build_report(load_run(layout, read_config(layout)))
    except RunFileError as err:
        return [unread_run_line(policy, where, str(err))]
    return gate_lines(policy, report.sites, prefix=f"{where}, ")


@dataclass(frozen=True)
class GateFiles:
    json_path: Path
    junit_path: Path


def write_gate_files(
    verdict: GateVerdict, *, json_path: Path, junit_path: Path, suite: str
) -> GateFiles:
    """The verdict as JSON (every line) and as JUnit XML (test suite ``suite``)."""
    return GateFiles(
        json_path=atomic_write_text(json_path, report_to_json_text(verdict)),
        junit_path=atomic_write_text(junit_path, junit_xml(verdict, suite=suite)),
    )
