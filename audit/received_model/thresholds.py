"""Each check's threshold and what honest models read (``benchmarks/model_checks_null.py``).

Chosen on calibration rounds (seeds 100-102 of each setting), never on the evaluation rounds
the benchmark reports (seeds 0-2): ``docs/model_checks.md`` says how and what each reads.
"""

from __future__ import annotations

THRESHOLDS: dict[str, tuple[float, str]] = {
    # Exact: a digest differs or an announcement is missing, or it does not.
    "consistency": (0.0, "0 problems: one model, announced to every site of the round"),
    # A proof (Adam's step bound); the calibration rounds' range is what honest models read.
    "plausibility": (0.0, "0.00-0.00 on calibration rounds"),
    "lone_units": (0.5, "0.00-0.00 on calibration rounds"),
    "repeated_rows": (0.5, "0.00-0.00 on calibration rounds"),
    "dead_units": (0.9, "0.00-0.00 on calibration rounds"),
}
"""check -> (threshold, honest range); plausibility's threshold is its bound's (its module)."""
