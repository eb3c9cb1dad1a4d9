"""What one round's inversion audit at one site sends: summary numbers, no records."""

from __future__ import annotations

from dataclasses import dataclass

from panoramia_fl.audit.inversion.inversion_config import AttackKind


@dataclass(frozen=True)
class InversionResult:
    """One round's inversion audit at one site: summary numbers only (what leaves the site)."""

    round: int
    attack: AttackKind
    modality: str
    measure: str
    """``ssim`` (images) or ``fields`` (tabular: the share of fields recovered)."""
    threshold: float
    """A record counts as rebuilt at this quality or above."""
    n_records: int
    """Records the attacked update came from."""
    n_dummies: int
    """Records the attack rebuilt (``max_dummies`` standing in for more)."""
    n_scored: int
    """Attacked records compared with their reconstruction."""
    quality_mean: float
    quality_median: float
    quality_max: float
    share_rebuilt: float
    """Share of scored records at or above ``threshold``."""
    psnr_mean: float | None
    baseline_quality_mean: float
    baseline_quality_max: float
    baseline_share_rebuilt: float
    baseline_psnr_mean: float | None
    match_loss: float
    """The attack's final cosine distance (0: the dummy update matches exactly)."""
    iterations: int
    """Optimisation steps the attack took (all restarts)."""
    seconds: float
    """Wall time of attack and baseline together."""
    dp_epsilon: float | None = None
    """The site's record-level epsilon spent by the end of the attacked round, if DP."""
    agreement: float | None = None
    """Tabular: the mean share of restarts agreeing with each pooled field, the attacker's
    own confidence (it needs no true row); None for images."""
    step_budget: int | None = None
    """Steps each attack (the site's and the baseline's) was given, restarts x iterations;
    None in results written before the budget was set in steps (a time limit decided)."""
    baseline_iterations: int | None = None
    """Optimisation steps the baseline's attack took."""
    cut_short: bool | None = None
    """The time guard (``time_limit_s``) stopped the attack or its baseline before its step
    budget: the numbers then depend on the machine's speed."""
