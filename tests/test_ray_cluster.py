"""Training and audits on an existing Ray cluster (``ray start --head`` on loopback)."""

from __future__ import annotations

import json
import time

import pytest

from simulations.config import validate_config
from simulations.local_ray import LocalRayHead
from simulations.processes import descendants, is_alive
from simulations.runner import ray_init_args, run_experiment

TINY_AUDIT = {
    "quick": True,
    "helper_epochs": 1,
    "generator": {"kind": "cgan", "epochs": 1},
    "classifier": {"epochs": [1], "gbm_iterations": [20], "gbm_learning_rates": [0.1]},
    # The run's two reference models still calibrate the scores; one epoch each is enough
    # for what is checked here (the default is 10).
    "calibration": {"epochs": 1},
}


@pytest.mark.slow
def test_experiment_runs_on_an_existing_ray_cluster(tmp_path):
    run_dir = tmp_path / "on-cluster"
    seen: list[tuple[int, int]] = []
    # One CPU, as the session's head (conftest.py): the run starts one site actor, not two,
    # and its two sites take turns in it; what is checked here does not need more.
    with LocalRayHead(num_cpus=1) as head:
        config = validate_config(
            {
                "name": "on-cluster",
                "seed": 0,
                "data": {"name": "digits"},
                "partition": {"scheme": "iid", "num_sites": 2},
                "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 32},
                "resources": {"num_gpus": 0, "audit_num_gpus": 0},
                "ray": {"address": head.address},
                "audit": {"enabled": True, "settings": TINY_AUDIT},
            }
        )
        outcome = run_experiment(config, run_dir)
        # The run's driver and its site workers were this cluster's, not a private Ray.
        logs = head.temp_dir / "session_latest" / "logs"
        drivers = list(logs.glob("python-core-driver-*"))
        workers = list(logs.glob("python-core-worker-*"))
        seen = [(s.proc.pid, s.start) for s in head.processes.started]
        seen += [d for s in head.processes.started for d in descendants(s.proc.pid)]
        temp_dir = head.temp_dir
    assert drivers and workers, sorted(p.name for p in logs.parent.glob("*"))
    # Every process of the head (GCS, raylet, workers) is stopped, its session dir removed.
    time.sleep(0.5)
    assert len(seen) >= 3
    assert not [pid for pid, start in seen if is_alive(pid, start)]
    assert not temp_dir.exists()

    parts = {k: v for k, v in outcome.timings.items() if k != "total_s"}
    # digits has a public split: the shared reference models train on the cluster too.
    assert set(parts) == {"data_s", "reference_models_s", "train+audit_s", "report_s"}
    assert min(parts.values()) > 0 and sum(parts.values()) <= outcome.timings["total_s"]
    rounds = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1] and set(rounds[0]["sites"]) == {"0", "1"}
    partition = json.loads((run_dir / "partition.json").read_text())["sites"]
    for site in (0, 1):
        audit = json.loads((run_dir / "audits" / f"site-{site}.json").read_text())
        assert audit["status"] == "ok", audit.get("error")
        # The audit of this site's members, of the final model, with its numbers consistent.
        assert audit["model_round"] == 1 and audit["n_members"] == partition[site]["train"]
        result = audit["result"]
        assert result["sizes"]["members"] == audit["n_members"]
        games = [rep["one_sided"] for rep in result["repeats"]]
        c_lb = [game["c_lb"] for game in games]
        assert result["one_sided"]["c_lb"]["mean"] == pytest.approx(sum(c_lb) / len(c_lb))
        for game in games:
            assert game["eps_tilde"] == pytest.approx(max(0.0, game["c_eps_lb"] - game["c_lb"]))
    assert (run_dir / "report.json").exists()


def test_ray_address_defaults_to_the_environment(monkeypatch, tmp_path):
    """``$RAY_ADDRESS`` (Ray's own variable) names the cluster to join when the config does
    not; the config's ``ray.address`` wins; without either a run starts a private Ray."""
    config = validate_config({"name": "x", "ray": {"num_cpus": 3}})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = ray_init_args(config, temp_dir=tmp_path, verbose=False)
    assert local["num_cpus"] == 3 and local["_temp_dir"] == str(tmp_path)
    assert "address" not in local
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    joined = ray_init_args(config, temp_dir=tmp_path, verbose=False)
    # Ray refuses num_cpus beside an address: the cluster's resources decide.
    assert joined["address"] == "10.0.0.1:6379" and "num_cpus" not in joined
    named = validate_config({"name": "x", "ray": {"address": "127.0.0.1:7000"}})
    assert ray_init_args(named, temp_dir=tmp_path, verbose=False)["address"] == "127.0.0.1:7000"
