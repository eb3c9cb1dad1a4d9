"""Files a security officer would check: site-local modes, durable atomic writes, a resume
that survives a damaged latest checkpoint, run names inside output_dir, CSV cells that a
spreadsheet cannot run."""

from __future__ import annotations

import csv
import io
import os
import stat
from pathlib import Path

import pytest
import torch
from builders import run_files

from clients.privacy import PrivacyLedger
from contracts.checkpoint import Checkpoint, latest_round_checkpoint, save_checkpoint
from reporting.writers import csv_cell
from simulations.config import ConfigError, validate_config
from simulations.resume import rounds_done
from simulations.run_dir import prepare_run_dir
from simulations.runner import training_done


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_site_local_files_are_owner_only(tmp_path, umask_022):
    config = validate_config(
        {"name": "modes", "data": {"name": "digits"}, "partition": {"num_sites": 2}}
    )
    run_dir = tmp_path / "run"
    prepare_run_dir(config, run_files(run_dir))
    layout = run_files(run_dir)
    for site in (0, 1):
        assert _mode(layout.site_file(site)) == 0o600  # the site's records
    assert _mode(layout.sites) == 0o700
    ledger = layout.site_dp_ledger(0)
    PrivacyLedger(accountant="rdp", history=[(1.0, 0.1, 10)]).save(ledger)
    assert _mode(ledger) == 0o600 and _mode(layout.site_state) == 0o700
    # What the server shares stays readable as before (umask 022).
    assert _mode(layout.config) == 0o644


def test_atomic_writes_fsync_the_file_and_its_folder(tmp_path, monkeypatch):
    synced: list[bool] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    path = tmp_path / "checkpoints" / "round-0001.pt"
    save_checkpoint(path, Checkpoint(round=1, state_dict={"w": torch.ones(2)}, meta=None))
    assert synced == [False, True]  # the file before the rename, the folder after it
    assert not list(path.parent.glob("*.tmp"))


def test_resume_falls_back_when_the_latest_checkpoint_is_unreadable(tmp_path):
    layout = run_files(tmp_path)
    for r in (1, 2):
        state = {"w": torch.full((2,), float(r))}
        save_checkpoint(
            layout.round_checkpoint(r), Checkpoint(round=r, state_dict=state, meta=None)
        )
    layout.round_checkpoint(2).write_bytes(b"")  # power lost: a zero-length latest
    latest = latest_round_checkpoint(run_files(tmp_path))
    assert latest is not None and latest.round == 1
    assert torch.equal(latest.state_dict["w"], torch.ones(2))
    assert rounds_done(run_files(tmp_path)) == 1
    # A damaged final model counts as training not done (redone from round 1's checkpoint).
    layout.final_model.write_bytes(b"\x80garbage")
    config = validate_config({"name": "r", "fl": {"rounds": 2}})
    assert not training_done(config, run_files(tmp_path)) and rounds_done(run_files(tmp_path)) == 1


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "/abs", "x\\y", ""])
def test_run_names_stay_inside_output_dir(name):
    with pytest.raises(ConfigError, match=r"^name: .*one folder name inside output_dir"):
        validate_config({"name": name})
    assert validate_config({"name": "record_eps=4,seed=0"}).name == "record_eps=4,seed=0"


@pytest.mark.parametrize("text", ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tx"])
def test_csv_cells_that_start_a_formula_are_escaped(text):
    cell = csv_cell(text)
    assert cell == "'" + text
    # Numbers stay numbers, negative ones included; ordinary text is untouched.
    assert csv_cell(-0.5) == "-0.5" and csv_cell(-3) == "-3" and csv_cell("ok") == "ok"
    row = next(csv.reader(io.StringIO(cell)))
    assert not row[0].startswith(("=", "+", "-", "@"))
