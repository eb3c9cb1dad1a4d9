"""Leakage over rounds through a real Flower simulation: every site audits the rounds asked
for and its own updates of rounds 1 and 3 (under record-level DP, each with its epsilon
then), and a resumed run with more rounds asked audits only those (the main audit is
kept)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import run_files

from panoramia_fl.contracts.run_files import SITE_REPORTS_DIR, local_model_name
from panoramia_fl.simulations.experiment_config import load_config
from panoramia_fl.simulations.runner import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ROOT = Path(__file__).resolve().parents[1]

SMALL = [
    "name=rounds",
    "seed=3",
    "data.name=digits",
    "data.options={public_fraction: 0.4}",
    "partition={scheme: iid, num_sites: 2, holdout_fraction: 0.2}",
    "fl.rounds=3",
    "fl.local_epochs=1",
    "fl.batch_size=32",
    "audit.settings.repeats=2",
    "audit.settings.helper_epochs=1",
    "audit.settings.calibration.reference_models=0",
    "audit.updates={rounds: [1, 3]}",
    "dp={level: record, target_epsilon: 8, delta: 0.00001}",
]
"""The default config (reference pool, quick score-only audit), small and fast: no reference
models (the calibrated audit in a run is tests/test_reference_models.py's)."""


def _config(rounds: list[int]):
    return load_config(ROOT / "configs" / "default.yaml", [*SMALL, f"audit.rounds={rounds}"])


def _audits(run_dir) -> dict[int, dict[str, Any]]:
    return {s: json.loads(p.read_text()) for s, p in run_files(run_dir).audit_files().items()}


def test_sites_audit_the_rounds_asked_and_a_resume_adds_only_new_ones(tmp_path) -> None:
    run_dir = tmp_path / "run"
    run_experiment(_config([1]), run_dir)
    first = _audits(run_dir)
    accuracy = {
        json.loads(line)["round"]: json.loads(line)["global_accuracy"]
        for line in run_files(run_dir).metrics.read_text().splitlines()
    }
    for site, audit in first.items():
        assert audit["status"] == "ok", audit.get("error")
        assert [e["round"] for e in audit["by_round"]] == [1, 3]
        assert [e["global_accuracy"] for e in audit["by_round"]] == [accuracy[1], accuracy[3]]
        # The final round's line is the main audit's two-sided result.
        two_sided = audit["result"]["two_sided"]["eps_tilde"]
        assert audit["by_round"][-1]["eps_tilde_two_sided"] == two_sided
        assert audit["result"]["per_class"]  # digits are labelled: per-class slices
        # The site's own updates, each covered by its DP-SGD epsilon after its round.
        updates = audit["updates"]
        assert [e["round"] for e in updates] == [1, 3]
        assert 0 < updates[0]["dp_epsilon"] < updates[1]["dp_epsilon"]
        assert updates[1]["dp_epsilon"] == pytest.approx(audit["dp_epsilon"])
        assert all(e["rm_rn_eps_lb"] is not None for e in updates + audit["by_round"])
        # The update differs from the global model it was averaged into.
        assert updates[1]["mia_auc"] != audit["by_round"][-1]["mia_auc"]
        kept = run_files(run_dir).site_state / local_model_name(site, 3)
        assert kept.stat().st_mode & 0o777 == 0o600
    report = json.loads((run_dir / "report.json").read_text())
    assert set(report["consortium"]["first_leaking_round"]) == {"0", "1"}
    page = (run_dir / SITE_REPORTS_DIR / "site-0.html").read_text()
    assert "Leakage over rounds" in page and "Which of your classes are exposed" in page
    assert "Leakage of your own updates" in page and 'id="updates-0"' in page
    for site in report["sites"]:
        assert [e["round"] for e in site["updates"]] == [1, 3]
        assert not site["checks"]["bound_violations"]  # none above the epsilon then

    run_experiment(_config([1, 2]), run_dir)
    second = _audits(run_dir)
    assert not list(run_dir.glob("audits-superseded-*"))  # a round selection is no new setting
    for site, audit in second.items():
        before = first[site]
        # The main audit and round 1 are kept as they were; round 2 is new.
        assert audit["result"] == before["result"] and audit["elapsed_s"] == before["elapsed_s"]
        assert [e["round"] for e in audit["by_round"]] == [1, 2, 3]
        assert audit["by_round"][0] == before["by_round"][0]
