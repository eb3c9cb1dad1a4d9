"""A site's local audit: PANORAMIA on its own members, comparisons on its own holdout, and
(simulation only) the one-run audit of the site's input canaries."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from panoramia_fl.audit.canaries.input_canaries import InputCanaryResult
from panoramia_fl.audit.config import AuditConfig, AuditSeeding
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.audit.tabular.attribute_result import (
    AttributeInferenceConfig,
    AttributeInferenceResult,
)
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.contracts.files import atomic_write_text

EXPOSED_RECORDS_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SiteAuditPolicy:
    settings: AuditConfig
    use_holdout: bool = True
    use_public_pool: bool = False
    reference_states: tuple[dict[str, torch.Tensor], ...] | None = None
    """Weights of the run's shared reference models (public records only); ``None``: the
    audit trains its own on the helper's records."""
    exposed_records: int = 0
    """K > 0: write the site's K most exposed members to ``exposed_records_path``."""
    exposed_records_path: Path | None = None
    """A file in the site's own state directory; required when ``exposed_records`` > 0."""
    attribute_inference: AttributeInferenceConfig | None = None
    """The sensitive field whose inference from the final model the site measures."""
    seeding: AuditSeeding = "sequence"
    """How the site's audit seed is drawn (:func:`audit_seed`)."""

    def __post_init__(self) -> None:
        if self.exposed_records > 0 and self.exposed_records_path is None:
            raise ValueError("exposed_records > 0 needs exposed_records_path (site-local)")


_FINAL = 0
"""The final model's key among the targets (earlier rounds are numbered from 1)."""


AuditRunner = Callable[
    [
        Any,
        torch.nn.Module | None,
        SiteData,
        int,
        Mapping[int, torch.nn.Module],
        Mapping[int, torch.nn.Module],
    ],
    SiteResults,
]
"""``runner(task, final_model, data, seed, earlier, updates) -> SiteResults``: PANORAMIA
(``result``, None when only earlier rounds are asked for), its brief audits of earlier
rounds (``by_round``) and of the site's own updates (``updates``), and the input-canary
audit (``input_canaries``, when the site has them)."""


def make_audit_runner(policy: SiteAuditPolicy) -> AuditRunner:
    """``runner(task, model, data, seed, earlier, updates) -> SiteResults`` for this site.

    ``model`` is the final model (None: only earlier rounds are asked for); ``earlier``
    maps earlier rounds to their global models and ``updates`` rounds to the site's own
    local models of them, each audited with the same settings and the same generated
    non-members, helper and reference models (only f changes).

    With ``policy.exposed_records`` > 0 the runner also writes the site's most exposed
    members to ``policy.exposed_records_path``; the returned output (the reply's content)
    never holds them. When ``data`` has canaries, the runner audits them after PANORAMIA
    (:func:`input_canary_audit_of`).
    """

    def runner(
        task: Any,
        model: torch.nn.Module | None,
        data: SiteData,
        seed: int,
        earlier: Mapping[int, torch.nn.Module],
        updates: Mapping[int, torch.nn.Module],
    ) -> SiteResults:
        from panoramia_fl.audit.panoramia.over_rounds import (
            round_leakage,  # heavy: only in processes that audit
        )
        from panoramia_fl.audit.panoramia.pipeline import run_audits_of

        if model is not None and data.has_input_canaries:
            _check_input_canary_coins(data)
        settings = policy.settings.model_copy(
            update={
                "seed": audit_seed(policy.settings.seed, seed, data.site_id, seeding=policy.seeding)
            }
        )
        use_holdout = policy.use_holdout and len(data.holdout_x) > 0
        holdout = data.records("holdout") if use_holdout else None
        public = None
        if policy.use_public_pool and data.public_x is not None:
            public = data.records("public")
        references = _reference_models(task, policy.reference_states)
        targets = dict(earlier)
        if model is not None:
            targets[_FINAL] = model
        # The site's own update of round r is target -r (global rounds are positive).
        targets.update({-r: local for r, local in updates.items()})
        results = run_audits_of(
            task,
            targets,
            data.records("train"),
            settings,
            nonmembers=holdout,
            public_pool=public,
            reference_models=references,
        )
        by_round = [round_leakage(results[r], r) for r in sorted(earlier)]
        own = [round_leakage(results[-r], r) for r in sorted(updates)]
        if model is None:
            return SiteResults(by_round=by_round, updates=own)
        input_canaries = _final_model_extras(policy, task, model, data, references, settings)
        return SiteResults(
            panoramia=results[_FINAL],
            input_canaries=input_canaries,
            by_round=by_round,
            updates=own,
            attribute_inference=_attribute_inference(policy, task, model, data, settings),
        )

    return runner


def _final_model_extras(
    policy: SiteAuditPolicy,
    task: Any,
    model: torch.nn.Module,
    data: SiteData,
    references: list[torch.nn.Module] | None,
    settings: AuditConfig,
) -> InputCanaryResult | None:
    """After the final model's PANORAMIA audit: its most exposed members, written at the
    site (never in the reply), and its canary audit when the site has canaries."""
    if policy.exposed_records > 0 and policy.exposed_records_path is not None:
        write_exposed_records(
            policy.exposed_records_path,
            task,
            model,
            data,
            references,
            k=policy.exposed_records,
            device_name=settings.device,
        )
    if not data.has_input_canaries:
        return None
    return input_canary_audit_of(
        task,
        model,
        data,
        beta=settings.beta,
        delta=settings.delta,
        device_name=settings.device,
    )


def _attribute_inference(
    policy: SiteAuditPolicy,
    task: Any,
    model: torch.nn.Module,
    data: SiteData,
    settings: AuditConfig,
) -> AttributeInferenceResult | None:
    """The final model's attribute-inference audit on the site's members against its
    held-out records (its guesses trained on the public pool when the site has one)."""
    if policy.attribute_inference is None:
        return None
    from panoramia_fl.audit.panoramia.settings import resolve_device
    from panoramia_fl.audit.tabular.attribute_game import attribute_inference_audit

    if len(data.holdout_x) == 0:
        raise ValueError(
            f"site {data.site_id}: audit.attribute_inference plays its members against "
            "held-out records, and the site has none (partition.holdout_fraction > 0)"
        )
    public = data.records("public") if data.public_x is not None else None
    return attribute_inference_audit(
        task,
        model,
        data.records("train"),
        data.records("holdout"),
        config=policy.attribute_inference,
        schema=getattr(task, "schema", None),
        public=public,
        beta=settings.beta,
        seed=settings.seed,
        device=resolve_device(settings.device),
    )


AUDIT_SEEDS = 2**21
"""``sequence`` seeds lie in ``[0, AUDIT_SEEDS)``: the audit derives its stages' seeds as
``seed * 1009 + repeat`` (:mod:`audit.panoramia.repeat`), and scikit-learn takes seeds below
2**32."""


def audit_seed(
    settings_seed: int, run_seed: int, site_id: int, *, seeding: AuditSeeding = "sequence"
) -> int:
    """The seed of one site's audit.

    Every site of a run, and each run of a replicate set, draws its own audit randomness
    (splits, generator, classifiers) while ``audit.settings.seed`` and the run's seed still
    reproduce it. ``sequence``: the first word of numpy's ``SeedSequence`` of entropy
    ``(settings_seed, run_seed)`` spawned for the site (``spawn_key=(site_id,)``), modulo
    :data:`AUDIT_SEEDS`: the sites of all runs draw independently (two share a seed with
    probability 1 / AUDIT_SEEDS, not by construction). ``legacy`` (runs written before it;
    their config says so): ``settings_seed * 1000 + run_seed * 7 + site_id``, which repeats
    across seeds once a consortium has more than 7 sites.
    """
    if seeding == "legacy":
        return settings_seed * 1_000 + run_seed * 7 + site_id
    sequence = np.random.SeedSequence(entropy=(settings_seed, run_seed), spawn_key=(site_id,))
    return int(sequence.generate_state(1)[0]) % AUDIT_SEEDS


def _check_input_canary_coins(data: SiteData) -> None:
    """Fail before the long PANORAMIA run when the coins cannot be audited."""
    _, coins = data.input_canary_records()
    if coins.all() or not coins.any():
        raise ValueError(
            f"site {data.site_id}: all {len(coins)} canary coins came out "
            f"{'included' if coins.all() else 'excluded'}; the canary audit needs "
            "both (use more canaries)"
        )


def _reference_models(
    task: Any, states: tuple[dict[str, torch.Tensor], ...] | None
) -> list[torch.nn.Module] | None:
    """The shared reference models, each built by the task and loaded (None: none)."""
    if states is None:
        return None
    references = []
    for state in states:
        ref = task.make_model()
        ref.load_state_dict(state)
        references.append(ref)
    return references


def input_canary_audit_of(
    task: Any,
    model: torch.nn.Module,
    data: SiteData,
    *,
    beta: float,
    device_name: str,
    delta: float | None = None,
) -> InputCanaryResult:
    """The one-run canary audit of ``data``'s canaries against ``model``.

    Scores every input canary (included or not) by the model's per-record loss and hands
    the losses and the coins to :func:`audit.canaries.input_canaries.input_canary_audit` (its
    f-DP bound at ``delta``; None: :data:`audit.stats.one_run.DEFAULT_DELTA`).
    """
    from panoramia_fl.audit.canaries.input_canaries import input_canary_audit
    from panoramia_fl.audit.panoramia.settings import resolve_device
    from panoramia_fl.audit.stats.one_run_methods import DEFAULT_DELTA

    records, coins = data.input_canary_records()
    losses = task.per_record_loss(model, records.x, records.y, device=resolve_device(device_name))
    kind = data.input_canary_kind or "unknown"
    delta = DEFAULT_DELTA if delta is None else delta
    return input_canary_audit(losses, coins, beta=beta, kind=kind, delta=delta)


def write_exposed_records(
    path: Path,
    task: Any,
    model: torch.nn.Module,
    data: SiteData,
    references: list[torch.nn.Module] | None,
    *,
    k: int,
    device_name: str,
) -> Path:
    """Score the site's members and write the ``k`` most exposed to ``path`` (site-local).

    Only the run's shared reference models calibrate the score: the ones an audit trains
    for itself stay inside it, so without shared ones the file says it fell back to f's
    log-likelihood.
    """
    from panoramia_fl.audit.panoramia.exposure import most_exposed
    from panoramia_fl.audit.panoramia.settings import resolve_device

    exposed = most_exposed(
        task, model, data.records("train"), references, k=k, device=resolve_device(device_name)
    )
    content = {
        "schema_version": EXPOSED_RECORDS_SCHEMA_VERSION,
        "site_id": data.site_id,
        "indices_into": "the site's train array (its members), in its data file's order",
        **exposed.to_dict(),
        "stays_at_site": True,
        "note": "Site-local: identifies individual members. It is never sent to the server "
        "and no report copies it.",
    }
    return atomic_write_text(
        path, json.dumps(content, indent=1, allow_nan=False) + "\n", private=True
    )
