"""What a SuperNode's per-message ClientApp process spends on imports before it handles
its message, in CPU seconds.

Under Flower's Deployment Engine every message (``query.whoami``, each round's ``train``,
``query.audit``) starts a fresh ``flwr-clientapp`` process that imports Flower's runtime,
then the app module (:mod:`deployment.flower_apps`). A ``query.whoami`` costs little more
than these imports, so they are a site's floor per message. Prints the median CPU time of
fresh interpreters that import Flower's runtime alone and then also the app module, and the
app module's import time per top-level package (``python -X importtime`` self times).

    python benchmarks/site_process_start.py [--repeats 5] [--module deployment.flower_apps]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = "flwr.supernode.runtime.run_clientapp"
"""What ``flwr-clientapp`` imports before it loads the app."""
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \| ( *)(\S+)")


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_import(modules: list[str], *, importtime: bool = False) -> tuple[float, str]:
    """CPU seconds of a fresh interpreter importing ``modules``, and its stderr."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    flags = ["-X", "importtime"] if importtime else []
    before = _child_cpu()
    proc = subprocess.run(
        [sys.executable, *flags, "-c", f"import {', '.join(modules)}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return _child_cpu() - before, proc.stderr


def self_time_by_package(importtime_log: str, after: str) -> dict[str, float]:
    """Seconds of import self time per top-level package, for modules imported after
    ``after`` finished (``-X importtime`` lists a module once its own imports are done)."""
    totals: dict[str, float] = {}
    started = False
    for line in importtime_log.splitlines():
        match = IMPORT_LINE.match(line)
        if match is None:
            continue
        micros, indent, name = int(match[1]), match[2], match[3]
        if started:
            package = name.split(".")[0]
            totals[package] = totals.get(package, 0.0) + micros / 1e6
        elif name == after and not indent:
            started = True
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--module", default="panoramia_fl.deployment.flower_apps")
    parser.add_argument("--top", type=int, default=12, help="packages to list")
    args = parser.parse_args()
    runtime = [run_import([RUNTIME])[0] for _ in range(args.repeats)]
    full = [run_import([RUNTIME, args.module])[0] for _ in range(args.repeats)]
    print(f"Flower's ClientApp runtime alone: {statistics.median(runtime):.2f} CPU-s (median)")
    print(f"runtime + {args.module}: {statistics.median(full):.2f} CPU-s (median)")
    _, log = run_import([RUNTIME, args.module], importtime=True)
    totals = self_time_by_package(log, RUNTIME)
    print(f"{args.module}'s imports by package (self time, one run, {sum(totals.values()):.2f} s):")
    for package, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {seconds:6.2f} s  {package}")


if __name__ == "__main__":
    main()
