"""A Flower consortium on loopback: one SuperLink, one SuperNode per site, ``flwr run``.

This is the Deployment Engine path of :mod:`simulations.deployment` on one machine: every
site is its own ``flower-supernode`` process (with its own ``FLWR_HOME``, data file and state
folder) talking to a ``flower-superlink`` over 127.0.0.1 without TLS, which is acceptable
only on loopback. Real sites use the same apps with TLS and SuperNode authentication
(``docs/deployment.md``).

Every process started here is recorded with its PID (and its kernel start time, so a
recycled PID is never signalled) and stopped at the end, together with the processes it
spawned (SuperExec, ServerApp and ClientApp processes), also when the run fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import tomli_w

from simulations.config import ExperimentConfig, dump_config
from simulations.deployment import (
    DATASET_KEY,
    EXPERIMENT_KEY,
    PHASES_KEY,
    REPORT_KEY,
    RUN_CONFIG_DEFAULTS,
    RUN_DIR_KEY,
    STATE_DIR_NAME,
)
from simulations.processes import ProcessError, ProcessGroup, free_port, wait_for_port
from simulations.run_dir import prepare_run_dir, site_file

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The folder holding the ``server``, ``clients``, ``audit`` and ``simulations`` packages."""
CONNECTION_NAME = "local-consortium"
DEPLOYMENT_DIR = "deployment"
APP_PUBLISHER = "panoramia"
APP_NAME = "panoramia-fl"

QUIET_ENV = {
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "PYTHONUNBUFFERED": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}
"""Set for every process started here (no update check or telemetry: runs are offline)."""


class ConsortiumError(ProcessError):
    """A process of the local consortium failed to start, or the run did not complete."""


# --------------------------------------------------------------------------- app files


def app_pyproject(*, version: str = "0.1.0") -> dict[str, Any]:
    """The smallest Flower App manifest that runs the installed project under ``flwr run``.

    The FAB then carries no code: the SuperLink and every SuperNode import
    ``simulations.deployment`` from the installed ``panoramia-fl`` package.
    """
    return {
        "project": {
            "name": APP_NAME,
            "version": version,
            "description": "PANORAMIA-FL: federated training and per-site privacy audits",
            "license": "Apache-2.0",
            "dependencies": ["flwr>=1.42,<1.43"],
        },
        "tool": {
            "flwr": {
                "app": {
                    "publisher": APP_PUBLISHER,
                    "components": {
                        "serverapp": "simulations.deployment:server_app",
                        "clientapp": "simulations.deployment:client_app",
                    },
                    "config": dict(RUN_CONFIG_DEFAULTS),
                }
            }
        },
    }


def write_app_dir(app_dir: Path) -> Path:
    """Write ``pyproject.toml`` of a code-less Flower App into ``app_dir``; return the dir."""
    app_dir.mkdir(parents=True, exist_ok=True)
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(app_pyproject()))
    return app_dir


def run_config_values(
    config: ExperimentConfig,
    run_dir: Path,
    *,
    phases: tuple[str, ...] = ("train", "audit"),
    write_report: bool = True,
) -> dict[str, Any]:
    """The ``flwr run --run-config`` values of one prepared run directory.

    The experiment config and the dataset metadata travel in the run config, so a SuperNode
    on another machine needs nothing from the server's disk.
    """
    run_dir = run_dir.resolve()
    return {
        RUN_DIR_KEY: str(run_dir),
        EXPERIMENT_KEY: dump_config(config),
        DATASET_KEY: (run_dir / "dataset.json").read_text(),
        PHASES_KEY: ",".join(phases),
        REPORT_KEY: write_report,
    }


def node_config_arg(values: dict[str, Any]) -> str:
    """``{"partition-id": 0, "data-path": "/x"}`` -> ``partition-id=0 data-path="/x"``."""
    parts = []
    for key, value in values.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = str(value)
        else:
            if '"' in str(value) or " " in str(value):
                raise ValueError(f"node config {key}={value!r}: no spaces or quotes allowed")
            text = f'"{value}"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


@dataclass(frozen=True)
class DeploymentFiles:
    """A run directory prepared for ``flwr run``."""

    run_dir: Path
    app_dir: Path
    run_config: Path
    node_configs: list[dict[str, Any]]
    """One ``--node-config`` mapping per site (partition-id, num-partitions, data-path,
    state-dir)."""


def prepare_deployment(
    config: ExperimentConfig,
    run_dir: Path,
    *,
    phases: tuple[str, ...] = ("train", "audit"),
    write_report: bool = True,
) -> DeploymentFiles:
    """Prepare ``run_dir`` as for a simulation, plus what ``flwr run`` needs.

    Writes ``<run_dir>/deployment/app/pyproject.toml`` (the Flower App) and
    ``<run_dir>/deployment/run-config.toml`` (``flwr run --run-config`` values), and returns
    each site's node config: its data file is ``<run_dir>/sites/site-<id>.npz`` and its state
    folder ``<run_dir>/sites/panoramia-state``; a real site points these at its own disk.
    """
    run_dir = run_dir.resolve()
    prepare_run_dir(config, run_dir)
    dep = run_dir / DEPLOYMENT_DIR
    app_dir = write_app_dir(dep / "app")
    run_config = dep / "run-config.toml"
    values = run_config_values(config, run_dir, phases=phases, write_report=write_report)
    run_config.write_text(tomli_w.dumps(values))
    n = config.partition.num_sites
    nodes = [
        {
            "partition-id": i,
            "num-partitions": n,
            "data-path": str(site_file(run_dir, i)),
            "state-dir": str(site_file(run_dir, i).parent / STATE_DIR_NAME),
        }
        for i in range(n)
    ]
    return DeploymentFiles(
        run_dir=run_dir, app_dir=app_dir, run_config=run_config, node_configs=nodes
    )


# --------------------------------------------------------------------------- consortium


def _bin(name: str) -> str:
    """A Flower executable from the running interpreter's environment."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


@dataclass(frozen=True)
class RunStatus:
    """How a ``flwr run`` ended."""

    run_id: int
    status: str
    """Flower's status text, e.g. ``finished:completed`` or ``finished:failed``."""
    details: str
    elapsed_s: float
    log_path: Path

    @property
    def ok(self) -> bool:
        return self.status == "finished:completed"


class LocalConsortium:
    """A SuperLink and N SuperNodes on 127.0.0.1 (a context manager that stops them all).

    Parameters
    ----------
    node_configs
        One ``--node-config`` mapping per SuperNode.
    work_dir
        Where the processes' ``FLWR_HOME`` folders and logs go (a new temp dir if None; it
        is removed on exit only when created here).
    env
        Extra environment for every process (e.g. ``RAY_ADDRESS``).
    """

    def __init__(
        self,
        node_configs: list[dict[str, Any]],
        *,
        work_dir: Path | None = None,
        env: dict[str, str] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.node_configs = node_configs
        self._own_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="pfl-flwr-")) if work_dir is None else work_dir
        self.extra_env = dict(env or {})
        self.start_timeout_s = start_timeout_s
        self.host = "127.0.0.1"
        self.port = 0
        self.processes = ProcessGroup()

    # environment -----------------------------------------------------------------------
    def _env(self, home: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(QUIET_ENV)
        env.update(self.extra_env)
        env["FLWR_HOME"] = str(self.work_dir / home)
        # Import this checkout's packages in the ServerApp/ClientApp processes whatever the
        # install mode (an editable install made before a package had its __init__.py
        # resolves it as a namespace package outside the project root).
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
        )
        # The SuperLink and SuperNodes spawn flower-superexec / flwr-* by name.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "logs"

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> LocalConsortium:
        self.port = free_port(self.host)
        self.processes.start(
            "superlink",
            [
                _bin("flower-superlink"),
                "--insecure",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",
            ],
            env=self._env("superlink"),
            log_path=self.log_dir / "superlink.log",
            cwd=self.work_dir,
        )
        wait_for_port(self.host, self.port, timeout_s=self.start_timeout_s, group=self.processes)
        for i, node in enumerate(self.node_configs):
            self.processes.start(
                f"supernode-{i}",
                [
                    _bin("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    self.address,
                    "--host",
                    self.host,
                    "--port",
                    str(free_port(self.host)),
                    "--node-config",
                    node_config_arg(node),
                ],
                env=self._env(f"supernode-{i}"),
                log_path=self.log_dir / f"supernode-{i}.log",
                cwd=self.work_dir,
            )
        self._write_cli_config()
        return self

    def stop(self) -> None:
        self.processes.stop()

    def __enter__(self) -> LocalConsortium:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # the flwr CLI ----------------------------------------------------------------------
    def _write_cli_config(self) -> None:
        home = self.work_dir / "cli"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            tomli_w.dumps(
                {
                    "superlink": {
                        "default": CONNECTION_NAME,
                        CONNECTION_NAME: {"address": self.address, "insecure": True},
                    }
                }
            )
        )

    def flwr(
        self, *args: str, timeout_s: float, stdout: IO[bytes] | None = None
    ) -> subprocess.CompletedProcess:
        """Run one ``flwr`` CLI command against this consortium's SuperLink."""
        try:
            return subprocess.run(
                [_bin("flwr"), *args],
                env=self._env("cli"),
                cwd=self.work_dir,
                timeout=timeout_s,
                check=False,
                stdout=stdout if stdout is not None else subprocess.PIPE,
                stderr=subprocess.STDOUT if stdout is not None else subprocess.PIPE,
            )
        except subprocess.TimeoutExpired as err:
            raise ConsortiumError(f"flwr {args[0]} did not return within {timeout_s}s") from err

    def submit(self, app_dir: Path, run_config: Path) -> int:
        """``flwr run``; returns the run id."""
        res = self.flwr(
            "run",
            str(app_dir),
            CONNECTION_NAME,
            "--run-config",
            str(run_config),
            "--format",
            "json",
            timeout_s=300,
        )
        text = res.stdout.decode(errors="replace")
        try:
            payload = json.loads(text[text.index("{") :])
            return int(payload["run-id"])
        except (ValueError, KeyError, TypeError):
            raise ConsortiumError(
                f"flwr run failed (exit {res.returncode}): {text.strip()} "
                f"{res.stderr.decode(errors='replace').strip()}"
            ) from None

    def status(self, run_id: int) -> tuple[str, str]:
        res = self.flwr(
            "ls", CONNECTION_NAME, "--run-id", str(run_id), "--format", "json", timeout_s=120
        )
        text = res.stdout.decode(errors="replace")
        try:
            payload = json.loads(text[text.index("{") :])
            row = payload["runs"][0]
            return str(row["status"]), str(row.get("status-details", ""))
        except (ValueError, KeyError, IndexError, TypeError):
            raise ConsortiumError(f"flwr ls failed: {text.strip()}") from None

    def run(
        self, app_dir: Path, run_config: Path, *, timeout_s: float, log_path: Path
    ) -> RunStatus:
        """Submit a run, stream its ServerApp log into ``log_path`` until it ends."""
        started = time.time()
        run_id = self.submit(app_dir, run_config)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        deadline = started + timeout_s
        status, details = "unknown", ""
        with open(log_path, "ab") as log:
            while True:
                self.processes.check_alive()
                remaining = deadline - time.time()
                if remaining <= 0:
                    self.flwr("stop", str(run_id), CONNECTION_NAME, timeout_s=60)
                    raise ConsortiumError(
                        f"run {run_id} did not finish within {timeout_s}s; "
                        f"see {log_path} and {self.log_dir}"
                    )
                # Blocks until the run ends; bounded so a dead SuperNode is noticed.
                with contextlib.suppress(ConsortiumError):
                    self.flwr(
                        "log",
                        str(run_id),
                        CONNECTION_NAME,
                        "--stream",
                        timeout_s=min(remaining, 600.0),
                        stdout=log,
                    )
                status, details = self.status(run_id)
                if status.startswith("finished"):
                    break
                time.sleep(1.0)
        return RunStatus(
            run_id=run_id,
            status=status,
            details=details,
            elapsed_s=time.time() - started,
            log_path=log_path,
        )


@dataclass
class ConsortiumOutcome:
    """A finished local-consortium run."""

    run_dir: Path
    status: RunStatus
    timings: dict[str, float] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)


def run_local_consortium(
    config: ExperimentConfig,
    run_dir: Path,
    *,
    timeout_s: float = 3600.0,
    env: dict[str, str] | None = None,
    keep_logs: bool = True,
) -> ConsortiumOutcome:
    """Prepare ``run_dir``, start a loopback consortium, ``flwr run`` the experiment, stop.

    Training, audits and the report all happen in the one run; the run directory ends up
    as after :func:`simulations.runner.run_experiment`. Process logs are copied to
    ``<run_dir>/deployment/logs`` when ``keep_logs``.

    Raises
    ------
    ConsortiumError
        A process failed to start or the run did not finish with ``finished:completed``.
    """
    t0 = time.time()
    files = prepare_deployment(config, run_dir)
    outcome_timings = {"data_s": time.time() - t0}
    logs_dir = files.run_dir / DEPLOYMENT_DIR / "logs"
    with LocalConsortium(files.node_configs, env=env) as consortium:
        try:
            t = time.time()
            status = consortium.run(
                files.app_dir,
                files.run_config,
                timeout_s=timeout_s,
                log_path=logs_dir / "serverapp.log",
            )
            outcome_timings["flwr_run_s"] = time.time() - t
        finally:
            consortium.stop()  # first, so the copied logs are complete
            if keep_logs:
                _copy_logs(consortium.log_dir, logs_dir)
    outcome_timings["total_s"] = time.time() - t0
    outcome = ConsortiumOutcome(
        run_dir=files.run_dir,
        status=status,
        timings=outcome_timings,
        logs={p.stem: p for p in sorted(logs_dir.glob("*.log"))},
    )
    if not status.ok:
        raise ConsortiumError(
            f"run {status.run_id} ended as {status.status} ({status.details}); logs in {logs_dir}"
        )
    return outcome


def _copy_logs(src: Path, dst: Path) -> None:
    if not src.exists():
        return
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.glob("*.log"):
        shutil.copyfile(path, dst / path.name)
