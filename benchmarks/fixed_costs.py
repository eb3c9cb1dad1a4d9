"""Where a run's wall time goes that is neither the sites' training nor their audits' compute.

    python benchmarks/fixed_costs.py [--rate 10] [--keep FILE] -- panoramia-fl run CONFIG ...
    python benchmarks/fixed_costs.py --profile FILE      # a profile written before

Runs the command under ``py-spy`` (``pip install py-spy``; not a dependency of the project),
which samples every thread of every process it starts ``--rate`` times a second, idle threads
included, then sorts each sample by the stack it caught:

- the driver's main thread, before and after the Flower simulation: imports, the run's data,
  Ray's start, the reference models, the report, Ray's shutdown and the process's exit;
- the ServerApp's thread: the first message to every site (the site actors start: their
  imports), the rounds (waiting for the sites' replies), the wait for the last round's
  central evaluation (the others run beside the next round, on the thread that evaluates
  and writes the rounds, shown on its own), the server's own work between them
  (aggregation, serialisation), the audits;
- each site actor's main thread: imports, local training (``train_locally``), the audits'
  compute (``run_audits_of``), the rest of a message's handling, idle.

An import met inside training or an audit (``torch.optim`` loading ``torch._dynamo``,
scikit-learn's first use) counts as an import: a process pays it once, whatever its data.
Prints each thread's seconds per kind and the run's wall time split into the sites' compute
(the mean over site actors of training and audit compute: they run side by side), the central
evaluation the server waits for (compute the settings ask for: ``fl.central_evaluation``) and
the fixed costs, the rest. Sampling costs the run about 4% at 10 samples a second on a 2-core
machine. A gap in the sampling (the driver's main thread sampled over a second less than the
run's wall time; seen when a process of the run is killed early) is said: it counts among
the fixed costs, not among their parts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Sorter = Callable[[list[str]], str]


def _has(names: list[str], function: str) -> bool:
    """Whether ``function`` (its last name: ``evaluate_fn`` matches ``f.<locals>.evaluate_fn``)
    is in a stack."""
    return any(n == function or n.endswith("." + function) for n in names)


Kinds = tuple[tuple[str, str], ...]
"""``(function, kind)``: a stack with ``function`` in it is of that kind; the first one found."""

DRIVER: Kinds = (
    ("run_simulation", "simulation"),
    ("start_ray", "Ray's start"),
    ("_ray_init", "Ray's start"),  # also started ahead of the run's imports, by the CLI
    ("ensure_reference_models", "reference models"),
    ("prepare_run_dir", "the run's data"),
    ("write_report", "report"),
    ("shutdown", "Ray's shutdown"),
    ("_find_and_load", "imports"),
)
SERVER: Kinds = (
    # Rounds are evaluated and written beside the next round's training (server.round_commits);
    # the server waits only for the last one.
    ("RoundCommits.__exit__", "central evaluation"),
    ("evaluate_fn", "central evaluation"),  # a profile of a version that evaluated here
    ("run_audits", "the audits (waiting)"),
    ("site_map", "first message: site actors start"),
    ("send_and_receive", "rounds: waiting for the sites"),
)
COMMITS: Kinds = (
    ("evaluate_fn", "central evaluation"),
    ("write_round", "writing the round"),
)
SITE: Kinds = (
    ("_find_and_load", "imports"),
    ("train_locally", "training"),
    ("run_audits_of", "audit compute"),
)


def _kind(names: list[str], kinds: Kinds) -> str | None:
    return next((kind for function, kind in kinds if _has(names, function)), None)


def _driver_kind(names: list[str]) -> str:
    short = len(names) <= 2  # only the process's and thread's own frames
    return _kind(names, DRIVER) or ("the process's start and exit" if short else "other")


def _server_kind(names: list[str]) -> str:
    return _kind(names, SERVER) or "server work between rounds"


def _commit_kind(names: list[str]) -> str:
    return _kind(names, COMMITS) or "idle"


def _site_kind(names: list[str]) -> str:
    kind = _kind(names, SITE)
    if kind is not None:
        return kind
    calls = [n for n in names if not n.startswith(("process ", "thread "))]
    if not calls or _has(calls[-1:], "main_loop"):
        return "idle"  # py-spy's stack of a thread that waits in native code: no Python frame
    return "message handling"


@dataclass
class Thread:
    name: str
    seconds: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def read_profile(path: Path) -> list[tuple[str, list[list[str]], float]]:
    """``(thread name, stacks outermost first, seconds a sample)`` of a py-spy speedscope file."""
    data = json.loads(path.read_text())
    frames = [f["name"] for f in data["shared"]["frames"]]
    threads = []
    for profile in data["profiles"]:
        weights = profile["weights"]
        step = weights[0] if weights else 0.0
        stacks = [[frames[i] for i in sample] for sample in profile["samples"]]
        threads.append((profile["name"], stacks, step))
    return threads


def sort_threads(path: Path) -> tuple[Thread, Thread | None, Thread | None, list[Thread]]:
    """The driver's main thread, the ServerApp's thread, the thread that evaluates and writes
    the rounds, and the site actors' main threads."""
    threads = read_profile(path)
    driver_pid = threads[0][0].split()[1]
    driver = server = commits = None
    sites = []
    for name, stacks, step in threads:
        flat = [n for s in stacks for n in s]
        pid, tid = name.split()[1], name.split()[3]
        sorter: Sorter | None = None
        if pid == driver_pid and tid == driver_pid:
            sorter = _driver_kind
        elif "server_th" in name:
            sorter = _server_kind
        elif "round-commit" in name:
            sorter = _commit_kind
        elif _has(flat, "train_locally") or _has(flat, "run_audits_of"):
            sorter = _site_kind
        if sorter is None:
            continue
        seconds: dict[str, float] = defaultdict(float)
        for stack in stacks:
            seconds[sorter(stack)] += step
        thread = Thread(name, seconds)
        if sorter is _driver_kind:
            driver = thread
        elif sorter is _server_kind:
            server = thread
        elif sorter is _commit_kind:
            commits = thread
        else:
            sites.append(thread)
    if driver is None:
        raise SystemExit(f"{path}: no driver thread in the profile")
    return driver, server, commits, sites


UNSAMPLED_WARN_S = 1.0
"""A driver's main thread sampled this much less than the run's wall time is a gap in
py-spy's sampling (the thread lives from the first to the last moment of the run; at 10
samples a second the count is otherwise within a second of it)."""


def report(path: Path, wall: float | None) -> None:
    driver, server, commits, sites = sort_threads(path)
    for thread in (driver, server, commits, *sites):
        if thread is None:
            continue
        print(f"{thread.name}: {thread.total:.1f} s")
        for kind, s in sorted(thread.seconds.items(), key=lambda item: -item[1]):
            print(f"  {s:7.1f} s  {kind}")
    wall = wall if wall is not None else driver.total
    train = sum(t.seconds.get("training", 0.0) for t in sites) / max(len(sites), 1)
    audit = sum(t.seconds.get("audit compute", 0.0) for t in sites) / max(len(sites), 1)
    central = server.seconds.get("central evaluation", 0.0) if server else 0.0
    fixed = wall - train - audit - central
    print(f"\nwall {wall:.1f} s = sites' training {train:.1f} s + audit compute {audit:.1f} s")
    print(f"  + central evaluation {central:.1f} s + fixed costs {fixed:.1f} s")
    print(f"fixed costs with the central evaluation counted among them: {fixed + central:.1f} s")
    unsampled = wall - driver.total
    if unsampled > UNSAMPLED_WARN_S:
        print(
            f"py-spy sampled the driver's main thread {driver.total:.1f} s of the run's "
            f"{wall:.1f} s: {unsampled:.1f} s not sampled count among the fixed costs above "
            "(the parts below are sampled time only)"
        )
    if server is None:
        return
    on_server = server.seconds.get
    parts = {
        "the driver outside the simulation": driver.total - driver.seconds.get("simulation", 0),
        "the site actors' start (first message)": on_server("first message: site actors start", 0),
        "the rounds beyond training (messages, imports in round 1, aggregation)": (
            on_server("rounds: waiting for the sites", 0) - train
        ),
        "the server's own work between rounds": on_server("server work between rounds", 0),
        "the audits beyond their compute (start-up, imports, messages)": (
            on_server("the audits (waiting)", 0) - audit
        ),
    }
    print("fixed costs by part:")
    for part, s in parts.items():
        print(f"  {s:7.1f} s  {part}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="write the py-spy profile here")
    parser.add_argument("--profile", type=Path, help="read this profile; run nothing")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.profile is not None:
        report(args.profile, None)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    out = args.keep or Path(tempfile.mkdtemp(prefix="fixed-costs-")) / "profile.json"
    began = time.time()
    subprocess.run(
        [spy, "record", "-r", str(args.rate), "--nonblocking", "--idle", "--subprocesses",
         "--threads", "-f", "speedscope", "-o", str(out), "--", *command],
        check=True,
    )  # fmt: skip
    report(out, time.time() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
