"""What the CLI tests share: a small config, a checkpointed run directory, stderr's lines."""

from __future__ import annotations

from pathlib import Path

import torch
from builders import run_files

from panoramia_fl.contracts.checkpoint import Checkpoint, save_checkpoint
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir

RAW = {
    "name": "cli",
    "seed": 3,
    "data": {"name": "digits"},
    "partition": {"scheme": "iid", "num_sites": 2},
    "fl": {"rounds": 3, "local_epochs": 1, "batch_size": 32},
    "resources": {"num_cpus": 2},
    "audit": {"enabled": False},
}


def raw_config(**sections) -> dict:
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in RAW.items()}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def site_files(run_dir: Path) -> dict[str, bytes]:
    """config.yaml, partition.json, dataset.json and every site file, byte for byte."""
    paths = [run_dir / n for n in ("config.yaml", "partition.json", "dataset.json")]
    paths += sorted((run_dir / "sites").glob("*.npz"))
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in paths}


def site_mtimes(run_dir: Path) -> dict[str, int]:
    return {str(p.relative_to(run_dir)): p.stat().st_mtime_ns for p in run_dir.rglob("*.npz")}


def checkpointed_run(tmp_path: Path) -> Path:
    """A prepared run directory with rounds 1 and 2 of 3 checkpointed (as after a kill)."""
    run_dir = tmp_path / "run"
    prepare_run_dir(validate_config(raw_config()), run_files(run_dir))
    for r in (1, 2):
        save_checkpoint(
            run_files(run_dir).round_checkpoint(r),
            Checkpoint(round=r, state_dict={"w": torch.zeros(1)}, meta=None),
        )
    return run_dir


def error_line(capsys) -> str:
    """The one line of a user error (after the run directory's, which ``run`` prints)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("run directory: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def stderr_lines(capsys) -> list[str]:
    """stderr's lines but the run directory's and the replicate set's."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if not line.startswith(("run directory: ", "replic"))]
