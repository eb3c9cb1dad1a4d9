"""Runs that stop or lose sites, on real CLI runs (digits, 3 sites, 1 round, tiny audits):
Ctrl-C in the audit phase, a second run on the same folder, a site's audit or whole process
taken by Ray's memory killer.

The faults come from a plugin the test writes (plugins are imported in every Ray worker,
docs/plugins.md), switched by files in a control folder: ``stall-<site>`` holds that site's
audit until the file goes, ``killed-<site>`` makes it fail with Ray's ``OutOfMemoryError``
(what the memory killer raises), ``killed-at-start`` raises it as each site's process
starts, before it can say which site it is. One run goes through every case: each CLI
start costs seconds of imports and Ray actors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from builders import TINY_AUDIT
from launchers import end_session, interrupt, start_interruptible

pytestmark = [pytest.mark.slow, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300.0
SITES_LOST = 75

PLUGIN = """
import time
from pathlib import Path

import ray
import ray.exceptions

import panoramia_fl.clients.client_app as site_app
CONTROL = Path({control!r})
KILLED = (
    "Task was killed due to the node running low on memory.\\n"
    "Memory on the node was 22.9GB / 23.0GB (a test's stand-in for Ray's memory killer)."
)
if ray.is_initialized() and (CONTROL / "killed-at-start").exists():
    raise ray.exceptions.OutOfMemoryError(KILLED)
_audit = site_app._audit


def audit(msg, context, runtime, started):
    if (CONTROL / f"killed-{{runtime.site_id}}").exists():
        raise ray.exceptions.OutOfMemoryError(KILLED)
    while (CONTROL / f"stall-{{runtime.site_id}}").exists():
        time.sleep(0.1)
    return _audit(msg, context, runtime, started)


site_app._audit = audit
"""


@dataclass(frozen=True)
class Faults:
    config: Path
    control: Path
    env: dict[str, str]


@pytest.fixture
def faults(tmp_path: Path) -> Faults:
    control = tmp_path / "control"
    control.mkdir()
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "site_faults.py").write_text(PLUGIN.format(control=str(control)))
    raw = {
        "name": "stops",
        "seed": 5,
        "plugins": ["site_faults"],
        "data": {"name": "digits"},
        "partition": {"scheme": "iid", "num_sites": 3},
        "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 32},
        "resources": {"num_gpus": 0, "audit_num_gpus": 0},
        "audit": {"enabled": True, "settings": TINY_AUDIT},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    path = os.pathsep.join(p for p in (str(REPO), str(plugins), os.environ.get("PYTHONPATH")) if p)
    return Faults(config, control, {**os.environ, "PYTHONPATH": path})


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "panoramia_fl.simulations.cli", "run", *args]


def _run(argv: list[str], faults: Faults) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=REPO, env=faults.env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def _said(stderr: str) -> list[str]:
    """What the CLI said on stderr (its own lines, not the progress bars)."""
    return [line for line in stderr.splitlines() if line.startswith("panoramia-fl: ")]


def _audits(run_dir: Path) -> dict[int, dict]:
    files = (run_dir / "audits").glob("site-*.json")
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in files}


def test_ctrl_c_in_the_audits_then_sites_lost_to_the_memory_killer(
    faults: Faults, tmp_path: Path
) -> None:
    """SIGINT while site 2's audit runs (sites 0 and 1 done, site 1's taken by the memory
    killer): exit 130 with the --resume line; the finished audits are on disk and site 2's,
    cut short, is not recorded as failed. A second run on the folder meanwhile meets a named
    error. ``--resume`` audits the rest, keeps site 0's audit as it was, and, with site 1
    lost again, says so on stderr and exits 75; the report opens with it. A resume whose
    sites are all killed as they start stops with one named line, exit 75."""
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    (faults.control / "stall-2").touch()
    (faults.control / "killed-1").touch()
    argv = _cli(str(faults.config), "--out", str(run_dir))
    proc = start_interruptible(argv, cwd=REPO, env=faults.env, log=log)
    try:
        deadline = time.time() + TIMEOUT_S
        while "site audits" not in log.read_text() or set(_audits(run_dir)) != {0, 1}:
            assert proc.poll() is None, f"the run ended first:\n{log.read_text()[-4000:]}"
            assert time.time() < deadline, log.read_text()[-4000:]
            time.sleep(0.1)
        second = _run(_cli(str(faults.config), "--out", str(run_dir)), faults)
        assert second.returncode == 2, second.stderr[-3000:]
        assert _said(second.stderr) == [
            f"panoramia-fl: error: {run_dir} is in use by another panoramia-fl run "
            f"(pid {proc.pid} on {os.uname().nodename} since "
            + _said(second.stderr)[0].split(" since ")[1]
        ]
        interrupt(proc)
        rc = proc.wait(timeout=60)
    finally:
        end_session(proc)
    text = log.read_text()
    assert rc == 130, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    assert text.rstrip().endswith(
        f"the site audits in progress were abandoned; continue with: panoramia-fl run "
        f"--resume {run_dir}"
    )
    audits = _audits(run_dir)
    assert sorted(audits) == [0, 1]  # site 2's audit, cut short, is left to --resume
    assert audits[0]["status"] == "ok"
    assert audits[1]["status"] == "failed" and "running low on memory" in audits[1]["error"]
    kept = (run_dir / "audits" / "site-0.json").stat().st_mtime_ns

    (faults.control / "stall-2").unlink()
    resumed = _run(_cli("--resume", str(run_dir)), faults)
    assert resumed.returncode == SITES_LOST, resumed.stderr[-4000:]
    said = _said(resumed.stderr)
    assert said[0].startswith(
        "panoramia-fl: Site audits lost: site 1 failed (OutOfMemoryError: Task was killed due "
        "to the node running low on memory.)"
    )
    assert said[1:] == [
        "panoramia-fl: Ray's memory killer ended site processes: the machine ran short of "
        "memory with this many sites at once.",
        "panoramia-fl: next time, run fewer sites at once: raise resources.num_cpus (training) "
        "or resources.audit_num_cpus (audits), the CPUs each site takes of Ray's, or lower "
        "ray.num_cpus.",
        f"panoramia-fl: audit the lost sites again with: panoramia-fl run --resume {run_dir}",
    ]
    audits = _audits(run_dir)
    assert [audits[s]["status"] for s in (0, 1, 2)] == ["ok", "failed", "ok"]
    assert (run_dir / "audits" / "site-0.json").stat().st_mtime_ns == kept
    first = (run_dir / "report.md").read_text().split("\n## Headline")[0]
    assert "> **Sites were lost in this run.**" in first and "site 1 failed" in first

    # Ray's memory killer takes every site's process before it says which site it is: one
    # line naming the cause, what to change and how to continue; what finished is kept.
    (faults.control / "killed-at-start").touch()
    done = _run(_cli("--resume", str(run_dir)), faults)
    assert done.returncode == SITES_LOST, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    (line,) = _said(done.stderr)
    assert line.startswith(
        "panoramia-fl: error: Ray's memory killer ended a process of the run, as the machine "
        "ran short of memory ("
    )
    assert "Task was killed due to the node running low on memory.); run fewer sites" in line
    assert "raise resources.num_cpus (training) or resources.audit_num_cpus (audits)" in line
    assert line.endswith(
        f"Finished rounds and audits are kept in {run_dir}; continue with: panoramia-fl run "
        f"--resume {run_dir}"
    )
    assert _audits(run_dir) == audits
