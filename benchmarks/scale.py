"""How a run's cost grows with the consortium: a grid over sites, records per site, model and
what runs beside the membership audit, timed per stage with its CPU time and peak memory.

    python benchmarks/scale.py [--sites 2 8 32] [--records 1000 5000 20000]
        [--models small_cnn resnet18] [--variants plain dp dp+gradient-canaries inversion]
        [--base configs/scale.yaml] [--set key=value ...] [--out DIR] [--keep] [--dry-run]

Every cell is ``--base`` (default ``configs/scale.yaml``) with its sites
(``partition.num_sites``), records per site (``partition.records_per_site``, before the
holdout and test splits), model (``resnet18`` with GroupNorm) and variant:

- ``plain``: no DP; the membership audits only;
- ``dp``: record-level DP-SGD (the base's ``dp``, eps = 4 in configs/scale.yaml);
- ``dp+gradient-canaries``: and the base's gradient canaries (``audit.gradient_canaries``);
- ``inversion``: no DP, and each site's gradient-inversion audit of round 1.

A cell whose sites x records exceed the dataset's training records is skipped (Fashion-MNIST
has 60,000: 32 sites x 5,000 do not fit). Each cell runs as its own process
(``run_experiment``, as the CLI does), and this process samples the cell's whole process
tree (driver, Ray's processes and workers) twice a second with psutil: per stage of the run
(data, reference models, the Flower simulation's phases, report) its wall time, CPU time
(user + system of every process, summed) and peak memory (RSS summed over the processes, and
PSS, which counts a page shared by several processes once: the figure that must fit the
machine); with ``nvidia-smi``, the GPU's peak memory. The per-site audit stages are the
means of the sites' own timings. Then, along each axis with two or more points, the growth
exponent: the slope of log(cost) against log(sites) or log(records), with the R^2 of that
line; and per model and variant, the least-squares fit of a run's seconds to
``a + b * sites + c * sites * records / 1000`` (what it pays once, a site, 1,000 records).

Writes to ``--out`` (default ``scale_out``): ``cells.jsonl`` (one line per cell, appended as
cells finish: a rerun skips the cells already there), ``scale.md`` (the tables) and
``scale.svg`` (wall time and peak PSS against sites and records, via ``charts.svg``).
Runs are long: on a 2-core machine run a subset, e.g. ``--sites 2 8 --records 1000``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the project's packages from this checkout

from panoramia_fl.charts.svg import Axes, Style, render_figure  # noqa: E402

VARIANTS = {
    "plain": ["dp.enabled=false", "audit.gradient_canaries=0"],
    "dp": ["audit.gradient_canaries=0"],
    "dp+gradient-canaries": [],
    "inversion": ["dp.enabled=false", "audit.gradient_canaries=0", "audit.inversion={}"],
}
"""Each variant's overrides of the base (configs/scale.yaml has DP and gradient canaries on)."""
MODEL_SETS = {"small_cnn": ["model.name=small_cnn"], "resnet18": ["model.name=resnet18"]}
MODEL_SETS["resnet18"].append("model.options={norm: group}")
SAMPLE_S = 1.0
"""Seconds between samples (each reads every process's smaps_rollup: about a tenth of a
core on a 2-core machine at 16 sites, recorded as the sampler's own CPU)."""


@dataclass(frozen=True)
class Cell:
    sites: int
    records: int
    model: str
    variant: str

    @property
    def name(self) -> str:
        return f"sites{self.sites}-records{self.records}-{self.model}-{self.variant}"

    def overrides(self, extra: list[str]) -> list[str]:
        return [
            f"name={self.name}",
            f"partition.num_sites={self.sites}",
            f"partition.records_per_site={self.records}",
            *MODEL_SETS[self.model],
            *VARIANTS[self.variant],
            *extra,
        ]


@dataclass
class Sample:
    """The process tree at one moment: memory summed, and each process's CPU seconds."""

    t: float
    rss: int
    pss: int
    cpu: dict[int, float]


@dataclass
class TreeSampler:
    """Samples a process and its descendants until told to stop (a thread)."""

    root: int
    samples: list[Sample] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append(self.sample())
            self.done.wait(SAMPLE_S)

    def sample(self) -> Sample:
        try:
            parent = psutil.Process(self.root)
            procs = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            procs = []
        rss = pss = 0
        cpu: dict[int, float] = {}
        for proc in procs:
            try:
                with proc.oneshot():
                    mem = proc.memory_full_info()
                    times = proc.cpu_times()
            except psutil.Error:
                continue  # ended between the listing and the reading
            rss, pss = rss + mem.rss, pss + getattr(mem, "pss", mem.rss)
            cpu[proc.pid] = times.user + times.system
        return Sample(time.time(), rss, pss, cpu)

    def cpu_until(self, t: float) -> float:
        """CPU seconds of every process seen up to ``t`` (each at its last sample by then)."""
        last: dict[int, float] = {}
        for s in self.samples:
            if s.t > t:
                break
            last.update(s.cpu)
        return sum(last.values())

    def window(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds and peak memory over ``[start, end]`` (NaN peaks: no sample in it)."""
        inside = [s for s in self.samples if start <= s.t <= end]
        return {
            "cpu_s": self.cpu_until(end) - self.cpu_until(start),
            "peak_rss_gb": max((s.rss for s in inside), default=math.nan) / 1e9,
            "peak_pss_gb": max((s.pss for s in inside), default=math.nan) / 1e9,
        }


def gpu_sampler(out: Path) -> Any:
    """benchmarks/gpu_check.py's nvidia-smi sampler (idle without nvidia-smi)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_check import Sampler

    sampler = Sampler(out / "gpu_util.csv")
    sampler.start()
    return sampler


def child(base: Path, overrides: list[str], run_dir: Path) -> None:
    """One cell, in its own process: the run as the CLI does it, with its start and stage
    times printed for the parent."""
    from panoramia_fl.simulations.experiment_config import load_config
    from panoramia_fl.simulations.runner import run_experiment

    config = load_config(base, overrides)
    print(f"SCALE_T0 {time.time():.3f}", flush=True)
    outcome = run_experiment(config, run_dir)
    print("SCALE_TIMINGS " + json.dumps(outcome.timings), flush=True)


def run_cell(cell: Cell, args: argparse.Namespace, gpu: Any) -> dict[str, Any]:
    run_dir = args.out / "runs" / cell.name
    argv = [sys.executable, __file__, "--child", str(args.base), str(run_dir)]
    argv += [f"--set={o}" for o in cell.overrides(args.overrides)]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    log_path = args.out / f"{cell.name}.log"
    own_cpu = time.process_time()
    began = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid)
        thread = threading.Thread(target=sampler.run, daemon=True)
        thread.start()
        try:
            rc = proc.wait(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        sampler.done.set()
        thread.join()
    ended = time.time()
    text = log_path.read_text(errors="replace")
    row: dict[str, Any] = {**asdict(cell), "rc": rc, "wall_s": ended - began}
    row["sampler_cpu_s"] = time.process_time() - own_cpu
    row["stages"] = stage_costs(text, sampler, gpu, began, ended)
    row["audit_stages"] = audit_stage_means(run_dir)
    if not args.keep:
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
    return row


def stage_costs(
    log: str, sampler: TreeSampler, gpu: Any, began: float, ended: float
) -> dict[str, dict[str, float]]:
    """Per stage (in the runner's order, from the child's start time and stage times):
    wall, CPU and peak memory; ``startup`` is the process's imports before the run."""
    t0 = next((float(x.split()[1]) for x in log.splitlines() if x.startswith("SCALE_T0 ")), None)
    line = next((x for x in log.splitlines() if x.startswith("SCALE_TIMINGS ")), None)
    if t0 is None or line is None:
        return {"whole": {"wall_s": ended - began, **sampler.window(began, ended)}}
    timings = json.loads(line.split(" ", 1)[1])
    windows = {"startup": (began, t0)}
    at = t0
    for name, seconds in timings.items():
        if name != "total_s":
            windows[name[:-2]] = (at, at + seconds)
            at += seconds
    windows["whole"] = (began, ended)
    out = {}
    for name, (start, end) in windows.items():
        out[name] = {"wall_s": end - start, **sampler.window(start, end)}
        if gpu is not None and gpu.available:
            used = [mem for _, _, mem in gpu.window(start, end)]
            out[name]["peak_gpu_mib"] = max(used, default=0.0)
    return out


def audit_stage_means(run_dir: Path) -> dict[str, float]:
    """Mean seconds per site of each audit stage (the sites' own timings)."""
    stages: dict[str, list[float]] = {}
    for path in sorted((run_dir / "audits").glob("site-*.json")):
        result = json.loads(path.read_text()).get("result") or {}
        for stage, seconds in (result.get("timings") or {}).items():
            stages.setdefault(stage, []).append(seconds)
    return {k: float(np.mean(v)) for k, v in stages.items()}


def growth(rows: list[dict[str, Any]], axis: str) -> list[tuple[str, str, int, float, float]]:
    """(the other settings, stage, points, exponent of wall time, R^2 of the log-log line)
    along ``axis``; R^2 is NaN for two points (a line through both)."""
    others = [k for k in ("sites", "records", "model", "variant") if k != axis]
    ok = [r for r in rows if r["rc"] == 0]
    out = []
    key = lambda r: tuple(r[k] for k in others)  # noqa: E731
    for fixed, group in itertools.groupby(sorted(ok, key=key), key=key):
        cells = sorted(group, key=lambda r: r[axis])
        if len({r[axis] for r in cells}) < 2:
            continue
        label = ", ".join(f"{k} {v}" for k, v in zip(others, fixed, strict=True))
        for stage in cells[0]["stages"]:
            pairs = [(r[axis], r["stages"].get(stage, {}).get("wall_s")) for r in cells]
            pairs = [(x, y) for x, y in pairs if y is not None and y > 0]
            if len(pairs) >= 2:
                xs, ys = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
                slope, intercept = np.polyfit(xs, ys, 1)
                fit = _r_squared(ys, slope * xs + intercept) if len(pairs) > 2 else math.nan
                out.append((label, stage, len(pairs), float(slope), fit))
    return out


def _r_squared(observed: np.ndarray, fitted: np.ndarray) -> float:
    spread = float(np.sum((observed - observed.mean()) ** 2))
    return 1.0 - float(np.sum((observed - fitted) ** 2)) / spread if spread > 0 else math.nan


def _without_reference_models(row: dict[str, Any], measure: str) -> float:
    stages = row["stages"]
    return float(stages["whole"][measure] - stages.get("reference_models", {}).get(measure, 0.0))


def cost_model(rows: list[dict[str, Any]]) -> list[tuple[str, str, np.ndarray, float, float]]:
    """Per model and variant with 4+ cells, the least-squares fit of a whole run's wall and CPU
    seconds to ``a + b * sites + c * (sites x records / 1,000)``: what a run pays once, a
    site, and 1,000 records' training and audit; with R^2 and the largest relative residual.
    Exponents below 1 come from ``a`` and ``b``; this says how large each is. The reference
    models' stage is left out: the weights cache trains them once for every cell that shares
    them, so the first cell of a grid pays them alone."""
    ok = [r for r in rows if r["rc"] == 0 and "whole" in r["stages"]]
    key = lambda r: (r["model"], r["variant"])  # noqa: E731
    out = []
    for (model, variant), group in itertools.groupby(sorted(ok, key=key), key=key):
        cells = list(group)
        if len(cells) < 4:
            continue
        design = np.array([[1.0, r["sites"], r["sites"] * r["records"] / 1000] for r in cells])
        for measure in ("wall_s", "cpu_s"):
            seconds = np.array([_without_reference_models(r, measure) for r in cells])
            coef = np.linalg.lstsq(design, seconds, rcond=None)[0]
            fitted = design @ coef
            worst = float(np.max(np.abs(fitted - seconds) / seconds))
            out.append((f"{model}, {variant}", measure, coef, _r_squared(seconds, fitted), worst))
    return out


def tables(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| sites | records | model | variant | rc | stage | wall s | CPU s | peak RSS GB | "
        "peak PSS GB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for stage, c in r["stages"].items():
            gpu = f" (GPU {c['peak_gpu_mib']:.0f} MiB)" if "peak_gpu_mib" in c else ""
            lines.append(
                f"| {r['sites']} | {r['records']:,} | {r['model']} | {r['variant']} | {r['rc']} "
                f"| {stage} | {c['wall_s']:.1f} | {c['cpu_s']:.1f} | {c['peak_rss_gb']:.2f} | "
                f"{c['peak_pss_gb']:.2f}{gpu} |"
            )
    for axis in ("sites", "records"):
        found = growth(rows, axis)
        if found:
            lines += ["", f"Growth of wall time with {axis} (slope of log-log):", ""]
            lines += ["| others | stage | points | exponent | R^2 |", "|---|---|---|---|---|"]
            lines += [f"| {o} | {s} | {n} | {e:.2f} | {r:.3f} |" for o, s, n, e, r in found]
    fits = cost_model(rows)
    if fits:
        lines += ["", "A run's seconds but its reference models' = a + b x sites + c x (sites x"]
        lines += ["records / 1,000), least squares over the cells:", ""]
        lines += ["| model, variant | measure | a | b | c | R^2 | largest residual |"]
        lines += ["|---|---|---|---|---|---|---|"]
        for label, measure, (a, b, c), r2, worst in fits:
            lines.append(
                f"| {label} | {measure} | {a:.1f} | {b:.2f} | {c:.2f} | {r2:.3f} | {worst:.0%} |"
            )
    return "\n".join(lines) + "\n"


def figure(rows: list[dict[str, Any]]) -> str | None:
    """Wall time and peak PSS of whole runs against sites and against records."""
    ok = [r for r in rows if r["rc"] == 0 and "whole" in r["stages"]]
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
    panels = []
    for measure, unit in (("wall_s", "wall s"), ("peak_pss_gb", "peak PSS GB")):
        for axis, other in (("sites", "records"), ("records", "sites")):
            ax = Axes(title=f"{unit} against {axis}", xlabel=axis, ylabel=unit, xlog=True)
            key = lambda r, o=other: (r[o], r["model"], r["variant"])  # noqa: E731
            for i, (fixed, group) in enumerate(itertools.groupby(sorted(ok, key=key), key=key)):
                cells = sorted(group, key=lambda r: r[axis])
                if len(cells) < 2:
                    continue
                style = Style(colors[i % len(colors)], marker="o")
                ys = [r["stages"]["whole"][measure] for r in cells]
                ax.plot(
                    [r[axis] for r in cells],
                    ys,
                    style,
                    f"{other} {fixed[0]}, {fixed[1]}, {fixed[2]}",
                )
            if ax.lines:
                ax.legend_loc = "outside right"  # inside, it hid the largest cells' points
                panels.append(ax)
    if not panels:
        return None
    return render_figure(panels, panel_width=640, panel_height=300, cols=2)


def cells_of(args: argparse.Namespace, pool: int) -> list[Cell]:
    grid = itertools.product(args.sites, args.records, args.models, args.variants)
    cells = [Cell(*c) for c in grid]
    too_big = sorted({(c.sites, c.records) for c in cells if c.sites * c.records > pool})
    for sites, records in too_big:
        print(f"scale: skip {sites} sites x {records:,} records: more than the {pool:,} there are")
    return [c for c in cells if c.sites * c.records <= pool]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000, 5_000, 20_000])
    parser.add_argument("--models", nargs="+", default=list(MODEL_SETS), choices=list(MODEL_SETS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--base", type=Path, default=REPO / "configs" / "scale.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("scale_out"))
    parser.add_argument("--timeout-s", type=float, default=6 * 3600, help="per cell")
    parser.add_argument("--keep", action="store_true", help="keep each cell's run directory")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and stop")
    return parser.parse_args()


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        child(Path(sys.argv[2]), [a.split("=", 1)[1] for a in sys.argv[4:]], Path(sys.argv[3]))
        return 0
    args = parse()
    args.base, args.out = args.base.resolve(), args.out.resolve()
    from panoramia_fl.ml.datasets import load_dataset
    from panoramia_fl.simulations.experiment_config import load_config

    data = load_config(args.base, args.overrides).data
    pool = len(load_dataset(data.name, root=data.root, options=data.options).x)
    cells = cells_of(args, pool)
    print(f"scale: {len(cells)} cells: " + ", ".join(c.name for c in cells), flush=True)
    if args.dry_run:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    done_path = args.out / "cells.jsonl"
    rows = [json.loads(x) for x in done_path.read_text().splitlines()] if done_path.exists() else []
    done = {Cell(r["sites"], r["records"], r["model"], r["variant"]) for r in rows}
    gpu = gpu_sampler(args.out)
    try:
        for cell in cells:
            if cell in done:
                continue
            row = run_cell(cell, args, gpu)
            rows.append(row)
            with open(done_path, "a") as out:
                out.write(json.dumps(row) + "\n")
            whole = row["stages"].get("whole", {})
            print(
                f"scale: {cell.name}: rc {row['rc']}, {row['wall_s']:.0f} s, "
                f"peak PSS {whole.get('peak_pss_gb', math.nan):.2f} GB (the sampler's own "
                f"CPU {row['sampler_cpu_s']:.1f} s)",
                flush=True,
            )
    finally:
        gpu.stop()
    text = tables(rows)
    (args.out / "scale.md").write_text(text)
    svg = figure(rows)
    if svg is not None:
        (args.out / "scale.svg").write_text(svg)
    print(text)
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
