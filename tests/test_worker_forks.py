"""Ray's workers forked from one server that imported their modules once: what a fork is
given, which requests are refused (the requester then starts the program itself), how a
fork ends, and a run's results with forks and without."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from panoramia_fl.simulations import fork_request
from panoramia_fl.simulations.experiment_config import RAY_ADDRESS_ENV, validate_config
from panoramia_fl.simulations.fork_server import SOCKET_ENV, WORKER_ENV
from panoramia_fl.simulations.processes import is_alive
from panoramia_fl.simulations.runner import run_experiment
from panoramia_fl.simulations.worker_forks import ForkServer, can_fork_workers, start_fork_server

pytestmark = pytest.mark.skipif(not can_fork_workers(), reason="forks need os.pidfd_open")

# Stands in for Ray's worker program: says what it was given, then sleeps or exits.
PROGRAM = """
import json, os, signal, sys, time
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[1:],
                  "cwd": os.getcwd(), "numpy": "numpy" in sys.modules,
                  "mark": os.environ.get("RAY_MARK"),
                  "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}), flush=True)
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def server() -> Iterator[tuple[ForkServer, dict[str, str]]]:
    """A server that imported numpy, and the environment it started in."""
    environment = {k: v for k, v in os.environ.items() if k != RAY_ADDRESS_ENV}
    forks = start_fork_server(environment, before_ray=["numpy"], with_ray=[])
    assert forks is not None
    yield forks, environment
    forks.close()


def _request(
    forks: ForkServer, environment: dict[str, str], program: Path, *args: str, **extra: str
) -> subprocess.Popen[str]:
    """What the raylet does for a worker: start the request command with its environment."""
    env = {**environment, SOCKET_ENV: str(forks.socket_path), WORKER_ENV: str(program), **extra}
    return subprocess.Popen(
        [sys.executable, fork_request.__file__, *args],
        env=env,
        cwd=program.parent,
        stdout=subprocess.PIPE,
        text=True,
    )


def _said(request: subprocess.Popen[str]) -> dict:
    assert request.stdout is not None
    return json.loads(request.stdout.readline())


def test_a_fork_is_the_program_with_the_requests_arguments_folder_and_environment(server, tmp_path):
    forks, environment = server
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    first = _request(forks, environment, program, "3", RAY_MARK="1")
    said = _said(first)
    assert first.wait(timeout=60) == 3  # the fork's exit status, through its requester
    assert said["ppid"] == forks.process.pid and said["pid"] != first.pid
    assert said["argv"] == ["3"] and said["cwd"] == str(tmp_path)
    assert said["numpy"] and said["mark"] == "1"
    assert said["sigterm"]  # as a new Python has it, not the server's handler
    # The next request of the same environment is forked too.
    again = _request(forks, environment, program, "0", RAY_MARK="1")
    assert _said(again)["ppid"] == forks.process.pid and again.wait(timeout=60) == 0


def test_a_request_in_another_environment_is_refused_and_runs_the_program_itself(server, tmp_path):
    """Ray reads some settings from the environment once, as it loads: a fork serves only
    the environment of the first one, and that one may differ from the server's own in
    Ray's variables only."""
    forks, environment = server
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    other = _request(forks, environment, program, "4", UNRELATED="x")
    said = _said(other)
    assert other.wait(timeout=60) == 4
    assert said["pid"] == other.pid and not said["numpy"]  # its own process, a new Python
    first = _request(forks, environment, program, "0", RAY_MARK="1")
    assert _said(first)["ppid"] == forks.process.pid and first.wait(timeout=60) == 0
    second = _request(forks, environment, program, "0", RAY_MARK="2")
    assert _said(second)["pid"] == second.pid and second.wait(timeout=60) == 0


def test_a_fork_ends_with_its_requester_and_the_server_with_its_process(server, tmp_path):
    forks, environment = server
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    request = _request(forks, environment, program, "sleep", RAY_MARK="1")
    pid = _said(request)["pid"]
    start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    request.send_signal(signal.SIGKILL)  # as the raylet kills a worker it started
    request.wait(timeout=10)
    deadline = time.time() + 10
    while is_alive(pid, start):
        assert time.time() < deadline, "the fork outlived its requester"
        time.sleep(0.1)
    forks.close()
    assert forks.process.returncode == 0 and not forks.folder.exists()


def test_a_server_stopped_from_outside_removes_its_sockets_folder(server):
    """A run killed with SIGKILL leaves its server to whoever stops it next (a process
    group's SIGTERM, a user's ``kill``): the server still removes its socket's folder."""
    forks, _ = server
    deadline = time.time() + 60
    while not _catches(forks.process.pid, signal.SIGTERM):  # its handler is set as it starts
        assert time.time() < deadline, "the server never set its SIGTERM handler"
        time.sleep(0.01)
    forks.process.send_signal(signal.SIGTERM)
    assert forks.process.wait(timeout=60) == 128 + signal.SIGTERM
    assert not forks.folder.exists()


# A module whose import turns any exception into its own ImportError, as a C extension's
# does (numpy's, when its import of ``datetime`` fails): the stop lands in the middle of it.
STOPPED_AS_IT_LOADS = """
import os, signal
try:
    os.kill(os.getpid(), signal.SIGTERM)
    sum(range(1000))  # the handler runs by here
except BaseException as err:
    raise ImportError("this module could not load") from err
"""


def test_a_server_stopped_as_an_extension_loads_still_ends_as_stopped(tmp_path):
    """A stop in the middle of an import that replaces exceptions with its own: the server
    ends as a stopped process (not with 1, an import's failure), its folder removed."""
    (tmp_path / "stopped_as_it_loads.py").write_text(STOPPED_AS_IT_LOADS)
    environment = {k: v for k, v in os.environ.items() if k != RAY_ADDRESS_ENV}
    environment["PYTHONPATH"] = os.pathsep.join([str(tmp_path), environment.get("PYTHONPATH", "")])
    forks = start_fork_server(environment, before_ray=["stopped_as_it_loads"], with_ray=[])
    assert forks is not None
    try:
        assert forks.process.wait(timeout=60) == 128 + signal.SIGTERM
        assert not forks.folder.exists()
    finally:
        forks.close()


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (Linux's SigCgt)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(
        next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16
    )
    return bool(caught >> (signum - 1) & 1)


TINY: dict[str, Any] = {
    "name": "forks",
    "data": {"name": "digits"},
    "partition": {"num_sites": 2},
    "fl": {"rounds": 1, "local_epochs": 1},
    "audit": {"enabled": False},
    "ray": {"num_cpus": 2},
}


@pytest.mark.slow
def test_a_run_trains_the_same_model_with_forked_workers_as_without(tmp_path, monkeypatch):
    """Each run starts a Ray of its own (no cluster to join): with its workers forked from
    a server, and each worker importing its own modules."""
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    models = {}
    for fork_workers in (True, False):
        config = validate_config({**TINY, "ray": {**TINY["ray"], "fork_workers": fork_workers}})
        run_dir = tmp_path / str(fork_workers)
        run_experiment(config, run_dir)
        models[fork_workers] = (run_dir / "global_model.pt").read_bytes()
    assert models[True] == models[False]
