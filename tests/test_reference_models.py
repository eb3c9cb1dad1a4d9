"""The calibrated MIA's shared reference models in a federated run: trained once on Ray on
public records no site pool holds, used by every site, not retrained on resume, and loaded
from the weights cache by another run with the same public records and settings. The same
run asks for ``audit.exposed_records``: each site keeps its most exposed members in its own
state directory, and nothing of them reaches the server side or any report."""

from __future__ import annotations

import json
import signal
from typing import Any

import numpy as np
import pytest
import torch
from builders import run_files

from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.contracts.run_files import SITE_REPORTS_DIR, exposed_records_name
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.reference_models import ReferenceModelsDone, site_pool, split_public
from panoramia_fl.simulations.replicate_runs import replicate_configs
from panoramia_fl.simulations.run_dir import load_public
from panoramia_fl.simulations.runner import run_experiment
from panoramia_fl.simulations.weights_cache import CACHE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.ray]

K = 5  # exposed records kept per site

AUDIT = {
    "quick": True,
    "helper_epochs": 1,
    "splits": {"generator": 0.05, "train": 0.3, "val": 0.15},
    "classifier": {"gbm_iterations": [20], "feature_sets": ["loss"]},
    "calibration": {"reference_models": 2, "epochs": 1},
}


def _config():
    return validate_config(
        {
            "name": "refs",
            "seed": 1,
            "data": {"name": "digits", "options": {"public_fraction": 0.4}},
            "partition": {"scheme": "iid", "num_sites": 2, "holdout_fraction": 0.2},
            "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 32},
            "audit": {
                "reference_pool": True,
                "reference_records": 0.3,
                "exposed_records": K,
                "settings": AUDIT,
            },
        }
    )


def _on_sigterm(signum: int, frame: object) -> None:
    """The harness's own SIGTERM handler stands in here (the CLI's stops the run)."""


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A weights cache of this module's own: its first run must train."""
    path = tmp_path_factory.mktemp("weights-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(path))
        yield path


@pytest.fixture(scope="module")
def run(tmp_path_factory, cache_dir):
    path = tmp_path_factory.mktemp("refs") / "run"
    config = _config()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        outcome = run_experiment(config, path)
        handler_after = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return config, path, outcome, handler_after


def test_reference_models_are_trained_once_and_every_site_uses_them(run) -> None:
    config, path, outcome, _ = run
    cache = run_files(path).reference_models
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["count"] == 2 and sorted(p.name for p in cache.glob("ref-*.pt")) == [
        "ref-0.pt",
        "ref-1.pt",
    ]
    assert outcome.timings["reference_models_s"] > 0
    assert outcome.reference_models == ReferenceModelsDone(trained=2, cached=0)
    assert len(manifest["cache_keys"]) == 2
    for site in (0, 1):
        audit = json.loads((path / "audits" / f"site-{site}.json").read_text())
        assert audit["status"] == "ok", audit.get("error")
        assert audit["result"]["sizes"]["reference_models"] == 2
        assert audit["result"]["two_sided"] is not None


def test_reference_records_never_reach_a_site_pool(run) -> None:
    config, path, _, _ = run
    public = load_public(run_files(path))
    refs, pool = split_public(public, share=0.3, seed=config.seed)

    def rows(*parts):
        return sorted(r.tobytes() + bytes([int(y)]) for p in parts for r, y in zip(p.x, p.y))

    # A partition of the public split: every public record lands on exactly one side.
    assert rows(refs, pool) == rows(public)
    assert len(refs) == pytest.approx(0.3 * len(public), abs=1)
    assert np.array_equal(site_pool(config, public).x, pool.x)


def test_resume_reuses_the_cache(run) -> None:
    config, path, _, _ = run
    cache = run_files(path).reference_models
    stamp = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    (path / "audits" / "site-1.json").unlink()
    outcome = run_experiment(config, path, write_report=False)
    assert "reference_models_s" not in outcome.timings
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == stamp
    assert json.loads((path / "audits" / "site-1.json").read_text())["status"] == "ok"


def test_training_them_on_ray_keeps_the_harness_sigterm_handler(run) -> None:
    """ray.init puts in a SIGTERM handler of its own (sys.exit), with which a terminated run
    waits forever on Flower's threads: after the reference models the harness's is back."""
    _, _, outcome, handler_after = run
    assert "reference_models_s" in outcome.timings
    assert handler_after is _on_sigterm


def test_a_replicate_trains_no_reference_model(run, cache_dir, tmp_path) -> None:
    """Another training seed on the same partition: the same public records and settings,
    so the same reference models, loaded from the cache bit for bit."""
    config, path, _, _ = run
    entries = {p.name: p.stat().st_mtime_ns for p in cache_dir.rglob("*.pt")}
    assert len(entries) == 2
    [(seed, replicate)] = replicate_configs(config, 2)[1:]
    assert seed != config.seed
    outcome = run_experiment(replicate, tmp_path / "replicate", write_report=False)
    assert outcome.reference_models == ReferenceModelsDone(trained=0, cached=2)
    assert {p.name: p.stat().st_mtime_ns for p in cache_dir.rglob("*.pt")} == entries
    first, second = run_files(path), run_files(tmp_path / "replicate")
    for k in (0, 1):
        a, b = (torch.load(r.reference_model(k), weights_only=True) for r in (first, second))
        assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    audit = json.loads((tmp_path / "replicate" / "audits" / "site-0.json").read_text())
    assert audit["status"] == "ok" and audit["result"]["sizes"]["reference_models"] == 2


def test_exposed_records_stay_at_the_site(run) -> None:
    _, run_dir, _, _ = run

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
