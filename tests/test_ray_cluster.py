"""Training and audits on an existing Ray cluster (``ray start --head`` on loopback)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.local_ray import LocalRayHead
from panoramia_fl.simulations.processes import descendants, is_alive
from panoramia_fl.simulations.ray_start import WORKERS_AHEAD, ray_init_args, ray_temp_dir
from panoramia_fl.simulations.runner import run_experiment

TINY_AUDIT = {
    "quick": True,
    "helper_epochs": 1,
    "generator": {"kind": "cgan", "epochs": 1},
    "classifier": {"epochs": [1], "gbm_iterations": [20], "gbm_learning_rates": [0.1]},
    # The run's two reference models still calibrate the scores; one epoch each is enough
    # for what is checked here (the default is 10).
    "calibration": {"epochs": 1},
}


AUTOSCALER_MONITOR = b"autoscaler/_private/monitor.py"


def _runs(head: LocalRayHead, script: bytes) -> bool:
    """Whether a process running ``script`` is among the head's processes, once ``ray
    start`` has started them all (it says so in its log)."""
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
    return any(script in cmdline for cmdline in cmdlines)


@pytest.mark.ray
def test_the_session_head_runs_no_log_monitor_nor_autoscaler(
    shared_ray_head: LocalRayHead | None,
) -> None:
    """The test session's head is started with ``log_monitor=False`` (conftest.py); a head's
    default, which ``--verbose`` runs read their workers' output through, keeps it (below).
    No head runs the autoscaler monitor: one machine has nothing to scale."""
    if shared_ray_head is None:
        pytest.skip("the session joins a cluster named by RAY_ADDRESS")
    assert not _runs(shared_ray_head, b"log_monitor.py")
    assert not _runs(shared_ray_head, AUTOSCALER_MONITOR)


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
        assert _runs(head, b"log_monitor.py")
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
    # Its workers start with its raylet, and import the site code as they start.
    assert local["_system_config"] == WORKERS_AHEAD
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    joined = ray_init_args(config, temp_dir=tmp_path, verbose=False)
    # Ray refuses num_cpus beside an address: the cluster's resources decide.
    assert joined["address"] == "10.0.0.1:6379" and "num_cpus" not in joined
    assert "_system_config" not in joined  # a cluster's settings are its own
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


def _in_a_process_of_its_own(script: str, *args: str) -> dict:
    """The JSON that ``script`` prints last, run by a new Python outside any cluster (no
    ``RAY_ADDRESS``) with a new folder for its Rays' session files, removed afterwards, as
    its first argument and ``args`` after it."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # Ray's socket paths must stay short: not under pytest's tmp_path.
    folder = tempfile.mkdtemp(prefix="pfl-own-", dir="/tmp")
    try:
        out = subprocess.run(
            [sys.executable, "-c", script, folder, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


_START_THEN_STOP = """
import json, os, sys
from pathlib import Path
import ray
from panoramia_fl.simulations.processes import descendants
from panoramia_fl.simulations.ray_start import start_ray

def started(init_args, site_cpus=1):
    # The processes below this one that starting (or joining) Ray added, with their command
    # lines; the last Ray's may still be on their way out.
    before = descendants(os.getpid())
    start_ray(init_args, num_cpus=site_cpus, num_gpus=0, key="resources.num_cpus")
    new = [p for p in descendants(os.getpid()) if p not in before]
    lines = [Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace") for pid, _ in new]
    raylet = [pid for (pid, _), line in zip(new, lines) if "/raylet/raylet" in line]
    # What the raylet started for workers: the processes below it but its two agents, which
    # show their scripts until they have set their titles (ray-dashboard-DashboardAgent...).
    agents = ("Agent", "dashboard/agent.py", "runtime_env/agent/main.py")
    workers = [line for (pid, _), line in zip(new, lines)
               if pid in {p for p, _ in descendants(raylet[0])}
               and not any(agent in line for agent in agents)]
    ray.shutdown()  # as Flower's Ray backend ends a simulation
    return new, lines, workers

args = {"num_cpus": 1, "include_dashboard": False, "logging_level": 40, "_temp_dir": sys.argv[1]}
own, lines, _ = started({**args, "log_to_driver": False})
verbose = started({**args, "log_to_driver": True})
joined = started({"address": sys.argv[2]})[0] if sys.argv[2] else []
one_site = started({**args, "num_cpus": 2, "log_to_driver": False}, site_cpus=2)
print(json.dumps({"own": own + verbose[0] + one_site[0], "lines": lines,
                  "verbose lines": verbose[1], "one site workers": one_site[2],
                  "joined": joined}))
"""


@pytest.mark.ray
def test_a_ray_the_run_starts_has_no_autoscaler_and_ends_whole(
    shared_ray_head: LocalRayHead | None,
) -> None:
    """A Ray the harness starts runs none of Ray's processes a run leaves unused: no
    autoscaler monitor (``ray start --head --no-monitor``), no dashboard's process, and no
    log monitor unless the run reads its workers' output (``--verbose``), and no more workers
    than the site processes its CPUs hold (Ray's own count: one per CPU). Nothing of it
    outlives ``ray.shutdown``; joining a cluster starts nothing of its own and leaving it
    stops nothing of the cluster's."""
    head = [] if shared_ray_head is None else _head_processes(shared_ray_head)
    address = "" if shared_ray_head is None else shared_ray_head.address
    result = _in_a_process_of_its_own(_START_THEN_STOP, address)
    lines, verbose = ("\n".join(result[key]) for key in ("lines", "verbose lines"))
    assert "gcs_server" in lines and "raylet" in lines
    for unused in (AUTOSCALER_MONITOR.decode(), "dashboard/dashboard.py", "log_monitor.py"):
        assert unused not in lines
    assert "log_monitor.py" in verbose and "dashboard/dashboard.py" not in verbose
    # Two CPUs, a site holding both: one worker, forked (the raylet started the request
    # for it, fork_request.py).
    workers = result["one site workers"]
    assert len(workers) == 1 and "fork_request.py" in workers[0], workers
    deadline = time.time() + 10
    while [pid for pid, start in result["own"] if is_alive(pid, start)]:
        assert time.time() < deadline, "processes of the stopped Ray still run"
        time.sleep(0.2)
    assert result["joined"] == []
    assert all(is_alive(pid, start) for pid, start in head)


def _head_processes(head: LocalRayHead) -> list[tuple[int, int]]:
    started = [(s.proc.pid, s.start) for s in head.processes.started]
    return started + [d for s in head.processes.started for d in descendants(s.proc.pid)]


_AHEAD = """
import gc, importlib.machinery, json, os, subprocess, sys, tempfile, threading, time
from pathlib import Path
tempfile.tempdir = sys.argv[1]  # the session folders of the Rays started below
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.ml.datasets import DataError
from panoramia_fl.simulations.data_ahead import ComputedAhead
from panoramia_fl.simulations.site_modules import SIMULATION_PACKAGE, SITE_CODE_MODULE
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.ray_start import (
    SITE_PRELOAD_MODULE, ray_started_ahead, ray_temp_dir, start_ray)

config = validate_config({"name": "ahead", "data": {"name": "digits"}, "ray": {"num_cpus": 1}})
seen = {}

def imported(name):  # and its code run: importlib marks a module's spec while it runs
    module = sys.modules.get(name)
    return module is not None and not getattr(module.__spec__, "_initializing", True)

class HeldBack:
    # Ray's loader, whose module's code runs once the other thread has imported the site
    # code: Flower's engine would come next there, before Ray's import is over.
    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def exec_module(self, module):
        deadline = time.monotonic() + 120
        while not imported(SITE_CODE_MODULE) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.loader.exec_module(module)

class EngineImport:
    # Notes where Flower's engine began to import, and whether Ray's own import was over
    # by then; finds nothing itself (Ray's spec aside, with its loader held back).
    def find_spec(self, name, path, target=None):
        if name == "ray" and threading.current_thread() is threading.main_thread():
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            spec.loader = HeldBack(spec.loader)
            return spec
        if name == SIMULATION_PACKAGE:
            seen["engine imported"] = {
                "on the main thread": threading.current_thread() is threading.main_thread(),
                "after Ray's": imported("ray"),
            }
        return None

sys.meta_path.insert(0, EngineImport())
assert "ray" not in sys.modules

def preloaded():
    # A task defined here travels by value: it imports nothing of the site code itself.
    loaded = SITE_PRELOAD_MODULE in sys.modules
    from panoramia_fl.simulations.site_preload import SITE_PROCESS_MODULES
    loaded = [loaded] + [name in sys.modules for name in SITE_PROCESS_MODULES]
    server_side = [name for name in ("sqlalchemy", "flwr.simulation.app") if name in sys.modules]
    import torch

    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    collector = [gc.isenabled(), gc.get_freeze_count() > 100_000]
    return loaded, server_side, torch.get_num_threads(), b"fork_server" in parent, collector

fresh = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                       capture_output=True, text=True, check=True)
seen["fresh threads"] = int(fresh.stdout)
read_ahead = threading.Event()

def missing_file():  # as a run's data read ahead fails
    read_ahead.set()
    raise DataError("missing data file: /nowhere/train-images-idx3-ubyte.gz")

data = ComputedAhead(missing_file)
collections_while_loading = []

def on_collection(phase, info):
    # From Ray's import on the main thread to the end of Flower's engine's on the other.
    if phase == "start" and "ray" in sys.modules and not imported(SIMULATION_PACKAGE):
        collections_while_loading.append(info["generation"])

gc.callbacks.append(on_collection)
with ray_started_ahead(
    config, RunLayout(Path(sys.argv[2])), verbose=False, ahead=data.compute_ahead
):
    import ray
    seen["up"] = ray.is_initialized()
    seen["ahead ran"] = read_ahead.wait(timeout=120)
    try:
        data.take()
    except DataError as err:
        seen["the run's error"] = str(err)
    import torch
    seen["driver threads"] = torch.get_num_threads()
    seen["collections while loading"] = collections_while_loading
    seen["driver collector"] = [gc.isenabled(), gc.get_freeze_count() > 100_000]
    (seen["preloaded"], seen["server side"], seen["threads"], seen["forked"],
     seen["worker collector"]) = ray.get(ray.remote(preloaded).remote())
    with ray_temp_dir(config) as folder:
        seen["second folder"] = folder is not None
        start_ray({}, num_cpus=1, num_gpus=0, key="resources.num_cpus")
        try:
            start_ray({}, num_cpus=64, num_gpus=0, key="resources.num_cpus")
        except ConfigError as err:
            seen["misfit"] = str(err)
        seen["up after misfit"] = ray.is_initialized()
seen["folders left"] = [p.name for p in Path(sys.argv[1]).iterdir()]
Path(sys.argv[2], "config.yaml").write_text("name: ahead")  # a run to resume: no Ray ahead
with ray_started_ahead(config, RunLayout(Path(sys.argv[2])), verbose=False):
    seen["up for a resumed run"] = ray.is_initialized()
print(json.dumps(seen))
"""


def test_a_new_run_starts_its_ray_ahead_and_its_workers_import_the_site_code(tmp_path):
    """``panoramia-fl run`` starts a new run's Ray before it imports torch and Flower's
    engine: a thread imports the site code (torch with it) beside Ray's start, then, once
    Ray's own import is over (no module of Ray's imported on two threads at once), Flower's
    engine, and then reads the run's data, whose error the run raises as its own. The
    collector is paused while those modules load. The workers (the site processes to be)
    are forked from a server that imported theirs meanwhile, without Flower's server side,
    their thread pools sized to a site's CPUs; the
    run's first simulation takes that Ray as it is, checks its request against it, and
    nothing of it is left. A resumed run starts its Ray when it needs one."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    seen = _in_a_process_of_its_own(_AHEAD, str(run_dir))
    assert seen["up"] and seen["ahead ran"] and seen["preloaded"] == [True, True, True]
    assert seen["engine imported"] == {"on the main thread": False, "after Ray's": True}
    assert seen["the run's error"].startswith("missing data file: /nowhere/")
    assert seen["forked"]  # from the server that imported them once (ray.fork_workers)
    # Both processes loaded their modules with the collector paused, and froze them after;
    # it runs again in each.
    assert seen["collections while loading"] == []
    assert seen["driver collector"] == seen["worker collector"] == [True, True]
    # The driver imported the site code (torch with it) beside Ray's start, in its own
    # environment: its thread pools are those of a new process, not a site's.
    assert seen["driver threads"] == seen["fresh threads"]
    assert seen["server side"] == []
    # torch loaded before Ray gave the worker its one CPU, and sized its threads to it.
    assert seen["threads"] == 1
    assert not seen["second folder"]
    assert "resources.num_cpus=64" in seen["misfit"] and not seen["up after misfit"]
    assert seen["folders left"] == [] and not seen["up for a resumed run"]


_DRAWS = """
import json, os, sys, tempfile
from pathlib import Path
tempfile.tempdir = sys.argv[1]
import ray
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.ray_start import ray_started_ahead

@ray.remote(num_cpus=1)
class Site:
    def draw(self):
        from ray import ObjectRef
        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
        return b"fork_server" in parent, ObjectRef.from_random().hex()

config = validate_config({"name": "draws", "data": {"name": "digits"}, "ray": {"num_cpus": 2}})
with ray_started_ahead(config, RunLayout(Path(sys.argv[2])), verbose=False):
    sites = [Site.remote() for _ in range(2)]
    print(json.dumps(ray.get([site.draw.remote() for site in sites])))
"""


def test_forked_workers_draw_ray_ids_of_their_own(tmp_path):
    """Ray's C++ generator of random ids seeds itself at its first draw: a draw in the fork
    server (Flower's site actor class takes an id as it is defined) would give every fork
    the same ids, and two workers that started together crashed on one of them."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (first, first_id), (second, second_id) = _in_a_process_of_its_own(_DRAWS, str(run_dir))
    assert first and second  # both forked from the one server
    assert first_id != second_id


def test_the_site_modules_a_started_ray_preloads_are_those_a_site_process_imports():
    from flwr.simulation.ray_transport.ray_actor import ClientAppActor

    from panoramia_fl.simulations.apps import build_apps
    from panoramia_fl.simulations.site_preload import SITE_PROCESS_MODULES

    assert (ClientAppActor.__module__, build_apps.__module__) == SITE_PROCESS_MODULES
