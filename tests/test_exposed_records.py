"""A federated run with audit.exposed_records: each site keeps its most exposed members in
its own state directory, and nothing of them reaches the server side or any report."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import run_files

from clients.site_data import SiteData
from contracts.run_files import exposed_records_name
from reporting import SITE_REPORTS_DIR
from simulations.config import validate_config
from simulations.runner import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.ray]

K = 5
TINY_AUDIT = {
    "quick": True,
    "helper_epochs": 1,
    "splits": {"generator": 0.05, "train": 0.3, "val": 0.15},
    "classifier": {"gbm_iterations": [20], "feature_sets": ["loss"]},
    "calibration": {"reference_models": 2, "epochs": 1},
}


def test_exposed_records_stay_at_the_site(tmp_path) -> None:
    run_dir = tmp_path / "run"
    config = validate_config(
        {
            "name": "exposed",
            "seed": 2,
            "data": {"name": "digits", "options": {"public_fraction": 0.4}},
            "partition": {"scheme": "iid", "num_sites": 2, "holdout_fraction": 0.2},
            "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 32},
            "audit": {"reference_pool": True, "exposed_records": K, "settings": TINY_AUDIT},
        }
    )
    run_experiment(config, run_dir)

    found: dict[int, dict] = {}
    for site in (0, 1):
        audit = json.loads((run_dir / "audits" / f"site-{site}.json").read_text())
        assert audit["status"] == "ok", audit.get("error")
        path = run_files(run_dir).site_state / exposed_records_name(site)
        content = json.loads(path.read_text())
        data = SiteData.load(run_files(run_dir).site_file(site))
        n_members = len(data.train_x)
        assert content["site_id"] == site and content["n_members"] == n_members
        # The run's shared reference models calibrate the score (offline LiRA).
        assert content["score"] == "lira_offline" and content["reference_models"] == 2
        assert len(content["indices"]) == len(set(content["indices"])) == K
        assert all(0 <= i < n_members for i in content["indices"])
        assert content["scores"] == sorted(content["scores"], reverse=True)
        # Each record's label: which of the site's groups it exposes.
        assert content["labels"] == [int(data.train_y[i]) for i in content["indices"]]
        found[site] = content

    # Nothing of it on the server side: audits (the replies), the consortium report, and
    # the site reports, which only link to the file.
    server_side = [
        *sorted((run_dir / "audits").glob("site-*.json")),
        *(run_dir / f"report.{ext}" for ext in ("json", "csv", "md", "html")),
    ]
    site_reports = sorted((run_dir / SITE_REPORTS_DIR).iterdir())
    assert [p.name for p in site_reports] == [
        "site-0.html",
        "site-0.json",
        "site-1.html",
        "site-1.json",
    ]
    for path in server_side + site_reports:
        text = path.read_text()
        lists = _int_lists(json.loads(text)) if path.suffix == ".json" else []
        for site, content in found.items():
            indices = content["indices"]
            assert json.dumps(indices) not in text, path.name
            assert not any(_contains(lst, indices) for lst in lists), path.name
            for score in content["scores"]:
                assert repr(score) not in text, (path.name, score)
            # report.json copies the config, which names the setting (exposed_records: 5);
            # the file's name and its own keys appear nowhere on the server side.
            if path in server_side:
                assert exposed_records_name(site) not in text, path.name
                for key in ("stays_at_site", "indices_into", "score_meaning"):
                    assert key not in text, (path.name, key)
    for site in (0, 1):
        page = json.loads((run_dir / SITE_REPORTS_DIR / f"site-{site}.json").read_text())
        assert page["exposed_records_link"] == f"../site_state/{exposed_records_name(site)}"
        assert "indices" not in json.dumps(page)


def _int_lists(obj: Any) -> list[list[int]]:
    """Every list of integers anywhere in a JSON value."""
    if isinstance(obj, dict):
        return [lst for v in obj.values() for lst in _int_lists(v)]
    if isinstance(obj, list):
        own = [obj] if obj and all(isinstance(v, int) for v in obj) else []
        return own + [lst for v in obj for lst in _int_lists(v)]
    return []


def _contains(values: list[int], needle: list[int]) -> bool:
    n = len(needle)
    return any(values[i : i + n] == needle for i in range(len(values) - n + 1))
