"""GPU check: the three GPU targets and the stages behind them, timed, with the GPU's
utilisation and memory sampled once a second by ``nvidia-smi``.

    python benchmarks/gpu_check.py [--out DIR] [--data-root DIR] [--budget-s 540]
        [--stages default inversion gpu text pipeline16]

Stages, in this order (each one subprocess under a time limit, all within ``--budget-s``;
a failed or timed-out stage does not stop the next, and a stage with under 20 s of budget
left is skipped):

- ``default``: ``configs/default.yaml`` end to end (target: at most 30 s);
- ``inversion``: ``benchmarks/inversion_cost.py --steps-in 30``: the steps the default's
  gradient-inversion attack reaches in 30 s on one CPU thread and on the GPU (target: the
  GPU at least 10x);
- ``gpu``: ``configs/gpu.yaml`` as it is (target: mean GPU utilisation at least 40% while
  its sites train, i.e. over its federated rounds: the window ends when the last round's
  line reaches ``metrics.jsonl`` and is as long as that line's ``elapsed_s``);
- ``text`` and ``pipeline16``: ``configs/text.yaml`` and a 16-site pipeline (no target).

Runs on an offline GPU machine given a Python environment with the project's packages
(installed, or on PYTHONPATH as in a carried archive); it downloads nothing. Writes to
``--out``:

- ``gpu_check.md``: the targets (measured, met or not) and the table (wall time per stage,
  the CLI's own stage times, GPU busy fraction = samples with utilisation > 0, mean
  utilisation, peak memory);
- ``gpu_util.csv``: the raw samples; ``<stage>.log``: each stage's output.

Without ``nvidia-smi`` it says so at the top of the table and still times the stages.
``--data-root`` is the Fashion-MNIST folder (default: the loader's own location).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMI_QUERY = ["--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]


@dataclass
class Stage:
    """One timed run: its command, its time limit, and what came out."""

    name: str
    argv: list[str]
    limit_s: int
    run_dir: Path | None = None
    """The run directory whose ``metrics.jsonl`` is watched (the rounds' window)."""
    start: float = 0.0
    end: float = 0.0
    rc: int | None = None
    inner: dict[str, float] = field(default_factory=dict)
    rounds: list[tuple[float, float]] = field(default_factory=list)
    """Per round line of ``metrics.jsonl``: (when it appeared, its ``elapsed_s``)."""
    log: str = ""

    @property
    def wall_s(self) -> float:
        return self.end - self.start

    @property
    def rounds_window(self) -> tuple[float, float] | None:
        """The federated rounds, start to end (epoch seconds), from the last round line."""
        if not self.rounds:
            return None
        seen, elapsed = self.rounds[-1]
        return seen - elapsed, seen


def watch_rounds(stage: Stage, done: threading.Event) -> None:
    """Note when each line of the stage's ``metrics.jsonl`` appears (4 times a second)."""
    assert stage.run_dir is not None
    path, count = stage.run_dir / "metrics.jsonl", 0
    while not done.wait(0.25):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        now = time.time()
        for line in lines[count:]:
            try:
                stage.rounds.append((now, float(json.loads(line)["elapsed_s"])))
            except (ValueError, KeyError, TypeError):
                break  # a line still being written: read again
            count += 1


class Sampler:
    """``nvidia-smi -lms 1000`` in the background; samples are (seconds since epoch, util %,
    memory MiB), the time stamped here so stage windows line up with them."""

    def __init__(self, csv_path: Path) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.csv_path = csv_path
        self.proc: subprocess.Popen[str] | None = None
        self.available = shutil.which("nvidia-smi") is not None

    def start(self) -> None:
        if not self.available:
            return
        self.proc = subprocess.Popen(
            ["nvidia-smi", *SMI_QUERY, "-lms", "1000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.csv_path, "w") as out:
            out.write("time,utilization_gpu_percent,memory_used_mib\n")
            for line in self.proc.stdout:
                parts = [p.strip() for p in line.split(",")]
                # One line per GPU; the first GPU is the one the runs use.
                try:
                    util, mem = float(parts[0]), float(parts[1])
                except (ValueError, IndexError):
                    continue
                now = time.time()
                self.samples.append((now, util, mem))
                out.write(f"{now:.1f},{util:g},{mem:g}\n")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def window(self, start: float, end: float) -> list[tuple[float, float, float]]:
        return [s for s in self.samples if start <= s[0] <= end]


def _stages(args: argparse.Namespace, runs: Path) -> list[Stage]:
    py = sys.executable
    cli = [py, "-m", "panoramia_fl.simulations.cli", "run"]
    data = [] if args.data_root is None else ["--set", f"data.root={args.data_root}"]
    pipeline = [py, "benchmarks/pipeline.py", "--sites", "16", "--records", "700"]
    pipeline += ["--rounds", "2", "--quick"]
    if args.data_root is not None:
        pipeline += ["--data-root", str(args.data_root)]
    inversion = [py, "benchmarks/inversion_cost.py", "--steps-in", str(INVERSION_S), *data]
    return [
        Stage(
            "default", [*cli, "configs/default.yaml", "--out", str(runs / "default"), *data], 150
        ),
        Stage("inversion", inversion, 150),
        Stage(
            "gpu",
            [*cli, "configs/gpu.yaml", "--out", str(runs / "gpu"), *data],
            240,
            run_dir=runs / "gpu",
        ),
        Stage("text", [*cli, "configs/text.yaml", "--out", str(runs / "text")], 150),
        Stage("pipeline16", pipeline, 180),
    ]


INVERSION_S = 30
"""Seconds the inversion stage gives the attack on each device."""
_DONE = re.compile(r"done: (.*)")
_TIMING = re.compile(r"([\w+]+_s) ([\d.]+)s")
_TABLE_ROW = re.compile(r"^16\t")


def _inner_times(log: str) -> dict[str, float]:
    """The CLI's ``done: data_s 1.2s, ...`` line, or the pipeline's 16-site row."""
    match = _DONE.search(log)
    if match:
        return {k: float(v) for k, v in _TIMING.findall(match.group(1))}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if _TABLE_ROW.match(line):
            head = next((h for h in reversed(lines[:i]) if h.startswith("sites\t")), "")
            cells = line.split("\t")
            return {
                k: float(v)
                for k, v in zip(head.split("\t")[1:], cells[1:], strict=False)
                if k.endswith("_s") and v.replace(".", "", 1).isdigit()
            }
    return {}


def run_stage(stage: Stage, out: Path, left_s: float) -> None:
    limit = int(min(stage.limit_s, left_s))
    log_path = out / f"{stage.name}.log"
    if limit < 20:
        stage.rc = None
        log_path.write_text(f"skipped: {left_s:.0f}s left of the budget\n")
        return
    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0")
    env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    stage.start = time.time()
    done = threading.Event()
    if stage.run_dir is not None:
        threading.Thread(target=watch_rounds, args=(stage, done), daemon=True).start()
    with open(log_path, "w") as log:
        # A session of its own: a timed-out stage's Ray workers are ended with it.
        proc = subprocess.Popen(
            stage.argv,
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            stage.rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            stage.rc = 124
    stage.end = time.time()
    done.set()
    stage.log = log_path.read_text(errors="replace")
    stage.inner = _inner_times(stage.log)


def gpu_cells(sampler: Sampler, start: float, end: float) -> list[str]:
    samples = sampler.window(start, end)
    if not sampler.available:
        return ["n/a", "n/a", "n/a"]
    if not samples:
        return ["no samples", "-", "-"]
    busy = sum(1 for _, util, _ in samples if util > 0)
    mean = sum(util for _, util, _ in samples) / len(samples)
    peak = max(mem for _, _, mem in samples)
    return [f"{busy}/{len(samples)} ({busy / len(samples):.0%})", f"{mean:.0f}%", f"{peak:.0f}"]


def gpu_rounds_cells(stage: Stage, sampler: Sampler) -> list[str] | None:
    """The GPU's figures over a stage's federated rounds, when it wrote any."""
    window = stage.rounds_window
    return None if window is None else gpu_cells(sampler, *window)


_SPEED = re.compile(r"attack speed: (\w+): (\d+) steps in ([\d.]+) s")


def attack_speeds(log: str) -> dict[str, float]:
    """Steps a second of the inversion attack per device, from ``inversion_cost.py``."""
    return {dev: int(n) / float(s) for dev, n, s in _SPEED.findall(log) if float(s) > 0}


def targets(stages: list[Stage], sampler: Sampler) -> list[str]:
    """The three targets: measured, and whether each is met."""
    by_name = {s.name: s for s in stages if s.rc is not None}
    rows = ["| target | measured | met |", "|---|---|---|"]

    def row(goal: str, measured: str, met: bool | None) -> None:
        rows.append(f"| {goal} | {measured} | {'-' if met is None else 'yes' if met else 'no'} |")

    default = by_name.get("default")
    row(
        "the default end to end at most 30 s",
        "not run" if default is None else f"{default.wall_s:.1f} s (rc {default.rc})",
        None if default is None else default.rc == 0 and default.wall_s <= 30,
    )
    gpu = by_name.get("gpu")
    window = None if gpu is None else gpu.rounds_window
    samples = [] if window is None else sampler.window(*window)
    mean = sum(u for _, u, _ in samples) / len(samples) if samples else None
    span = 0.0 if window is None else window[1] - window[0]
    row(
        "mean GPU utilisation at least 40% during configs/gpu.yaml's rounds",
        "no rounds or samples"
        if mean is None
        else f"{mean:.0f}% over {len(samples)} samples ({span:.1f} s)",
        None if mean is None else mean >= 40,
    )
    speeds = attack_speeds(by_name["inversion"].log) if "inversion" in by_name else {}
    ratio = speeds["cuda"] / speeds["cpu"] if {"cuda", "cpu"} <= set(speeds) else None
    row(
        "the inversion attack at least 10x the steps of one CPU thread",
        "no CUDA or no speeds"
        if ratio is None
        else f"{ratio:.1f}x ({speeds['cuda']:.2f} vs {speeds['cpu']:.2f} steps/s)",
        None if ratio is None else ratio >= 10,
    )
    return rows


def table(stages: list[Stage], sampler: Sampler, device: str, total_s: float) -> str:
    lines = [f"# GPU check ({time.strftime('%Y-%m-%d %H:%M')})", "", f"Device: {device}.", ""]
    if not sampler.available:
        lines += [
            "**nvidia-smi was not found: no GPU utilisation or memory figures; the stages are "
            "still timed.**",
            "",
        ]
    lines += [*targets(stages, sampler), ""]
    lines += [
        "| stage | rc | wall s | stages (s) | GPU busy samples | mean util | peak MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in stages:
        status = "skipped" if s.rc is None else ("timed out" if s.rc == 124 else str(s.rc))
        inner = ", ".join(f"{k[:-2]} {v:.1f}" for k, v in s.inner.items()) or "-"
        cells = gpu_cells(sampler, s.start, s.end) if s.rc is not None else ["-"] * 3
        lines.append(
            f"| {s.name} | {status} | {s.wall_s:.1f} | {inner} | " + " | ".join(cells) + " |"
        )
        rounds = gpu_rounds_cells(s, sampler) if s.rc is not None else None
        if rounds is not None and s.rounds_window is not None:
            start, end = s.rounds_window
            row = f"| ↳ {s.name}: its {len(s.rounds)} rounds | | {end - start:.1f} | | "
            lines.append(row + " | ".join(rounds) + " |")
    lines += ["", f"Total wall time: {total_s:.0f} s."]
    return "\n".join(lines) + "\n"


def device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"
        return f"no CUDA device visible to torch {torch.__version__}: the runs use the CPU"
    except ImportError:
        return "torch not importable"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check_out"))
    parser.add_argument("--data-root", type=Path, help="Fashion-MNIST folder (data.root)")
    parser.add_argument("--budget-s", type=int, default=540, help="all stages together")
    parser.add_argument(
        "--stages", nargs="+", help="only these (default, inversion, gpu, text, pipeline16)"
    )
    args = parser.parse_args()
    if args.data_root is not None:  # the stages run from the repository's root
        args.data_root = args.data_root.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = (args.out / "runs").resolve()
    stages = [s for s in _stages(args, runs) if not args.stages or s.name in args.stages]
    sampler = Sampler(args.out / "gpu_util.csv")
    if not sampler.available:
        print("gpu_check: nvidia-smi not found: stages are timed, GPU use is not measured")
    t0 = time.time()
    sampler.start()
    try:
        for stage in stages:
            run_stage(stage, args.out, args.budget_s - (time.time() - t0))
            print(f"gpu_check: {stage.name}: rc {stage.rc}, {stage.wall_s:.1f}s", flush=True)
    finally:
        sampler.stop()
    text = table(stages, sampler, device_name(), time.time() - t0)
    (args.out / "gpu_check.md").write_text(text)
    print(text)
    return 0 if all(s.rc == 0 for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main())
