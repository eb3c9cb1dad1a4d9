"""Where a run's wall time goes that is neither the sites' compute nor the evaluation it waits for.

    python benchmarks/fixed_costs.py [--rate 10] [--keep FILE] -- panoramia-fl run CONFIG ...
    python benchmarks/fixed_costs.py --profile FILE      # a trace written before (--keep)

Runs the command under ``py-spy`` (``pip install py-spy``; not a dependency of the project),
which samples every thread of every process it starts ``--rate`` times a second, idle threads
included, into a trace of timed stacks on one clock (Chrome's trace format), then sorts each
stretch of a thread's time by the stack it caught:

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

The run's compute is the time during which at least one site trains or computes its audit,
or the server waits for a central evaluation (compute the settings ask for:
``fl.central_evaluation``): sites that run side by side count once, a round lasts as long as
its slowest site, and sites that take turns add up. The fixed costs are the rest of the wall
time, each moment put to what the driver (outside the simulation) or the server (inside it)
was doing then. Prints each thread's seconds per kind, then that split. Sampling costs the
run about 4% at 10 samples a second on a 2-core machine.
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
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

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
ENGINE_ENDS = "RayBackend.terminate"
"""Where Flower's engine, its ServerApp done, ends its actors and shuts Ray down."""
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


Span = tuple[float, float]
"""``(start, end)`` in seconds from the trace's start."""
Stretch = tuple[float, float, list[str]]
"""A span of a thread's time and the stack it held all along (outermost frame first)."""


def _length(spans: list[Span]) -> float:
    return sum(b - a for a, b in spans)


@dataclass
class Thread:
    """One sampled thread: its stacks (outermost frame first) over time."""

    name: str
    pid: int
    stretches: list[Stretch]

    def spans(self, sorter: Sorter, kinds: Container[str]) -> list[Span]:
        """The stretches whose stack ``sorter`` puts in one of ``kinds``."""
        return [(a, b) for a, b, stack in self.stretches if sorter(stack) in kinds]

    def seconds(self, sorter: Sorter) -> dict[str, float]:
        seconds: dict[str, float] = defaultdict(float)
        for a, b, stack in self.stretches:
            seconds[sorter(stack)] += b - a
        return seconds


def read_trace(path: Path) -> list[Thread]:
    """The threads of a py-spy trace (``--format chrometrace``): each event opens or closes a
    frame of a thread's stack at a time in microseconds; a stack holds until the next event
    of its thread. py-spy closes every frame at the trace's end, so a thread that ended
    earlier keeps its last stack to the end: bound it by another thread where that matters.

    py-spy tells a thread's events from another's by the thread's id alone, and the forks of
    one process (Ray's workers forked from the fork server) share their main thread's id:
    their events replay as one stack, each sample of which belongs to the process and the
    thread its outer frames name, and holds until that thread's next sample."""
    events: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in json.loads(path.read_text()):
        events[event["tid"]].append(event)
    threads: dict[tuple[int, str], list[Stretch]] = defaultdict(list)
    names: dict[tuple[int, str], str] = {}
    for thread_events in events.values():
        stack: list[str] = []
        held: dict[tuple[int, str], tuple[float, list[str]]] = {}
        last: tuple[int, str] | None = None  # whose stack the events last changed
        now = 0.0
        for ts, at_once in groupby(thread_events, key=lambda e: e["ts"]):
            for event in at_once:
                if event["ph"] == "B":
                    stack.append(event["name"])
                elif stack:
                    stack.pop()
            now = ts / 1e6
            owner = _owner(stack) if stack else last
            if owner is None:
                continue
            names[owner] = max(names.get(owner, ""), _thread_frame(stack), key=len)
            if owner in held and held[owner][1] != stack:
                start, ended = held.pop(owner)
                threads[owner].append((start, now, ended))
            if stack and owner not in held:
                held[owner] = (now, list(stack))
            last = owner if stack else None
        for owner, (start, ended) in held.items():
            threads[owner].append((start, now, ended))
    return [Thread(names[owner], owner[0], stretches) for owner, stretches in threads.items()]


def _owner(stack: list[str]) -> tuple[int, str]:
    """The process (the innermost of py-spy's ``process PID:"command"`` frames) and the
    thread (``thread (TID)``) whose stack ``stack`` is. The thread's frame adds its name
    (``thread (TID): name``) only once Python's threading module is loaded: a thread is its
    id, so that a driver's first stretches, before that, are the same thread as the rest."""
    processes = [n for n in stack if n.startswith("process ")]
    pid = int(processes[-1].removeprefix("process ").split(":", 1)[0]) if processes else 0
    return pid, _thread_frame(stack).split(":", 1)[0]


def _thread_frame(stack: list[str]) -> str:
    """py-spy's frame for the thread of ``stack``: ``thread (TID)``, and its name once known."""
    return next((n for n in stack if n.startswith("thread (")), "")


def union(spans: Iterable[Span]) -> list[Span]:
    """``spans`` merged where they overlap or touch, in order."""
    merged: list[Span] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def gaps(spans: list[Span], start: float, end: float) -> list[Span]:
    """The parts of ``[start, end]`` outside the merged ``spans``."""
    out, at = [], start
    for a, b in spans:
        if a > at:
            out.append((at, min(a, end)))
        at = max(at, b)
    if end > at:
        out.append((at, end))
    return [(a, b) for a, b in out if b > a]


def overlap(span: Span, stretches: list[Stretch]) -> Iterator[tuple[float, list[str]]]:
    """``(seconds, stack)`` of each stretch of a thread inside ``span``."""
    for a, b, stack in stretches:
        seconds = min(span[1], b) - max(span[0], a)
        if seconds > 0:
            yield seconds, stack


@dataclass
class Run:
    driver: Thread
    server: Thread | None
    commits: Thread | None
    sites: list[Thread]


def sort_threads(threads: list[Thread]) -> Run:
    """The driver's main thread, the ServerApp's thread, the thread that evaluates and writes
    the rounds, and the site actors' main threads."""
    sampled = [t for t in threads if t.stretches]
    driver_pid = min(sampled, key=lambda t: t.stretches[0][0]).pid  # the command: sampled first
    driver = server = commits = None
    sites = []
    for thread in sampled:
        flat = [n for _, _, stack in thread.stretches for n in stack]
        if thread.pid == driver_pid and thread.name.startswith(f"thread ({driver_pid})"):
            driver = thread
        elif "server_th" in thread.name:
            server = thread
        elif "round-commit" in thread.name:
            commits = thread
        elif _has(flat, "train_locally") or _has(flat, "run_audits_of"):
            sites.append(thread)
    if driver is None:
        raise SystemExit("no driver thread in the trace")
    if server is not None:
        # The server's thread ends inside the simulation: its last stack is not its end,
        # which is at the latest where Flower's engine begins to end (Ray's shutdown).
        in_simulation = driver.spans(_driver_kind, {"simulation"})
        if in_simulation:
            ending = [a for a, _, stack in driver.stretches if _has(stack, ENGINE_ENDS)]
            end = min(ending, default=in_simulation[-1][1])
            server.stretches = [(a, min(b, end), s) for a, b, s in server.stretches if a < end]
    return Run(driver, server, commits, sites)


OUTSIDE = "the driver outside the simulation"
ENGINE = "Flower's engine starting and ending (no ServerApp thread)"
UNTRACED = "outside the trace (before py-spy's first sample of the command, after its last)"
PARTS = {
    "first message: site actors start": "the site actors' start (first message)",
    "rounds: waiting for the sites": "the rounds beyond training (messages, aggregation)",
    "server work between rounds": "the server's own work between rounds",
    "the audits (waiting)": "the audits beyond their compute (start-up, messages)",
    "central evaluation": "the server's wait for an evaluation (none: compute)",
}
"""Each of the ServerApp thread's kinds: the part of the fixed costs its moments go to."""


def fixed_parts(run: Run, fixed: list[Span]) -> dict[str, float]:
    """The seconds of ``fixed`` by what the driver did then, or inside the simulation, the
    ServerApp's thread (Flower's engine starting or ending when it has no stack)."""
    parts: dict[str, float] = defaultdict(float)
    for gap in fixed:
        for a, b, stack in run.driver.stretches:
            here = (max(gap[0], a), min(gap[1], b))
            if here[1] <= here[0]:
                continue
            kind = _driver_kind(stack)
            if kind != "simulation":
                parts[f"{OUTSIDE}: {kind}"] += here[1] - here[0]
                continue
            placed = 0.0
            for seconds, server_stack in overlap(here, run.server.stretches if run.server else []):
                parts[PARTS[_server_kind(server_stack)]] += seconds
                placed += seconds
            parts[ENGINE] += here[1] - here[0] - placed
    return parts


def report(path: Path, wall: float | None) -> None:
    run = sort_threads(read_trace(path))
    sorters = [(run.driver, _driver_kind), (run.server, _server_kind), (run.commits, _commit_kind)]
    for thread, sorter in [*sorters, *((site, _site_kind) for site in run.sites)]:
        if thread is None:
            continue
        seconds = thread.seconds(sorter)
        print(f"{thread.name} (process {thread.pid}): {sum(seconds.values()):.1f} s")
        for kind, s in sorted(seconds.items(), key=lambda item: -item[1]):
            print(f"  {s:7.1f} s  {kind}")
    end = max(b for t in (run.driver, *run.sites) for _, b, _ in t.stretches)
    wall = max(wall, end) if wall is not None else end
    compute = {
        "the sites' training": union(
            span for site in run.sites for span in site.spans(_site_kind, {"training"})
        ),
        "the sites' audit compute": union(
            span for site in run.sites for span in site.spans(_site_kind, {"audit compute"})
        ),
        "the central evaluation the server waits for": (
            run.server.spans(_server_kind, {"central evaluation"}) if run.server else []
        ),
    }
    busy = union(span for spans in compute.values() for span in spans)
    fixed = gaps(busy, 0.0, wall)
    print(f"\nwall {wall:.1f} s = compute {_length(busy):.1f} s", end="")
    print(f" + fixed costs {_length(fixed):.1f} s")
    for what, spans in compute.items():
        print(f"  {_length(spans):7.1f} s  {what} (some at once with the others)")
    for site in run.sites:
        seconds = site.seconds(_site_kind)
        print(
            f"  process {site.pid} on its own: training {seconds.get('training', 0):.1f} s, "
            f"audit compute {seconds.get('audit compute', 0):.1f} s"
        )
    parts = fixed_parts(run, fixed)
    # The wall time also holds the command's start before py-spy first sampled it (py-spy's
    # start included) and, measured around py-spy, its writing of the trace.
    parts[UNTRACED] = _length(fixed) - sum(parts.values())
    print("fixed costs by part:")
    for part, s in sorted(parts.items(), key=lambda item: -item[1]):
        if s >= 0.05:
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
         "--threads", "-f", "chrometrace", "-o", str(out), "--", *command],
        check=True,
    )  # fmt: skip
    report(out, time.time() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
