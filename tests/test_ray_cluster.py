"""Training and audits on an existing Ray cluster (``ray start --head`` on loopback)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest

from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.local_ray import LocalRayHead
from panoramia_fl.simulations.processes import descendants, is_alive
from panoramia_fl.simulations.runner import ray_init_args, ray_temp_dir, run_experiment

TINY_AUDIT = {
    "quick": True,
    "helper_epochs": 1,
    "generator": {"kind": "cgan", "epochs": 1},
    "classifier": {"epochs": [1], "gbm_iterations": [20], "gbm_learning_rates": [0.1]},
    # The run's two reference models still calibrate the scores; one epoch each is enough
    # for what is checked here (the default is 10).
    "calibration": {"epochs": 1},
}


def _runs_log_monitor(head: LocalRayHead) -> bool:
    """Whether Ray's log monitor is among the head's processes, once ``ray start`` has
    started them all (it says so in its log)."""
    deadline = time.time() + 120
    while "Ray runtime started" not in head.log_path.read_text(errors="replace"):
        assert time.time() < deadline, head.log_path.read_text(errors="replace")
        time.sleep(0.2)
    pids = [pid for s in head.processes.started for pid, _ in descendants(s.proc.pid)]
    cmdlines = []
    for pid in pids:
        try:
            cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:
            continue  # gone meanwhile
    assert cmdlines, "the head has no processes"
    return any(b"log_monitor.py" in cmdline for cmdline in cmdlines)


@pytest.mark.ray
def test_the_session_head_runs_no_log_monitor(shared_ray_head: LocalRayHead | None) -> None:
    """The test session's head is started with ``log_monitor=False`` (conftest.py); a head's
    default, which ``--verbose`` runs read their workers' output through, keeps it (below)."""
    if shared_ray_head is None:
        pytest.skip("the session joins a cluster named by RAY_ADDRESS")
    assert not _runs_log_monitor(shared_ray_head)


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
        assert _runs_log_monitor(head)
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


def test_a_run_that_joins_a_cluster_makes_no_session_folder(monkeypatch, tmp_path):
    """A local Ray's session files go to a short private folder, removed after the run (or
    to ``ray.temp_dir``); a run that joins a cluster makes none, so that a joined run killed
    with SIGKILL leaves nothing behind in the temporary folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = validate_config({"name": "x"})
    with ray_temp_dir(local) as folder:
        assert folder is not None and folder.parent == tmp_path and folder.is_dir()
        assert ray_init_args(local, temp_dir=folder, verbose=False)["_temp_dir"] == str(folder)
    assert list(tmp_path.iterdir()) == []
    kept = validate_config({"name": "x", "ray": {"temp_dir": str(tmp_path / "ray")}})
    with ray_temp_dir(kept) as folder:
        assert folder == tmp_path / "ray"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    with ray_temp_dir(local) as folder:
        assert folder is None
        assert "_temp_dir" not in ray_init_args(local, temp_dir=folder, verbose=False)
    assert list(tmp_path.iterdir()) == []
