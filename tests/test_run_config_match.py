"""Runs never mix configs: a sweep point, deployment preparation and a resume compare the
config with the run directory's, field by field, and refuse what may not change; a changed
``audit.*`` sets the old audits aside so every site audits again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from builders import make_result, run_files

from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.checkpoint import Checkpoint, save_checkpoint
from panoramia_fl.contracts.site_audit import SiteAuditFile
from panoramia_fl.deployment.flwr_run_files import prepare_deployment
from panoramia_fl.server.run_writer import sites_needing_audit, write_site_audit
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.resume import RunConfigMismatchError
from panoramia_fl.simulations.run_dir import DatasetMeta, prepare_run_dir

RAW = {
    "name": "point",
    "data": {"name": "digits"},
    "partition": {"scheme": "iid", "num_sites": 2},
    "fl": {"rounds": 2, "local_epochs": 1},
    "audit": {"enabled": True},
}


def _config(**changes):
    raw = {**RAW, **changes}
    return validate_config(raw)


def _ok_file(site: int) -> SiteAuditFile[SiteResults]:
    """A site's ok audit of round 2's model."""
    results = SiteResults(panoramia=make_result([0.5], [1.0]))
    return SiteAuditFile(site_id=site, status="ok", results=results, model_round=2)


def _trained(run_dir: Path) -> None:
    """A run directory as a finished no-DP run leaves it: a final model and an audit."""
    state = {"w": torch.zeros(1)}
    save_checkpoint(
        run_files(run_dir).final_model, Checkpoint(round=2, state_dict=state, meta=None)
    )
    write_site_audit(run_files(run_dir), _ok_file(0))


def test_a_sweep_point_refuses_a_run_dir_of_another_config(tmp_path, capsys):
    sweep_dir = tmp_path / "runs" / "s"
    old = sweep_dir / "record"
    prepare_run_dir(_config(name="record"), run_files(old))  # the no-DP run that is already there
    _trained(old)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(RAW))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": "base.yaml",
                "output_dir": str(tmp_path / "runs"),
                "points": {"record": {"dp.level": "record", "dp.noise_multiplier": 1.0}},
            }
        )
    )
    assert cli_main(["sweep", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "already holds a run whose config differs" in err
    assert "dp.level ('none' -> 'record'" in err
    # Nothing was touched: the old config and model stay as they were.
    assert yaml.safe_load(run_files(old).config.read_text())["dp"]["level"] == "none"


def test_deployment_preparation_refuses_another_config(tmp_path):
    run_dir = tmp_path / "run"
    prepare_run_dir(_config(), run_files(run_dir))
    _trained(run_dir)
    with pytest.raises(RunConfigMismatchError, match=r"seed \(0 -> 5"):
        prepare_deployment(_config(seed=5), run_dir)
    meta = DatasetMeta.read(run_files(run_dir))
    with pytest.raises(RunConfigMismatchError, match=r"model\.name"):
        prepare_deployment(_config(model={"name": "mlp"}), run_dir, meta=meta)
    # The same config (or one a resume may use) is accepted.
    prepare_deployment(_config(resources={"num_cpus": 1}), run_dir, meta=meta)


def test_a_changed_audit_setting_re_audits(tmp_path):
    run_dir = tmp_path / "run"
    prepare_run_dir(_config(), run_files(run_dir))
    _trained(run_dir)
    write_site_audit(run_files(run_dir), _ok_file(1))
    assert sites_needing_audit(run_files(run_dir), [0, 1], 2) == []
    prepare_run_dir(_config(), run_files(run_dir))  # same config: the audits stay
    assert sites_needing_audit(run_files(run_dir), [0, 1], 2) == []

    prepare_run_dir(_config(audit={"enabled": True, "use_holdout": False}), run_files(run_dir))
    assert sites_needing_audit(run_files(run_dir), [0, 1], 2) == [0, 1]  # both audit again
    kept = tmp_path / "run" / "audits-superseded-1"
    assert sorted(p.name for p in kept.iterdir()) == ["site-0.json", "site-1.json"]
