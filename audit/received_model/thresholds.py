"""Each check's threshold and what honest models read (``benchmarks/model_checks_null.py``).

The structure checks' thresholds come from the calibration rounds only (seed 100 of each
setting, 7 rounds, both sites: 56 rounds with a first ReLU layer), never from the evaluation
rounds the benchmark reports (seeds 0-3): twice the largest calibration value, rounded up to
a tenth, and at least 0.1. Consistency is exact and plausibility's bound is a proof (its
module); their ranges are what the calibration rounds read. ``docs/model_checks.md`` has the
numbers of both sets.
"""

from __future__ import annotations

THRESHOLDS: dict[str, tuple[float, str]] = {
    "consistency": (0.0, "0 problems: one model, announced to every site (84 of 84 rounds)"),
    "plausibility": (0.0, "0.99 to 1.00 on 72 calibration rounds"),
    "lone_units": (0.2, "0 to 0.063 on 56 calibration rounds"),
    "repeated_rows": (0.1, "0 to 0 on 56 calibration rounds"),
    "dead_units": (0.8, "0 to 0.35 on 56 calibration rounds"),
}
"""check -> (threshold, honest range); plausibility's threshold is its bound's (its module)."""
