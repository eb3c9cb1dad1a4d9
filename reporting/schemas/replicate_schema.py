"""What a replicate set's report holds (``replicates.json``): each number over the set's
runs, per site and per run; declared as :mod:`.schema` declares a run's report.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OverRuns:
    """One number over a replicate set's training runs (one seed each): the spread that
    training, DP noise and audit randomness give on the same consortium's data."""

    values: list[float | None]
    """Each run's own value, in the order of the set's seeds (None: that run has none)."""
    n: int
    """Runs with a value."""
    mean: float | None
    sd: float | None
    """Sample standard deviation over the runs (None below 2 runs)."""
    low: float | None
    high: float | None
    """The between-run 95% interval: where another training run of the same config would
    read (Student-t prediction interval, clipped to the number's range; None below 2 runs)."""
    mean_low: float | None
    mean_high: float | None
    """The 95% interval of the mean over training runs (Student t)."""
    lowest: float | None
    highest: float | None
    """The range of the runs' values."""


@dataclass(frozen=True)
class ReplicateSite:
    """A site's headline numbers over a replicate set (keys: ``between_runs.pooled()``)."""

    site_id: int
    numbers: dict[str, OverRuns]


@dataclass(frozen=True)
class ReplicateRun:
    """One run of a replicate set."""

    seed: int
    run_dir: str
    """Relative to the set's folder."""
    status: str
    """``complete`` or ``incomplete`` (then ``problems`` says what is missing)."""
    problems: list[str]
    cpu: str | None
    """The CPU that trained it (``platform.json``), None when unknown."""


@dataclass(frozen=True)
class ReplicateReport:
    """Everything ``replicates.json`` holds: one config trained and audited once per seed on
    the same partition (``partition_seed``)."""

    schema_version: int
    name: str | None
    partition_seed: int | None
    runs: list[ReplicateRun]
    sites: list[ReplicateSite]
