"""Timing of the bounds on large score vectors (target: 10^6 scores in <= 2 s).

Run: ``.venv/bin/python benchmarks/bounds_speed.py [--n 1000000] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from panoramia_fl.audit.stats.bounds import bound_curve, ceiling, hoeffding_lower_bound, lower_bound
from panoramia_fl.audit.stats.o1 import o1_lower_bound


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    s = rng.integers(0, 2, args.n)
    t = rng.normal(size=args.n) + 0.5 * s  # continuous scores: ~n distinct levels
    grid = np.linspace(0, 1, 101)
    cases: dict[str, Callable[[], object]] = {
        "lower_bound (every level)": lambda: lower_bound(t, s, beta=0.05),
        "lower_bound (grid 1000)": lambda: lower_bound(t, s, beta=0.05, threshold_grid=1000),
        "hoeffding_lower_bound": lambda: hoeffding_lower_bound(t, s, beta=0.05),
        "bound_curve (101 recalls)": lambda: bound_curve(t, s, beta=0.05, recall_grid=grid),
        "ceiling": lambda: ceiling(s, beta=0.05),
        "o1_lower_bound": lambda: o1_lower_bound(t, s, beta=0.05),
    }
    print(f"n = {args.n:,} scores, best of {args.repeats}")
    for name, fn in cases.items():
        print(f"  {name:<28s} {_best_time(fn, args.repeats):7.3f} s")
    print(f"  lower bound: {lower_bound(t, s, beta=0.05).lower_bound:.4f}")


if __name__ == "__main__":
    main()
