"""The canary clients' reading in the report: ``client_canaries.json`` (when the run had
``audit.canary_clients``) as report.json's ``client_canaries``, the ledger's
``client_eps_estimate`` / ``client_eps_lb`` and one paragraph of report.md / report.html.

The ledger shows the final-model threat model (who sees the released model, as every other
audit of the report does); report.json holds both threat models.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from audit.client_canaries import ClientCanaryResult
from audit.one_run import METHOD_LABELS
from contracts.run_files import RunLayout

from .inputs import ReportInputError

LEDGER_THREAT = "final"
"""The threat model whose numbers the ledger's ``client_eps_*`` columns show."""


def load_client_canaries(run_dir: Path) -> ClientCanaryResult | None:
    """``client_canaries.json`` of ``run_dir``; None when the run had no canary clients."""
    path = RunLayout(run_dir).client_canaries
    if not path.exists():
        return None
    try:
        return ClientCanaryResult.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as err:
        raise ReportInputError(f"{path}: not a canary-clients result ({err})") from None


def ledger_fields(result: ClientCanaryResult | None) -> dict[str, float | None]:
    """``client_eps_estimate`` and ``client_eps_lb`` of every ledger row."""
    est = None if result is None else result.estimates.get(LEDGER_THREAT)
    return {
        "client_eps_estimate": None if est is None else _finite(est.eps_estimate),
        "client_eps_lb": None if est is None else est.eps_lb,
    }


def report_section(result: ClientCanaryResult | None) -> dict[str, Any] | None:
    """report.json's ``client_canaries``: the file's numbers plus the report's sentences."""
    if result is None:
        return None
    return {**result.to_dict(), "ledger_threat": LEDGER_THREAT, "summary": summary_lines(result)}


def summary_lines(result: ClientCanaryResult) -> list[str]:
    """The paragraph of report.md / report.html (plain text, one sentence a line)."""
    lb_label = METHOD_LABELS.get(result.lb_method, result.lb_method)  # type: ignore[call-overload]
    total = 2 * result.canary_clients
    lines = [
        f"{result.inserted} of {total} canary directions were inserted as clients (scaled to "
        f"the {result.scale}); the other {total - result.inserted} are the null. "
        f"Epsilon at delta = {result.delta:g}:",
    ]
    for threat, est in result.estimates.items():
        ratio = ""
        if result.accountant_epsilon:
            ratio = f", {est.eps_estimate / result.accountant_epsilon:.2f} x the accountant's"
        lines.append(
            f"{threat.replace('_', '-')}: estimate {_fmt(est.eps_estimate)} (Gaussian fit, not "
            f"a bound{ratio}; {est.eps_estimate_equal_var:.2f} with one pooled variance); "
            f"lower bound {est.eps_lb:.2f} ({lb_label}, beta = {result.beta:g})."
        )
    if result.accountant_epsilon is not None:
        lines.append(
            f"Client-level accountant: {result.accountant_epsilon:.2f} for a client in all "
            f"{result.rounds} rounds."
        )
    cost = result.accuracy_cost
    if cost is not None:
        lines.append(
            f"Canary cost: global accuracy {result.accuracy_with_canaries:.3f} with the canaries, "
            f"{result.accuracy_without_canaries:.3f} without (the same run trained again): "
            f"cost {cost:+.3f}"
            + (
                " (the canaries helped, e.g. by adding clients that the client-level noise is "
                "divided by)."
                if cost < 0
                else "."
            )
        )
    if result.outweighed:
        lines.append(
            f"The canaries outweigh the real sites ({result.mean_canaries_per_round:.1f} canaries "
            f"against {result.sites_per_round} sites a round): the estimate describes a different "
            "training run from the one without canaries."
        )
    return lines


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _fmt(value: float) -> str:
    return "unbounded" if math.isinf(value) else f"{value:.2f}"
