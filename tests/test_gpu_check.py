"""benchmarks/gpu_check.py without a GPU: it says nvidia-smi is missing and still times stages."""

from __future__ import annotations

import sys
from pathlib import Path

from launchers import load_benchmark

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def _module():
    return load_benchmark("gpu_check")


def test_without_nvidia_smi_it_says_so_and_skips_past_the_budget(tmp_path, monkeypatch, capsys):
    # The script's own main, in this process (torch is imported already): no nvidia-smi on PATH.
    gpu_check = _module()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(
        sys, "argv", [str(SCRIPT), "--out", str(tmp_path / "out"), "--budget-s", "0"]
    )
    assert gpu_check.main() == 1  # nothing ran: not a pass
    assert "nvidia-smi not found" in capsys.readouterr().out
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "nvidia-smi was not found" in table
    for stage in ("default", "inversion", "gpu", "text", "pipeline16"):
        assert f"| {stage} | skipped |" in table


def test_a_stage_is_timed_and_its_own_stage_times_are_read(tmp_path):
    gpu_check = _module()
    line = "done: data_s 0.5s, reference_models_s 1.0s, train+audit_s 2.5s, report_s 0.3s"
    stage = gpu_check.Stage(
        "gpu", [sys.executable, "-c", f"import time; time.sleep(0.3); print({line!r})"], 60
    )
    gpu_check.run_stage(stage, tmp_path, left_s=60)
    assert stage.rc == 0 and stage.wall_s >= 0.3
    assert stage.inner == {
        "data_s": 0.5, "reference_models_s": 1.0, "train+audit_s": 2.5, "report_s": 0.3
    }  # fmt: skip
    sampler = gpu_check.Sampler(tmp_path / "util.csv")
    sampler.available = False
    text = gpu_check.table([stage], sampler, "CPU", 1.0)
    assert "| gpu | 0 |" in text and "n/a" in text and "train+audit 2.5" in text


def test_the_pipeline_row_is_read_from_its_table():
    gpu_check = _module()
    log = "device: CPU\nsites\tdata_s\ttrain+audit_s\treport_s\twall_s\n16\t3.1\t60.2\t2.4\t70.0\n"
    assert gpu_check._inner_times(log) == {
        "data_s": 3.1,
        "train+audit_s": 60.2,
        "report_s": 2.4,
        "wall_s": 70.0,
    }


ROUNDS = """
import json, pathlib, sys, time
run = pathlib.Path(sys.argv[1]); run.mkdir(parents=True)
for line in ({"round": 1, "elapsed_s": 0.4}, {"round": 2, "elapsed_s": 1.0}):
    time.sleep(0.6)
    with open(run / "metrics.jsonl", "a") as out:
        out.write(json.dumps(line) + "\\n")
time.sleep(0.6)
"""


def test_the_targets_read_the_rounds_window_and_the_attack_speeds(tmp_path):
    """The training window is the rounds' (from metrics.jsonl as it grows), the GPU's mean
    over it is the utilisation target, and the inversion stage's speeds give the ratio."""
    gpu_check = _module()
    run = tmp_path / "run"
    stage = gpu_check.Stage("gpu", [sys.executable, "-c", ROUNDS, str(run)], 60, run_dir=run)
    gpu_check.run_stage(stage, tmp_path, left_s=60)
    assert stage.rc == 0 and [e for _, e in stage.rounds] == [0.4, 1.0]
    start, end = stage.rounds_window
    assert end - start == 1.0 and stage.start < start < end < stage.end
    sampler = gpu_check.Sampler(tmp_path / "util.csv")
    sampler.available = True
    # Two samples inside the rounds, one before them (Ray's start) that must not count.
    sampler.samples = [(start - 0.5, 0.0, 10.0), (start + 0.2, 50.0, 900.0), (end, 40.0, 1e3)]
    default = gpu_check.Stage("default", [], 150, start=0.0, end=25.0, rc=0)
    log = "attack speed: cpu: 10 steps in 20.0 s (2000 ms)\nattack speed: cuda: 300 steps in 30.0 s"
    inversion = gpu_check.Stage("inversion", [], 150, start=0.0, end=80.0, rc=0, log=log)
    text = gpu_check.table([default, inversion, stage], sampler, "GPU", 100.0)
    assert "| the default end to end at most 30 s | 25.0 s (rc 0) | yes |" in text
    assert "rounds | 45% over 2 samples (1.0 s) | yes |" in text
    assert "| 20.0x (10.00 vs 0.50 steps/s) | yes |" in text
    assert "| ↳ gpu: its 2 rounds | | 1.0 |" in text
