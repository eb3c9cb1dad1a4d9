"""Small real federated runs with audits for the tabular and text modalities."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from panoramia_fl.simulations.experiment_config import load_config
from panoramia_fl.simulations.runner import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.ray]
CONFIGS = Path(__file__).resolve().parents[1] / "configs"

SMALL = {
    "tabular": [
        "partition.num_sites=2",
        "data.options.max_rows=1600",
        # MST, the tabular generator for sites without public rows (the config plays against
        # its public rows, too few in 1,600 rows for a game): this run exercises it end to end.
        "audit.settings.generator.kind=mst",
        "audit.settings.generator.filter=true",
        "fl.rounds=1",
        "fl.local_epochs=2",
        "audit.settings.helper_epochs=2",
        "audit.settings.quick=true",
        "audit.settings.calibration.epochs=1",
        "audit.settings.classifier.gbm_iterations=[20]",
    ],
    "text": [
        # 480 of the 1,189 chapters: the sites take 800 chunks; every round's central
        # evaluation, the two reference models and the sites' reference pools go through
        # the 720 public ones (all chapters: 1,803; 375 were too few non-members for
        # a site's game).
        "data.options.max_documents=480",
        "partition.num_sites=2",
        "partition.records_per_site=400",
        "fl.rounds=1",
        "fl.local_epochs=1",
        "audit.settings.helper_epochs=1",
        "audit.settings.quick=true",
        "audit.settings.repeats=1",
        "audit.settings.calibration.epochs=1",
        "audit.settings.classifier.gbm_iterations=[20]",
    ],
}
# calibration.epochs=1: the two reference models still calibrate the scores (the default
# trains each for 10 epochs); gbm_iterations=[20]: the boosting baseline and MIA still pick
# among their learning rates, at 20 rounds instead of 50 and 100. What is checked is that
# each modality runs end to end.


@pytest.mark.parametrize("modality", ["tabular", "text"])
def test_federated_run_with_audits(tmp_path, modality):
    config = load_config(CONFIGS / f"{modality}.yaml", SMALL[modality])
    run_experiment(config, tmp_path / modality)
    report = json.loads((tmp_path / modality / "report.json").read_text())
    assert [s["status"] for s in report["sites"]] == ["ok", "ok"], report["sites"]
    for site in report["sites"]:
        audit = site["audit"]
        game = {
            k: v["mean"] if isinstance(v, dict) and "mean" in v else v
            for k, v in audit["one_sided"].items()
        }
        assert audit["modality"] == modality
        # quick mode: one repeat, so the mean obeys the definition exactly
        assert game["eps_tilde"] == pytest.approx(max(0.0, game["c_eps_lb"] - game["c_lb"]))
        assert game["c_lb"] <= game["ceiling"] + 1e-9
        assert game["rm_rn_eps_lb"] is not None and audit["o1_eps_lb"] is not None
    if modality == "tabular":
        # configs/tabular.yaml's attribute inference: each site's result reaches the
        # consortium report and the site's own page.
        for site in report["sites"]:
            inferred = site["privacy"]["attribute_inference"]
            assert inferred["field"] == "health" and inferred["levels"] == 4
            assert inferred["pairs"] > 10 and inferred["eps_lb"]["mean"] >= 0
        assert "## Attribute inference" in (tmp_path / modality / "report.md").read_text()
        page = (tmp_path / modality / "site-reports" / "site-0.html").read_text()
        assert 'id="attribute-inference"' in page and "members&#x27; health" in page
