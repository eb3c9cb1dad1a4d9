"""Time the report stage (``write_report``) on existing run directories: wall and CPU time.

    python benchmarks/report_stage.py RUN_DIR [RUN_DIR ...] [--repeats 3]

Each directory's report is written once to warm up (imports), then ``--repeats`` times; CPU
time counts the writer and any process it waited for (git, for the manifests). The
directories' report files are rewritten. ``benchmarks/pipeline.py --keep DIR`` leaves run
directories of 2, 8 and 16 sites to time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.reporting import write_report
from panoramia_fl.simulations.config_file import report_config


def cpu_seconds() -> float:
    """User + system time of this process and of its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("run_dir\tsites\twall_s_median\tcpu_s_median\tload_average")
    for run_dir in args.run_dirs:
        layout = RunLayout(run_dir)
        files = write_report(layout, report_config(layout))
        walls, cpus = [], []
        for _ in range(args.repeats):
            wall, cpu = time.perf_counter(), cpu_seconds()
            write_report(layout, report_config(layout))
            walls.append(time.perf_counter() - wall)
            cpus.append(cpu_seconds() - cpu)
        print(
            f"{run_dir}\t{len(files.site_reports)}\t{statistics.median(walls):.2f}\t"
            f"{statistics.median(cpus):.2f}\t{os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
