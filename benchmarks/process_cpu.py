"""CPU seconds of every process a command starts, by kind: what a run's fixed costs are.

    python benchmarks/process_cpu.py [--every 0.25] [--top 12] -- panoramia-fl run CONFIG ...

Runs the command and samples its process tree (psutil) every ``--every`` seconds: each
process's user + system CPU time at its last sample, and the command line it had when first
seen. Prints the wall time, the CPU of all processes, and the CPU per kind: the driver (the
command itself), Ray's workers (site actors and tasks; ``setup_worker.py`` is a worker that
set up a runtime environment first), Ray's own processes (GCS, raylet, dashboard, agents,
monitor) and the rest, then the ``--top`` processes. A process that ends between two samples
loses at most one interval's CPU. On a shared machine compare CPU, not wall time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict

import psutil

WORKER_MARKS = ("default_worker.py", "setup_worker.py", "ray::")
"""Command-line parts of a Ray worker (its title once it runs an actor or a task)."""
RAY_MARKS = ("ray/", "gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def kind(pid: int, root: int, cmdline: str) -> str:
    if pid == root:
        return "driver"
    if any(m in cmdline for m in ("ray::DashboardAgent", "ray::RuntimeEnvAgent")):
        return "ray's own"
    if any(m in cmdline for m in WORKER_MARKS):
        return "ray workers"
    if any(m in cmdline for m in RAY_MARKS):
        return "ray's own"
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--every", type=float, default=0.25)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    began = time.time()
    proc = subprocess.Popen(command)
    cpu: dict[int, float] = {}
    names: dict[int, str] = {}
    while proc.poll() is None:
        try:
            root = psutil.Process(proc.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for p in tree:
            try:
                with p.oneshot():
                    times = p.cpu_times()
                    names.setdefault(p.pid, " ".join(p.cmdline()))
            except psutil.Error:
                continue  # ended between the listing and the reading
            cpu[p.pid] = times.user + times.system
        time.sleep(args.every)
    wall = time.time() - began
    kinds: defaultdict[str, float] = defaultdict(float)
    for pid, seconds in cpu.items():
        kinds[kind(pid, proc.pid, names.get(pid, ""))] += seconds
    print(f"wall {wall:.1f} s, CPU of all processes {sum(cpu.values()):.1f} s", file=sys.stderr)
    for name, seconds in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {seconds:.1f} s", file=sys.stderr)
    for pid, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {seconds:7.2f} s  {pid}  {names.get(pid, '?')[:100]}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
