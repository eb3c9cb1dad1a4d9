"""Configuration of one PANORAMIA audit (validated, keyword-only, serialisable)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from panoramia_fl.audit.stats.one_run_methods import DEFAULT_BETA, DEFAULT_DELTA

AuditSeeding = Literal["sequence", "legacy"]
"""How a federated run seeds each site's audit from ``settings.seed``, its own seed and the
site: ``sequence`` (numpy's SeedSequence, independent streams for every site of every run)
or ``legacy`` (``settings_seed * 1000 + run_seed * 7 + site_id``, which repeats across the
runs of a replicate set once a consortium has more than 7 sites; runs written before
``sequence`` keep it)."""
GbmFeatures = Literal["loss", "loss+pixels"]
"""The gbm design's inputs: loss features (+label), or those and pooled pixels."""


def _all_feature_sets() -> list[GbmFeatures]:
    return ["loss", "loss+pixels"]


class StrictModel(BaseModel):
    """A settings block: unknown keys are errors, values are frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


ONE_SIDED_SHARES = 2
"""The one-sided game's two bounds (c_lb and {c+eps}_lb) share beta: beta/2 each."""
TWO_SIDED_SHARES = 4
"""The two-sided game's four bounds (b and the MIA on each side) share beta: beta/4 each."""


class SplitConfig(StrictModel):
    """How the member set D_f is cut (Algorithm 1, step 1).

    Each value is a fraction of D_f (``0 < v < 1``) or a record count (``v >= 1``). The
    splits are disjoint; what is left after D_G, validation and train goes to the game's
    test split, so m uses as much of the member set as the other splits allow.
    """

    generator: float | None = Field(
        None,
        gt=0,
        description="D_G: records that train the generator; None: 0.3 for a trained "
        "generator, 0.1 for the reference pool (which only reads D_G's label histogram)",
    )
    train: float = Field(0.3, gt=0, description="D_in^tr: members that train b and the MIA")
    val: float = Field(0.1, gt=0, description="D_in^val: members for model selection")


class GeneratorConfig(StrictModel):
    """The generator G that supplies non-members."""

    options: dict[str, Any] = Field(
        default_factory=dict,
        description="kind-specific settings, validated by the generator (e.g. gpt2: "
        "pretrain_epochs, prompt_tokens, top_k, temperature)",
    )

    kind: str = Field(
        "auto",
        description="registered generator name, e.g. cgan, vae, reference_pool, mst, gpt2; "
        "auto: reference_pool when run_audit gets a public pool, else the modality's trained "
        "generator (image: cgan, tabular: mst, text: gpt2)",
    )
    epochs: int = Field(30, ge=0, description="training budget (generator epochs)")
    filter: bool = Field(
        False,
        description="drop samples a real-vs-synthetic classifier "
        "flags as synthetic with high confidence",
    )
    filter_confidence: float = Field(0.95, gt=0.5, lt=1.0)
    resample_labels: bool = Field(
        True, description="reference pool: match the site's label distribution"
    )
    batch_size: int = Field(64, ge=1, description="generator training batch size")
    learning_rate: float = Field(2e-4, gt=0, description="generator learning rate")
    latent_dim: int = Field(64, ge=1, description="noise / latent dimension")


class ClassifierConfig(StrictModel):
    """Baseline b and MIA share this design; only h vs f differs.

    ``design`` picks how b and the MIA score records: ``"score"`` trains nothing and scores
    each record by one scalar statistic of its model (h for b, f for the MIA: the
    log-likelihood, raw or calibrated by the reference models), so every member outside D_G
    plays in the game; ``"gbm"`` is one gradient-boosting model on the loss features and
    down-sampled pixels (boosting rounds selected on validation); ``"stacked"`` trains a
    small CNN on the pixels and a gradient-boosting loss module and stacks their scores with
    a logistic regression (the paper's design). ``"auto"``: ``score`` for images when
    ``feature_sets`` is ``[loss]`` (one statistic per record: a classifier would only learn
    its direction), else ``gbm`` (tabular and text classifiers also read the record).
    """

    design: Literal["auto", "score", "gbm", "stacked"] = Field(
        "auto", description="auto, score, gbm or stacked"
    )
    gbm_iterations: list[int] = Field(
        default_factory=lambda: [50, 100, 200, 400], description="candidate boosting rounds (gbm)"
    )
    gbm_learning_rates: list[float] = Field(
        default_factory=lambda: [0.05, 0.1], description="candidate learning rates (gbm)"
    )
    gbm_max_leaf_nodes: int = Field(15, ge=2)
    feature_sets: list[GbmFeatures] = Field(
        default_factory=_all_feature_sets,
        description="gbm candidates: loss features (+label) alone and with pooled pixels",
    )
    single_statistics: bool = Field(
        True,
        description="also try each confidence statistic "
        "as the score (threshold attacks), selected on validation",
    )
    pixel_side: int = Field(
        14,
        ge=1,
        description="pixels are average-pooled to at most "
        "this side before entering the gbm / loss module",
    )

    epochs: list[int] = Field(
        default_factory=lambda: [5, 10, 20], description="candidate epochs, selected on validation"
    )
    learning_rate: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    batch_size: int = Field(128, ge=1)
    helper_reference: bool = Field(
        True,
        description="MIA also sees h's loss as a difficulty "
        "reference (valid: h does not depend on the game)",
    )


class CalibrationConfig(StrictModel):
    """Reference models for the calibrated MIA (offline LiRA / RMIA statistics).

    Models of the target's architecture trained on records that are never game records
    (public or generated: the helper's training data when ``run_audit`` trains them itself).
    Their per-record statistics become features of both b and the MIA, and each classifier
    also gets its own model's statistic calibrated by them (h for b, f for the MIA).
    """

    reference_models: int = Field(
        2, ge=0, description="K reference models; 0 turns calibration off"
    )
    epochs: int = Field(10, ge=1, description="training epochs of each reference model")
    fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="share of the reference records each model trains on (a random subset "
        "per model, as in LiRA's shadow models)",
    )


class AuditConfig(StrictModel):
    """Settings of :func:`audit.run_audit`."""

    beta: float = Field(
        DEFAULT_BETA, gt=0, lt=1, description="overall level, shared among the game's bounds"
    )
    repeats: int = Field(5, ge=1, description="re-split b/MIA training data and redraw the game")
    quick: bool = Field(
        False,
        description="one repeat unless repeats is set, smallest selection grid, coarser "
        "pixels, generator and helper epochs capped at 5",
    )
    threshold_grid: int | None = Field(
        None,
        ge=2,
        description="None: every score level is a threshold; G: a fixed grid of G thresholds "
        "(union mode), placed by threshold_spacing",
    )
    threshold_spacing: Literal["quantile", "geometric"] = Field(
        "quantile",
        description="quantile: the top-j/G quantiles; geometric: the top-k records for about G "
        "geometrically spaced counts k (fine among the most confident guesses)",
    )
    threshold_selection: Literal["union", "split"] = Field(
        "union",
        description="union: best threshold with a union bound over every score level; "
        "split: the cut chosen on the validation split, one Clopper-Pearson test on the game",
    )
    pairing: Literal["label", "none"] = Field(
        "label",
        description="label: each game slot pairs a member with a non-member of the same label "
        "(closeness then holds per label); none: the paper's unpaired draw. Records without "
        "labels (text) always play unpaired",
    )
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)
    splits: SplitConfig = Field(default_factory=SplitConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    helper_epochs: int = Field(10, ge=1)
    helper_real_records: bool = Field(
        True,
        description="with a trained generator, the helper h (and the reference models trained "
        "on its records) also trains on the real records the audit may use: the public pool "
        "when one is given, and D_G (the members spent on the generator, never game records). "
        "b then knows what real records look like, as f does; false: synthetic records only "
        "(the paper's helper). A reference pool's records are real already",
    )
    synthetic_multiplier: float = Field(
        1.0, gt=0, description="helper training set size relative to the member train split"
    )
    classifier: ClassifierConfig = Field(default_factory=ClassifierConfig)
    saturation_margin: float = Field(
        0.3, ge=0, description="c_lb within this of the ceiling is flagged saturated"
    )
    delta: float = Field(
        DEFAULT_DELTA,
        gt=0,
        lt=1,
        description="delta at which the f-DP one-run bounds (canary audit, O(1)) state eps; "
        "a run sets it to dp.delta",
    )
    return_scores: bool = Field(False, description="keep per-record scores in the result")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = 0

    @property
    def one_sided_level(self) -> float:
        """The level of each of the one-sided game's bounds (and RM;RN's one-sided ones)."""
        return self.beta / ONE_SIDED_SHARES

    @property
    def two_sided_level(self) -> float:
        """The level of each of the two-sided game's bounds (and RM;RN's two-sided ones)."""
        return self.beta / TWO_SIDED_SHARES

    @model_validator(mode="after")
    def _quick_means_one_repeat(self) -> AuditConfig:
        # An explicit ``repeats`` wins: quick audits with intervals are a common CPU setting.
        if self.quick and "repeats" not in self.model_fields_set:
            object.__setattr__(self, "repeats", 1)
        return self
