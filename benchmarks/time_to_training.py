"""Seconds from ``panoramia-fl run CONFIG`` until its sites train: a run's start, unprofiled.

    python benchmarks/time_to_training.py CONFIG [--repeat 5] [-- --set fl.rounds=1 ...]

Starts a new run of CONFIG in a fresh folder (a new run, so its Ray starts ahead of its
imports, as ``make run``'s does), samples the CPU of the processes it starts (psutil) every
``--every`` seconds, and takes the run's start to end where Ray's workers first train: two
windows of a quarter of a second running in which they use at least ``--cores`` cores (a
worker's registration with Ray takes a fraction of one). Then stops the run as Ctrl-C
would, ends what is left of the processes it started, and prints the seconds, one line per
repeat, then their median.

``benchmarks/fixed_costs.py`` says where a whole run's fixed costs go, but its sampler
shares the cores with the run, and its per-part figures move by a second from run to run.
This measures only the start, without a profiler: alternate two versions of the code
(``git stash``) and compare the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_cpu import WORKER_MARKS  # noqa: E402

from panoramia_fl.simulations import fork_server  # noqa: E402

WINDOW_S = 0.25


def _is_worker(process: psutil.Process, driver: int) -> bool:
    """A Ray worker's command line, or that of the run's fork server, which a worker forked
    from it keeps until it takes an actor."""
    command = " ".join(process.cmdline())
    if fork_server.__name__ in command:
        return process.ppid() != driver  # the server itself is the driver's child
    return any(mark in command for mark in WORKER_MARKS)


def time_to_training(command: list[str], *, every: float, cores: float) -> float | None:
    """Seconds until ``command``'s workers train, or None if they never did (the run ended
    first, or 300 s passed); the run is stopped either way."""
    began = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    root = psutil.Process(proc.pid)
    seen: dict[int, psutil.Process] = {}
    cpu: dict[int, float] = {}
    window_start, used = began, 0.0
    hits: list[float] = []  # the starts of the windows in a row in which the workers train
    found: float | None = None
    while proc.poll() is None and time.monotonic() - began < 300 and found is None:
        try:
            tree = root.children(recursive=True)
        except psutil.Error:
            tree = []
        for process in tree:
            seen.setdefault(process.pid, process)
            try:
                if not _is_worker(process, proc.pid):
                    continue
                times = process.cpu_times()
            except psutil.Error:
                continue
            total = times.user + times.system
            used += total - cpu.get(process.pid, total)  # a worker's first sample: its base
            cpu[process.pid] = total
        time.sleep(every)
        now = time.monotonic()
        if now - window_start >= WINDOW_S:
            hits = hits + [window_start - began] if used >= cores * WINDOW_S else []
            found = hits[0] if len(hits) == 2 else None
            window_start, used = now, 0.0
    _stop(proc, list(seen.values()))
    return found


def _stop(proc: subprocess.Popen[bytes], started: list[psutil.Process]) -> None:
    """SIGTERM to the run (it stops as on Ctrl-C), then SIGKILL to whatever it started that
    is still running (Ray's processes the run had no time to end)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    for process in started:
        with contextlib.suppress(psutil.Error):
            process.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--cores", type=float, default=0.8)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:split]), argv[split + 1 :]
    seconds = []
    for repeat in range(1, args.repeat + 1):
        out = Path(tempfile.mkdtemp(prefix="time-to-training-"))
        command = ["panoramia-fl", "run", str(args.config), *extra, "--out", str(out / "run")]
        try:
            found = time_to_training(command, every=args.every, cores=args.cores)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        print(f"repeat {repeat}: " + ("never trained" if found is None else f"{found:.2f} s"))
        if found is not None:
            seconds.append(found)
    if not seconds:
        return 1
    print(f"median {statistics.median(seconds):.2f} s over {len(seconds)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
