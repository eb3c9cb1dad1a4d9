"""What machine and build trains a run (``platform.json``): its numbers depend on them."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import torch

from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.run_log import PlatformInfo


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what Python knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def collect_platform(
    *, site_torch_threads: int, evaluation_threads_beside_training: int | None, cuda_used: bool
) -> PlatformInfo:
    """This process's machine and torch build; ``cuda_used``: the run trains on the GPU."""
    return PlatformInfo(
        cpu_model=cpu_model(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_count=os.cpu_count(),
        machine=platform.machine(),
        system=platform.platform(),
        python=platform.python_version(),
        torch=torch.__version__,
        torch_git=torch.version.git_version,
        torch_cuda_build=torch.version.cuda,
        torch_threads=torch.get_num_threads(),
        torch_interop_threads=torch.get_num_interop_threads(),
        evaluation_threads_beside_training=evaluation_threads_beside_training,
        site_torch_threads=site_torch_threads,
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        cuda_device=torch.cuda.get_device_name(0) if cuda_used else None,
    )


def write_platform(layout: RunLayout, info: PlatformInfo) -> Path:
    """``platform.json`` of the run (the machine that trains it now)."""
    return atomic_write_text(layout.platform, json.dumps(info.to_dict(), indent=1))
