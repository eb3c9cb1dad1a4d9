"""``panoramia-fl gate``: a run's or a sweep's results against a release policy.

One line per site and rule on stdout (pass, fail or not measured), then the verdict;
``gate.json`` (the verdict, every line) and ``gate-junit.xml`` (JUnit XML, for CI) in the
run's folder or where ``--json`` and ``--junit`` say. Exit 0 when every rule passes, 1 when
one fails (or was not measured where the policy does not allow it), 2 on a bad policy,
naming the key, or an unreadable run.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

GATE_FAILED = 1
"""Exit status of a gate with a failing rule (a bad policy or run is 2, as everywhere)."""

# The report's modules load when the command runs: --help stays instant.


def register(subparsers: Any) -> None:
    """Add the ``gate`` subcommand to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "gate",
        help="check a run's (or a sweep's) results against a release policy: exit 0 pass, "
        "1 fail, 2 bad policy",
        description=(
            "Read a run's saved results (or each point's of a sweep) and check every site "
            "against the policy's thresholds and requirements (docs/evidence.md). Prints one "
            "line per site and rule, writes the verdict as JSON and as JUnit XML."
        ),
    )
    parser.add_argument("run_dir", type=Path, help="a run directory, or a sweep's folder")
    parser.add_argument(
        "--policy", type=Path, required=True, help="the policy YAML (configs/policies/)"
    )
    parser.add_argument("--json", type=Path, help="the verdict's JSON (default RUN_DIR/gate.json)")
    parser.add_argument(
        "--junit", type=Path, help="the verdict as JUnit XML (default RUN_DIR/gate-junit.xml)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from panoramia_fl.contracts.files import check_writable
    from panoramia_fl.reporting.evidence.gate_files import (
        GATE_JSON,
        GATE_JUNIT,
        gate_folder,
        write_gate_files,
    )
    from panoramia_fl.simulations.config_file import report_config
    from panoramia_fl.simulations.policy_file import load_policy

    policy = load_policy(args.policy)
    json_path = args.json or args.run_dir / GATE_JSON
    junit_path = args.junit or args.run_dir / GATE_JUNIT
    for path in (json_path, junit_path):
        check_writable(path.parent)
    verdict = gate_folder(policy, args.run_dir, report_config)
    for line in verdict.lines:
        print(line.text())
    files = write_gate_files(
        verdict, json_path=json_path, junit_path=junit_path, suite=str(args.run_dir)
    )
    counts = verdict.counts
    print(
        f"gate: {'PASS' if verdict.passed else 'FAIL'} (policy {policy.name}: "
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['not measured']} not "
        f"measured, {counts['failing']} counting as failures); {files.json_path}, "
        f"{files.junit_path}"
    )
    return 0 if verdict.passed else GATE_FAILED
