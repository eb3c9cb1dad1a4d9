"""Files a security officer would check: site-local modes, durable atomic writes, a resume
that survives a damaged latest checkpoint, run names inside output_dir, CSV cells that a
spreadsheet cannot run."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from builders import make_result, ok_audit, run_files, write_run

from panoramia_fl.clients.privacy import AccountantHistory
from panoramia_fl.contracts.checkpoint import Checkpoint, latest_round_checkpoint, save_checkpoint
from panoramia_fl.reporting.assembly.writers import csv_cell
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.resume import rounds_done
from panoramia_fl.simulations.run_dir import prepare_run_dir
from panoramia_fl.simulations.runner import training_done


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
    assert _mode(layout.public) == 0o600  # in sites/, as docs/run_outputs.md says
    assert _mode(layout.sites) == 0o700
    ledger = layout.site_accountant_history(0)
    AccountantHistory(accountant="rdp", history=[(1.0, 0.1, 10)]).save(ledger)
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


REPO = Path(__file__).resolve().parents[1]

# Each command in the read-only mount, its exit status and stderr collected.
COMMANDS = """
import contextlib, io, json, sys
from panoramia_fl.simulations.cli import main
codes = {}
for name, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        codes[name] = [main(argv), err.getvalue()]
print(json.dumps(codes))
"""


def _read_only(folder: Path) -> list[str]:
    """argv prefix running a command where ``folder`` is a read-only mount (its own mount
    namespace: nothing outside it sees the mount); the test is skipped where the kernel or
    the container allows none."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a read-only folder")
    remount = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}"'
    prefix = ["unshare", "-rm", "sh", "-c", f'{remount} && exec "$@"', "sh"]
    probe = subprocess.run([*prefix, "sh", "-c", f'! touch "{folder}/probe"'], check=False)
    if probe.returncode != 0:
        pytest.skip("no user and mount namespace for a read-only folder here")
    return prefix


def test_read_only_outputs_are_named_before_any_work(tmp_path):
    """``run --out``, ``report``, ``report --site`` and ``audit --out`` on a read-only file
    system: one line naming the folder and exit 2, before the run prepares anything or the
    audit starts (its checkpoint is not even read)."""
    read_only = tmp_path / "read-only"
    run = write_run(
        read_only / "run", n_sites=1, audits={0: ok_audit(0, make_result([1.0], [1.5]))}
    )
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "ro", "data": {"name": "digits"}}))
    commands = {
        "run": ["run", str(config), "--out", str(read_only / "new")],
        "report": ["report", str(run)],
        "site": ["report", str(run), "--site", "0"],
        "audit": [
            "audit",
            str(tmp_path / "no-such-model.pt"),
            "--config",
            str(config),
            "--site",
            "0",
            "--out",
            str(read_only / "result.json"),
        ],
    }
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [*_read_only(read_only), sys.executable, "-c", COMMANDS, json.dumps(commands)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    codes = json.loads(done.stdout.splitlines()[-1])
    where = {
        "run": f"{read_only / 'new'} (its parent {read_only})",
        "report": str(run),
        "site": f"{run / 'site-reports'} (its parent {run})",
        "audit": str(read_only),
    }
    for name, (code, err) in codes.items():
        lines = [line for line in err.splitlines() if not line.startswith("run directory: ")]
        assert code == 2 and lines == [
            f"panoramia-fl: error: cannot write in {where[name]}: Read-only file system"
        ], (name, err)
    assert not (read_only / "new").exists()
