"""``kill -9`` of a real run (digits, 3 sites, 3 rounds on Ray) at several moments, then
``run --resume``: every round is logged exactly once, every checkpoint and the final model
are there, and nothing finished before the kill is redone. The two moments inside round 2
are hit in turn on one run (killed, resumed, killed again, resumed to the end).

Every run of the module but the Ctrl-C case's first (whose private Ray is what it checks)
joins the session's Ray head (``RAY_ADDRESS``, tests/conftest.py): a kill ends the run's
driver and, with it, the site actors it owns; Ray starts once instead of twice per case.
A run that is killed is a CLI process of its own; a resume that runs to its end runs in the
test's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from builders import run_files
from launchers import SessionPopen, end_session, interrupt, session_processes, start_interruptible

from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.saved_models import load_global_model
from panoramia_fl.simulations.cli import main
from panoramia_fl.simulations.experiment_config import RAY_ADDRESS_ENV, load_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task

pytestmark = [pytest.mark.slow, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 3
TIMEOUT_S = 300.0
POLL_S = 0.05  # a round takes seconds: the kills still land where they are meant to

# The first run of a scenario may stall one round's checkpoint, so that a kill lands
# between the round's metrics line and its checkpoint (the window a real crash may hit).
STALL = """
import sys, time
import panoramia_fl.server.strategy
stall_at = sys.argv.pop(1)
real = panoramia_fl.server.strategy.save_checkpoint
def stalled(path, checkpoint):
    if path.name == stall_at:
        time.sleep(600)
    real(path, checkpoint)
panoramia_fl.server.strategy.save_checkpoint = stalled
from panoramia_fl.simulations.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def ray_address() -> str:
    """The cluster the module's runs join: the session's head (or the one ``$RAY_ADDRESS``
    named before the session started)."""
    return os.environ[RAY_ADDRESS_ENV]


def _config(path: Path, *, private: bool = False) -> Path:
    """The module's run; ``private``: the run starts a Ray of its own (one CPU, as the
    session's head has: one site actor), wherever it is started."""
    raw = {
        "name": "kill",
        "seed": 11,
        "data": {"name": "digits"},
        "partition": {"scheme": "iid", "num_sites": 3},
        "fl": {"rounds": ROUNDS, "local_epochs": 1, "batch_size": 32},
        "resources": {"num_gpus": 0, "audit_num_gpus": 0},
        "audit": {"enabled": False},
    }
    if private:
        raw["ray"] = {"num_cpus": 1}
    path.write_text(yaml.safe_dump(raw))
    return path


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _start(argv: list[str], log: Path) -> SessionPopen:
    with open(log, "ab") as fh:
        return SessionPopen(argv, cwd=REPO, env=_env(), stdout=fh, stderr=subprocess.STDOUT)


def _resume_to_end(run_dir: Path) -> None:
    """``run --resume`` to the end, in this process: nothing is killed, so the CLI process
    a kill needs would only pay its imports again."""
    assert main(["run", "--resume", str(run_dir)]) == 0


def _kill_when(argv: list[str], log: Path, ready: Callable[[], bool]) -> None:
    proc = _start(argv, log)
    try:
        deadline = time.time() + TIMEOUT_S
        while not ready():
            assert proc.poll() is None, f"the run ended first:\n{log.read_text()[-4000:]}"
            assert time.time() < deadline, log.read_text()[-4000:]
            time.sleep(POLL_S)
    finally:
        end_session(proc)


def _lines(run_dir: Path) -> list[str]:
    path = run_dir / "metrics.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def _has_round(run_dir: Path, r: int) -> bool:
    for line in _lines(run_dir):
        try:
            if json.loads(line)["round"] == r:
                return True
        except json.JSONDecodeError:
            pass  # torn: being written
    return False


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "panoramia_fl.simulations.cli", "run", *args]


def _stalled(name: str, *args: str) -> list[str]:
    return [sys.executable, "-c", STALL, name, "run", *args]


def _snapshot(run_dir: Path) -> dict[str, int]:
    """mtime of every checkpoint and site file: a redone round or re-cut site changes one."""
    paths = [*(run_dir / "checkpoints").glob("*.pt"), *(run_dir / "sites").glob("*.npz")]
    return {str(p.relative_to(run_dir)): p.stat().st_mtime_ns for p in paths}


def _assert_complete(run_dir: Path) -> list[dict]:
    rounds = [json.loads(line) for line in _lines(run_dir)]
    assert [r["round"] for r in rounds] == list(range(1, ROUNDS + 1))
    for r in range(1, ROUNDS + 1):
        assert load_checkpoint(run_files(run_dir).round_checkpoint(r)).round == r
    final = load_checkpoint(run_dir / "global_model.pt")
    last = load_checkpoint(run_files(run_dir).round_checkpoint(ROUNDS))
    assert final.round == ROUNDS and final.state_dict.keys() == last.state_dict.keys()
    for key, value in final.state_dict.items():
        assert torch.equal(value, last.state_dict[key]), key
    return rounds


@dataclass(frozen=True)
class KilledAtTheEnd:
    """A run killed once its final model is written, and what it held then."""

    run_dir: Path
    snapshot: dict[str, int]
    lines: list[str]
    final_model: bytes


@pytest.fixture(scope="module")
def killed_at_the_end(tmp_path_factory, ray_address) -> KilledAtTheEnd:
    base = tmp_path_factory.mktemp("reference")
    run_dir, log = base / "run", base / "log.txt"
    config = _config(base / "config.yaml")
    _kill_when(_cli(str(config), "--out", str(run_dir)), log, (run_dir / "global_model.pt").exists)
    killed = KilledAtTheEnd(
        run_dir, _snapshot(run_dir), _lines(run_dir), (run_dir / "global_model.pt").read_bytes()
    )
    _resume_to_end(run_dir)
    return killed


@pytest.fixture(scope="module")
def reference(killed_at_the_end) -> Path:
    """The complete run the other tests compare with: the resumed one above."""
    return killed_at_the_end.run_dir


def test_kill_after_the_final_model_redoes_nothing(killed_at_the_end):
    run_dir = killed_at_the_end.run_dir
    # No round re-trained, no site re-cut, no metrics line added, the model untouched...
    assert _snapshot(run_dir) == killed_at_the_end.snapshot
    assert _lines(run_dir) == killed_at_the_end.lines
    assert (run_dir / "global_model.pt").read_bytes() == killed_at_the_end.final_model
    _assert_complete(run_dir)
    # ...and what was left to do, the report, was written from the finished rounds.
    report = json.loads((run_dir / "report.json").read_text())
    logged = [json.loads(line) for line in killed_at_the_end.lines]
    assert [(r["round"], r["global_loss"]) for r in report["rounds"]] == [
        (r["round"], r["global_loss"]) for r in logged
    ]
    assert (run_dir / "report.html").exists()


def test_a_finished_run_holds_its_rounds_and_a_loadable_global_model(reference):
    """The run every case compares with, as any finished run: each round's metrics line
    with every site (no DP: no epsilon), the loss falling, the partition and config kept,
    and the global model loads back with the accuracy its last round logged."""
    rounds = [json.loads(line) for line in _lines(reference)]
    for r in rounds:
        assert set(r["sites"]) == {"0", "1", "2"}
        assert all(s["dp_epsilon"] is None and s["train_loss"] > 0 for s in r["sites"].values())
    assert rounds[-1]["global_loss"] < rounds[0]["global_loss"]
    assert rounds[-1]["global_accuracy"] > 0.5
    summary = json.loads((reference / "partition.json").read_text())
    assert [s["site_id"] for s in summary["sites"]] == [0, 1, 2]
    # torch_threads auto, recorded as the count it resolved to: one CPU a site, one thread;
    # the central evaluation beside the training in a cluster the run joins: one thread.
    platform = json.loads(run_files(reference).platform.read_text())
    assert platform["site_torch_threads"] == platform["evaluation_threads_beside_training"] == 1
    config = load_config(reference / "config.yaml")
    model, checkpoint = load_global_model(reference / "global_model.pt")
    assert checkpoint.round == ROUNDS
    assert not any(k.startswith("_module.") for k in checkpoint.state_dict)
    dataset = load_dataset("digits")
    task = make_task(config, DatasetMeta.of(dataset))
    scores = task.evaluate(model, dataset.public_x, dataset.public_y, device=torch.device("cpu"))
    assert scores["accuracy"] == pytest.approx(rounds[-1]["global_accuracy"])


LOGGED = "round 2 logged, its checkpoint not yet written"
CHECKPOINTED = "round 2 checkpointed"


@dataclass(frozen=True)
class KilledMidRun:
    """What a run held when a kill landed: its first ``kept`` rounds' metrics lines, and the
    mtimes of their checkpoints and of the site files (a redone one would change)."""

    kept: int
    logged: list[str]
    done: dict[str, int]


def _held(run_dir: Path, kept: int) -> KilledMidRun:
    assert run_files(run_dir).round_checkpoint(kept).exists()
    finished = [
        str(run_files(run_dir).round_checkpoint(r).relative_to(run_dir)) for r in range(1, kept + 1)
    ]
    done = {k: v for k, v in _snapshot(run_dir).items() if k.startswith("sites/") or k in finished}
    return KilledMidRun(kept, _lines(run_dir)[:kept], done)


@pytest.fixture(scope="module")
def killed_mid_run(tmp_path_factory, ray_address) -> tuple[Path, dict[str, KilledMidRun]]:
    """One run killed twice in round 2, then resumed to the end: first between round 2's
    metrics line and its checkpoint (its saving stalled), then, resumed, once the redone
    round 2's checkpoint is written. Each moment's case checks the finished run against what
    the run held at its kill (a third run of the module's size would only repeat rounds)."""
    base = tmp_path_factory.mktemp("killed")
    run_dir, log = base / "run", base / "log.txt"
    config = str(_config(base / "config.yaml"))
    second = run_files(run_dir).round_checkpoint(2)
    _kill_when(
        _stalled(second.name, config, "--out", str(run_dir)), log, lambda: _has_round(run_dir, 2)
    )
    assert not second.exists()
    held = {LOGGED: _held(run_dir, 1)}
    _kill_when(_cli("--resume", str(run_dir)), log, second.exists)
    held[CHECKPOINTED] = _held(run_dir, 2)
    _resume_to_end(run_dir)
    return run_dir, held


@pytest.mark.parametrize("moment", [CHECKPOINTED, LOGGED])
def test_kill_9_then_resume_loses_and_repeats_nothing(killed_mid_run, reference, moment):
    run_dir, held = killed_mid_run
    kept, logged, done = held[moment].kept, held[moment].logged, held[moment].done
    rounds = _assert_complete(run_dir)
    # What was finished before the kill is kept as it was, not redone.
    assert _lines(run_dir)[:kept] == logged
    now = _snapshot(run_dir)
    assert {k: now[k] for k in done} == done
    # Resumed from the right weights and seeds: the rounds of a run never cut short (up to
    # float noise from the order site updates arrive in, ~3e-4 here; replayed round seeds
    # moved round 3's losses by 1-5%).
    expected = [json.loads(line) for line in _lines(reference)]
    for got, want in zip(rounds, expected, strict=True):
        assert got["global_loss"] == pytest.approx(want["global_loss"], rel=2e-3)
        for site, entry in want["sites"].items():
            assert got["sites"][site]["train_loss"] == pytest.approx(entry["train_loss"], rel=2e-3)


def test_ctrl_c_stops_the_run_and_resume_finishes_it(tmp_path, reference):
    """SIGINT to the run's process group (as Ctrl-C sends it) after round 1: exit 130 within
    seconds, the run's private Ray gone, nothing half-written; ``--resume`` then ends with
    the model of a run never interrupted."""
    run_dir, log = tmp_path / "run", tmp_path / "log.txt"
    config = str(_config(tmp_path / "config.yaml", private=True))
    env = {k: v for k, v in _env().items() if k != "RAY_ADDRESS"}
    proc = start_interruptible(_cli(config, "--out", str(run_dir)), cwd=REPO, env=env, log=log)
    try:
        deadline = time.time() + TIMEOUT_S
        while not run_files(run_dir).round_checkpoint(1).exists():
            assert proc.poll() is None, f"the run ended first:\n{log.read_text()[-4000:]}"
            assert time.time() < deadline, log.read_text()[-4000:]
            time.sleep(POLL_S)
        interrupt(proc)
        rc = proc.wait(timeout=30)
        assert rc == 130, log.read_text()[-4000:]
        assert "the round in progress was abandoned; continue with" in log.read_text()
        deadline = time.time() + 30  # Ray's workers notice their raylet is gone
        while left := session_processes(proc.pid, since=proc.started):
            assert time.time() < deadline, f"processes of the run survive: {left}"
            time.sleep(0.2)
    finally:
        end_session(proc)
    assert not [p for p in run_dir.rglob("*.tmp")], "a half-written file remains"
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
    assert len(checkpoints) < ROUNDS and not (run_dir / "global_model.pt").exists()

    _resume_to_end(run_dir)  # on the session's head
    rounds = _assert_complete(run_dir)
    # The model of a run never interrupted, up to the float noise of the order in which
    # site updates arrive (as in the kill -9 cases above; Adam turns it into differences of
    # about one step on weights whose gradient is near 0, so the whole model is compared).
    expected = [json.loads(line) for line in _lines(reference)]
    for got_round, want_round in zip(rounds, expected, strict=True):
        assert got_round["global_loss"] == pytest.approx(want_round["global_loss"], rel=2e-3)
    got = load_checkpoint(run_dir / "global_model.pt").state_dict
    want = load_checkpoint(reference / "global_model.pt").state_dict
    assert got.keys() == want.keys()
    diff = torch.cat([(got[k].double() - v.double()).flatten() for k, v in want.items()])
    norm = torch.cat([v.double().flatten() for v in want.values()]).norm()
    assert diff.norm() <= 1e-2 * norm, f"{diff.norm() / norm:.2e} of the model's norm"


def test_no_signal_of_these_tests_can_reach_the_test_runner(shared_ray_head):
    """The session's Ray head (whose processes a run's kill makes Ray clean up) runs in a
    session of its own, and a test signals only a child alive in a session of its own:
    neither the head's nor a child's signals reach the xdist worker running the tests."""
    ours = os.getsid(0)
    if shared_ray_head is not None:
        pids = shared_ray_head.processes.pids()
        assert pids and all(os.getsid(pid) != ours for pid in pids)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(AssertionError, match="not a session of its own"):
            interrupt(child)
        assert child.poll() is None  # nothing was sent
    finally:
        child.kill()
        child.wait(timeout=30)
