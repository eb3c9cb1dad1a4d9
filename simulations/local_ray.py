"""A single-machine Ray cluster started with ``ray start --head`` (for ``ray.address``).

:class:`LocalRayHead` runs ``ray start --head --block`` on free loopback ports, waits until
the head answers, and on exit stops exactly the processes it started (by PID, with their
descendants: GCS, raylet, workers). It never calls ``ray stop``, which would end every Ray
instance of this user on the machine, other runs included.

An experiment joins the cluster through its config (``ray.address: "127.0.0.1:<port>"``):
the simulation runner then passes ``init_args={"address": ...}`` to Flower, for training
and for the audits alike.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from panoramia_fl.simulations.processes import ProcessGroup, free_port, wait_for_port


def _ray_bin() -> str:
    candidate = Path(sys.executable).parent / "ray"
    return str(candidate) if candidate.exists() else "ray"


class LocalRayHead:
    """``ray start --head`` on 127.0.0.1 as a context manager.

    Parameters
    ----------
    num_cpus, num_gpus
        CPUs and GPUs the head node offers to tasks and actors.
    temp_dir
        Ray's session folder. Ray's socket paths must stay under the AF_UNIX limit, so the
        default is a new short folder in ``/tmp``, removed on exit.
    start_timeout_s
        How long to wait for the head's GCS port.
    log_monitor
        Whether the head runs Ray's log monitor, which sends the workers' output to drivers
        that ask for it (``--verbose`` runs). Without it that output stays in the session's
        log files, and the head spends less CPU while it waits.
    """

    def __init__(
        self,
        *,
        num_cpus: int = 2,
        num_gpus: int = 0,
        temp_dir: Path | None = None,
        start_timeout_s: float = 120.0,
        log_monitor: bool = True,
    ) -> None:
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self._own_temp = temp_dir is None
        self.temp_dir = (
            Path(tempfile.mkdtemp(prefix="pfl-rc-", dir="/tmp")) if temp_dir is None else temp_dir
        )
        self.start_timeout_s = start_timeout_s
        self.log_monitor = log_monitor
        self.host = "127.0.0.1"
        self.port = 0
        self.processes = ProcessGroup()

    @property
    def address(self) -> str:
        """``HOST:PORT`` for ``ray.address`` / ``ray.init(address=...)``."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.temp_dir / "ray-start.log"

    def start(self) -> LocalRayHead:
        self.port = free_port(self.host)
        env = dict(os.environ)
        env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"})
        env.pop("RAY_ADDRESS", None)
        argv = [
            _ray_bin(),
            "start",
            "--head",
            "--block",
            "--node-ip-address",
            self.host,
            "--port",
            str(self.port),
            "--num-cpus",
            str(self.num_cpus),
            "--num-gpus",
            str(self.num_gpus),
            "--temp-dir",
            str(self.temp_dir),
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
            # One machine has nothing to autoscale, and the monitor held each stop a second
            # (its exit handler waits on the GCS, stopped before it).
            "--no-monitor",
            "--include-log-monitor",
            str(self.log_monitor).lower(),
            # Fixed default ports would collide with any other Ray instance here.
            "--ray-client-server-port",
            str(free_port(self.host)),
            "--dashboard-agent-listen-port",
            str(free_port(self.host)),
            "--node-manager-port",
            str(free_port(self.host)),
            "--object-manager-port",
            str(free_port(self.host)),
            # Workers and drivers bind ports the OS picks: with Ray's default range
            # (10002-19999) two heads on one machine hand out the same ports, and a driver
            # that loses the race aborts ("Failed to start the grpc server").
            "--min-worker-port",
            "0",
            "--max-worker-port",
            "0",
        ]
        # Its own session: Ray's processes and what they signal stay apart from this one's
        # process group (a pytest worker's, a terminal's); the harness stops the head itself.
        self.processes.start("ray-head", argv, env=env, log_path=self.log_path, own_session=True)
        wait_for_port(self.host, self.port, timeout_s=self.start_timeout_s, group=self.processes)
        return self

    def stop(self) -> None:
        self.processes.stop(grace_s=15.0)

    def __enter__(self) -> LocalRayHead:
        try:
            return self.start()
        except BaseException:
            self.stop()
            self._cleanup()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._own_temp:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
