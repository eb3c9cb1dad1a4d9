"""benchmarks/scale.py's measures: the CPU of a process tree counts descendants that ended,
and the growth exponent is the log-log slope along one axis with the others fixed."""

from __future__ import annotations

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
    assert [(n, round(e, 6)) for _, _, n, e in by_sites] == [(3, 1.0)]
    (label, stage, points, exponent) = scale.growth(rows, "records")[0]
    assert "sites 2" in label and stage == "whole" and points == 2
    assert exponent == pytest.approx(1.0)
