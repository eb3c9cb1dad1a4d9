"""Replicate seeds: runs over seeds on one partition, their report, the sweep's pooling, and
one machine's determinism."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from builders import run_files

from panoramia_fl.contracts.run_files import REPLICATES_FILE, replicate_run_dir
from panoramia_fl.reporting import SweepPoint, build_sweep_report, write_sweep_report
from panoramia_fl.reporting.layout.between_runs import HEADLINE, over_runs, pooled
from panoramia_fl.simulations import shared_ray
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.config_file import report_config
from panoramia_fl.simulations.experiment_config import (
    RAY_ADDRESS_ENV,
    ConfigError,
    load_config,
    validate_config,
)
from panoramia_fl.simulations.local_ray import LocalRayHead
from panoramia_fl.simulations.replicate_runs import replicate_configs
from panoramia_fl.simulations.runner import run_experiment
from panoramia_fl.simulations.sweep import expand, load_sweep

TINY = {
    "name": "tiny",
    "seed": 0,
    "data": {"name": "digits"},
    "partition": {"scheme": "iid", "num_sites": 2, "records_per_site": 300},
    "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 32},
    # The set's own Ray head offers one CPU, as the session's does: each run starts one site
    # actor instead of one per CPU (seconds of CPU each to start).
    "ray": {"num_cpus": 1},
    "audit": {
        "settings": {
            "quick": True,
            "helper_epochs": 1,
            "splits": {"generator": 60, "train": 40, "val": 20},
            "generator": {"kind": "cgan", "epochs": 1},
            "classifier": {"epochs": [1], "gbm_iterations": [20]},
            "calibration": {"reference_models": 0},
        }
    },
}


@pytest.fixture(scope="module")
def replicate_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The set, run on a Ray of its own (not the session's head): the addresses of the Ray
    heads it started."""
    root = tmp_path_factory.mktemp("replicates")
    (root / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    args = ["run", str(root / "tiny.yaml"), "--seeds", "2", "--out", str(root / "set")]
    started: list[str] = []

    class CountedHead(LocalRayHead):
        def start(self) -> LocalRayHead:
            head = super().start()
            started.append(head.address)
            return head

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(RAY_ADDRESS_ENV, raising=False)
        patch.setattr(shared_ray, "LocalRayHead", CountedHead)
        assert cli_main(args) == 0
    return root / "set", started


@pytest.fixture(scope="module")
def replicate_set(replicate_run: tuple[Path, list[str]]) -> Path:
    return replicate_run[0]


@pytest.mark.slow
@pytest.mark.ray
def test_the_set_starts_ray_once(replicate_run: tuple[Path, list[str]]) -> None:
    set_dir, started = replicate_run
    assert len(started) == 1
    assert all((replicate_run_dir(set_dir, s) / "report.json").exists() for s in (0, 1))


def _report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.ray
def test_replicates_share_the_data_and_vary_the_training(replicate_set: Path) -> None:
    first, second = (replicate_run_dir(replicate_set, s) for s in (0, 1))
    assert (first / "partition.json").read_text() == (second / "partition.json").read_text()
    for site in (0, 1):
        a, b = (np.load(run_files(d).site_file(site)) for d in (first, second))
        assert all(np.array_equal(a[k], b[k]) for k in a.files)
    accuracies = {_report(d)["consortium"]["final_global_accuracy"] for d in (first, second)}
    assert len(accuracies) == 2, "another seed should train another model"


@pytest.mark.slow
@pytest.mark.ray
def test_replicate_report_pools_each_runs_numbers(replicate_set: Path) -> None:
    pooled = json.loads((replicate_set / REPLICATES_FILE).read_text())
    assert [r["seed"] for r in pooled["runs"]] == [0, 1]
    assert all(r["status"] == "complete" and r["cpu"] for r in pooled["runs"])
    reports = [_report(replicate_run_dir(replicate_set, s)) for s in (0, 1)]
    for site in pooled["sites"]:
        accuracy = site["numbers"]["global_accuracy"]
        runs = [r["consortium"]["final_global_accuracy"] for r in reports]
        assert accuracy["values"] == pytest.approx(runs)
        assert accuracy["mean"] == pytest.approx(np.mean(runs))
        assert accuracy["lowest"] <= accuracy["mean"] <= accuracy["highest"]
        assert accuracy["low"] <= accuracy["lowest"] and accuracy["highest"] <= accuracy["high"]
        two_sided = [
            next(s for s in r["sites"] if s["site_id"] == site["site_id"])["audit"]["two_sided"]
            for r in reports
        ]
        assert site["numbers"][HEADLINE]["values"] == pytest.approx(
            [t["eps_tilde"]["mean"] for t in two_sided]
        )
    # Each run's pages now say which interval is which.
    page = (replicate_run_dir(replicate_set, 1) / "site-reports" / "site-0.html").read_text()
    assert "another training run of this config would read between" in page
    assert "over audit repeats of this one trained model" in page
    assert (
        "another training run of this config" in (replicate_set / "seed-0/report.html").read_text()
    )
    assert (replicate_set / "replicates.html").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_running_the_set_again_retrains_nothing(replicate_set: Path) -> None:
    model = run_files(replicate_run_dir(replicate_set, 1)).final_model
    before = model.stat().st_mtime_ns
    config = replicate_set.parent / "tiny.yaml"
    assert cli_main(["run", str(config), "--seeds", "2", "--out", str(replicate_set)]) == 0
    assert model.stat().st_mtime_ns == before


def _numbers(data: Any) -> Any:
    """report.json without what may differ between two identical runs: durations (keys
    ending ``_s``) and the replicate set the run sits in."""
    if isinstance(data, dict):
        return {
            k: _numbers(v) for k, v in data.items() if k != "replicates" and not k.endswith("_s")
        }
    if isinstance(data, list):
        return [_numbers(v) for v in data]
    return data


@pytest.mark.slow
@pytest.mark.ray
def test_a_run_is_reproduced_number_for_number_on_one_machine(
    replicate_set: Path, tmp_path: Path
) -> None:
    first = replicate_run_dir(replicate_set, 0)
    again = tmp_path / "again"
    run_experiment(load_config(run_files(first).config), again)
    assert _numbers(_report(again)) == _numbers(_report(first))
    manifest = json.loads((again / "site-reports" / "site-0.json").read_text())["manifest"]
    platform = manifest["platform"]
    assert platform["cpu_model"] and platform["torch"] and platform["cpu_capability"]
    assert platform["cuda_device"] is None  # these tests train on the CPU


@pytest.mark.slow
@pytest.mark.ray
def test_sweep_draws_between_run_error_bars_and_compares_points(
    replicate_set: Path, tmp_path: Path
) -> None:
    # The same set as two points: no difference can be beyond run-to-run spread.
    first = replicate_run_dir(replicate_set, 0)
    points = [SweepPoint(x, {}, run_files(first)) for x in ("a", "b")]
    files = write_sweep_report(tmp_path, points, report_config)
    report = build_sweep_report(tmp_path, points, report_config)
    assert [(c.site_id, c.first, c.second) for c in report.comparisons] == [
        (0, "a", "b"),
        (1, "a", "b"),
    ]
    assert all(c.p_value == 1.0 and c.alpha == pytest.approx(0.025) for c in report.comparisons)
    html = files.html_path.read_text()
    assert "Over training seeds" in html and "no difference beyond run-to-run spread" in html
    assert "between-run 95% interval" in html


def test_between_run_interval_covers_another_run() -> None:
    """The between-run interval holds about 95% of further runs (normal spread, 5 runs)."""
    rng = np.random.default_rng(0)
    trials = 4000
    draws = rng.normal(1.0, 0.3, size=(trials, 6))
    covered = 0
    for row in draws:
        iv = over_runs(list(row[:5]), (-math.inf, math.inf))
        assert iv.low is not None and iv.high is not None
        covered += iv.low <= row[5] <= iv.high
    assert covered / trials == pytest.approx(0.95, abs=0.015)
    one = over_runs([0.4, None], pooled()[0].bounds)
    assert one.n == 1 and one.mean == 0.4 and one.low is None


def test_replicate_seeds_keep_the_partition(tmp_path: Path) -> None:
    config = validate_config({**TINY, "seed": 7})
    planned = replicate_configs(config, 3)
    assert [seed for seed, _ in planned] == [7, 8, 9]
    assert {c.partition.seed_for(c.seed) for _, c in planned} == {7}
    assert [c.seed for _, c in planned] == [7, 8, 9]


def test_sweep_set_replicates(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(TINY))
    sweep = {"name": "s", "base": "base.yaml", "grid": {"fl.rounds": [1, 2]}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    loaded = load_sweep(tmp_path / "sweep.yaml", ["replicates=3"])
    assert loaded.replicates == 3 and len(expand(loaded)) == 2
    with pytest.raises(ConfigError, match="replicates"):
        load_sweep(tmp_path / "sweep.yaml", ["replicates=0"])


def test_seeds_needs_a_config_and_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    assert cli_main(["run", str(tmp_path / "tiny.yaml"), "--seeds", "0"]) == 2
    assert "--seeds: at least 1 run" in capsys.readouterr().err
    assert cli_main(["run", "--resume", str(tmp_path), "--seeds", "2"]) == 2
    assert "--seeds: give a CONFIG" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
