"""benchmarks/time_to_training.py: a run's start ends when Ray's workers train, not when one
of them registers, and the processes the run started are ended with it."""

from __future__ import annotations

import sys

import psutil
from launchers import load_benchmark

benchmark = load_benchmark("time_to_training")

# A driver whose child, titled as a Ray worker, sleeps, works for 0.38 CPU s (as a worker
# registers: more than one window's threshold, 0.2 CPU s, less than two windows') and, from
# about 1.5 s on, trains (one core, busy): it never ends by itself.
DRIVER = (
    "import subprocess, sys, time\n"
    "def worker(code):\n"
    "    title = ['bash', '-c', f'exec -a ray::Site {sys.executable} -c \"{code}\"']\n"
    "    return subprocess.Popen(title)\n"
    "worker('import time; time.sleep(0.5); t = time.process_time(); "
    "any(time.process_time() - t > 0.38 for _ in iter(int, 1))')\n"
    "time.sleep(1.5)\n"
    "worker('while True: pass')\n"
    "time.sleep(600)\n"
)


def test_the_start_ends_where_the_workers_train_and_the_run_is_stopped():
    before = {p.pid for p in psutil.process_iter()}
    seconds = benchmark.time_to_training([sys.executable, "-c", DRIVER], every=0.05, cores=0.8)
    assert seconds is not None and 1.3 < seconds < 3.0
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.pid not in before and "ray::Site" in " ".join(p.info["cmdline"] or [])
    ]
    assert left == []


def test_a_run_that_ends_before_training_has_no_start_time():
    quick = "import time; time.sleep(1)"
    assert benchmark.time_to_training([sys.executable, "-c", quick], every=0.05, cores=0.8) is None
