"""benchmarks/fixed_costs.py's split of a run's wall time: what any site computes (or the
evaluation the server waits for) counts once, however many sites compute at that moment, and
every other moment goes to what the driver or the ServerApp's thread was doing then."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launchers import load_benchmark

Stretch = tuple[float, float, list[str]]


def _trace(path: Path, threads: dict[tuple[int, str], list[Stretch]]) -> Path:
    """A trace in py-spy's Chrome format: each stretch's frames opened at its start and
    closed at its end, under the frames py-spy puts first (the process, the thread)."""
    events = []
    for (pid, thread), stretches in threads.items():
        native_id = pid if thread == "MainThread" else pid + len(thread)
        outer = [f'process {pid}:"python"', f"thread ({native_id}): {thread}"]
        for start, end, frames in stretches:
            for ts, ph, names in ((start, "B", outer + frames), (end, "E", outer + frames)):
                ordered = names if ph == "B" else names[::-1]
                events += [
                    {"name": n, "ph": ph, "pid": pid, "tid": len(thread), "ts": ts * 1e6}
                    for n in ordered
                ]
    path.write_text(json.dumps(events))
    return path


def test_compute_counts_once_and_the_rest_goes_to_what_the_run_was_doing(tmp_path):
    fixed_costs = load_benchmark("fixed_costs")
    server = ["main", "run_audits"]
    trace = _trace(
        tmp_path / "trace.json",
        {
            (100, "MainThread"): [
                (0.0, 2.0, ["<module>", "_find_and_load"]),
                (2.0, 9.6, ["main", "run_simulation"]),
                (9.6, 10.0, ["main", "run_simulation", "RayBackend.terminate", "shutdown"]),
                (10.0, 10.5, ["main", "write_report"]),
            ],
            (100, "Thread-2 (server_th_with_start_checks)"): [
                (2.0, 3.0, ["main", "site_map", "send_and_receive"]),
                (3.0, 8.0, ["main", "Strategy.start", "send_and_receive"]),
                (8.0, 10.5, server),  # py-spy keeps an ended thread's last stack to the end
            ],
            (200, "MainThread"): [
                (3.2, 7.0, ["main_loop", "train_locally"]),
                (8.2, 9.0, ["main_loop", "run_audits_of"]),
            ],
            (300, "MainThread"): [
                (3.3, 7.8, ["main_loop", "train_locally"]),  # the round's slower site
                (8.3, 9.2, ["main_loop", "run_audits_of"]),
            ],
        },
    )
    run = fixed_costs.sort_threads(fixed_costs.read_trace(trace))
    assert [site.pid for site in run.sites] == [200, 300]
    busy = fixed_costs.union(
        span
        for site in run.sites
        for span in site.spans(fixed_costs._site_kind, {"training", "audit compute"})
    )
    assert busy == [(3.2, 7.8), (8.2, 9.2)]
    fixed = fixed_costs.gaps(busy, 0.0, 10.5)
    parts = fixed_costs.fixed_parts(run, fixed)
    assert sum(parts.values()) == pytest.approx(10.5 - 5.6)
    assert parts == pytest.approx(
        {
            f"{fixed_costs.OUTSIDE}: imports": 2.0,
            f"{fixed_costs.OUTSIDE}: report": 0.5,
            fixed_costs.PARTS["first message: site actors start"]: 1.0,
            fixed_costs.PARTS["rounds: waiting for the sites"]: 0.2 + 0.2,
            # The server's thread is bounded by the engine's end (Ray's shutdown from 9.6 s,
            # inside the simulation), not by the trace's end.
            fixed_costs.PARTS["the audits (waiting)"]: 0.2 + 0.4,
            fixed_costs.ENGINE: 0.4,
        }
    )


def test_a_thread_sampled_before_and_after_it_had_a_name_is_one_thread(tmp_path):
    """py-spy names a thread only once Python's threading module is loaded: the driver's
    first imports are sampled as ``thread (TID)``, the rest as ``thread (TID): MainThread``.
    Both are the driver, and the imports end where its next stack begins, not at the trace's
    end."""
    fixed_costs = load_benchmark("fixed_costs")
    process = 'process 100:"python"'
    samples = [
        (0.0, 1.5, ["thread (100)", "<module>", "_find_and_load"]),
        (1.5, 2.0, ["thread (100): MainThread", "<module>", "_find_and_load"]),
        (2.0, 9.0, ["thread (100): MainThread", "main", "run_simulation"]),
    ]
    events = []
    for start, end, frames in samples:
        names = [process, *frames]
        for ts, ph, ordered in ((start, "B", names), (end, "E", names[::-1])):
            events += [{"name": n, "ph": ph, "pid": 100, "tid": 7, "ts": ts * 1e6} for n in ordered]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(events))
    threads = fixed_costs.read_trace(trace)
    assert [(t.pid, t.name) for t in threads] == [(100, "thread (100): MainThread")]
    run = fixed_costs.sort_threads(threads)
    assert run.driver.seconds(fixed_costs._driver_kind) == pytest.approx(
        {"imports": 2.0, "simulation": 7.0}
    )
