"""The calibrated MIA's shared reference models in a federated run: trained once on Ray on
public records no site pool holds, cached, used by every site, not retrained on resume."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
from builders import run_files

from simulations.config import validate_config
from simulations.reference_models import site_pool, split_public
from simulations.run_dir import load_public
from simulations.runner import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.ray]

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
            "audit": {"reference_pool": True, "reference_records": 0.3, "settings": AUDIT},
        }
    )


def _on_sigterm(signum: int, frame: object) -> None:
    """The harness's own SIGTERM handler stands in here (the CLI's stops the run)."""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("refs") / "run"
    config = _config()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        outcome = run_experiment(config, path, write_report=False)
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
