"""benchmarks/scale.py's measures: the CPU of a process tree counts descendants that ended,
and the growth exponent is the log-log slope along one axis with the others fixed."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import pytest
from launchers import load_benchmark

BURN = """
import subprocess, sys, time
child = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"
subprocess.run([sys.executable, "-c", child])  # a grandchild that burns 0.6 s and ends
time.sleep(0.6)
"""


def _module():
    pytest.importorskip("psutil")
    return load_benchmark("scale")


def test_the_tree_sampler_counts_a_descendant_that_ended():
    scale = _module()
    scale.SAMPLE_S = 0.2
    began = time.time()
    proc = subprocess.Popen([sys.executable, "-c", BURN])
    sampler = scale.TreeSampler(proc.pid)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    proc.wait(timeout=60)
    sampler.done.set()
    thread.join()
    costs = sampler.window(began, time.time())
    # The grandchild's 0.6 s are counted up to its last sample (sampled every 0.2 s).
    assert costs["cpu_s"] >= 0.1
    assert costs["peak_rss_gb"] > 0 and 0 < costs["peak_pss_gb"] <= costs["peak_rss_gb"]


def test_growth_is_the_log_log_slope_along_one_axis():
    scale = _module()

    def row(sites, records, wall):
        return {
            "sites": sites,
            "records": records,
            "model": "small_cnn",
            "variant": "plain",
            "rc": 0,
            "stages": {"whole": {"wall_s": wall}},
        }

    rows = [row(2, 1000, 10.0), row(8, 1000, 40.0), row(32, 1000, 160.0), row(2, 5000, 50.0)]
    by_sites = scale.growth(rows, "sites")
    assert [(n, round(e, 6), round(r2, 6)) for _, _, n, e, r2 in by_sites] == [(3, 1.0, 1.0)]
    (label, stage, points, exponent, r2) = scale.growth(rows, "records")[0]
    assert "sites 2" in label and stage == "whole" and points == 2
    assert exponent == pytest.approx(1.0) and math.isnan(r2)  # two points: no fit to judge
    # A fixed cost bends the line: the slope falls below 1 and R^2 says the line misfits.
    bent = [row(2, 1000, 30 + 10.0), row(8, 1000, 30 + 40.0), row(32, 1000, 30 + 160.0)]
    ((_, _, _, exponent, r2),) = scale.growth(bent, "sites")
    assert 0.5 < exponent < 1 and r2 < 0.99


def test_the_cost_model_recovers_what_a_run_pays_once_a_site_and_per_record():
    """``a + b * sites + c * sites * records / 1000``, the reference models' stage left out."""
    scale = _module()
    cells = [(s, r) for s in (2, 8, 32) for r in (500, 1875)]
    rows = []
    for sites, records in cells:
        wall = 30.0 + 0.8 * sites + 3.0 * sites * records / 1000
        first = (sites, records) == cells[0]  # the cell that trained the reference models
        refs = 28.0 if first else 0.0
        stages = {"whole": {"wall_s": wall + refs, "cpu_s": 2 * wall + refs}}
        stages["reference_models"] = {"wall_s": refs, "cpu_s": refs}
        rows.append(
            {"sites": sites, "records": records, "model": "small_cnn", "variant": "dp",
             "rc": 0, "stages": stages}
        )  # fmt: skip
    (_, wall_fit, coef, r2, worst), (_, cpu_fit, cpu_coef, _, _) = scale.cost_model(rows)
    assert (wall_fit, cpu_fit) == ("wall_s", "cpu_s")
    assert coef == pytest.approx([30.0, 0.8, 3.0]) and r2 == pytest.approx(1.0)
    assert worst == pytest.approx(0.0, abs=1e-9)
    assert cpu_coef == pytest.approx([60.0, 1.6, 6.0])
