"""A Flower consortium on loopback: one SuperLink, one SuperNode per site, ``flwr run``.

This is the Deployment Engine path of :mod:`deployment.flower_apps` on one machine: every
site is its own ``flower-supernode`` process (with its own ``FLWR_HOME``, data file and state
folder) talking to a ``flower-superlink`` over 127.0.0.1: without TLS (``--insecure``, acceptable
only on loopback), or with TLS and SuperNode authentication as real sites use it
(:class:`~deployment.consortium_tls.ConsortiumTLS`, ``docs/deployment.md``).

Every process started here is recorded with its PID (and its kernel start time, so a
recycled PID is never signalled) and stopped at the end, together with the processes it
spawned (SuperExec, ServerApp and ClientApp processes), also when the run fails.
"""

from __future__ import annotations

import argparse
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

from panoramia_fl.deployment.consortium_tls import ConsortiumTLS
from panoramia_fl.deployment.flwr_run_files import (
    DeploymentFiles,
    node_config_arg,
    prepare_deployment,
)
from panoramia_fl.simulations.experiment_config import ConfigError, ExperimentConfig, load_config
from panoramia_fl.simulations.processes import ProcessError, ProcessGroup, free_port, wait_for_port

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The folder holding the project's packages (``server``, ``clients``, ``audit``, ``ml`` ...)."""
CONNECTION_NAME = "local-consortium"

QUIET_ENV = {
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "PYTHONUNBUFFERED": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}
"""Set for every process started here (no update check or telemetry: runs are offline)."""


class ConsortiumError(ProcessError):
    """A process of the local consortium failed to start, or the run did not complete."""


# --------------------------------------------------------------------------- consortium


def _bin(name: str) -> str:
    """A Flower executable from the running interpreter's environment."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def _json_payload(res: subprocess.CompletedProcess, what: str) -> dict[str, Any]:
    """The JSON object a ``flwr ... --format json`` command printed (raise if it failed)."""
    text = res.stdout.decode(errors="replace") if isinstance(res.stdout, bytes) else res.stdout
    err = res.stderr.decode(errors="replace") if isinstance(res.stderr, bytes) else res.stderr
    try:
        payload = json.loads(text[text.index("{") :])
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("success") is False:
        raise ConsortiumError(f"{what} failed (exit {res.returncode}): {text.strip()} {err or ''}")
    return payload


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
    tls
        None: plain HTTP with ``--insecure`` (loopback only). Otherwise TLS on every
        connection and ``--enable-supernode-auth`` (only registered node keys connect).
    """

    def __init__(
        self,
        node_configs: list[dict[str, Any]],
        *,
        work_dir: Path | None = None,
        env: dict[str, str] | None = None,
        tls: ConsortiumTLS | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.node_configs = node_configs
        self.tls = tls
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
    def _superlink_security(self) -> list[str]:
        if self.tls is None:
            return ["--insecure"]  # loopback only
        return [
            "--ssl-ca-certfile",
            str(self.tls.ca_cert),
            "--ssl-certfile",
            str(self.tls.server_cert),
            "--ssl-keyfile",
            str(self.tls.server_key),
            "--enable-supernode-auth",
        ]

    def _supernode_security(self, index: int) -> list[str]:
        if self.tls is None:
            return ["--insecure"]
        return [
            "--root-certificates",
            str(self.tls.ca_cert),
            "--auth-supernode-private-key",
            str(self.tls.node_keys[index]),
        ]

    def start(self) -> LocalConsortium:
        """Start the SuperLink, register the SuperNodes' keys (with TLS), start the nodes."""
        if self.tls is not None and len(self.tls.node_keys) < len(self.node_configs):
            raise ConsortiumError(
                f"{len(self.node_configs)} SuperNodes but {len(self.tls.node_keys)} node keys"
            )
        self.port = free_port(self.host)
        argv = [
            _bin("flower-superlink"),
            *self._superlink_security(),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--disable-runtime-dependency-installation",
        ]
        self.processes.start(
            "superlink",
            argv,
            env=self._env("superlink"),
            log_path=self.log_dir / "superlink.log",
            cwd=self.work_dir,
        )
        wait_for_port(self.host, self.port, timeout_s=self.start_timeout_s, group=self.processes)
        self._write_cli_config()
        for i, node in enumerate(self.node_configs):
            if self.tls is not None:
                self.register_node(Path(f"{self.tls.node_keys[i]}.pub"))
            self.start_node(i, node, self._supernode_security(i))
        return self

    def start_node(self, index: int, node_config: dict[str, Any], security: list[str]) -> None:
        """Start one SuperNode with the given TLS/authentication arguments."""
        argv = [
            _bin("flower-supernode"),
            *security,
            "--superlink",
            self.address,
            "--host",
            self.host,
            "--port",
            str(free_port(self.host)),
            "--node-config",
            node_config_arg(node_config),
        ]
        self.processes.start(
            f"supernode-{index}",
            argv,
            env=self._env(f"supernode-{index}"),
            log_path=self.log_dir / f"supernode-{index}.log",
            cwd=self.work_dir,
        )

    def register_node(self, public_key: Path) -> int:
        """``flwr supernode register``: only registered keys may connect (with TLS)."""
        res = self.flwr(
            "supernode",
            "register",
            str(public_key),
            CONNECTION_NAME,
            "--format",
            "json",
            timeout_s=300,
        )
        payload = _json_payload(res, "flwr supernode register")
        return int(payload["node-id"])

    def nodes(self) -> list[dict[str, Any]]:
        """``flwr supernode list``: registered nodes with their status (online, ...)."""
        res = self.flwr("supernode", "list", CONNECTION_NAME, "--format", "json", timeout_s=300)
        return list(_json_payload(res, "flwr supernode list")["nodes"])

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
        connection: dict[str, Any] = {"address": self.address}
        if self.tls is None:
            connection["insecure"] = True
        else:
            connection["root-certificates"] = str(self.tls.ca_cert)
        home = self.work_dir / "cli"
        home.mkdir(parents=True, exist_ok=True)
        config = {"superlink": {"default": CONNECTION_NAME, CONNECTION_NAME: connection}}
        (home / "config.toml").write_text(tomli_w.dumps(config))

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
        return int(_json_payload(res, "flwr run")["run-id"])

    def status(self, run_id: int) -> tuple[str, str]:
        """(status, details) of a run, e.g. ("finished:completed", "")."""
        res = self.flwr(
            "ls", CONNECTION_NAME, "--run-id", str(run_id), "--format", "json", timeout_s=300
        )
        row = _json_payload(res, "flwr ls")["runs"][0]
        return str(row["status"]), str(row.get("status-details", ""))

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
    logs_dir = files.layout.deployment / "logs"
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


def _manual_commands(files: DeploymentFiles, port: int = 9093) -> str:
    """Shell commands that run a prepared run directory on a loopback consortium (writes
    the CLI's connection file next to the run config)."""
    cli_config = files.run_config.with_name("flwr-cli-config.toml")
    cli_config.write_text(
        tomli_w.dumps({"superlink": {"default": "loopback", "loopback": {
            "address": f"127.0.0.1:{port}", "insecure": True}}})
    )  # fmt: skip
    lines = [
        "export FLWR_DISABLE_UPDATE_CHECK=1 FLWR_TELEMETRY_ENABLED=0",
        f"FLWR_HOME=/tmp/flwr-link flower-superlink --insecure --host 127.0.0.1 --port {port} "
        "--disable-runtime-dependency-installation &",
    ]
    for i, node in enumerate(files.node_configs):
        lines.append(
            f"FLWR_HOME=/tmp/flwr-site-{i} flower-supernode --insecure --superlink "
            f"127.0.0.1:{port} --host 127.0.0.1 --port {port + 10 + i} "
            f"--node-config '{node_config_arg(node)}' &"
        )
    lines += [
        "export FLWR_HOME=/tmp/flwr-cli; mkdir -p $FLWR_HOME",
        f"cp {cli_config} $FLWR_HOME/config.toml",
        f"flwr run {files.app_dir} loopback --run-config {files.run_config} --stream",
        "# then stop the SuperLink and SuperNodes by PID (kill %1 %2 ...)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m deployment.local_consortium CONFIG``: run it on a loopback consortium."""
    parser = argparse.ArgumentParser(
        prog="python -m deployment.local_consortium",
        description="Run an experiment on Flower's Deployment Engine on this machine: one "
        "SuperLink and one SuperNode per site on 127.0.0.1, then `flwr run`.",
    )
    parser.add_argument("config", type=Path, help="experiment config (YAML)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run directory (default: <output_dir>/<name>)"
    )
    parser.add_argument(
        "--prepare-only",
        action="store_true",
        help="write the run directory and print the commands; start nothing",
    )
    parser.add_argument("--timeout", type=float, default=24 * 3600.0, help="seconds")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run_dir = (args.out or config.output_dir / config.name).resolve()
    if args.prepare_only:
        files = prepare_deployment(config, run_dir)
        print(_manual_commands(files))
        return 0
    try:
        outcome = run_local_consortium(config, run_dir, timeout_s=args.timeout)
    except ProcessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    timings = ", ".join(f"{k}={v:.1f}" for k, v in outcome.timings.items())
    print(f"{outcome.status.status}: {outcome.run_dir} ({timings})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
